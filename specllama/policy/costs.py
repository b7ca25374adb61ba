"""What a round costs on this machine: measured once (`Costs`, see
`specllama.policy.calibration`) and corrected online by what the rounds really cost (`LiveCosts`).

A round that drafts k tokens from a source of kind s ("model", "mtp" or "ngram") costs

    C_s(k) = k * c_draft[s] + V(k + 1) + o_s(k + 1)             seconds,

with V(n) the target verifying a batch of n tokens (the pending token plus k drafts), c_draft one
draft-model step, or one step of the target's own MTP head (an engine has one or the other; 0 for
n-gram lookup) and o_s(k + 1) the Python time of such a round (sampling,
bookkeeping, the controller: what is neither model's decode), a base plus a part per verified
row. A round that drafts nothing is the target alone: C(0) = V(1) + o_plain(1). The measured V
is a prior that the rounds correct size by size (`specllama.policy.verify_curve`: measured on a
loaded machine the calibration can be off by a factor or have the wrong shape; on a GPU a decode
can return before its work is done), c_draft is rescaled by what draft steps really cost, and
the o's are fitted to the rounds. They start where the last runs on this machine left them
(`Costs.learnt`, kept with the calibration), else at 0, which is nearly right on a CPU: where
they matter (a GPU, a short answer after a long prompt) a run cannot wait to learn them.

When each draft token is accepted independently with probability a, a round that drafts k
tokens yields on average the accepted prefix plus the target's own token:

    E(a, k) = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a)      tokens.

Pipelined drafting (`specllama.engine.pipeline`): while the target verifies k drafts, the draft
model drafts the next k + 1 tokens on another thread, as if all k were accepted and its own guess
for the target's token were right. Both are, with probability s = a^(k+1); then the next round's
draft is already made. Running side by side, the verify V = V(k + 1) and the draft ahead
A = (k + 1) c_draft take

    W = max(V, A) + lambda * min(V, A)                                seconds,

with lambda the `overlap` measured on this machine: 0 when they run fully in parallel (a GPU
with room for both), 1 when they take turns (CPU cores that each decode already fills), more
when they get in each other's way. A rejection stops the draft ahead, so that round's span is
V + lambda * min(V, A). A round starts with its draft made when the round before it
survived, so in the long run a fraction s of rounds do, and a pipelined round costs on average

    P_s(k) = s * W + (1 - s) * (V + lambda * min(V, A) + k * c_draft) + o_pipe(k + 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from specllama.engine.control import MODEL, MTP, NGRAM, PLAIN, STEPPED
from specllama.policy.verify_curve import RunningRatio, VerifyCurve

PIPELINED = "pipelined"  # a draft-model round whose next draft is made while the target verifies

# How fast the online corrections follow the rounds (EWMA weight), and how far they may move the
# measured costs (a factor either way).
_LEARN_RATE = 0.1
_SCALE_LIMIT = 4.0
# How much longer than the largest batch seen a draft may be (`LiveCosts.draft_limit`).
DRAFT_GROWTH = 4
# What earlier runs' figures (`Learnt`) are worth, in rounds: enough to start from, few enough
# for this run's rounds to take over within a dozen. Also the rounds a run must have seen of a
# kind before its figures are kept for the next.
_LEARNT_WEIGHT = 4
# Where a move of V redoes the controller's tables.
_WATCHED_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)


@dataclass(frozen=True)
class Costs:
    """Measured seconds on this machine.

    verify_s: (batch size, seconds) for the target decoding a batch and reading the logits of
    every position, in increasing batch size; batch 1 is the target alone.
    draft_step_s: one draft-model token (batch 1); 0 when there is no draft model.
    draft_catchup_s: per token, when the draft model evaluates a backlog in one batch.
    overlap: lambda of the module docstring, for the target verifying while the draft model
    drafts ahead (0: fully in parallel, 1: in turn). 1 unless measured: no gain assumed.
    learnt: what earlier runs' rounds showed beyond the decodes timed here (`Learnt`).
    """

    verify_s: tuple[tuple[int, float], ...]
    draft_step_s: float = 0.0
    draft_catchup_s: float = 0.0
    measured: bool = True
    overlap: float = 1.0
    learnt: Learnt | None = None

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
        data: dict[str, object] = {
            "verify_s": {str(n): round(s, 6) for n, s in self.verify_s},
            "draft_step_s": round(self.draft_step_s, 6),
            "draft_catchup_s": round(self.draft_catchup_s, 6),
            "measured": self.measured,
            "overlap": round(self.overlap, 4),
        }
        if self.learnt is not None:
            data["learnt"] = self.learnt.as_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Costs:
        verify = data["verify_s"]
        assert isinstance(verify, dict)
        return cls(
            verify_s=tuple(sorted((int(n), float(s)) for n, s in verify.items())),
            draft_step_s=float(data.get("draft_step_s", 0.0)),  # type: ignore[arg-type]
            draft_catchup_s=float(data.get("draft_catchup_s", 0.0)),  # type: ignore[arg-type]
            measured=bool(data.get("measured", True)),
            overlap=float(data.get("overlap", 1.0)),  # type: ignore[arg-type]
            learnt=Learnt.from_dict(data["learnt"]) if data.get("learnt") else None,  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class Learnt:
    """What a run's rounds showed its rounds cost beyond the decodes the calibration times: the
    Python time of each kind of round (base + per verified row, seconds) and a draft step in
    the loop over the calibration's. On an H200 a drafting round took 6 ms besides its decodes
    (0.84 of a target token) and a draft step 1.55x the one timed alone; on a 2-core EPYC
    0.3-0.8 ms and 1.2x. A run that starts from the last run's figures weighs its first
    rounds right: a short answer after a long prompt is over before they could be learnt."""

    overheads: tuple[tuple[str, float, float], ...] = ()  # (kind, base, per_row)
    draft_scale: float | None = None

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            "overheads": {kind: [round(b, 7), round(r, 7)] for kind, b, r in self.overheads}
        }
        if self.draft_scale is not None:
            data["draft_scale"] = round(self.draft_scale, 4)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Learnt:
        overheads = data.get("overheads", {})
        scale = data.get("draft_scale")
        return cls(
            overheads=tuple((str(k), float(b), float(r)) for k, (b, r) in overheads.items()),
            draft_scale=float(scale) if scale is not None else None,
        )


def expected_tokens(a: float, k: int) -> float:
    """E(a, k) = (1 - a^(k+1)) / (1 - a): tokens per round with k drafts at acceptance a."""
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def side_by_side(verify_s: float, ahead_s: float, overlap: float) -> float:
    """W: the time a verify and a draft ahead take when they run at once (module docstring)."""
    return max(verify_s, ahead_s) + overlap * min(verify_s, ahead_s)


class _Overhead:
    """Python seconds of a round, as base + per_row * rows (rows = k + 1 verified positions),
    fitted to the rounds by least squares with fading weights. A weak prior that a row costs
    nothing extra keeps a run of rounds of one length from inventing a per-row cost. Where an
    earlier run's line is known (`start_from`), it counts as that many rounds against the fit,
    and fades as they do."""

    def __init__(self, fade: float = 0.9, prior: float = 0.5) -> None:
        self.fade = fade
        self.prior = prior
        self.sums = [0.0] * 5  # weight, rows, rows^2, seconds, rows * seconds
        self._fitted = (0.0, 0.0)  # base, per_row of the rounds seen
        self._start = (0.0, 0.0)  # an earlier run's base, per_row
        self._start_weight = 0.0
        # The line now, kept as plain numbers: the rate tables read it dozens of times a round.
        self.base, self.per_row = 0.0, 0.0

    def start_from(self, base: float, per_row: float, weight: float) -> None:
        self._start, self._start_weight = (base, per_row), weight
        self._blend()

    @property
    def weight(self) -> float:
        """What the line rests on, in rounds: this run's (faded), and an earlier run's."""
        return self.sums[0] + self._start_weight

    def _blend(self) -> None:
        """The line: the rounds' fit, with an earlier run's weighed in as its rounds."""
        start, seen = self._start_weight, self.sums[0]
        if not start:
            self.base, self.per_row = self._fitted
            return
        self.base, self.per_row = (
            (start * was + seen * fitted) / (start + seen)
            for was, fitted in zip(self._start, self._fitted)
        )

    def add(self, rows: int, seconds: float) -> None:
        new = (1.0, rows, rows * rows, seconds, rows * seconds)
        self.sums = [s * self.fade + x for s, x in zip(self.sums, new)]
        self._start_weight *= self.fade
        n, r, rr, y, ry = self.sums
        det = n * (rr + self.prior) - r * r
        per_row = max((n * ry - r * y) / det, 0.0)
        self._fitted = (max((y - per_row * r) / n, 0.0), per_row)
        self._blend()

    def __call__(self, rows: int) -> float:
        return self.base + self.per_row * rows


class LiveCosts:
    """The measured costs, corrected by the rounds of this run (module docstring)."""

    def __init__(self, costs: Costs) -> None:
        self.measured = costs
        self.verify_curve = VerifyCurve(costs.verify)
        self._draft = RunningRatio()  # observed / measured draft step
        self.overlap = costs.overlap  # lambda, corrected by pipelined rounds
        kinds = (PLAIN, MODEL, MTP, NGRAM, PIPELINED)
        self.overhead = {kind: _Overhead() for kind in kinds}
        if costs.learnt is not None:
            self._start_from(costs.learnt)
        # Beside other slots: (this slot's share of the batched step its rounds join, what a
        # drafted token adds to it), the stepper's measure (`in_batch`); None alone.
        self.batch_price: tuple[float, float] | None = None
        self.version = 0  # bumped when the costs moved enough for a cached table to be redone
        self._at_version = self._snapshot()

    def _start_from(self, learnt: Learnt) -> None:
        for kind, base, per_row in learnt.overheads:
            if kind in self.overhead:
                self.overhead[kind].start_from(base, per_row, _LEARNT_WEIGHT)
        if learnt.draft_scale is not None:
            self._draft.seed(learnt.draft_scale, _LEARNT_WEIGHT)

    def learnt(self) -> Learnt | None:
        """What this run's rounds showed beyond the decodes (`Learnt`), on top of what it started
        from, for the next run: the kinds of round seen often enough, and the draft step's
        scale; None if nothing was."""
        overheads = tuple(
            (kind, o.base, o.per_row)
            for kind, o in self.overhead.items()
            if o.weight >= _LEARNT_WEIGHT
        )
        scale = self._draft.value if self._draft.count >= _LEARNT_WEIGHT else None
        if not overheads and scale is None:
            return None
        return Learnt(overheads, scale)

    # -- the model --------------------------------------------------------------------------

    def verify(self, n: int) -> float:
        """V(n). Beside other slots, a round's pending token costs its share of the step and
        each drafted token what it adds to the step, as the stepper measures them for the
        batch: a curve learnt size by size from this slot's own rounds (alone, mostly) would
        find that out only by drafting at a loss."""
        if self.batch_price is not None:
            share, per_token = self.batch_price  # per_token may be inf: no draft is worth it
            return share + per_token * (n - 1) if n > 1 else share
        return self.verify_curve(n)

    def in_batch(self, price: tuple[float, float] | None) -> None:
        """The stepper's price of the step this slot's next round joins (see `verify`); kept
        as it was while it moves less than 10% (the rate tables are redone when it moves: a
        step's price moves a little every step, and a table costs ~0.5 ms of a slot's turn)."""
        old = self.batch_price
        if price == old:  # alone (None), round after round: nothing to redo
            return
        if price and old and all(abs(new - was) <= 0.1 * was for new, was in zip(price, old)):
            return
        self.batch_price = price
        self._bump_version()

    @property
    def draft_scale(self) -> float:
        """Observed over measured draft step; until a draft step is seen, the target's ratio
        for one token, within `_SCALE_LIMIT` either way: a machine busier (or quieter) than at
        calibration is so for both, but not by as much. Beside two busy loops one calibration
        timed the target's token 92x too slow and the draft's 2-7x: the draft taken 92x
        cheaper caught up on whole prompts for answers of a few tokens (0.39x)."""
        if self._draft.count:
            return self._draft.value
        ratio = self.verify_curve.ratio(1)
        return 1.0 if ratio is None else min(max(ratio, 1 / _SCALE_LIMIT), _SCALE_LIMIT)

    def draft_limit(self) -> int:
        """The longest draft worth weighing now: four times the largest batch verified so
        far (at least 2). The calibration's word on batches no round has made is a guess, and a
        flat guess on a machine where a batch of 49 costs 20 tokens would cost that much at
        once; growing by a factor, the costs are seen before they are paid in full. Not by 2:
        a calibration whose batch of 8 was measured dear (a busy moment) kept a copy at drafts
        of 4 when 16 to 48 paid best (replayed, code editing 1.34x -> 1.75x on that machine)."""
        return max(2, DRAFT_GROWTH * self.verify_curve.largest)

    def draft_step(self) -> float:
        return self.measured.draft_step_s * self.draft_scale

    def catch_up(self, backlog: int) -> float:
        """The draft model evaluating `backlog` tokens before it can draft."""
        return backlog * self.measured.draft_catchup_s * self.draft_scale

    def plain(self) -> float:
        """C(0): one token from the target alone."""
        return self.verify(1) + self.overhead[PLAIN](1)

    def round(self, kind: str, k: int) -> float:
        """C_s(k): a round drafting k tokens from a source of this kind."""
        if k == 0:
            return self.plain()
        return self._round(kind, k, self.verify(k + 1))

    def rounds(self, kind: str, k_max: int) -> np.ndarray:
        """[C_s(0), ..., C_s(k_max)]: what `round` gives for each length, in one call. A rate
        table needs them all and is redone whenever the costs move, which beside other slots
        is most rounds: on a slot's turn on the GIL, which every slot of the step waits for."""
        k = np.arange(1, k_max + 1)
        verify = np.array([self.verify(n) for n in range(2, k_max + 2)])  # cheap; its own rule
        draft = k * self.draft_step() if kind in STEPPED else 0.0
        overhead = self.overhead[kind]
        costs = draft + verify + (overhead.base + overhead.per_row * (k + 1))
        return np.concatenate(([self.plain()], costs))

    def optimistic_round(self, kind: str, k: int) -> float:
        """C_s(k) with V at its plausible best (`VerifyCurve.optimistic`): what a draft longer
        than any batch seen may cost where the calibration's shape is not trusted (beside
        other slots, the stepper's price is measured: no better is plausible)."""
        if self.batch_price is not None:
            return self.round(kind, k)
        return self._round(kind, k, self.verify_curve.optimistic(k + 1))

    def _round(self, kind: str, k: int, verify_s: float) -> float:
        draft = k * self.draft_step() if kind in STEPPED else 0.0
        return draft + verify_s + self.overhead[kind](k + 1)

    def pipelined(self, k: int, survive: float) -> float:
        """P_s(k): a pipelined round of k drafts whose draft ahead survives with probability
        `survive` (module docstring)."""
        both, serial, python = self.pipelined_parts(k)
        return survive * both + (1.0 - survive) * serial + python

    def pipelined_parts(self, k: int) -> tuple[float, float, float]:
        """P_s(k) = s * both + (1 - s) * serial + python: the three parts, for tables."""
        v, ahead = self.verify(k + 1), (k + 1) * self.draft_step()
        both = side_by_side(v, ahead, self.overlap)
        serial = v + self.overlap * min(v, ahead) + k * self.draft_step()
        return both, serial, self.overhead[PIPELINED](k + 1)

    # -- learning from rounds ---------------------------------------------------------------

    def learn_pipelined(
        self, n_drafted: int, n_ahead: int, draft_s: float, span_s: float, wall_s: float
    ) -> None:
        """What a pipelined round cost: `draft_s` drafting its own tokens first (0 when they
        were drafted ahead last round), then `span_s` from starting the verify, with `n_ahead`
        tokens drafted ahead beside it, to having both. Corrects lambda and the round's Python
        time; the verify and draft steps are learnt from rounds that run them alone."""
        self.verify_curve.tried(n_drafted + 1)
        v, ahead = self.verify(n_drafted + 1), n_ahead * self.draft_step()
        if n_ahead and min(v, ahead) > 0:
            seen = (span_s - max(v, ahead)) / min(v, ahead)
            self.overlap += _LEARN_RATE * (min(max(seen, 0.0), _SCALE_LIMIT) - self.overlap)
        if wall_s > 0:
            self.overhead[PIPELINED].add(n_drafted + 1, max(wall_s - draft_s - span_s, 0.0))
        self._bump_version()

    def learn(
        self,
        kind: str,
        n_drafted: int,
        draft_steps: int,
        draft_s: float,
        target_s: float,
        wall_s: float,
    ) -> None:
        """What one round cost: its target verify (n_drafted + 1 rows), `draft_steps` one-token
        draft decodes (when the draft model did nothing else), and its whole time."""
        self.verify_curve.observe(n_drafted + 1, target_s)
        if kind in STEPPED and draft_steps and self.measured.draft_step_s:
            self._draft.add(draft_s, draft_steps * self.measured.draft_step_s)
        if wall_s > 0:
            self.overhead[kind].add(n_drafted + 1, max(wall_s - draft_s - target_s, 0.0))
        self._bump_version()

    def _bump_version(self) -> None:
        if self._moved():
            self.version += 1
            self._at_version = self._snapshot()

    def _snapshot(self) -> tuple[float, ...]:
        overheads = [o(1) for o in self.overhead.values()] + [o(9) for o in self.overhead.values()]
        verify = [self.verify(n) for n in _WATCHED_SIZES]
        return (self.draft_scale, self.overlap, *overheads, *verify)

    def _moved(self) -> bool:
        """More than 2% (of one target token, for the overheads; 0.02 for lambda) since the
        last version, for the draft step, lambda, the overheads or V at a few sizes."""
        now, then = self._snapshot(), self._at_version
        one = self.verify(1) or 1.0
        n = len(self.overhead) * 2
        draft = abs(now[0] - then[0]) > 0.02 * then[0]
        overlap = abs(now[1] - then[1]) > 0.02
        overheads = any(abs(a - b) > 0.02 * one for a, b in zip(now[2 : 2 + n], then[2 : 2 + n]))
        verify = any(abs(a - b) > 0.02 * b for a, b in zip(now[2 + n :], then[2 + n :]))
        return draft or overlap or overheads or verify
