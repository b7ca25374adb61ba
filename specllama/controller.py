"""How many tokens to draft next round, and from which source: fixed, or adaptive.

Each round the loop asks the drafter what it could offer (`Drafter.sources(context)`: e.g. an
n-gram match in the text so far, and the draft model), asks the controller to `choose` one
source and a draft length, runs the round, and reports it back with `observe`.

Expected-speedup model (`AdaptiveController`)
--------------------------------------------

Treat each draft token as accepted independently with probability a (per source, learned from
the rounds so far). A round that drafts k tokens then yields the accepted prefix plus the
target's own token, on average

    E(a, k) = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)        tokens,

and costs

    C(k) = k * c_draft + V(k + 1)                                        seconds,

where c_draft is one draft step (0 for n-gram lookup) and V(n) the target's verify decode of a
batch of n tokens (the pending token plus k drafts), both measured on this machine (see
`specllama.calibration`) and rescaled during the run by what the rounds actually cost. The
target alone produces 1 / V(1) tokens per second, so the expected speedup of drafting k tokens
is

    S(k) = E(a, k) / C(k) * V(1).

The controller picks the source and k that maximise S(k). When no source reaches
S > 1 + margin, it drafts nothing (the target runs alone, k = 0) and switches that source off
for a while (`probe_after` rounds, doubling after each failed probe). When the pause ends it
probes: one round drafted as if acceptance were halfway between what it knows and 1; what that
round shows decides whether the source is back on, or off for twice as long. A source that cannot
pay even at a = 1 is never tried.

Two costs decide whether a probe is worth making at all:

- a draft model that has been switched off has fallen behind the text; catching up costs
  `backlog * c_catchup` (a batched decode on the draft model). It probes only when that is
  small next to what the probe could win over the tokens still to generate;
- the draft model's own confidence: drafting stops at the first token whose top probability is
  below `min_confidence` (llama.cpp's p-min), set to the break-even point of the measured costs:
  a token is worth drafting when its chance of acceptance exceeds (c_draft + dV) / V(1), with dV
  the cost of one more token in the verify batch. Cheap verification (a GPU) gives a low
  threshold, expensive verification (a quantised target on a CPU) a high one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from specllama.speculative import RoundEvent

MODEL = "model"
NGRAM = "ngram"

# (source, backlog): what a drafter could propose from the current text, best first. The backlog
# is how many tokens the source must evaluate before drafting (a draft model that fell behind).
SourceOption = tuple[str, int]


class DraftController(Protocol):
    # The draft model stops at a token whose top probability is below this; None: the drafter's.
    min_confidence: float | None

    def choose(self, options: Sequence[SourceOption], remaining: int) -> tuple[str, int]:
        """The source and draft length for the coming round (length 0 = the target alone).

        `remaining` is the number of tokens still allowed in this generation."""

    def observe(self, round_: RoundEvent) -> None:
        """What the last round drafted, what the target kept, and what it cost."""


class FixedLength:
    """Always draft the same number of tokens, from the first source offered."""

    min_confidence: float | None = None

    def __init__(self, draft_max: int) -> None:
        self.draft_max = draft_max

    def next_length(self) -> int:
        return self.draft_max

    def choose(self, options: Sequence[SourceOption], remaining: int) -> tuple[str, int]:
        if not options or self.draft_max <= 0:
            return "", 0
        return options[0][0], self.draft_max

    def observe(self, round_: RoundEvent) -> None:
        pass


# -- costs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    """Measured seconds on this machine (see `specllama.calibration`).

    verify_s: (batch size, seconds) for the target decoding a batch and reading the logits of
    every position, in increasing batch size; batch 1 is the target alone.
    draft_step_s: one draft-model token (batch 1); 0 when there is no draft model.
    draft_catchup_s: per token, when the draft model evaluates a backlog in one batch.
    """

    verify_s: tuple[tuple[int, float], ...]
    draft_step_s: float = 0.0
    draft_catchup_s: float = 0.0
    measured: bool = True

    def __post_init__(self) -> None:
        if not self.verify_s or self.verify_s[0][0] != 1:
            raise ValueError("verify costs must start at batch size 1")

    @classmethod
    def guess(cls, target_s: float = 0.05, has_draft: bool = True) -> Costs:
        """Rough relative costs for when nothing was measured; the run rescales them."""
        sizes = (1, 2, 4, 8, 16, 32)
        return cls(
            verify_s=tuple((n, target_s * (1 + 0.25 * (n - 1))) for n in sizes),
            draft_step_s=0.3 * target_s if has_draft else 0.0,
            draft_catchup_s=0.05 * target_s if has_draft else 0.0,
            measured=False,
        )

    def verify(self, n: int) -> float:
        """V(n), interpolated linearly between measured sizes, extrapolated past the last."""
        points = self.verify_s
        if n <= points[0][0]:
            return points[0][1]
        for (n0, v0), (n1, v1) in pairwise(points):
            if n <= n1:
                return v0 + (v1 - v0) * (n - n0) / (n1 - n0)
        if len(points) == 1:
            return points[0][1] * n
        (n0, v0), (n1, v1) = points[-2], points[-1]
        return v1 + max(v1 - v0, 0.0) / (n1 - n0) * (n - n1)

    def as_dict(self) -> dict[str, object]:
        return {
            "verify_s": {str(n): round(s, 6) for n, s in self.verify_s},
            "draft_step_s": round(self.draft_step_s, 6),
            "draft_catchup_s": round(self.draft_catchup_s, 6),
            "measured": self.measured,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Costs:
        verify = data["verify_s"]
        assert isinstance(verify, dict)
        return cls(
            verify_s=tuple(sorted((int(n), float(s)) for n, s in verify.items())),
            draft_step_s=float(data.get("draft_step_s", 0.0)),  # type: ignore[arg-type]
            draft_catchup_s=float(data.get("draft_catchup_s", 0.0)),  # type: ignore[arg-type]
            measured=bool(data.get("measured", True)),
        )


def expected_tokens(a: float, k: int) -> float:
    """E(a, k) = (1 - a^(k+1)) / (1 - a): tokens per round with k drafts at acceptance a."""
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


# -- the adaptive controller ------------------------------------------------------------------

# What each source is assumed to get right before anything is observed. An n-gram match is
# judged by its length: a 1-token match is a weak guess, six tokens or more usually means the
# answer is copying the prompt (measured on the bundled prompts with Qwen2.5-Coder: the first
# token after a 1-token match is right 13-47% of the time, after 6+ tokens 84-97% in code and
# summaries).
PRIORS = {MODEL: 0.8, "ngram1": 0.2, "ngram2": 0.45, "ngram3": 0.6, "ngram4": 0.7, "ngram6": 0.85}


def lane_of(source: str) -> str:
    """The controller's statistics key for a source name: "ngramN" (match of N tokens) is
    bucketed as 1, 2, 3, 4-5, 6+; other names are their own key."""
    if source.startswith(NGRAM):
        size = int(source[len(NGRAM) :] or 3)
        return f"{NGRAM}{size if size <= 3 else (4 if size < 6 else 6)}"
    return source


@dataclass
class _Source:
    """What the controller knows about one source of drafts."""

    name: str
    k_max: int
    prior: float  # acceptance assumed before (and, as pseudo-counts, alongside) observations
    hits: float = 0.0  # accepted draft tokens (decayed)
    misses: float = 0.0  # rejections (decayed)
    off_until: int = 0  # round number until which this source is paused
    pause: int = 0  # length of the next pause, doubled after each failed probe
    probing: bool = True  # the next round tests the source, optimistically
    rounds: int = 0  # rounds drafted from this source
    history: list[int] = field(default_factory=list)  # pauses taken (for tests and reports)

    def acceptance(self, prior_weight: float) -> float:
        total = self.hits + self.misses + prior_weight
        return (self.hits + self.prior * prior_weight) / total


class AdaptiveController:
    """Choose the draft source and length that maximise the expected speedup (module docstring).

    `draft_max` caps the draft model; n-gram drafts cost nothing to make and go up to
    `ngram_max`. `memory` is the decay of the acceptance counts per drafted token (0.9: about
    the last 10 drafted tokens of a source count). `margin`: a source must promise at least
    1 + margin times the target alone. `probe_after`: rounds a source stays off after its
    first failed probe.
    """

    def __init__(
        self,
        costs: Costs,
        *,
        draft_max: int = 8,
        ngram_max: int = 48,
        memory: float = 0.9,
        prior_weight: float = 2.0,
        margin: float = 0.03,
        probe_after: int = 16,
        probe_after_max: int = 512,
        priors: dict[str, float] | None = None,
    ) -> None:
        self.costs = costs
        self.memory = memory
        self.prior_weight = prior_weight
        self.margin = margin
        self.probe_after = probe_after
        self.probe_after_max = probe_after_max
        self.draft_max = max(1, draft_max)
        self.ngram_max = max(1, ngram_max, draft_max)
        self.priors = {**PRIORS, **(priors or {})}
        self.sources: dict[str, _Source] = {}
        self.round = 0
        self.target_scale = 1.0  # observed / calibrated verify cost
        self.draft_scale = 1.0  # observed / calibrated draft step
        self.min_confidence = self._break_even_confidence()
        self.last_choice: tuple[str, int] = ("", 0)

    def source(self, name: str) -> _Source:
        """The statistics of a source (created on first sight, from its prior)."""
        lane = lane_of(name)
        if lane not in self.sources:
            k_max = self.draft_max if lane == MODEL else self.ngram_max
            prior = self.priors.get(lane, 0.5)
            self.sources[lane] = _Source(lane, k_max, prior, pause=self.probe_after)
        return self.sources[lane]

    # -- the model --------------------------------------------------------------------------

    def step_cost(self, source: str) -> float:
        return self.costs.draft_step_s * self.draft_scale if source == MODEL else 0.0

    def verify_cost(self, n: int) -> float:
        return self.costs.verify(n) * self.target_scale

    def speedup(self, source: str, a: float, k: int) -> float:
        """S(k) = E(a, k) / (k * c_draft + V(k + 1)) * V(1)."""
        cost = k * self.step_cost(source) + self.verify_cost(k + 1)
        return expected_tokens(a, k) / cost * self.verify_cost(1)

    def best_length(self, source: str, a: float) -> tuple[int, float]:
        """The k in 1..k_max with the highest expected speedup, and that speedup."""
        best = (0, 0.0)
        for k in range(1, self.source(source).k_max + 1):
            s = self.speedup(source, a, k)
            if s > best[1]:
                best = (k, s)
        return best

    def acceptance(self, source: str) -> float:
        return self.source(source).acceptance(self.prior_weight)

    def break_even(self, source: str) -> float:
        """The lowest acceptance (in steps of 0.05) at which `source` pays; above 1: never."""
        for step in range(21):
            a = step / 20
            if self.best_length(source, a)[1] > 1.0 + self.margin:
                return a
        return 1.01

    def _break_even_confidence(self) -> float:
        dv = (self.costs.verify(4) - self.costs.verify(2)) / 2
        ratio = (self.costs.draft_step_s + dv) / self.costs.verify(1)
        return min(max(ratio, 0.3), 0.9)

    # -- the protocol -----------------------------------------------------------------------

    def choose(self, options: Sequence[SourceOption], remaining: int) -> tuple[str, int]:
        best: tuple[str, int] = ("", 0)
        best_speedup = 1.0 + self.margin
        for name, backlog in options:
            source = self.source(name)
            if self.round < source.off_until:
                continue
            if source.probing:
                k, s = self._probe(source, backlog, remaining)
            else:
                k, s = self.best_length(source.name, self.acceptance(source.name))
                if s <= 1.0 + self.margin:
                    self._pause(source)
                    continue
            if k and s > best_speedup:
                best, best_speedup = (name, k), s
        self.last_choice = best
        return best

    def _probe(self, source: _Source, backlog: int, remaining: int) -> tuple[int, float]:
        """Length and promised speedup for a probe of `source`: as if it were right a bit more
        often than known so far ((1 + a) / 2); (0, 0) when the probe cannot pay for itself."""
        ceiling = self.best_length(source.name, 1.0)[1]
        if ceiling <= 1.0 + self.margin:  # cannot pay on this machine even at 100% acceptance
            source.off_until = 1 << 62
            return 0, 0.0
        optimistic = (1.0 + max(source.prior, self.acceptance(source.name))) / 2
        k, s = self.best_length(source.name, optimistic)
        if backlog and source.name == MODEL and s > 1:
            catch_up = backlog * self.costs.draft_catchup_s * self.draft_scale
            # What the source could save over the rest of the generation, if it works out.
            saving = remaining * self.verify_cost(1) * (1.0 - 1.0 / s)
            if catch_up > 0.5 * saving:
                return 0, 0.0
        return k, s

    def _pause(self, source: _Source) -> None:
        source.off_until = self.round + source.pause
        source.history.append(source.pause)
        source.pause = min(2 * source.pause, self.probe_after_max)
        source.probing = True  # when the pause ends, one round decides: on again, or longer off

    def observe(self, round_: RoundEvent) -> None:
        self.round += 1
        self._learn_costs(round_)
        name = getattr(round_, "source", "")
        if not name:  # nothing was asked of a source (k = 0)
            return
        source = self.source(name)
        source.rounds += 1
        decay = self.memory ** max(round_.n_drafted, 1)  # older tokens weigh less
        source.hits = source.hits * decay + round_.n_accepted
        # A draft model that stopped at once (not confident) wasted its step: a miss too.
        missed = round_.n_accepted < round_.n_drafted or round_.n_drafted == 0
        source.misses = source.misses * decay + missed
        if source.probing:  # the probe alone decides: back on, or off for twice as long
            source.probing = False
            kept = round_.n_accepted / round_.n_drafted if round_.n_drafted else 0.0
            if kept >= self.break_even(source.name):
                source.pause = self.probe_after
            else:
                self._pause(source)

    def _learn_costs(self, round_: RoundEvent) -> None:
        """Rescale the calibrated costs by what this round cost (slow EWMA, clipped)."""
        n = round_.n_drafted + 1
        expected = self.costs.verify(n)
        if round_.target_s > 0 and expected > 0:
            ratio = min(max(round_.target_s / expected, 0.5), 2.0)
            self.target_scale += 0.1 * (ratio - self.target_scale)
        if getattr(round_, "source", "") == MODEL and self.costs.draft_step_s:
            steps = max(round_.n_drafted, 1)  # a draft that stopped at once still took a step
            ratio = round_.draft_s / (steps * self.costs.draft_step_s)
            ratio = min(max(ratio, 0.5), 2.0)
            self.draft_scale += 0.1 * (ratio - self.draft_scale)
