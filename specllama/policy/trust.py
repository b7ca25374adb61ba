"""Whether measured costs can be trusted: the checks a calibration must pass to be cached, and
what tells that a cached one no longer holds.

A calibration measured while another program used the cores is wrong in ways the numbers show:
repeats of one size that spread, a curve that falls as the batch grows, a batch that costs more
than its tokens decoded one by one, one-token decodes in a row that take other than verify(1).
Measured on a machine that was quiet then and is busy now (or the reverse), it is contradicted
by the rounds of a run instead: `disagreement`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from itertools import pairwise

from specllama.policy.costs import Costs

# `problems`: how far repeats of one size may spread ((max - min) / median), how much a larger
# batch may seem cheaper than a smaller one (timing noise), how many one-token decodes a batch
# may cost at most, and how far a run of one-token decodes may be from V(1).
MAX_SPREAD = 0.25
MAX_DIP = 0.9
MAX_TOKENS_PER_BATCH = 1.2
MAX_RUN_GAP = 0.2
# `disagreement`: how many rounds of one size make evidence, and how far off they may be.
ROUNDS_FOR_EVIDENCE = 16
MAX_ROUND_GAP = 0.3


def problems(
    verify: dict[int, list[float]], run: Sequence[float], steps: Sequence[float] = ()
) -> list[str]:
    """What makes a measurement untrustworthy (module docstring); empty when nothing does."""
    found = []
    medians = {n: statistics.median(s) for n, s in verify.items() if s}
    one = medians.get(1, 0.0)
    if one <= 0:
        return []  # nothing measurable (decodes that take no time): nothing to check
    for name, values in [*((f"verify({n})", s) for n, s in verify.items()), ("draft", steps)]:
        if len(values) > 1 and _spread(values) > MAX_SPREAD:
            found.append(f"{name} repeats spread {_spread(values):.0%}")
    sizes = sorted(medians)
    for small, large in pairwise(sizes):
        if medians[large] < MAX_DIP * medians[small]:
            found.append(
                f"verify({large}) {medians[large] * 1e3:.1f} ms < "
                f"verify({small}) {medians[small] * 1e3:.1f} ms"
            )
    for n in sizes[1:]:
        if medians[n] > MAX_TOKENS_PER_BATCH * n * one:
            found.append(f"verify({n}) costs {medians[n] / one:.1f} one-token decodes")
    if run and abs(statistics.median(run) / one - 1) > MAX_RUN_GAP:
        found.append(
            f"one-token decodes in a row take {statistics.median(run) * 1e3:.1f} ms, "
            f"verify(1) {one * 1e3:.1f} ms"
        )
    return found


def _spread(values: Sequence[float]) -> float:
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle > 0 else 0.0


def disagreement(costs: Costs, observed: Callable[[int], tuple[float, int]]) -> str | None:
    """How the rounds of a run contradict `costs`, or None. `observed(n)`: what verifies of n
    tokens took in the run, and how many there were."""
    for n in (1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48):
        seconds, count = observed(n)
        if count < ROUNDS_FOR_EVIDENCE or seconds <= 0:
            continue
        expected = costs.verify(n)
        if abs(seconds / expected - 1) > MAX_ROUND_GAP:
            return (
                f"{count} rounds took {seconds * 1e3:.1f} ms to verify {n} token(s), "
                f"the calibration says {expected * 1e3:.1f} ms"
            )
    return None
