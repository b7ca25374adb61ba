"""How long a benchmark will take: each run's expected seconds before it starts (from the
calibration), and the time left while it runs (`TimeLeft`), corrected by the runs done so far.

A run of n tokens is expected to take what the target alone takes for them, one token at a time
(V(1) each), plus the prompt's prefill where it happens: the target's when a prompt is new to it
(later runs reuse the evaluated prefix), the draft model's in every run that uses it (its
context is emptied before each run). A speculative run is faster or slower than that; the runs
done so far say by how much, and the estimate follows them (`TimeLeft`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specllama.policy.costs import Costs

# What starting another program costs before it decodes (llama.cpp loading both models from the
# page cache); the runs done correct it like the rest.
EXTERNAL_START_S = 2.0


def prefill_s(costs: Costs, n_tokens: int) -> float:
    """The target evaluating `n_tokens` of a prompt in batches: the per-token cost of the
    largest batch measured."""
    size, seconds = costs.verify_s[-1]
    return n_tokens * seconds / size


def run_prior_s(
    costs: Costs | None,
    tokens: int,
    *,
    target_prefill: int = 0,
    draft_prefill: int = 0,
    external: bool = False,
) -> float | None:
    """Expected seconds of one run of `tokens` tokens (None without a calibration)."""
    if costs is None:
        return None
    seconds = tokens * costs.verify(1) + prefill_s(costs, target_prefill)
    seconds += draft_prefill * costs.draft_catchup_s
    return seconds + (EXTERNAL_START_S if external else 0.0)


@dataclass(frozen=True)
class Step:
    """One run the benchmark will make: what to show while it runs, its expected seconds, and
    the group whose runs done correct that expectation (specllama's, or another tool's)."""

    label: str
    prior_s: float | None
    group: str = "specllama"


@dataclass(frozen=True)
class ProgressUpdate:
    """What the progress display shows: runs done of all, what runs now, the time left (None:
    not known yet, before the first run without a calibration)."""

    done: int
    total: int
    now: str
    left_s: float | None


Clock = Callable[[], float]


class TimeLeft:
    """The time left of a list of steps, from their expected seconds corrected by the ratio of
    observed to expected seconds of the steps done: per group where that group has run, else
    over all. A step without an expectation counts as the mean of the observed steps."""

    def __init__(self, steps: Sequence[Step], clock: Clock = time.monotonic) -> None:
        self.steps = list(steps)
        self.clock = clock
        self.took: dict[int, float] = {}
        self.skipped: set[int] = set()  # left out: neither waited for nor learnt from
        self.current: int | None = None
        self.started = 0.0

    def start(self, index: int) -> None:
        self.current, self.started = index, self.clock()

    def finish(self) -> None:
        if self.current is not None:
            self.took[self.current] = self.clock() - self.started
            self.current = None

    def skip(self, index: int) -> None:
        self.skipped.add(index)
        if self.current == index:
            self.current = None

    def left_s(self) -> float | None:
        """Seconds left: the pending steps, and what remains of the one running now."""
        total = 0.0
        for index in range(len(self.steps)):
            if index in self.took or index in self.skipped:
                continue
            expected = self._expected(index)
            if expected is None:
                return None
            if index == self.current:
                expected = max(expected - (self.clock() - self.started), 0.0)
            total += expected
        return total

    def _expected(self, index: int) -> float | None:
        step = self.steps[index]
        if step.prior_s is None:
            observed = list(self.took.values())
            return sum(observed) / len(observed) if observed else None
        return step.prior_s * self._ratio(step.group)

    def _ratio(self, group: str) -> float:
        """Observed over expected seconds of the steps done (1.0 before any)."""
        done = [(i, s) for i, s in self.took.items() if self.steps[i].prior_s]
        mine = [(i, s) for i, s in done if self.steps[i].group == group]
        chosen = mine or done
        if not chosen:
            return 1.0
        expected = sum(self.steps[i].prior_s or 0.0 for i, _ in chosen)
        return sum(s for _, s in chosen) / expected


def describe_left(seconds: float | None) -> str:
    """'about 2 min 10 s left', for the progress display."""
    if seconds is None:
        return "time left: estimating"
    seconds = round(seconds)
    if seconds < 60:
        return f"about {seconds} s left"
    return f"about {seconds // 60} min {seconds % 60:02d} s left"
