"""The loop's logic on a fake Markov-chain backend: events, stops, rollback, sampled output equal
to the target alone's for any drafter, and the statistics of the sampling rule. Real-model tests
are in test_speculative_real.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from fakes import MarkovBackend, random_table

from specllama.engine import speculative
from specllama.engine.control import FixedLength
from specllama.engine.drafters import Draft, DraftModelDrafter, NgramDrafter, NoDrafter
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams, draw, probabilities
from specllama.engine.speculative import generate
from specllama.errors import ContextOverflowError, UsageError

GREEDY = SamplingParams(temperature=0.0)
SAMPLED = SamplingParams(temperature=1.0, top_k=0)


def run(target, drafter, prompt, params=GREEDY, k=3, max_tokens=20):
    """All events of one generation with a fixed draft length, and the emitted tokens."""
    events = list(
        generate(target, drafter, prompt, params, max_tokens=max_tokens, controller=FixedLength(k))
    )
    tokens = [e.token for e in events if isinstance(e, TokenEvent)]
    return tokens, events


def test_greedy_output_equals_target_alone_whatever_the_draft():
    rng = np.random.default_rng(1)
    target = MarkovBackend(random_table(12, rng, 0.3))
    alone, _ = run(target, NoDrafter(), [0, 1])
    for draft_table in (target.table, random_table(12, rng, 0.3)):
        drafted, events = run(target, DraftModelDrafter(MarkovBackend(draft_table)), [0, 1])
        assert drafted == alone
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert sum(r.n_drafted for r in rounds) > 0


def test_draft_equal_to_target_is_always_accepted_and_batches_k_plus_one():
    table = random_table(10, np.random.default_rng(2), 0.3)
    target = MarkovBackend(table)
    _, events = run(target, DraftModelDrafter(MarkovBackend(table)), [3], k=4, max_tokens=15)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert all(r.n_accepted == r.n_drafted for r in rounds)
    assert [r.n_drafted for r in rounds] == [4, 4, 4]  # the last round drafts only what fits
    assert target.batch_sizes[1:] == [5, 5, 5]  # pending token + 4 drafts, one decode each
    froms = [e.from_draft for e in events if isinstance(e, TokenEvent)]
    assert froms == [True] * 4 + [False] + [True] * 4 + [False] + [True] * 4 + [False]


def test_max_tokens_and_finish_reason():
    target = MarkovBackend(random_table(6, np.random.default_rng(3)))
    tokens, events = run(target, NgramDrafter(), [1, 2, 3, 1, 2], max_tokens=7)
    assert len(tokens) == 7
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    assert finish.reason == "length"
    assert finish.stats.n_generated == 7


def test_stops_at_end_of_generation_token_without_emitting_it():
    table = np.full((4, 4), 0.01)
    table[:, 3] = 1.0  # every next token is 3, the end-of-generation token
    target = MarkovBackend(table, eog=3)
    tokens, events = run(target, DraftModelDrafter(MarkovBackend(table, eog=3)), [0])
    assert tokens == []
    assert events[-1].reason == "stop"


def test_context_full_stops_cleanly():
    table = np.eye(5)[[1, 2, 3, 4, 0]]  # a cycle 0 -> 1 -> 2 -> 3 -> 4 -> 0
    target = MarkovBackend(table + 1e-6, n_ctx=10)
    tokens, events = run(target, NgramDrafter(), [0, 1, 2, 3, 4, 0], max_tokens=50)
    # 6 prompt + 5 generated: the context holds all but the last token, which needs no slot.
    assert len(tokens) == 5
    assert events[-1].reason == "context"
    assert target.n_past <= 10


def test_prompt_that_fills_the_context_is_refused():
    target = MarkovBackend(random_table(4, np.random.default_rng(4)), n_ctx=8)
    with pytest.raises(ContextOverflowError):
        run(target, NoDrafter(), [0] * 8)


def test_empty_prompt_is_refused():
    with pytest.raises(UsageError):
        run(MarkovBackend(np.ones((3, 3))), NoDrafter(), [])


def test_consumer_stopping_early_leaves_contexts_holding_what_was_emitted():
    table = random_table(8, np.random.default_rng(5), 0.5)
    target, draft_model = (
        MarkovBackend(table),
        MarkovBackend(random_table(8, np.random.default_rng(6))),
    )
    prompt = [1, 2]
    stream = generate(
        target,
        DraftModelDrafter(draft_model),
        prompt,
        GREEDY,
        max_tokens=30,
        controller=FixedLength(4),
    )
    emitted = []
    for event in stream:
        if isinstance(event, TokenEvent):
            emitted.append(event.token)
            if len(emitted) == 5:
                break
    stream.close()
    context = prompt + emitted
    assert target.tokens == context[:-1]
    assert draft_model.tokens == context[: len(draft_model.tokens)]


def test_second_generation_reuses_the_evaluated_prefix():
    target = MarkovBackend(random_table(8, np.random.default_rng(7)))
    first, _ = run(target, NoDrafter(), [1, 2, 3, 4], max_tokens=5)
    before = target.n_decoded
    run(target, NoDrafter(), [1, 2, 3, 4, *first, 5], max_tokens=1)
    # Only the new token and the round's own pending token are evaluated again.
    assert target.n_decoded - before <= 2


def test_ngram_drafter_proposes_what_followed_the_last_match():
    drafter = NgramDrafter()
    context = [5, 6, 7, 8, 9, 1, 5, 6, 7]
    draft = drafter.propose(context, 3, GREEDY)
    assert draft.tokens == [8, 9, 1]
    assert drafter.propose([1, 2, 3], 3, GREEDY).tokens == []


# -- sampling: the target alone's tokens, whatever drafts ----------------------------------------

SAMPLINGS = [
    SamplingParams(temperature=1.0, top_k=0),
    SamplingParams(temperature=0.7, top_k=6, top_p=0.9, min_p=0.05),
    SamplingParams(temperature=1.4, top_k=9, top_p=0.95, min_p=0.02),
]


def seeded(params: SamplingParams, seed: int) -> SamplingParams:
    return replace(params, seed=seed)


@pytest.mark.parametrize("params", SAMPLINGS, ids=["t1-full", "t0.7-filtered", "t1.4-filtered"])
def test_sampled_output_equals_the_target_alone_for_any_drafter(params):
    """For many seeds: a draft model that agrees well, one that agrees badly, the target's own
    table as the draft, n-gram lookup, at several draft lengths: the target alone's tokens."""
    rng = np.random.default_rng(21)
    table = random_table(12, rng, 0.3)
    target = MarkovBackend(table)
    drafts = [table, 0.8 * table + 0.2 * random_table(12, rng, 0.3), random_table(12, rng, 0.3)]
    rounds = []
    for seed in range(30):
        these = seeded(params, seed)
        alone, _ = run(target, NoDrafter(), [0, 1], these, k=0, max_tokens=24)
        for k, draft_table in zip((1, 3, 6), drafts):
            drafter = DraftModelDrafter(MarkovBackend(draft_table))
            tokens, events = run(target, drafter, [0, 1], these, k=k, max_tokens=24)
            assert tokens == alone
            rounds += [e for e in events if isinstance(e, RoundEvent)]
        tokens, _ = run(target, NgramDrafter(), [0, 1, 0, 1], these, k=4)
        alone, _ = run(target, NoDrafter(), [0, 1, 0, 1], these, k=0)
        assert tokens == alone
    # Every path ran: a rejection at the first token, partial accepts, all accepted.
    assert any(r.n_drafted and r.n_accepted == 0 for r in rounds)
    assert any(0 < r.n_accepted < r.n_drafted for r in rounds)
    assert any(r.n_drafted and r.n_accepted == r.n_drafted for r in rounds)


def test_a_seed_repeats_and_another_seed_differs():
    target = MarkovBackend(random_table(12, np.random.default_rng(22), 1.0))
    drafter = DraftModelDrafter(MarkovBackend(random_table(12, np.random.default_rng(23), 1.0)))
    runs = {
        tuple(run(target, drafter, [0], seeded(SAMPLED, 5), max_tokens=16)[0]) for _ in range(3)
    }
    assert len(runs) == 1
    others = {
        tuple(run(target, drafter, [0], seeded(SAMPLED, s), max_tokens=16)[0]) for s in range(8)
    }
    assert len(others) == 8


def test_a_generation_without_a_seed_draws_one_and_reports_it():
    target = MarkovBackend(random_table(12, np.random.default_rng(24), 1.0))
    tokens, events = run(target, NoDrafter(), [0], SAMPLED, k=0, max_tokens=16)
    seed = events[-1].stats.seed
    assert seed is not None
    assert run(target, NgramDrafter(), [0], seeded(SAMPLED, seed), max_tokens=16)[0] == tokens
    _, greedy_events = run(target, NoDrafter(), [0], replace(GREEDY, seed=3), max_tokens=4)
    assert greedy_events[-1].stats.seed is None  # greedy: nothing was drawn with a seed


# -- sampling: the distribution -----------------------------------------------------------------

CHI2_CRITICAL_P001 = {7: 24.32, 15: 37.70, 63: 103.44}  # chi-square quantiles at 0.999


def chi_square(counts: np.ndarray, expected_probs: np.ndarray) -> float:
    expected = expected_probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def first_two_tokens_counts(verify_fn, n_draws: int = 12_000):
    """Joint counts of (t1, t2) emitted after prompt [0] by the speculative loop, one seed per
    generation."""
    rng = np.random.default_rng(42)
    p_table = random_table(8, rng, 1.0)
    q_table = random_table(8, rng, 1.0)
    target, draft_model = MarkovBackend(p_table), MarkovBackend(q_table)
    drafter = DraftModelDrafter(draft_model)
    counts = np.zeros((8, 8))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(speculative, "verify", verify_fn)
        for seed in range(n_draws):
            tokens, _ = run(target, drafter, [0], seeded(SAMPLED, seed), k=3, max_tokens=2)
            counts[tokens[0], tokens[1]] += 1
    expected = p_table[0][:, None] * p_table  # P(t1) * P(t2 | t1)
    return counts, expected


@pytest.mark.parametrize("k", [1, 3])
def test_sampled_tokens_follow_the_target_distribution(k):
    rng = np.random.default_rng(k)
    p_table = random_table(8, rng, 0.7)
    q_table = random_table(8, rng, 0.7)
    target = MarkovBackend(p_table)
    drafter = DraftModelDrafter(MarkovBackend(q_table))
    counts = np.zeros(8)
    for seed in range(16_000):
        # One round drafts k tokens; count the (k+1)-th emitted token, whichever path made it
        # (an accepted draft, the target's draw at a mismatch, or the bonus token).
        tokens, _ = run(target, drafter, [0], seeded(SAMPLED, seed), k=k, max_tokens=k + 1)
        counts[tokens[-1]] += 1
    # Its marginal under the target chain alone: p0 @ P^k
    marginal = p_table[0] @ np.linalg.matrix_power(p_table, k)
    assert chi_square(counts, marginal) < CHI2_CRITICAL_P001[7]


def test_joint_of_two_tokens_follows_the_target():
    counts, expected = first_two_tokens_counts(speculative.verify)
    assert chi_square(counts.ravel(), expected.ravel()) < CHI2_CRITICAL_P001[63]


def accept_what_the_target_allows(rows, draft: Draft, params, position, constraint=None):
    """Wrong: keeps any draft token the target could draw (p(x) > 0), not only its draw."""
    for i, x in enumerate(draft.tokens):
        if probabilities(rows[i], params)[x] == 0:
            return i, draw(rows[i], params, position + i)
    return len(draft), draw(rows[len(draft)], params, position + len(draft))


def test_the_statistic_catches_a_wrong_rule():
    """The same test on a broken verifier must fail: it has the power to see a wrong rule."""
    counts, expected = first_two_tokens_counts(accept_what_the_target_allows)
    assert chi_square(counts.ravel(), expected.ravel()) > CHI2_CRITICAL_P001[63]


def test_deterministic_draft_keeps_the_target_distribution_and_is_accepted_at_p():
    """n-gram under sampling: the target's distribution, and the draft token is kept with
    probability p(x), as under the rejection rule with q = one-hot."""
    rng = np.random.default_rng(11)
    p_table = random_table(8, rng, 0.7)
    target = MarkovBackend(p_table)
    counts = np.zeros(8)
    prompt = [0, 5, 0]  # the n-gram drafter proposes 5 after 0
    n = 12_000
    for seed in range(n):
        drafter = NgramDrafter()
        tokens, _ = run(target, drafter, prompt, seeded(SAMPLED, seed), k=2, max_tokens=2)
        counts[tokens[0]] += 1
    assert chi_square(counts, p_table[0]) < CHI2_CRITICAL_P001[7]
    p = p_table[0][5]
    assert abs(counts[5] / n - p) < 4 * np.sqrt(p * (1 - p) / n)


def gumbel_coupling_bound(p: np.ndarray, q: np.ndarray) -> float:
    """(1 - TV) / (1 + TV): how often a Gumbel-max draft is at least the target's draw."""
    tv = 0.5 * np.abs(p - q).sum()
    return (1 - tv) / (1 + tv)


def test_a_sampled_draft_model_drafts_with_the_targets_noise():
    """The draft's first token is the target's draw at least (1 - TV)/(1 + TV) of the time;
    with noise of its own (an independent draw) it would be sum(p q), far lower here."""
    rng = np.random.default_rng(31)
    p_table = random_table(12, rng, 0.5)
    q_table = 0.6 * p_table + 0.4 * random_table(12, rng, 0.5)
    p, q = p_table[0], q_table[0]
    bound, independent = gumbel_coupling_bound(p, q), float(p @ q)
    assert bound > independent + 0.1
    target = MarkovBackend(p_table)
    drafter = DraftModelDrafter(MarkovBackend(q_table))
    n, accepted = 3000, 0
    for seed in range(n):
        _, events = run(target, drafter, [0], seeded(SAMPLED, seed), k=1, max_tokens=2)
        accepted += events[0].n_accepted
    assert accepted / n > bound - 4 * np.sqrt(bound * (1 - bound) / n)
