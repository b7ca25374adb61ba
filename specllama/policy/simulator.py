"""Replay recorded (or synthetic) acceptance against a controller on a machine's costs, to test
the adaptive policy without models and to compare policies offline in seconds.

A `Trace` records one greedy answer position by position: after the first i tokens of the
answer (the target's own tokens),

- `model_agrees[i]`: the draft model's greedy token equals the target's;
- `model_confidence[i]`: the draft model's top probability there (for its confidence stop);
- `ngram_match[i]`: the length of the longest match the n-gram drafter finds (0: none);
- `ngram_unanimous[i]`: every earlier occurrence of that match is followed by the same token;
- `ngram_offer[i]`: how many tokens it could propose there;
- `ngram_run[i]`: how many of those agree with the answer, in a row;
- `model_second_agrees[i]`: the draft model's second choice equals the target's token (what a
  token tree that also verifies the draft's runner-up would gain; empty in older traces).

Greedy verification keeps the longest agreeing prefix of a draft, so these decide every round of
any policy: a chain drafted at position i keeps as many tokens as agree in a row from i (the
draft's tokens past a disagreement are rejected whatever they are). `simulate` plays the loop
of `specllama.engine.speculative.generate` on such a trace with a clock driven by `MachineCosts`:
what the rounds cost in fact, which may differ from the calibration the controller starts from
(as on a GPU, where the measured per-round costs exceed what the decode timings predict).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from specllama.engine.control import MODEL, NGRAM, DraftController, kind_of
from specllama.engine.drafters import NgramDrafter, NoDrafter
from specllama.engine.events import RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams, argmax, top_probability
from specllama.engine.speculative import generate
from specllama.llama.backend import LlamaBackend
from specllama.llama.evaluated import common_prefix_length
from specllama.policy.costs import Costs, side_by_side


@dataclass(frozen=True)
class Trace:
    model_agrees: tuple[bool, ...]
    model_confidence: tuple[float, ...]
    ngram_match: tuple[int, ...]
    ngram_offer: tuple[int, ...]
    ngram_run: tuple[int, ...]
    n_prompt: int = 32
    name: str = ""
    category: str = ""
    model_second_agrees: tuple[bool, ...] = ()
    ngram_unanimous: tuple[bool, ...] = ()  # empty in older traces: taken as unanimous

    def __len__(self) -> int:
        return len(self.model_agrees)

    def ngram_source(self, i: int) -> str:
        """The n-gram drafter's source name at position i, as `NgramDrafter.sources` gives it
        ("ngramN", or "ngramN-mixed"); call only where `ngram_match[i]` is not 0."""
        mixed = self.ngram_unanimous and not self.ngram_unanimous[i]
        return f"{NGRAM}{self.ngram_match[i]}{'-mixed' if mixed else ''}"

    def model_run(self, i: int, n: int) -> int:
        """How many of n model drafts from position i agree in a row."""
        run = 0
        while run < n and i + run < len(self) and self.model_agrees[i + run]:
            run += 1
        return run

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "category": self.category,
            "n_prompt": self.n_prompt,
            "model_agrees": [int(x) for x in self.model_agrees],
            "model_confidence": [round(x, 3) for x in self.model_confidence],
            "ngram_match": list(self.ngram_match),
            "ngram_offer": list(self.ngram_offer),
            "ngram_run": list(self.ngram_run),
            "model_second_agrees": [int(x) for x in self.model_second_agrees],
            "ngram_unanimous": [int(x) for x in self.ngram_unanimous],
        }

    @classmethod
    def from_dict(cls, data: dict) -> Trace:
        return cls(
            model_agrees=tuple(bool(x) for x in data["model_agrees"]),
            model_confidence=tuple(float(x) for x in data["model_confidence"]),
            ngram_match=tuple(data["ngram_match"]),
            ngram_offer=tuple(data["ngram_offer"]),
            ngram_run=tuple(data["ngram_run"]),
            n_prompt=int(data.get("n_prompt", 32)),
            name=str(data.get("name", "")),
            category=str(data.get("category", "")),
            model_second_agrees=tuple(bool(x) for x in data.get("model_second_agrees", ())),
            ngram_unanimous=tuple(bool(x) for x in data.get("ngram_unanimous", ())),
        )


def synthetic_trace(
    n: int,
    a: float,
    rng: np.random.Generator,
    *,
    n_prompt: int = 32,
    name: str = "",
    second: float = 0.0,
) -> Trace:
    """A draft model that agrees with the target at each position independently with
    probability a (as the controlled-acceptance GPU pair does), sure of itself, and no n-grams;
    where it does not, its second choice is right with probability `second`."""
    agrees = rng.random(n) < a
    runner_up = ~agrees & (rng.random(n) < second)
    zeros = (0,) * n
    return Trace(
        tuple(bool(x) for x in agrees),
        (0.95,) * n,
        zeros,
        zeros,
        zeros,
        n_prompt,
        name or f"a={a}",
        model_second_agrees=tuple(bool(x) for x in runner_up),
    )


@dataclass(frozen=True)
class MachineCosts:
    """What rounds cost on the simulated machine: the measured decode costs, times factors for
    what the loop really pays, plus Python time per round (plain, and per drafting round)."""

    costs: Costs
    draft_step_factor: float = 1.0
    overhead_plain_s: float = 0.0
    overhead_round_s: float = 0.0  # each round that drafts, beyond the plain round's
    noise: float = 0.0  # lognormal sigma of each round's cost (a shared, noisy machine)
    overlap: float = 1.0  # lambda: how the verify and a draft ahead share the machine (costs.py)
    overhead_ahead_s: float = 0.0  # each pipelined round, beyond a drafting round's

    def verify(self, n: int) -> float:
        return self.costs.verify(n)

    def draft_step(self) -> float:
        return self.costs.draft_step_s * self.draft_step_factor

    def catch_up(self, backlog: int) -> float:
        """The draft model's sync: a batch of `backlog` tokens, at least one step's cost."""
        return max(self.draft_step(), backlog * self.costs.draft_catchup_s * self.draft_step_factor)

    def target_alone(self, n_tokens: int) -> float:
        return n_tokens * (self.verify(1) + self.overhead_plain_s)


@dataclass
class SimResult:
    name: str
    n_tokens: int
    time_s: float
    target_alone_s: float
    n_rounds: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    rounds: list[RoundEvent] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return self.target_alone_s / self.time_s if self.time_s else 0.0


def simulate(
    trace: Trace,
    controller: DraftController,
    machine: MachineCosts,
    *,
    draft_model: bool = True,
    ngram: bool = True,
    max_tokens: int | None = None,
    seed: int = 0,
) -> SimResult:
    """Play `generate`'s loop over `trace` with `controller`, on `machine`'s clock.

    `max_tokens` is the run's budget: the answer stops there, and what the controller is told
    remains counts down from it, as in the loop, which cannot know where an answer will end
    (without it, from the answer's own length: a replay that knows the end)."""
    rng = np.random.default_rng(seed)
    budget = max_tokens or len(trace)
    n = min(len(trace), budget)
    result = SimResult(trace.name, n, 0.0, machine.target_alone(n))
    state = _DraftState()
    while state.pos < n:
        pos = state.pos
        options: list[tuple[str, int]] = []
        if ngram and trace.ngram_match[pos]:
            options.append((trace.ngram_source(pos), 0))
        backlog = max(trace.n_prompt + pos - state.model_done, 0)
        if draft_model:
            options.append((MODEL, backlog))
        source, k = controller.choose(options, remaining=budget - pos, generated=pos)
        k = max(0, min(k, n - pos - 1))
        kind = kind_of(source) if k else ""
        if kind == MODEL:
            event = _model_round(trace, controller, machine, state, k, n - pos, backlog)
        else:
            state.carry = 0
            drafted = accepted = 0
            if kind == NGRAM:
                drafted = min(k, trace.ngram_offer[pos])
                accepted = min(drafted, trace.ngram_run[pos])
            target_s = machine.verify(drafted + 1)
            event = RoundEvent(drafted, accepted, 0.0, target_s, source if kind else "")
        event = _clocked(replace(event, k=k if kind else 0), machine, bool(kind), rng)
        if ngram and kind != NGRAM and trace.ngram_match[pos]:
            event = _in_hindsight(event, trace, pos, n)
        controller.observe(event)
        result.rounds.append(event)
        result.time_s += event.wall_s
        result.n_rounds += 1
        result.n_drafted += event.n_drafted
        result.n_accepted += event.n_accepted
        state.pos += event.n_accepted + 1
    return result


def _in_hindsight(event: RoundEvent, trace: Trace, pos: int, n: int) -> RoundEvent:
    """The round with what the n-gram source it did not draft from would have got right of
    the tokens it emitted (as the loop checks it)."""
    emitted = min(event.n_accepted + 1, n - pos)
    seen = min(trace.ngram_offer[pos], emitted)
    right = min(trace.ngram_run[pos], seen)
    return replace(
        event, hindsight=trace.ngram_source(pos), hindsight_right=right, hindsight_seen=seen
    )


@dataclass
class _DraftState:
    pos: int = 0  # answer tokens emitted
    model_done: int = 0  # context tokens the draft model has evaluated (it starts empty)
    carry: int = 0  # draft tokens made ahead for position `pos` (pipelined drafting)


def _model_round(
    trace: Trace,
    controller: DraftController,
    machine: MachineCosts,
    state: _DraftState,
    k: int,
    left: int,
    backlog: int,
) -> RoundEvent:
    """A draft-model round at state.pos: drafted now or ahead, and maybe drafting ahead."""
    pos, p_min = state.pos, controller.min_confidence
    carried = state.carry > 0
    draft_s = 0.0
    if carried:
        drafted = min(state.carry, k)
    else:
        drafted = _model_draft_length(trace, pos, k, p_min)
        # The sync (catch-up), then one step per draft token but the last (a confidence stop
        # reads one more).
        steps = drafted if drafted < k else drafted - 1
        draft_s = machine.catch_up(backlog) + steps * machine.draft_step()
    accepted = trace.model_run(pos, drafted)
    state.carry = 0
    state.model_done = trace.n_prompt + pos + min(accepted, max(drafted - 1, 0))
    target_s = machine.verify(drafted + 1)
    ahead_max = min(k + 1, left - k - 1) if controller.pipelined and drafted else 0
    if ahead_max < 2:  # as the loop: no draft ahead that could leave no next draft
        return RoundEvent(drafted, accepted, draft_s, target_s, MODEL, carried=carried)

    # The draft ahead follows the draft's own path, which is the answer's when every draft
    # was accepted; a rejection stops it at its next step.
    n_ahead = _model_draft_length(trace, pos + drafted, ahead_max, p_min)
    end = pos + drafted
    survives = accepted == drafted and n_ahead > 1 and end < len(trace)
    survives = survives and trace.model_agrees[end]
    if not survives:
        n_ahead = min(n_ahead, int(target_s / machine.draft_step()) + 1)
    ahead_s = n_ahead * machine.draft_step()
    span = side_by_side(target_s, ahead_s, machine.overlap)
    if survives:
        state.carry = n_ahead - 1
        state.model_done = trace.n_prompt + end + n_ahead - 1
    return RoundEvent(
        drafted,
        accepted,
        draft_s,
        target_s,
        MODEL,
        carried=carried,
        n_ahead=n_ahead,
        ahead_s=ahead_s,
        wait_s=span - target_s,
    )


def _clocked(
    event: RoundEvent, machine: MachineCosts, drafted: bool, rng: np.random.Generator
) -> RoundEvent:
    """The round with its wall time on `machine` (and the machine's noise)."""
    python_s = machine.overhead_plain_s + (machine.overhead_round_s if drafted else 0.0)
    if event.n_ahead:
        python_s += machine.overhead_ahead_s
    scale = float(rng.lognormal(0.0, machine.noise)) if machine.noise else 1.0
    draft_s, target_s, wait_s = (x * scale for x in (event.draft_s, event.target_s, event.wait_s))
    wall_s = draft_s + target_s + wait_s + python_s
    return replace(
        event,
        draft_s=draft_s,
        target_s=target_s,
        wait_s=wait_s,
        ahead_s=event.ahead_s * scale,
        wall_s=wall_s,
    )


def _model_draft_length(trace: Trace, pos: int, k: int, min_confidence: float | None) -> int:
    """How many tokens the draft model drafts before its confidence stop (or k)."""
    if not min_confidence:
        return k
    for j in range(k):
        i = min(pos + j, len(trace) - 1)
        if trace.model_confidence[i] < min_confidence:
            return j
    return k


def oracle_speedup(trace: Trace, machine: MachineCosts, *, max_tokens: int | None = None) -> float:
    """The speedup of the best rounds any policy could choose on `trace`, knowing the answer in
    advance: at each position, the target alone, or a draft of exactly as many tokens as will
    be accepted (n-gram, or the draft model with no catch-up to pay), whichever makes the whole
    answer soonest (a shortest path over positions). An upper bound for `simulate` on the same
    noiseless machine, drafting in turn (a draft made beside the verify, where the machine's
    overlap is below 1, can beat it): what is left to win here is the gap to it."""
    n = min(len(trace), max_tokens or len(trace))
    drafting = machine.overhead_plain_s + machine.overhead_round_s
    soonest = [0.0] * (n + 1)  # soonest[i]: the time to emit the answer from position i on
    for i in range(n - 1, -1, -1):
        best = machine.verify(1) + machine.overhead_plain_s + soonest[i + 1]
        longest = n - i - 1  # a round emits its accepted drafts and one token of the target's
        copied = min(trace.ngram_run[i], trace.ngram_offer[i], longest)
        guessed = trace.model_run(i, longest)
        for k in range(1, max(copied, guessed) + 1):
            verify = machine.verify(k + 1) + drafting + soonest[i + k + 1]
            if k <= copied:
                best = min(best, verify)
            if k <= guessed:
                best = min(best, verify + k * machine.draft_step())
        soonest[i] = best
    return machine.target_alone(n) / soonest[0] if soonest[0] else 0.0


def median_speedup(results: Sequence[SimResult]) -> float:
    return float(np.median([r.speedup for r in results])) if results else 0.0


# -- recording a trace from real models -------------------------------------------------------


def record_trace(
    target: LlamaBackend,
    draft: LlamaBackend | None,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    offer_max: int = 64,
    name: str = "",
    category: str = "",
) -> tuple[Trace, list[int]]:
    """The target's greedy answer to `prompt`, and what the draft model and the n-gram drafter
    would have proposed at each position of it. Returns the trace and the answer's tokens."""
    answer = [
        event.token
        for event in generate(
            target, NoDrafter(), prompt, SamplingParams(temperature=0.0), max_tokens=max_tokens
        )
        if isinstance(event, TokenEvent)
    ]
    n = len(answer)
    agrees, confidence, second = [False] * n, [0.0] * n, [False] * n
    if draft is not None and n:
        _teacher_forced(draft, list(prompt), answer, agrees, confidence, second)
    lookup = NgramDrafter()
    context = list(prompt)
    match, offer, run, unanimous = [0] * n, [0] * n, [0] * n, [True] * n
    for i in range(n):
        if lookup.sources(context):
            match[i], unanimous[i] = lookup.match.length, lookup.match.unanimous
            proposal = lookup.propose(context, offer_max, SamplingParams(0.0)).tokens
            offer[i] = len(proposal)
            run[i] = common_prefix_length(proposal, answer[i:])
        context.append(answer[i])
    trace = Trace(
        tuple(agrees),
        tuple(confidence),
        tuple(match),
        tuple(offer),
        tuple(run),
        n_prompt=len(prompt),
        name=name,
        category=category,
        model_second_agrees=tuple(second),
        ngram_unanimous=tuple(unanimous),
    )
    return trace, answer


def _teacher_forced(
    draft: LlamaBackend,
    prompt: list[int],
    answer: list[int],
    agrees: list[bool],
    confidence: list[float],
    second: list[bool],
    chunk: int = 32,
) -> None:
    """The draft model's greedy guess, confidence and runner-up at each answer position, from
    the logits of every position of the answer evaluated in chunks (teacher forcing)."""

    def judge(i: int, row: np.ndarray) -> None:
        best = argmax(row)
        top_two = np.argpartition(row, len(row) - 2)[-2:]
        runner_up = int(top_two[0] if top_two[1] == best else top_two[1])
        agrees[i] = best == answer[i]
        second[i] = runner_up == answer[i]
        confidence[i] = top_probability(row)

    draft.rollback(0)
    judge(0, draft.decode(prompt, [len(prompt) - 1])[0])
    for start in range(0, len(answer) - 1, chunk):
        piece = answer[start : min(start + chunk, len(answer) - 1)]
        for j, row in enumerate(draft.decode(piece, range(len(piece)))):
            judge(start + j + 1, row)
    draft.rollback(0)
