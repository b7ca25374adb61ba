"""The logits -> probabilities transform and the sampler, numpy only: the Gumbel-max draw
follows the tempered, truncated distribution (a chi-square test that also fails wrong noise)."""

from __future__ import annotations

import numpy as np
import pytest

from specllama.engine import noise, sampling
from specllama.engine.sampling import (
    DRAWN_SEED_BITS,
    Distribution,
    SamplingParams,
    draw,
    gumbel_max,
    probabilities,
    top_k_indices,
    top_probability,
)
from specllama.errors import UsageError

LOGITS = np.log(np.array([0.5, 0.25, 0.125, 0.0625, 0.0625]))


def dense(logits, params):
    return probabilities(logits, params).dense(len(logits))


def test_temperature_one_without_filters_is_the_softmax():
    probs = dense(LOGITS, SamplingParams(temperature=1.0, top_k=0))
    np.testing.assert_allclose(probs, [0.5, 0.25, 0.125, 0.0625, 0.0625])


def test_low_temperature_sharpens():
    probs = dense(LOGITS, SamplingParams(temperature=0.5, top_k=0))
    assert probs[0] > 0.5 and probs.sum() == pytest.approx(1.0)


def test_top_k_keeps_the_k_likeliest():
    probs = dense(LOGITS, SamplingParams(temperature=1.0, top_k=2))
    np.testing.assert_allclose(probs, [2 / 3, 1 / 3, 0, 0, 0])


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    probs = dense(LOGITS, SamplingParams(temperature=1.0, top_k=0, top_p=0.7))
    np.testing.assert_allclose(probs, [2 / 3, 1 / 3, 0, 0, 0])


def test_min_p_drops_tokens_below_a_share_of_the_top():
    probs = dense(LOGITS, SamplingParams(temperature=1.0, top_k=0, min_p=0.2))
    np.testing.assert_allclose(probs, [4 / 7, 2 / 7, 1 / 7, 0, 0])


def test_large_vocabulary_top_k_is_exact():
    logits = np.random.default_rng(0).normal(size=151_936).astype(np.float32)
    probs = dense(logits, SamplingParams(temperature=0.7, top_k=40))
    assert np.count_nonzero(probs) == 40
    assert set(np.flatnonzero(probs)) == set(np.argsort(logits)[-40:])


def test_lookup_outside_the_support_is_zero():
    p = Distribution(np.array([3, 8]), np.array([0.25, 0.75]))
    assert (p[3], p[8], p[0], p[5], p[9]) == (0.25, 0.75, 0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"temperature": -1},
        {"top_k": -1},
        {"top_p": 0},
        {"top_p": 1.5},
        {"min_p": 1.0},
        {"seed": -1},
        {"seed": 2**64},
    ],
)
def test_invalid_parameters_are_usage_errors(bad):
    with pytest.raises(UsageError):
        SamplingParams(**bad)


@pytest.mark.parametrize("k", [1, 40, 500])
def test_fast_top_k_equals_a_full_partition_with_and_without_ties(k):
    rng = np.random.default_rng(k)
    for ties in (False, True):
        logits = rng.normal(size=151_936).astype(np.float32)
        if ties:  # many equal top values: the strided threshold passes too few, or too many
            logits[rng.choice(logits.size, 3000, replace=False)] = 9.0
        fast = top_k_indices(logits, k)
        full = np.argpartition(logits, logits.size - k)[logits.size - k :]
        assert len(set(fast)) == k
        np.testing.assert_array_equal(np.sort(logits[fast]), np.sort(logits[full]))


@pytest.mark.parametrize("spread", [0.5, 3.0, 8.0])
def test_top_probability_is_the_softmax_maximum(spread):
    rng = np.random.default_rng(0)
    logits = (rng.standard_normal(151_936) * spread).astype(np.float32)
    logits[7] += 12.0
    shifted = logits.astype(np.float64) - logits.max()
    exact = 1.0 / np.exp(shifted).sum()
    assert top_probability(logits) == pytest.approx(exact, rel=0.02)


# -- the draw ------------------------------------------------------------------------------------

# Twelve tokens whose logits spread enough that each filter below cuts something.
LOGITS_12 = np.array([2.0, 1.6, 1.5, 1.1, 0.9, 0.7, 0.2, 0.0, -0.4, -0.9, -1.5, -3.0])
FILTERED = [
    SamplingParams(temperature=0.7, top_k=8, top_p=0.95, min_p=0.05, seed=11),
    SamplingParams(temperature=1.5, top_k=10, top_p=0.9, min_p=0.02, seed=12),
]
N_DRAWS = 20_000
Z_999 = 3.0902  # the standard normal's 0.999 quantile


def chi_square_critical(dof: int) -> float:
    """The chi-square 0.999 quantile (Wilson-Hilferty: within 1% for dof >= 3)."""
    return dof * (1 - 2 / (9 * dof) + Z_999 * np.sqrt(2 / (9 * dof))) ** 3


def draw_statistic(params: SamplingParams, n: int = N_DRAWS) -> tuple[float, float]:
    """Draws at positions 0..n-1 of one seed against p: (chi-square statistic, critical value
    at 0.999). Each position's noise is independent of the others', so the draws are n
    independent samples of p when the noise is right."""
    p = probabilities(LOGITS_12, params).dense(len(LOGITS_12))
    counts = np.bincount(
        [draw(LOGITS_12, params, position) for position in range(n)], minlength=len(p)
    )
    support = p > 0
    assert counts[~support].sum() == 0  # a token cut by a filter is never drawn
    expected = p[support] * n
    statistic = float(((counts[support] - expected) ** 2 / expected).sum())
    return statistic, chi_square_critical(int(support.sum()) - 1)


def test_the_filters_leave_several_tokens_and_cut_some():
    for params in FILTERED:
        kept = np.count_nonzero(probabilities(LOGITS_12, params).probs)
        assert 3 <= kept < len(LOGITS_12)


@pytest.mark.parametrize("params", FILTERED, ids=["t0.7", "t1.5"])
def test_draws_follow_the_tempered_truncated_distribution(params):
    statistic, critical = draw_statistic(params)
    assert statistic < critical


def noise_reused_across_positions(seed, position, tokens):
    """Wrong: the same noise at every position (a generator re-seeded for every token)."""
    return REAL_GUMBEL(seed, 0, tokens)


def noise_shared_by_a_block(seed, position, tokens):
    """Wrong: the four tokens of a Philox block get one number (word 0 for all)."""
    return REAL_GUMBEL(seed, position, np.asarray(tokens) // 4 * 4)


REAL_GUMBEL = noise.gumbel


@pytest.mark.parametrize("wrong", [noise_reused_across_positions, noise_shared_by_a_block])
@pytest.mark.parametrize("params", FILTERED, ids=["t0.7", "t1.5"])
def test_the_statistic_catches_wrong_noise(monkeypatch, params, wrong):
    """The same check with broken noise must fail: it has the power to see it."""
    monkeypatch.setattr(noise, "gumbel", wrong)
    statistic, critical = draw_statistic(params)
    assert statistic > critical


def test_greedy_draw_is_the_argmax_at_any_position():
    greedy = SamplingParams()
    assert {draw(LOGITS_12, greedy, position) for position in range(50)} == {0}


def test_a_draw_without_a_seed_is_refused():
    with pytest.raises(ValueError, match="seed"):
        draw(LOGITS_12, SamplingParams(temperature=1.0), 0)


def test_pruned_gumbel_max_equals_the_full_argmax_on_a_large_vocabulary(monkeypatch):
    """Top-k 0, top-p 1: the whole 151,936-token vocabulary is the support. Noise drawn only
    for the tokens that can still win picks what the argmax over all of them picks."""
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal(151_936) * 8.0).astype(np.float32)  # wide, as real logits
    dist = probabilities(logits, SamplingParams(temperature=1.0, top_k=0))
    log_p = np.log(dist.probs)
    assert len(dist.ids) == logits.size
    full = [dist.ids[np.argmax(log_p + noise.gumbel(99, t, dist.ids))] for t in range(300)]

    drawn = []
    monkeypatch.setattr(noise, "gumbel", lambda *a: drawn.append(len(a[2])) or REAL_GUMBEL(*a))
    assert [gumbel_max(dist, 99, t) for t in range(300)] == full
    assert sum(drawn) / 300 < logits.size / 10  # it prunes
    # Winners came from far down too, past the first look: the second stage matters.
    far = log_p[np.searchsorted(dist.ids, full)] < log_p.max() - sampling.FIRST_LOOK
    assert len(set(full)) > 20 and far.any()


def test_with_seed_draws_one_only_when_sampling_without_one():
    assert SamplingParams().with_seed().seed is None  # greedy: no noise, no seed
    assert SamplingParams(temperature=0.5, seed=3).with_seed().seed == 3
    drawn = {SamplingParams(temperature=0.5).with_seed().seed for _ in range(8)}
    assert len(drawn) == 8 and all(0 <= s < 2**DRAWN_SEED_BITS for s in drawn)
    assert SamplingParams(seed=3).effective_seed is None  # greedy reports none
