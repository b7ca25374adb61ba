"""Pipelined drafting on the fake Markov-chain backend: the same greedy output as the target
alone, drafts made ahead used only when the round went as they guessed, contexts cleaned up,
and sampled output equal to the target alone's for every seed, even with a wrong carry. Real
models: test_speculative_real.py."""

from __future__ import annotations

import gc
import signal
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
from fakes import MarkovBackend, random_table

from specllama.engine import pipeline
from specllama.engine.control import FixedLength
from specllama.engine.drafters import Draft, DraftModelDrafter, NoDrafter
from specllama.engine.events import RoundEvent, TokenEvent
from specllama.engine.pipeline import DraftAhead
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate

GREEDY = SamplingParams(temperature=0.0)
SAMPLED = SamplingParams(temperature=1.0, top_k=0)


def run(target, drafter, prompt, k, *, params=GREEDY, max_tokens=40, pipelined=True):
    events = list(
        generate(
            target,
            drafter,
            prompt,
            params,
            max_tokens=max_tokens,
            controller=FixedLength(k, pipelined=pipelined),
        )
    )
    tokens = [e.token for e in events if isinstance(e, TokenEvent)]
    return tokens, [e for e in events if isinstance(e, RoundEvent)]


def pair(seed: int, agreement: float, n_vocab: int = 12):
    """A target and a draft model that mixes the target's table with a random one."""
    rng = np.random.default_rng(seed)
    table = random_table(n_vocab, rng, 0.3)
    draft = agreement * table + (1 - agreement) * random_table(n_vocab, rng, 0.3)
    return MarkovBackend(table), MarkovBackend(draft)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_pipelined_output_equals_the_target_alone(k):
    rounds: list[RoundEvent] = []
    for seed, agreement in ((1, 1.0), (2, 0.7), (3, 0.4), (4, 0.0)):
        target, draft_model = pair(seed, agreement)
        alone, _ = run(target, NoDrafter(), [0, 1], 0, pipelined=False)
        tokens, these = run(target, DraftModelDrafter(draft_model), [0, 1], k)
        assert tokens == alone
        rounds += these
    # Every path ran: drafts made ahead and used, rejections, drafts ahead dropped.
    assert any(r.carried for r in rounds)
    assert any(r.n_accepted < r.n_drafted for r in rounds)
    assert any(r.n_ahead and r.n_accepted == r.n_drafted for r in rounds)


def test_a_perfect_draft_is_made_ahead_every_round_after_the_first():
    target, draft_model = pair(5, 1.0)
    _, rounds = run(target, DraftModelDrafter(draft_model), [3], 4, max_tokens=26)
    # Five rounds of 4 drafts and the target's token, then one token left: the target alone.
    assert [r.carried for r in rounds] == [False] + [True] * 4 + [False]
    assert all(r.draft_s == 0.0 for r in rounds[1:])  # nothing drafted on the loop's clock
    assert target.batch_sizes[1:] == [5] * 5 + [1]  # pending + 4 drafts, one decode a round
    # No draft ahead where nothing would be left to use it.
    assert [r.n_ahead for r in rounds] == [5] * 4 + [0, 0]


def test_contexts_hold_what_was_emitted_after_rejections_and_early_stops():
    target, draft_model = pair(6, 0.6)
    prompt = [1, 2]
    tokens, rounds = run(target, DraftModelDrafter(draft_model), prompt, 3)
    assert any(r.n_accepted < r.n_drafted for r in rounds)
    context = prompt + tokens
    assert target.tokens == context[:-1]
    assert draft_model.tokens == context[: len(draft_model.tokens)]

    threads = threading.active_count()
    stream = generate(
        target,
        DraftModelDrafter(draft_model),
        context,
        GREEDY,
        max_tokens=30,
        controller=FixedLength(3, pipelined=True),
    )
    emitted = []
    for event in stream:
        if isinstance(event, TokenEvent):
            emitted.append(event.token)
            if len(emitted) == 7:
                break
    stream.close()
    assert target.tokens == (context + emitted)[:-1]
    assert draft_model.tokens == (context + emitted)[: len(draft_model.tokens)]
    assert threading.active_count() == threads  # the worker thread is gone


WORKER = "specllama-draft-ahead"


def workers() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(WORKER)]


class InterruptedTarget(MarkovBackend):
    """A target whose `fail_at`-th decode raises KeyboardInterrupt (Ctrl-C during a verify),
    noting which draft-ahead workers were alive then."""

    def __init__(self, table, fail_at: int) -> None:
        super().__init__(table)
        self.fail_at, self.calls, self.workers_then = fail_at, 0, []

    def decode(self, tokens, logits_at=(), *, copy=True):
        self.calls += 1
        if self.calls == self.fail_at:
            self.workers_then = workers()
            raise KeyboardInterrupt
        return super().decode(tokens, logits_at, copy=copy)


class SlowMarkov(MarkovBackend):
    """A draft model whose decodes take 20 ms each, so a draft ahead is still under way."""

    def decode(self, tokens, logits_at=(), *, copy=True):
        time.sleep(0.02)
        return super().decode(tokens, logits_at, copy=copy)


def test_an_interrupted_verify_stops_and_joins_the_draft_ahead():
    table = random_table(10, np.random.default_rng(8), 0.3)
    target, draft_model = InterruptedTarget(table, fail_at=4), SlowMarkov(table)
    prompt, emitted = [0, 1], []
    with pytest.raises(KeyboardInterrupt):
        for event in generate(
            target,
            DraftModelDrafter(draft_model),
            prompt,
            GREEDY,
            max_tokens=40,
            controller=FixedLength(4, pipelined=True),
        ):
            if isinstance(event, TokenEvent):
                emitted.append(event.token)
    assert target.workers_then  # a draft ahead was running beside the interrupted verify
    assert not workers()  # stopped and joined before the exception left the generator
    decoded = draft_model.n_decoded
    time.sleep(0.1)
    assert draft_model.n_decoded == decoded
    context = prompt + emitted
    assert target.tokens == context[:-1]
    assert draft_model.tokens == context[: len(draft_model.tokens)]


def test_a_consumer_that_raises_leaves_no_worker_behind():
    table = random_table(10, np.random.default_rng(9), 0.3)
    target, draft_model = MarkovBackend(table), MarkovBackend(table)

    def consume() -> None:
        # No name for the generator: the traceback keeps the frame's locals, not its iterator.
        for event in generate(
            target,
            DraftModelDrafter(draft_model),
            [0, 1],
            GREEDY,
            max_tokens=40,
            controller=FixedLength(4, pipelined=True),
        ):
            if isinstance(event, RoundEvent) and event.carried:
                assert workers()  # the pool is alive between rounds
                raise RuntimeError("the consumer failed")

    with pytest.raises(RuntimeError):
        consume()
    gc.collect()
    assert not workers()


class BlockingDrafter:
    """Drafts one token, then waits (up to 5 s) for the stop signal before the next."""

    name = "model"
    decode_seconds = 0.0

    def __init__(self) -> None:
        self.stopped = threading.Event()

    def propose(self, context, n_max, params, *, stop, **_):
        if stop.wait(timeout=5.0):
            self.stopped.set()
            return Draft([7])
        return Draft([7] * n_max)


def test_a_rejection_stops_the_draft_ahead_and_leaves_no_draft():
    ahead, drafter = DraftAhead(), BlockingDrafter()
    ahead.start(drafter, [1, 2, 3], 5, GREEDY, source="model", min_confidence=None)
    report = ahead.finish(all_accepted=False, next_token=7)
    assert drafter.stopped.is_set()
    assert report.n_ahead == 1 and report.wait_s < 4.0
    assert ahead.take([1, 2, 3, 7], 4) is None
    ahead.close()


def test_a_ctrl_c_while_waiting_for_the_draft_ahead_stops_it():
    """Interrupted in finish (the loop waiting for a draft ahead that all accepted drafts let
    run on), close() still stops the job rather than waiting for it to end by itself."""
    ahead, drafter = DraftAhead(), BlockingDrafter()
    ahead.start(drafter, [1, 2, 3], 5, GREEDY, source="model", min_confidence=None)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(KeyboardInterrupt):
            ahead.finish(all_accepted=True, next_token=7)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    started = time.perf_counter()
    ahead.close()
    assert drafter.stopped.is_set()
    assert time.perf_counter() - started < 2.0  # not the drafter's own 5 s
    assert not workers()


def test_a_draft_made_ahead_is_used_once_and_only_for_its_context():
    ahead = DraftAhead()
    drafter = DraftModelDrafter(MarkovBackend(np.eye(4)[[1, 2, 3, 0]] + 1e-6))  # 0 1 2 3 0 ...
    context = [0, 1]
    ahead.start(drafter, context, 3, GREEDY, source="model", min_confidence=None)
    ahead.finish(all_accepted=True, next_token=2)  # drafted ahead: 2 (the guess), 3, 0
    assert ahead.take([0, 1, 2, 9], 5) is None  # another context: dropped
    ahead.start(drafter, context, 3, GREEDY, source="model", min_confidence=None)
    ahead.finish(all_accepted=True, next_token=2)
    assert ahead.take([0, 1, 2], 1).tokens == [3]
    assert ahead.take([0, 1, 2], 1) is None
    ahead.start(drafter, context, 3, GREEDY, source="model", min_confidence=None)
    ahead.finish(all_accepted=True, next_token=1)  # the target's token was not the guess
    assert ahead.take([0, 1, 1], 2) is None
    ahead.close()


# -- sampling ------------------------------------------------------------------------------------

SAMPLINGS = [
    SamplingParams(temperature=1.0, top_k=0),
    SamplingParams(temperature=0.8, top_k=8, top_p=0.9, min_p=0.05),
]


def sampled_runs(params: SamplingParams, seeds: range, k: int = 3):
    """For each seed: the target alone's tokens, and the pipelined run's tokens and rounds."""
    target, draft_model = pair(7, 0.8)
    drafter = DraftModelDrafter(draft_model)
    for seed in seeds:
        seeded = replace(params, seed=seed)
        alone, _ = run(target, NoDrafter(), [0], 0, params=seeded, pipelined=False)
        tokens, rounds = run(target, drafter, [0], k, params=seeded)
        yield alone, tokens, rounds


@pytest.mark.parametrize("params", SAMPLINGS, ids=["t1-full", "t0.8-filtered"])
def test_sampled_pipelined_output_equals_the_target_alone(params):
    """Every seed: the target alone's tokens, through carried drafts and dropped ones. (So it
    follows the target's distribution as the target alone does: test_sampling.py.)"""
    rounds: list[RoundEvent] = []
    for alone, tokens, these in sampled_runs(params, range(40)):
        assert tokens == alone
        rounds += these
    assert any(r.carried and r.n_accepted == r.n_drafted for r in rounds)
    assert any(r.carried and r.n_accepted < r.n_drafted for r in rounds)
    assert any(r.n_ahead and r.n_accepted < r.n_drafted for r in rounds)  # dropped


def shifted_carry(ahead: Draft) -> Draft:
    """Wrong: carries the draft ahead one token off (its guess of the target's token too)."""
    return Draft(ahead.tokens[:-1])


def test_a_wrong_carry_costs_acceptance_never_the_text(monkeypatch):
    """Whatever a draft made ahead holds, the round keeps only the target's own draws: a broken
    carry is rejected more often, and the text stays the target alone's."""

    def acceptance(runs) -> float:
        rounds = [r for _, _, these in runs for r in these if r.carried]
        return sum(r.n_accepted for r in rounds) / sum(r.n_drafted for r in rounds)

    right = list(sampled_runs(SAMPLINGS[0], range(30)))
    monkeypatch.setattr(pipeline, "carried", shifted_carry)
    wrong = list(sampled_runs(SAMPLINGS[0], range(30)))
    for alone, tokens, _ in wrong:
        assert tokens == alone
    assert acceptance(wrong) < acceptance(right) - 0.2
