"""V(n), the target verifying a batch of n tokens, learnt from the rounds of this run.

The calibration's curve is the prior, not the truth: measured on a busy machine it can be off by a
factor, or have the wrong shape (verify(4) dearer than verify(8)). So:

- the prior is first made plausible: non-decreasing in n (isotonic regression, which pools a
  spike with its neighbours instead of spreading it upwards as a running maximum would), and
  never dearer than n separate one-token decodes (a batch shares the weights' reads). A prior
  that needed either is `doubtful`: its shape is not used at all;
- every verify a round makes is an observation of V at its size; per size, the log of observed
  over prior is averaged (a running mean for the first few, then fading);
- while the sizes seen agree with the prior's shape (their ratios observed / prior within
  `SHAPE_TOLERANCE` of each other, plus what the noise explains: a shared machine's verifies
  vary by ~10% from round to round, learnt from the sizes seen more than once, so one slow
  round of a new size is not a new shape), the prior is right up to a scale: the ratio is their
  common one, with each size's own evidence weighed in as it accumulates, interpolated in log n
  between sizes; one token keeps its own, since every round is weighed against it. A prior off
  by a factor is corrected everywhere after one round;
- once they disagree (or the prior is doubtful), the shape is the rounds' own: straight lines
  through the sizes seen, continued past the largest with the least-squares slope of them all
  (a doubtful prior with one size seen: `GUESSED_SLOPE` of a token per token).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

N_MAX = 65  # the largest verify batch a round makes: a pending token and 64 drafts
_FADE_AFTER = 8  # a running mean for the first 8 observations of a size, then an EWMA of 1/8
# An observation moves a size at most this factor from the prior: a flat prior (verifying 49
# tokens costs one token, as on a big GPU) on a CPU, where it costs 20, must be believed.
_RATIO_LIMIT = 64.0
SHAPE_TOLERANCE = 1.15
# A verify's time, over what its size usually costs, varies by this much (the sd of its log) on a
# shared machine until the rounds show how much it does here; never taken below _NOISE_FLOOR.
_NOISE_PRIOR, _NOISE_FLOOR = 0.1, 0.05
_NOISE_PRIOR_WEIGHT = 4  # what _NOISE_PRIOR is worth, in observations
_SHAPE_Z = 2.0  # how many standard errors two sizes may part by before the shape is broken
_POOLED = 2  # what the common scale is worth, in rounds of one size, while the shape holds
_CURVE_LAG = 0.01  # how far (in log) a size's mean may move before the curve is made again
# Each token more in a batch, as a fraction of one token, when nothing better is known: between
# a GPU's (0.02-0.1) and a 2-core CPU's (0.2-0.5), so that longer drafts are tried, step by step.
GUESSED_SLOPE = 0.25


def plausible(verify: Callable[[int], float], n_max: int = N_MAX) -> tuple[np.ndarray, bool]:
    """V(1..n_max) from a measured curve, made non-decreasing and sub-additive, and whether
    that changed it by more than timing noise (then it is doubtful)."""
    raw = np.array([verify(n) for n in range(1, n_max + 1)], dtype=np.float64)
    curve = isotonic(raw)
    curve = np.minimum(curve, curve[0] * np.arange(1, n_max + 1))
    return curve, bool(np.any(np.abs(curve / raw - 1) > 0.1))


def isotonic(values: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to `values` in least squares (pool adjacent
    violators)."""
    if np.all(values[1:] >= values[:-1]):  # the usual case, once a round: nothing to pool
        return values.copy()
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, c1), (m2, c2) = blocks[-2], blocks.pop()
            blocks[-1] = [(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2]
    means, counts = np.array(blocks).T
    return np.repeat(means, counts.astype(np.int64))


class VerifyCurve:
    """The prior curve, corrected per batch size by observed verifies (module docstring)."""

    def __init__(self, verify: Callable[[int], float], n_max: int = N_MAX) -> None:
        self.prior, self.doubtful = plausible(verify, n_max)
        self._log_ratio = np.zeros(n_max)
        self._in_curve = np.zeros(n_max)  # the log ratios the curve was last made from
        self.seen = np.zeros(n_max, dtype=np.int64)
        self._sizes = np.arange(1, n_max + 1, dtype=np.float64)
        self._log_sizes = np.log(self._sizes)
        self.curve = self.prior.copy()
        self.largest = 0  # the largest batch size observed
        self._noise_var = _NOISE_PRIOR**2
        self._noise_count = 0

    def __call__(self, n: int) -> float:
        if n <= len(self.curve):
            return float(self.curve[n - 1])
        # Past the largest batch: on with the last step's slope.
        return float(self.curve[-1] + (self.curve[-1] - self.curve[-2]) * (n - len(self.curve)))

    def optimistic(self, n: int) -> float:
        """V(n) at best, as far as is plausible: where the prior's shape is not trusted, a batch
        larger than any the rounds made may cost as little as GUESSED_SLOPE of a token per token
        more than the largest did (a CPU's curve can step up and then stay flat: on the 2-core
        EPYC a batch of 8 cost 7.9 tokens, one of 12 only 8.5). What a length probe hopes for."""
        if self.shape_holds or not 0 < self.largest < n:
            return self(n)
        above = (n - self.largest) * GUESSED_SLOPE * float(self.curve[0])
        return min(self(n), self(self.largest) + above)

    def tried(self, n: int) -> None:
        """A batch of n was verified, but not alone (beside a draft ahead) or too fast to time
        (a fake backend): not an observation of its cost, but a size the rounds have made."""
        self.largest = max(self.largest, min(n, len(self.curve)))

    def observe(self, n: int, seconds: float) -> None:
        if not 1 <= n <= len(self.curve):
            return
        self.tried(n)
        if seconds <= 0:
            return
        i = n - 1
        limit = math.log(_RATIO_LIMIT)
        ratio = min(max(math.log(seconds / self.prior[i]), -limit), limit)
        if self.seen[i]:
            self._learn_noise(ratio - self._log_ratio[i], int(self.seen[i]))
        self.seen[i] += 1
        weight = 1.0 / min(self.seen[i], _FADE_AFTER)
        self._log_ratio[i] += weight * (ratio - self._log_ratio[i])
        # Remade only when a size's mean moved past _CURVE_LAG since it was last made from it:
        # most rounds move it by less (and a 2-core CPU spends a fifth of a millisecond a
        # round on remaking it), and the controller's tables follow moves over 2% only.
        if self.seen[i] == 1 or abs(self._log_ratio[i] - self._in_curve[i]) > _CURVE_LAG:
            self._update()

    def _learn_noise(self, residual: float, count: int) -> None:
        """One more residual of a size seen `count` times before: its square is noise^2 times
        (1 + 1/count) on average (the mean it parted from is itself noisy)."""
        self._noise_count += 1
        weight = 1.0 / min(self._noise_count + _NOISE_PRIOR_WEIGHT, 4 * _FADE_AFTER)
        square = residual**2 * count / (count + 1)
        self._noise_var += weight * (square - self._noise_var)

    @property
    def noise(self) -> float:
        """The sd of one verify's log time about its size's mean, as seen in this run."""
        return max(math.sqrt(self._noise_var), _NOISE_FLOOR)

    @property
    def shape_holds(self) -> bool:
        """The sizes seen so far agree with the prior's shape, up to a scale: no two of them
        part by more than SHAPE_TOLERANCE plus what the noise of their few rounds explains (so
        one slow round of a new size does not break it, and a shape twice wrong does)."""
        if self.doubtful:
            return False
        seen = self.seen > 0
        ratios = self._log_ratio[seen]
        counts = np.minimum(self.seen[seen], _FADE_AFTER).astype(np.float64)
        apart = np.abs(ratios[:, None] - ratios[None, :])
        error = self.noise * np.sqrt(1.0 / counts[:, None] + 1.0 / counts[None, :])
        return bool(np.all(apart <= math.log(SHAPE_TOLERANCE) + _SHAPE_Z * error))

    def _update(self) -> None:
        self._in_curve[:] = self._log_ratio
        seen = np.flatnonzero(self.seen)
        if self.shape_holds:
            # One scale, with each size's own evidence on top as it accumulates (few noisy
            # rounds of one size do not make it look cheaper than its neighbours), taken by
            # every size from the nearest sizes seen (flat beyond them).
            counts, ratios = self.seen[seen], self._log_ratio[seen]
            overall = float(np.average(ratios, weights=counts))
            pooled = (counts * ratios + _POOLED * overall) / (counts + _POOLED)
            if seen[0] == 0:  # except one token: what every round is weighed against, seen alone
                pooled[0] = ratios[0]
            curve = self.prior * np.exp(np.interp(self._log_sizes, self._log_sizes[seen], pooled))
        else:
            curve = self.prior * np.exp(self._log_ratio[seen[0]])
            curve[seen[0] :] = self._own_shape(seen)
        self.curve = isotonic(curve)

    def _own_shape(self, seen: np.ndarray) -> np.ndarray:
        """From the smallest size seen on: straight lines through what the rounds showed,
        continued past the largest with the last slope."""
        sizes = self._sizes[seen]
        values = self.prior[seen] * np.exp(self._log_ratio[seen])
        if len(seen) > 1:  # the least-squares slope of all sizes seen, by how often they were
            slope = max(float(np.polyfit(sizes, values, 1, w=np.sqrt(self.seen[seen]))[0]), 0.0)
        else:
            slope = GUESSED_SLOPE * values[0]
        rest = self._sizes[seen[0] :]
        line = np.interp(rest, sizes, values)
        past = rest > sizes[-1]
        line[past] = values[-1] + slope * (rest[past] - sizes[-1])
        return line

    def ratio(self, n: int) -> float | None:
        """Observed over prior at size n, or None when no round verified n tokens."""
        seen = self.observed(n)
        return seen / float(self.prior[n - 1]) if seen is not None else None

    def count(self, n: int) -> int:
        """How many verifies of n tokens were observed."""
        return int(self.seen[n - 1]) if 1 <= n <= len(self.seen) else 0

    def observed(self, n: int) -> float | None:
        """What rounds showed V(n) to be, or None when no round verified n tokens."""
        i = n - 1
        if not 0 <= i < len(self.seen) or not self.seen[i]:
            return None
        return float(self.prior[i] * math.exp(self._log_ratio[i]))


class RunningRatio:
    """Observed over expected, averaged in log space as VerifyCurve averages each size."""

    def __init__(self) -> None:
        self._log = 0.0
        self.count = 0

    def seed(self, ratio: float, count: int) -> None:
        """Start from `ratio`, as if `count` observations had shown it."""
        if ratio > 0:
            self._log, self.count = math.log(ratio), count

    def add(self, observed: float, expected: float) -> None:
        if observed <= 0 or expected <= 0:
            return
        limit = math.log(_RATIO_LIMIT)
        ratio = min(max(math.log(observed / expected), -limit), limit)
        self.count += 1
        self._log += (ratio - self._log) / min(self.count, _FADE_AFTER)

    @property
    def value(self) -> float:
        return math.exp(self._log)
