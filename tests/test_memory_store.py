"""The memory on disk: written whole, read back, and a damaged store set aside in one line."""

from __future__ import annotations

import numpy as np
import pytest

from specllama import memory_store
from specllama.errors import SpecllamaError


def test_a_saved_memory_is_read_back(tmp_path):
    tokens = np.array([5, 6, 7, -1, 8, 9, -1], dtype=np.int32)
    memory_store.save_tokens(tmp_path / "mem", "abc", tokens)
    loaded, notice = memory_store.load_tokens(tmp_path / "mem", "abc", n_vocab=10)
    assert notice is None and loaded.tolist() == tokens.tolist()
    assert list((tmp_path / "mem").iterdir()) == [tmp_path / "mem" / "memory-abc.npy"]


def test_no_store_yet_is_an_empty_memory(tmp_path):
    loaded, notice = memory_store.load_tokens(tmp_path, "abc", n_vocab=10)
    assert notice is None and len(loaded) == 0


@pytest.mark.parametrize(
    "content",
    [b"not a numpy file at all", None],
    ids=["garbage", "ids-outside-the-vocabulary"],
)
def test_a_damaged_store_is_set_aside_and_memory_starts_afresh(tmp_path, content):
    path = memory_store.store_path(tmp_path, "abc")
    if content is None:
        memory_store.save_tokens(tmp_path, "abc", np.array([1, 2, 99], dtype=np.int32))
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    loaded, notice = memory_store.load_tokens(tmp_path, "abc", n_vocab=10)
    assert len(loaded) == 0
    assert "could not be read" in notice and "\n" not in notice
    assert (tmp_path / "memory-abc.npy.damaged").read_bytes() == before  # nothing lost
    assert not path.exists()


def test_a_folder_that_cannot_be_written_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SpecllamaError, match="cannot save the memory"):
        memory_store.save_tokens(blocker / "inside", "abc", np.array([1], dtype=np.int32))
