"""Counters of one generation and the figures derived from them. No I/O."""

from __future__ import annotations

import statistics
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class GenerationStats:
    drafter: str = "none"
    n_prompt: int = 0
    n_generated: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_rounds: int = 0  # target verify passes
    n_draft_rounds: int = 0  # rounds in which something was drafted
    # Of n_accepted: tokens an output constraint allowed alone, drafted without any model.
    n_forced: int = 0
    # The client's prediction of the answer: its tokens drafted and kept, drafted and thrown
    # away (None: no prediction was given).
    prediction_accepted: int | None = None
    prediction_rejected: int | None = None
    accepted_histogram: Counter[int] = field(default_factory=Counter)  # accepted length -> rounds
    prefill_s: float = 0.0
    time_s: float = 0.0  # generation after the prefill
    target_s: float = 0.0  # inside the target's llama_decode during generation
    draft_s: float = 0.0  # inside the draft's llama_decode
    # Of draft_s, what ran beside the target's verify (pipelined drafting): off the clock.
    draft_hidden_s: float = 0.0
    finish_reason: str = ""
    # The seed the sampling noise was keyed with (drawn when none was given); None: greedy.
    seed: int | None = None

    def record_round(self, n_drafted: int, n_accepted: int) -> None:
        self.n_rounds += 1
        self.n_drafted += n_drafted
        self.n_accepted += n_accepted
        if n_drafted:
            self.n_draft_rounds += 1
            self.accepted_histogram[n_accepted] += 1

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def mean_accepted_per_round(self) -> float:
        """Accepted draft tokens per round that drafted something."""
        return self.n_accepted / self.n_draft_rounds if self.n_draft_rounds else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.n_generated / self.time_s if self.time_s > 0 else 0.0

    @property
    def overhead_s(self) -> float:
        """Time in Python (sampling, bookkeeping, drafting logic): neither model's decode."""
        return max(self.time_s - self.target_s - self.draft_s + self.draft_hidden_s, 0.0)

    @property
    def overhead_ms_per_round(self) -> float:
        return 1000 * self.overhead_s / self.n_rounds if self.n_rounds else 0.0

    def merge(self, other: GenerationStats) -> None:
        """Add another generation's counts (a chat session sums its answers)."""
        for name in (
            "n_prompt",
            "n_generated",
            "n_drafted",
            "n_accepted",
            "n_rounds",
            "n_draft_rounds",
            "n_forced",
            "prefill_s",
            "time_s",
            "target_s",
            "draft_s",
            "draft_hidden_s",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.accepted_histogram.update(other.accepted_histogram)

    def as_dict(self) -> dict[str, object]:
        return {
            "n_prompt": self.n_prompt,
            "n_generated": self.n_generated,
            "time_s": round(self.time_s, 4),
            "prefill_s": round(self.prefill_s, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
            "drafter": self.drafter,
            "n_drafted": self.n_drafted,
            "n_accepted": self.n_accepted,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "n_forced": self.n_forced,
            "prediction_accepted": self.prediction_accepted,
            "prediction_rejected": self.prediction_rejected,
            "n_rounds": self.n_rounds,
            "mean_accepted_per_round": round(self.mean_accepted_per_round, 4),
            "accepted_histogram": {str(k): v for k, v in sorted(self.accepted_histogram.items())},
            "target_s": round(self.target_s, 4),
            "draft_s": round(self.draft_s, 4),
            "draft_hidden_s": round(self.draft_hidden_s, 4),
            "overhead_ms_per_round": round(self.overhead_ms_per_round, 4),
            "finish_reason": self.finish_reason,
            "seed": self.seed,
        }


class LiveCounter:
    """Running figures of a generation in progress, from its round and token events.

    What a live display shows before the FinishEvent arrives, and the stats of an answer that
    was stopped early (which never gets one). The clock starts when the first round began
    (its own decode time is subtracted), so the prompt's prefill does not count.
    """

    def __init__(self, drafter: str, clock: Callable[[], float] = time.perf_counter) -> None:
        self.stats = GenerationStats(drafter=drafter)
        self.last_draft_length = 0
        self._clock = clock
        self._started: float | None = None

    def on_round(self, n_drafted: int, n_accepted: int, draft_s: float, target_s: float) -> None:
        if self._started is None:
            self._started = self._clock() - draft_s - target_s
        self.stats.record_round(n_drafted, n_accepted)
        self.stats.draft_s += draft_s
        self.stats.target_s += target_s
        self.last_draft_length = n_drafted

    def on_token(self) -> None:
        self.stats.n_generated += 1

    def snapshot(self, finish_reason: str | None = None) -> GenerationStats:
        """The stats so far, with the elapsed time filled in (and the finish reason, when the
        generation was ended from outside)."""
        if self._started is not None:
            self.stats.time_s = max(self._clock() - self._started, 1e-9)
        if finish_reason is not None:
            self.stats.finish_reason = finish_reason
        return self.stats


class TargetRate:
    """An estimate of the target model's speed alone, one token per decode.

    Fed with measured one-token target decodes: rounds that drafted nothing (the target then
    verifies a batch of one, exactly what it does alone) and any explicit probe. The estimate
    is the median of the recent samples: the fastest one, which this once took, sits 5-15%
    above what the target alone really runs at on a quiet 2-core machine (one-token decodes of
    the 1.5B Q4 target vary that much), which read as a loss where `specllama bench` measured
    none. A speedup is then measured tok/s
    ÷ this rate; it leaves out the sampling overhead the target-alone loop would also pay, so it
    is an estimate ("est."), not a benchmark (`specllama bench` measures both).
    """

    def __init__(self, keep: int = 64) -> None:
        self._samples: deque[float] = deque(maxlen=keep)

    def add(self, seconds_per_token: float) -> None:
        if seconds_per_token > 0:
            self._samples.append(seconds_per_token)

    def observe_round(self, n_drafted: int, target_s: float) -> None:
        if n_drafted == 0:
            self.add(target_s)

    @property
    def known(self) -> bool:
        return bool(self._samples)

    @property
    def tokens_per_s(self) -> float:
        if not self._samples:
            return 0.0
        return 1.0 / statistics.median(self._samples)

    def speedup(self, tokens_per_s: float) -> float | None:
        """Measured rate over the target-alone estimate; None when nothing is known yet."""
        rate = self.tokens_per_s
        return tokens_per_s / rate if rate > 0 and tokens_per_s > 0 else None
