"""Pipelined drafting on the fake Markov-chain backend: the same greedy output as the target
alone, drafts made ahead used only when the round went as they guessed, contexts cleaned up,
and the sampling rule kept exactly (with a test that a wrong carry fails). Real models:
test_speculative_real.py."""

from __future__ import annotations

import gc
import signal
import threading
import time

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


def run(target, drafter, prompt, k, *, params=GREEDY, max_tokens=40, rng=None, pipelined=True):
    events = list(
        generate(
            target,
            drafter,
            prompt,
            params,
            max_tokens=max_tokens,
            controller=FixedLength(k, pipelined=pipelined),
            rng=rng if rng is not None else np.random.default_rng(0),
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

    def propose(self, context, n_max, params, rng, *, stop, **_):
        if stop.wait(timeout=5.0):
            self.stopped.set()
            return Draft([7])
        return Draft([7] * n_max)


def test_a_rejection_stops_the_draft_ahead_and_leaves_no_draft():
    ahead, drafter = DraftAhead(), BlockingDrafter()
    ahead.start(
        drafter, [1, 2, 3], 5, GREEDY, np.random.default_rng(), source="model", min_confidence=None
    )
    report = ahead.finish(all_accepted=False, next_token=7)
    assert drafter.stopped.is_set()
    assert report.n_ahead == 1 and report.wait_s < 4.0
    assert ahead.take([1, 2, 3, 7], 4) is None
    ahead.close()


def test_a_ctrl_c_while_waiting_for_the_draft_ahead_stops_it():
    """Interrupted in finish (the loop waiting for a draft ahead that all accepted drafts let
    run on), close() still stops the job rather than waiting for it to end by itself."""
    ahead, drafter = DraftAhead(), BlockingDrafter()
    ahead.start(
        drafter, [1, 2, 3], 5, GREEDY, np.random.default_rng(), source="model", min_confidence=None
    )

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
    ahead.start(
        drafter, context, 3, GREEDY, np.random.default_rng(), source="model", min_confidence=None
    )
    ahead.finish(all_accepted=True, next_token=2)  # drafted ahead: 2 (the guess), 3, 0
    assert ahead.take([0, 1, 2, 9], 5) is None  # another context: dropped
    ahead.start(
        drafter, context, 3, GREEDY, np.random.default_rng(), source="model", min_confidence=None
    )
    ahead.finish(all_accepted=True, next_token=2)
    assert ahead.take([0, 1, 2], 1).tokens == [3]
    assert ahead.take([0, 1, 2], 1) is None
    ahead.start(
        drafter, context, 3, GREEDY, np.random.default_rng(), source="model", min_confidence=None
    )
    ahead.finish(all_accepted=True, next_token=1)  # the target's token was not the guess
    assert ahead.take([0, 1, 1], 2) is None
    ahead.close()


def test_sampled_pipelined_generation_is_reproducible_with_a_seed():
    target, draft_model = pair(7, 0.7)
    drafter = DraftModelDrafter(draft_model)
    runs = [
        run(target, drafter, [0], 3, params=SAMPLED, rng=np.random.default_rng(99))
        for _ in range(3)
    ]
    assert runs[0][0] == runs[1][0] == runs[2][0]
    assert any(r.carried for r in runs[0][1])


# -- the sampling rule ----------------------------------------------------------------------------

N_VOCAB = 8
Z_999 = 3.0902  # the standard normal's 0.999 quantile


def chi_square_critical(dof: int) -> float:
    """The chi-square 0.999 quantile (Wilson-Hilferty: within 1% for dof > 10)."""
    return dof * (1 - 2 / (9 * dof) + Z_999 * np.sqrt(2 / (9 * dof))) ** 3


def pipelined_statistics(n_generations: int = 1500) -> dict[str, tuple[float, float, int]]:
    """Chi-square statistics of sampled pipelined generations against the target's transitions
    (the target is a Markov chain: row P[previous]), pooled over previous tokens, as
    {name: (statistic, critical value at 0.999, tokens counted)}:

    - "carried": the first token each carried round emits. Whether a round is carried depends
      only on what came before it (the last round accepted everything and the target's token
      was the draft's guess), so given its pending token, that token must follow P[pending];
    - "all": every emitted token, whichever round and path made it."""
    rng = np.random.default_rng(5)
    # Peaked rows (the draft often guesses right, so rounds are carried), floored so every
    # expected count is large enough for the chi-square approximation.
    p_table = 0.9 * random_table(N_VOCAB, rng, 0.3) + 0.1 / N_VOCAB
    q_table = 0.9 * (0.7 * p_table + 0.3 * random_table(N_VOCAB, rng, 0.3)) + 0.1 / N_VOCAB
    target, drafter = MarkovBackend(p_table), DraftModelDrafter(MarkovBackend(q_table))
    carried = np.zeros((N_VOCAB, N_VOCAB))
    every = np.zeros((N_VOCAB, N_VOCAB))
    sample_rng = np.random.default_rng(1)
    for _ in range(n_generations):
        context, pending = [0], None
        for event in generate(
            target,
            drafter,
            [0],
            SAMPLED,
            max_tokens=12,
            controller=FixedLength(1, pipelined=True),
            rng=sample_rng,
        ):
            if isinstance(event, RoundEvent):
                pending = context[-1] if event.carried else None
            elif isinstance(event, TokenEvent):
                if pending is not None:
                    carried[pending, event.token] += 1
                    pending = None
                every[context[-1], event.token] += 1
                context.append(event.token)
    return {"carried": _statistic(carried, p_table), "all": _statistic(every, p_table)}


def _statistic(counts: np.ndarray, p_table: np.ndarray) -> tuple[float, float, int]:
    seen = counts.sum(axis=1)
    expected = seen[:, None] * p_table
    rows = seen > 0
    statistic = float(((counts - expected) ** 2 / expected)[rows].sum())
    return statistic, chi_square_critical(int(rows.sum()) * (N_VOCAB - 1)), int(seen.sum())


def test_pipelined_sampling_follows_the_target_distribution():
    statistics = pipelined_statistics()
    statistic, critical, n = statistics["carried"]
    assert n > 1000  # the pipeline carried a draft often enough for the test to mean something
    assert statistic < critical
    statistic, critical, n = statistics["all"]
    assert n == 1500 * 12
    assert statistic < critical


def misaligned_q(ahead: Draft) -> Draft:
    """Wrong: each carried token verified with the q of the token before it."""
    return Draft(ahead.tokens[1:], ahead.q[:-1])


def test_the_statistic_catches_a_wrong_carry(monkeypatch):
    """The same test with a broken carry must fail: it has the power to see it. (Pooled over
    every token, the same error is diluted by the rounds that were not carried and stays below
    the critical value: "all" is the broad check, "carried" the sharp one.)"""
    monkeypatch.setattr(pipeline, "carried", misaligned_q)
    statistic, critical, _ = pipelined_statistics()["carried"]
    assert statistic > critical
