"""The MTP head's parts that need no model: the store of the target's hidden rows, and the
probe of what this llama-cpp-python can do."""

from __future__ import annotations

import numpy as np

from specllama.llama.mtp import HiddenRows, mtp_support


def rows(start: int, n: int, width: int = 4) -> np.ndarray:
    """Rows whose every value is their position: what was read tells where it came from."""
    return np.repeat(np.arange(start, start + n, dtype=np.float32)[:, None], width, axis=1)


def test_rows_are_read_by_position_across_writes():
    store = HiddenRows(4)
    store.write(0, rows(0, 5))
    store.write(5, rows(5, 3))
    assert np.array_equal(store.read(2, 8), rows(2, 6))


def test_before_the_first_token_and_past_the_last_read_zeros():
    store = HiddenRows(4)
    store.write(0, rows(0, 3))
    got = store.read(-1, 4)
    assert np.array_equal(got[1:4], rows(0, 3))
    assert not got[0].any() and not got[4].any()


def test_a_rollback_rewrites_from_where_the_target_went_back():
    store = HiddenRows(4)
    store.write(0, rows(0, 10))
    store.write(6, rows(106, 2))  # rejected drafts replaced
    assert np.array_equal(store.read(5, 8), np.vstack([rows(5, 1), rows(106, 2)]))
    assert not store.read(8, 10).any(), "rows past the rewrite are stale, not read"


def test_released_rows_are_dropped_and_an_edit_before_them_starts_afresh():
    store = HiddenRows(4)
    store.write(0, rows(0, 64))
    store.release_before(60)
    assert np.array_equal(store.read(60, 64), rows(60, 4))
    assert not store.read(10, 11).any(), "released: zeros, a weaker draft, never a wrong text"
    store.write(20, rows(220, 5))  # a chat edited further back than what is kept
    assert np.array_equal(store.read(20, 25), rows(220, 5))
    store.write(25, rows(25, 200))  # and it grows again from there
    assert np.array_equal(store.read(200, 225), rows(200, 25))


def test_this_llama_cpp_python_runs_mtp_heads():
    """The tested range of llama-cpp-python (pyproject) has every symbol the head needs."""
    assert mtp_support() is None
