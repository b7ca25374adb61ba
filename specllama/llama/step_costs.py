"""What a model's batched steps cost, and each sequence's share of one (the stepper's charges).

A slot's controller weighs its drafts by what it is charged for its rounds, so a step's seconds
are split by what each sequence adds to it: every sequence in a step pays an equal share of the
step without its extra tokens, and each extra token (beyond the one a sequence needs each step:
drafts to verify, a prompt's chunk) pays the step's marginal cost per token at that width. A
slot then drafts exactly when its drafts raise the batch's tokens per second: k more tokens
that bring E accepted ones pay when E / (marginal cost of k) beats the batch's rate.

The marginal cost is read near the step's own width, not off one line over every width: on a
CPU a 300-token prompt chunk costs ~15 ms a token where four slots' verifies cost ~35 ms a
token more than their plain step (a 2-core EPYC, Qwen2.5-Coder-1.5B Q4_K_M), so a line through
both makes drafts in a full batch look half their price. A GPU's slack (a wider step costing
little more) shows the same way: a small slope near its width.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

MIN_STEPS = 8  # steps near a width before their slope is trusted


class StepCosts:
    """The recent steps of one model, (tokens, seconds), and what they say a token costs."""

    def __init__(self, window: int = 64) -> None:
        self._steps: deque[tuple[int, float]] = deque(maxlen=window)
        self._prices: dict[tuple[int, int], tuple[float, float]] = {}  # until the next step

    def add(self, tokens: int, seconds: float) -> None:
        self._steps.append((tokens, seconds))
        self._prices = {}

    def line(self) -> tuple[float, float]:
        """(a, b), both at least 0: a step of W tokens costs about a + b*W over every recent
        width; (0, mean cost per token) until the widths vary or where a line does not fit."""
        return _line(list(self._steps))

    def marginal(self, low: int, high: int) -> float:
        """Seconds a token adds to a step between `low` and `high` tokens wide (`price`)."""
        return self.price(low, high)[1]

    def price(self, sequences: int, high: int) -> tuple[float, float]:
        """(share, per_token): what a step of `sequences` tokens, one a sequence, costs each of
        them, and what a token adds to it up to `high` tokens: the charges a sequence can
        expect for its next round. Read off the recent steps near those widths (half
        `sequences` to twice `high` tokens): their slope, and the step it puts at `sequences`.
        While those steps do not vary in width (slots that have not drafted beside each other
        yet), what a token adds is the slope over every recent width, prompt chunks' too (on
        a CPU cheaper a token than drafts in a full batch), so that a batch's slack is tried,
        and seen, before it is taken to be absent; their mean per token is the share."""
        prices = self._prices  # every slot asks after each step: one fit serves them all
        if (sequences, high) not in prices:
            prices[sequences, high] = self._price(sequences, high)
        return prices[sequences, high]

    def _price(self, sequences: int, high: int) -> tuple[float, float]:
        steps = list(self._steps)  # one copy (atomic): the stepper's thread may add a step
        near = [(w, s) for w, s in steps if sequences / 2 <= w <= 2 * high]
        if not near:
            fixed, per_token = _line(steps)
            return fixed / sequences + per_token, per_token
        widths, seconds = _arrays(near)
        plain = 0.0
        if _varied(widths):
            per_token = _slope(near)
            plain = float(seconds.mean() + per_token * (sequences - widths.mean()))
        else:
            per_token = _line(steps)[1]
        if plain <= 0:  # no slope near, or one that overstates the narrowest steps
            plain = float(seconds.sum() / widths.sum()) * sequences
        return plain / sequences, per_token

    def charges(self, sizes: Sequence[int], seconds: float) -> list[float]:
        """Each sequence's share of a step of `sizes` tokens that took `seconds` (see the
        module's doc): alone, a sequence pays the whole step."""
        if len(sizes) == 1:
            return [seconds]
        extra = [n - 1 for n in sizes]
        per_token = self.marginal(len(sizes), sum(sizes))
        shared = seconds - per_token * sum(extra)
        if shared < 0:  # the slope overstates this step: every token pays alike
            return [seconds * n / sum(sizes) for n in sizes]
        return [shared / len(sizes) + per_token * e for e in extra]


def _line(steps: list[tuple[int, float]]) -> tuple[float, float]:
    if not steps:
        return 0.0, 1.0
    slope = _slope(steps)
    widths, seconds = _arrays(steps)
    intercept = float(seconds.mean() - slope * widths.mean())
    if intercept < 0:  # cost grows faster than width: no line a + b*W, b >= 0, a >= 0
        return 0.0, float(seconds.sum() / widths.sum())
    return intercept, slope


def _slope(steps: list[tuple[int, float]]) -> float:
    """Seconds per token: the least-squares slope of the steps' cost over their widths; their
    mean cost per token while there are few, their widths do not vary, or the slope is < 0."""
    widths, seconds = _arrays(steps)
    per_token = float(seconds.sum() / widths.sum())
    if not _varied(widths):
        return per_token
    dw = widths - widths.mean()  # least squares: sum(dw * ds) / sum(dw^2)
    slope = float(np.dot(dw, seconds - seconds.mean()) / np.dot(dw, dw))
    return slope if slope >= 0 else per_token


def _varied(widths: np.ndarray) -> bool:
    """Enough steps, of widths that differ enough, for a slope to say something."""
    return len(widths) >= MIN_STEPS and widths.var() >= 1.0


def _arrays(steps: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    widths = np.array([tokens for tokens, _ in steps], dtype=np.float64)
    seconds = np.array([took for _, took in steps], dtype=np.float64)
    return widths, seconds
