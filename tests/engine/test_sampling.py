"""The logits -> probabilities transform and the sampler, numpy only."""

from __future__ import annotations

import numpy as np
import pytest

from specllama.engine.sampling import (
    Distribution,
    SamplingParams,
    probabilities,
    residual,
    sample,
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


def test_sample_frequencies_match_the_probabilities():
    probs = Distribution(np.array([2, 5, 7, 9]), np.array([0.1, 0.2, 0.3, 0.4]))
    rng = np.random.default_rng(5)
    counts = np.bincount([sample(probs, rng) for _ in range(20_000)], minlength=10)[probs.ids]
    expected = probs.probs * 20_000
    assert (((counts - expected) ** 2) / expected).sum() < 16.27  # chi-square, 3 df, p=0.001


def test_residual_is_the_normalised_positive_part_over_both_supports():
    p = Distribution(np.array([1, 4, 6]), np.array([0.5, 0.3, 0.2]))
    q = Distribution(np.array([4, 6, 8]), np.array([0.2, 0.2, 0.6]))
    np.testing.assert_allclose(residual(p, q).dense(10), [0, 5 / 6, 0, 0, 1 / 6, 0, 0, 0, 0, 0])
    assert residual(p, p) is p


def test_lookup_outside_the_support_is_zero():
    p = Distribution(np.array([3, 8]), np.array([0.25, 0.75]))
    assert (p[3], p[8], p[0], p[5], p[9]) == (0.25, 0.75, 0.0, 0.0, 0.0)
    assert Distribution.one_hot(7)[7] == 1.0


@pytest.mark.parametrize(
    "bad",
    [{"temperature": -1}, {"top_k": -1}, {"top_p": 0}, {"top_p": 1.5}, {"min_p": 1.0}],
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
