"""The verify cost curve: a plausible prior, corrected size by size by what rounds took."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from specllama.policy.costs import Costs
from specllama.policy.verify_curve import VerifyCurve, isotonic, plausible

# A quiet 2-core AMD EPYC, Qwen2.5-Coder 1.5B Q4_K_M (issue 17): the truth in these tests.
TRUE = Costs(verify_s=((1, 0.029), (2, 0.045), (4, 0.070), (8, 0.121), (16, 0.215)))
# The same machine calibrated while a build kept both cores busy (issue 17).
UNDER_LOAD = Costs(
    verify_s=((1, 0.079), (2, 0.183), (4, 0.434), (5, 0.257), (8, 0.177), (16, 0.300))
)


def test_isotonic_pools_a_spike_with_its_neighbours():
    assert isotonic(np.array([1.0, 4.0, 2.0, 3.0])) == pytest.approx([1.0, 3.0, 3.0, 3.0])
    assert isotonic(np.array([1.0, 2.0, 3.0])) == pytest.approx([1.0, 2.0, 3.0])


def test_the_prior_is_made_non_decreasing_and_no_dearer_than_separate_decodes():
    curve, doubtful = plausible(UNDER_LOAD.verify, 16)
    assert doubtful and not plausible(TRUE.verify, 16)[1]
    assert np.all(np.diff(curve) >= 0)
    assert np.all(curve <= curve[0] * np.arange(1, 17) + 1e-12)
    assert curve[1] == pytest.approx(2 * 0.079)  # 183 ms for two tokens: not believed


def test_a_prior_off_by_a_factor_is_corrected_everywhere_by_one_size():
    curve = VerifyCurve(lambda n: 3 * TRUE.verify(n), 16)
    curve.observe(1, TRUE.verify(1))
    for n in (1, 2, 5, 8, 16):
        assert curve(n) == pytest.approx(TRUE.verify(n))


def test_a_prior_of_the_wrong_shape_is_corrected_where_rounds_have_been_and_between():
    curve = VerifyCurve(UNDER_LOAD.verify, 16)
    for n in (1, 4, 8, 16):
        curve.observe(n, TRUE.verify(n))
    for n in (1, 4, 8, 16):
        assert curve(n) == pytest.approx(TRUE.verify(n), rel=0.01)
    for n in (2, 3, 5, 6, 12):  # between seen sizes: within 20% of the truth
        assert curve(n) == pytest.approx(TRUE.verify(n), rel=0.2)
    assert curve.observed(2) is None and curve.observed(4) == pytest.approx(TRUE.verify(4))


def test_noisy_observations_average_out():
    rng = np.random.default_rng(0)
    curve = VerifyCurve(TRUE.verify, 16)
    for _ in range(200):
        curve.observe(4, TRUE.verify(4) * rng.lognormal(0, 0.2))
    assert curve(4) == pytest.approx(TRUE.verify(4), rel=0.1)


def test_an_observation_moves_a_size_at_most_64_fold():
    curve = VerifyCurve(TRUE.verify, 16)
    curve.observe(1, 1000.0)
    assert curve(1) == pytest.approx(64 * TRUE.verify(1))


def noisy_plain_rounds(curve: VerifyCurve, rng: np.random.Generator, sd: float = 0.12) -> None:
    """20 rounds of the target alone on a shared machine (one decode's log time varies by
    about 0.08-0.14 on the 2-core EPYC)."""
    for _ in range(20):
        curve.observe(1, TRUE.verify(1) * rng.lognormal(0, sd))


def test_one_slow_round_of_a_new_size_does_not_break_a_right_shape():
    """Issue 17's code edit: one verify of 2 took 1.3x what its neighbours said (79 ms for 61).
    Taken as the shape, it made every longer draft look dear and ended the copy."""
    curve = VerifyCurve(TRUE.verify, 16)
    noisy_plain_rounds(curve, np.random.default_rng(1))
    curve.observe(2, 1.3 * TRUE.verify(2))
    assert 0.06 < curve.noise < 0.2  # learnt from the one-token rounds
    assert curve.shape_holds
    for n in (4, 8, 16):
        assert curve(n) == pytest.approx(TRUE.verify(n), rel=0.15)


def test_a_shape_wrong_beyond_the_noise_is_broken_at_once():
    """A flat calibration (verifying is free, as on a big GPU) on this CPU: the first verify of
    4 tokens costs 2.4 tokens, past any noise, and the rounds' own shape takes over."""
    curve = VerifyCurve(lambda n: TRUE.verify(1), 16)
    noisy_plain_rounds(curve, np.random.default_rng(1))
    curve.observe(4, TRUE.verify(4))
    assert not curve.shape_holds
    assert curve(4) == pytest.approx(TRUE.verify(4), rel=0.05)
    assert curve(8) > 1.5 * TRUE.verify(4)


def test_the_noise_is_learnt_from_repeated_sizes():
    rng = np.random.default_rng(2)
    quiet, busy = VerifyCurve(TRUE.verify, 16), VerifyCurve(TRUE.verify, 16)
    for _ in range(60):
        quiet.observe(1, TRUE.verify(1) * rng.lognormal(0, 0.03))
        busy.observe(1, TRUE.verify(1) * rng.lognormal(0, 0.3))
    assert quiet.noise == pytest.approx(0.05)  # the floor
    assert busy.noise == pytest.approx(0.3, rel=0.25)


def test_one_token_keeps_its_own_evidence_while_the_shape_holds():
    """What every round is weighed against is not pooled with the other sizes' scale."""
    curve = VerifyCurve(TRUE.verify, 16)
    curve.observe(1, TRUE.verify(1))
    for _ in range(8):
        curve.observe(4, 1.1 * TRUE.verify(4))
    assert curve.shape_holds
    assert curve(1) == pytest.approx(TRUE.verify(1))


def test_past_the_sizes_seen_an_untrusted_shape_hopes_for_cheap_batches():
    """A doubtful prior's curve past the largest size seen is a line (here 13.6 ms a token);
    the hope for a probe is a quarter of a token a token. A trusted shape is its own hope."""
    curve = VerifyCurve(UNDER_LOAD.verify, 16)
    for n in (1, 2, 4):
        curve.observe(n, TRUE.verify(n))
    assert curve.optimistic(4) == curve(4)
    assert curve.optimistic(8) == pytest.approx(TRUE.verify(4) + 4 * 0.25 * TRUE.verify(1))
    assert curve.optimistic(8) < 0.85 * curve(8)
    right = VerifyCurve(TRUE.verify, 16)
    for n in (1, 4):
        right.observe(n, TRUE.verify(n))
    assert right.shape_holds and right.optimistic(8) == right(8)


def test_the_curve_is_remade_only_when_a_size_moved_but_stays_within_a_percent():
    """Remaking the curve is most of the policy's Python a round; a size's mean that moved by
    less than 1% since the curve was made from it does not remake it."""
    rng = np.random.default_rng(0)
    curve = VerifyCurve(TRUE.verify, 16)
    remade = 0
    remake = curve._update

    def counted() -> None:
        nonlocal remade
        remade += 1
        remake()

    curve._update = counted
    for i in range(300):
        n = (1, 1, 1, 2, 4)[i % 5]
        curve.observe(n, TRUE.verify(n) * rng.lognormal(0, 0.1))
        exact = copy.deepcopy(curve)
        remake.__func__(exact)
        assert curve.curve == pytest.approx(exact.curve, rel=0.015)
    assert remade < 0.7 * 300
