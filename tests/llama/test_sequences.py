"""Sequences of one context decoded together (a server's slots), on the F32 SmolLM2: what each
sequence gets from a batched step is what it gets alone."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

from specllama.llama.backend import LlamaBackend
from specllama.llama.evaluated import Part
from specllama.llama.sequences import (
    SequenceView,
    Stepper,
    WaitClock,
    _fitting,
    _Request,
)

pytestmark = pytest.mark.slow

TEXTS = ["def fibonacci(n):\n    if n < 2:", "The capital of France is", "1, 2, 3, 4, 5,"]


@pytest.fixture(scope="module", params=[False, True], ids=["own-caches", "one-cache"])
def shared(smol_f32, request):
    """Three sequences, each in a KV cache of its own (an exact model's way) or all in one (a
    quantised model's, faster): either way each sees only its own cells."""
    kv = {"n_ctx": 3 * 256, "n_batch": 64, "n_seq": 3, "unified_kv": request.param}
    with LlamaBackend(smol_f32, **kv) as backend:
        yield backend


@pytest.fixture(scope="module")
def alone(smol_f32):
    with LlamaBackend(smol_f32, n_ctx=256, n_batch=64) as backend:
        yield backend


def each_alone(alone: LlamaBackend, tokens: list[int]) -> np.ndarray:
    alone.rollback(0)
    return alone.decode(tokens, range(len(tokens)))


def on_slots(stepper: Stepper, works: list[Callable[[], object]]) -> list[object]:
    """Each work on its own thread, as a slot runs it, the stepper stepping meanwhile."""
    results: list[object] = [None] * len(works)
    done = threading.Event()

    def slot(i: int) -> None:
        try:
            results[i] = works[i]()
        finally:
            stepper.leave()

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(len(works))]
    for _ in threads:
        stepper.enter()  # all of them before the first step (and before any asks if alone)
    for thread in threads:
        thread.start()
    waiter = threading.Thread(target=lambda: ([t.join() for t in threads], done.set()))
    waiter.start()
    stepper.run(until=done.is_set)
    waiter.join()
    return results


def test_an_exact_model_keeps_a_cache_per_sequence_a_quantised_one_shares_one(smol_f32, smol_q4):
    """What llama.cpp made of it: a sequence's own context is its share of the cache, or all
    of the one cache (of which each sequence may hold only its share)."""
    for path, n_ctx_seq in [(smol_f32, 256), (smol_q4, 2 * 256)]:
        with LlamaBackend(path, n_ctx=2 * 256, n_seq=2) as backend:
            assert backend._lib.llama_n_ctx_seq(backend._ctx) == n_ctx_seq
            assert backend.n_ctx == 256


def test_each_sequence_of_a_batched_step_gets_its_own_logits(shared, alone):
    """Three prompts of different lengths, in chunks of 4 tokens a step: every position's
    logits are the prompt's alone (F32: to rounding), each sequence sees only its own cells."""
    stepper = Stepper()
    views = [SequenceView(shared, seq, stepper, chunk=4) for seq in range(3)]
    prompts = [shared.tokenize(text, add_bos=False) for text in TEXTS]
    works = [
        lambda view=view, tokens=tokens: view.decode(tokens, range(len(tokens)))
        for view, tokens in zip(views, prompts)
    ]
    results = on_slots(stepper, works)
    second, longest = sorted(len(tokens) for tokens in prompts)[-2:]
    # A chunk of each prompt per step, all together while two or more run (the longest's
    # rest goes at once when it runs alone: test_a_prompt_alone_goes_in_whole_batches).
    assert -(-second // 4) <= stepper.steps <= -(-longest // 4)
    for view, tokens, rows in zip(views, prompts, results):
        expected = each_alone(alone, tokens)
        np.testing.assert_allclose(rows, expected, atol=2e-3)
        assert (rows.argmax(axis=1) == expected.argmax(axis=1)).all()
        assert view.tokens == tokens and view.n_past == len(tokens)


def test_parts_given_out_of_sequence_order_get_their_own_rows(shared, alone):
    """The batch goes to llama.cpp in sequence order (faster with a cache per sequence);
    each part still gets its own rows, in the order the parts were given."""
    prompts = [shared.tokenize(text, add_bos=False) for text in TEXTS]
    for seq in range(3):
        shared.forget(seq, 0)
    order = [2, 0, 1]
    parts = [Part(seq, 0, prompts[seq], range(len(prompts[seq]))) for seq in order]
    rows = shared.decode_parts(parts)
    for seq, own in zip(order, rows, strict=True):
        expected = each_alone(alone, prompts[seq])
        assert own.shape == expected.shape
        np.testing.assert_allclose(own, expected, atol=2e-3)
    for seq in range(3):
        shared.forget(seq, 0)


def test_a_prompt_alone_goes_in_whole_batches(shared, alone):
    """No other slot runs: the prompt is not cut to `chunk` tokens a step, but to the batch
    the context takes (prefill as fast as one model alone)."""
    stepper = Stepper()
    view = SequenceView(shared, 0, stepper, chunk=4)
    tokens = shared.tokenize(" ".join(TEXTS), add_bos=False)
    rows = on_slots(stepper, [lambda: view.decode(tokens, [len(tokens) - 1])])[0]
    assert len(tokens) > 4 and stepper.steps == -(-len(tokens) // shared.n_batch)
    np.testing.assert_allclose(rows, each_alone(alone, tokens)[-1:], atol=2e-3)


def test_a_sequence_cut_back_goes_on_as_if_it_never_went_further(shared, alone):
    stepper = Stepper()
    view = SequenceView(shared, 1, stepper, chunk=64)
    tokens = shared.tokenize(TEXTS[0], add_bos=False)
    on_slots(stepper, [lambda: view.decode([*tokens, 7, 8, 9], [])])
    view.rollback(len(tokens) - 2)  # as a rejected draft is taken back
    rows = on_slots(stepper, [lambda: view.decode(tokens[-2:], [0, 1])])[0]
    np.testing.assert_allclose(rows, each_alone(alone, tokens)[-2:], atol=2e-3)


def test_a_saved_sequence_loads_into_another(shared, alone):
    stepper = Stepper()
    first, second = (SequenceView(shared, seq, stepper, chunk=64) for seq in (0, 2))
    tokens = shared.tokenize(TEXTS[1], add_bos=False)
    on_slots(stepper, [lambda: first.decode(tokens[:-1], [])])
    assert second.load_state(first.save_state())
    assert second.tokens == tokens[:-1]
    rows = on_slots(stepper, [lambda: second.decode(tokens[-1:], [0])])[0]
    np.testing.assert_allclose(rows[0], each_alone(alone, tokens)[-1], atol=2e-3)


def test_requests_are_split_into_batches_the_context_takes():
    def request(n: int) -> _Request:
        return _Request(model=None, part=Part(0, 0, list(range(n)), []))  # type: ignore[arg-type]

    sizes = [
        [len(r.part.tokens) for r in batch]
        for batch in _fitting([request(n) for n in (30, 30, 10, 64, 1)], 64)
    ]
    assert sizes == [[30, 30], [10], [64], [1]]


def test_a_sequence_in_a_shared_step_is_charged_its_share_and_waits_the_rest(shared):
    stepper = Stepper()
    clocks = [WaitClock(), WaitClock()]
    views = [SequenceView(shared, seq, stepper, 64, clocks[seq]) for seq in (0, 1)]
    short, long = shared.tokenize("Hi", add_bos=False), shared.tokenize(TEXTS[0] * 3, add_bos=False)
    on_slots(stepper, [lambda: views[0].decode(short, [0]), lambda: views[1].decode(long, [0])])
    assert views[0].decode_seconds < views[1].decode_seconds  # fewer tokens, smaller share
    assert views[0].waited_seconds > 0 and views[0].waited_seconds == clocks[0].seconds
