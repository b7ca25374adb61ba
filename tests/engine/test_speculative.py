"""The loop's logic on a fake Markov-chain backend: events, stops, rollback, and the
statistics of the sampling rule. Real-model tests are in test_speculative_real.py."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import MarkovBackend, random_table

from specllama.engine import speculative
from specllama.engine.control import FixedLength
from specllama.engine.drafters import Draft, DraftModelDrafter, NgramDrafter, NoDrafter
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.errors import ContextOverflowError, UsageError

GREEDY = SamplingParams(temperature=0.0)
SAMPLED = SamplingParams(temperature=1.0, top_k=0)


def run(target, drafter, prompt, params=GREEDY, k=3, max_tokens=20, rng=None):
    """All events of one generation with a fixed draft length, and the emitted tokens."""
    rng = rng if rng is not None else np.random.default_rng(0)
    events = list(
        generate(
            target,
            drafter,
            prompt,
            params,
            max_tokens=max_tokens,
            controller=FixedLength(k),
            rng=rng,
        )
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
    draft = drafter.propose(context, 3, GREEDY, np.random.default_rng())
    assert draft.tokens == [8, 9, 1]
    assert drafter.propose([1, 2, 3], 3, GREEDY, np.random.default_rng()).tokens == []


# -- the sampling rule --------------------------------------------------------------------------

CHI2_CRITICAL_P001 = {7: 24.32, 15: 37.70, 63: 103.44}  # chi-square quantiles at 0.999


def chi_square(counts: np.ndarray, expected_probs: np.ndarray) -> float:
    expected = expected_probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def first_two_tokens_counts(verify_fn, n_draws: int = 12_000):
    """Joint counts of (t1, t2) emitted after prompt [0] by the speculative loop."""
    rng = np.random.default_rng(42)
    p_table = random_table(8, rng, 1.0)
    q_table = random_table(8, rng, 1.0)
    target, draft_model = MarkovBackend(p_table), MarkovBackend(q_table)
    drafter = DraftModelDrafter(draft_model)
    counts = np.zeros((8, 8))
    sample_rng = np.random.default_rng(123)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(speculative, "verify", verify_fn)
        for _ in range(n_draws):
            tokens, _ = run(target, drafter, [0], SAMPLED, k=3, max_tokens=2, rng=sample_rng)
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
    sample_rng = np.random.default_rng(7)
    for _ in range(16_000):
        # One round drafts k tokens; count the (k+1)-th emitted token, whichever path made it
        # (accepted draft, residual after a rejection, or the bonus token).
        tokens, _ = run(target, drafter, [0], SAMPLED, k=k, max_tokens=k + 1, rng=sample_rng)
        counts[tokens[-1]] += 1
    # Its marginal under the target chain alone: p0 @ P^k
    marginal = p_table[0] @ np.linalg.matrix_power(p_table, k)
    assert chi_square(counts, marginal) < CHI2_CRITICAL_P001[7]


def test_joint_of_two_tokens_follows_the_target():
    counts, expected = first_two_tokens_counts(speculative.verify)
    assert chi_square(counts.ravel(), expected.ravel()) < CHI2_CRITICAL_P001[63]


def reversed_ratio_rule(rows, draft: Draft, params, rng):
    """Wrong: accepts with q/p instead of p/q."""
    for i, x in enumerate(draft.tokens):
        p, q = speculative.probabilities(rows[i], params), draft.q[i]
        if rng.random() < min(1.0, q[x] / p[x]):
            continue
        return i, speculative.sample(speculative.residual(p, q), rng)
    return len(draft), speculative.sample(speculative.probabilities(rows[len(draft)], params), rng)


def resample_from_p_rule(rows, draft: Draft, params, rng):
    """Wrong: after a rejection, samples from p instead of norm(max(p - q, 0))."""
    for i, x in enumerate(draft.tokens):
        p, q = speculative.probabilities(rows[i], params), draft.q[i]
        if rng.random() < min(1.0, p[x] / q[x]):
            continue
        return i, speculative.sample(p, rng)
    return len(draft), speculative.sample(speculative.probabilities(rows[len(draft)], params), rng)


@pytest.mark.parametrize("wrong_rule", [reversed_ratio_rule, resample_from_p_rule])
def test_the_statistic_catches_a_wrong_rule(wrong_rule):
    """The same test on a broken verifier must fail: it has the power to see a wrong rule."""
    counts, expected = first_two_tokens_counts(wrong_rule)
    assert chi_square(counts.ravel(), expected.ravel()) > CHI2_CRITICAL_P001[63]


def test_deterministic_draft_keeps_the_target_distribution():
    """n-gram (q = one-hot) under sampling: still the target's distribution."""
    rng = np.random.default_rng(11)
    p_table = random_table(8, rng, 0.7)
    target = MarkovBackend(p_table)
    counts = np.zeros(8)
    sample_rng = np.random.default_rng(3)
    prompt = [0, 5, 0]  # the n-gram drafter proposes 5 after 0
    for _ in range(12_000):
        drafter = NgramDrafter()
        tokens, _ = run(target, drafter, prompt, SAMPLED, k=2, max_tokens=2, rng=sample_rng)
        counts[tokens[0]] += 1
    assert chi_square(counts, p_table[0]) < CHI2_CRITICAL_P001[7]
