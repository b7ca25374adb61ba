"""The verify cost curve: a plausible prior, corrected size by size by what rounds took."""

from __future__ import annotations

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
