"""The speculative loop: draft -> verify in one target batch -> accept/reject -> rollback.

No I/O. `generate` is a generator of events; the caller prints, counts or stops as it likes.

Invariant between rounds: the target context has evaluated every token of `context` except the
last one (the "pending" token). A round feeds [pending, d1..dk] in ONE decode and reads logits at
all k+1 positions: row i is the target's distribution for the token after position i, so row i
checks draft token d(i+1), and row k gives a bonus token when every draft token is accepted.

Sampling (temperature > 0) is drafter-invariant (Daliri, Musco, Suresh 2024): the token at
position t is `sampling.draw`, the Gumbel-max argmax(log p_t + G(seed, t, .)) with p_t the
TARGET's distribution after temperature/top-k/top-p/min-p and noise that is a pure function of
the seed, t and the token. That is how the target alone samples. A round accepts a draft token
iff it equals the target's own draw at its position, and emits the target's draw at the first
mismatch (or, when all are accepted, at the position after the last): every emitted token is
the target-alone token, whatever was drafted, so the text follows p exactly (Gumbel-max) and a
seed gives the same text with any drafter, draft length, controller, pipelining and cache.
Greedy (temperature 0) is the same rule with argmax for the draw. A deterministic draft
(n-gram, greedy draft model) is accepted with probability p(x), as under the rejection rule;
a sampled draft model drafts with the same noise on its own q, so it hits the target's draw
at least (1 - TV)/(1 + TV) of the time (TV: the total variation between q and p), nearly what
any coupling without communication can.

When the controller asks for it (`pipelined`), the draft model drafts the next round while the
target verifies (`specllama.engine.pipeline`); a round then may start with its draft already made.

Under an output constraint (`specllama.engine.constraint`) every position is drawn from the
target's masked logits, by the target alone and by every round alike, so the text stays the
constrained target's. A draft is cut before its first token the constraint forbids (it could
never be accepted), and where the constraint allows one continuation alone (a JSON key, a
brace) the round drafts it without asking anyone ("grammar" rounds, which the controller does
not see: they say nothing about any drafter).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specllama.engine.constraint import Constraint
from specllama.engine.control import (
    GRAMMAR,
    MODEL,
    NGRAM,
    DraftController,
    FixedLength,
    SourceOption,
    kind_of,
)
from specllama.engine.drafters import Draft, Drafter, NoDrafter
from specllama.engine.events import Event, FinishEvent, RoundEvent, TokenEvent
from specllama.engine.pipeline import DraftAhead
from specllama.engine.sampling import SamplingParams, draw
from specllama.engine.stats import GenerationStats
from specllama.errors import ContextOverflowError, UsageError
from specllama.llama.backend import LlamaBackend
from specllama.llama.evaluated import common_prefix_length


def verify(
    rows: np.ndarray,
    draft: Draft,
    params: SamplingParams,
    position: int,
    constraint: Constraint | None = None,
) -> tuple[int, int]:
    """Check the draft against the target's logits rows; return (n_accepted, next_token).

    rows[i] is the target's logits for the token at `position + i` (the position of
    draft.tokens[i]); rows[len(draft)] is for the position after the last draft token. The
    target draws at each position as it would alone, and a draft token is kept iff it is
    that draw. Under a constraint the draw is from the masked logits, and the constraint
    consumes every token emitted (the accepted drafts and the target's own).
    """
    choose = constraint.draw if constraint is not None else draw
    for i, x in enumerate(draft.tokens):
        own = choose(rows[i], params, position + i)
        if own != x:
            return i, own
    return len(draft), choose(rows[len(draft)], params, position + len(draft))


def check_prompt_fits(prompt: Sequence[int], n_ctx: int) -> None:
    """The prompt plus at least one generated token must fit in the context."""
    if len(prompt) >= n_ctx:
        raise ContextOverflowError(
            f"the prompt has {len(prompt)} tokens and the context holds {n_ctx}",
            hint="use a shorter prompt or a larger --ctx",
        )


def generate(
    target: LlamaBackend,
    drafter: Drafter,
    prompt: Sequence[int],
    params: SamplingParams,
    *,
    max_tokens: int,
    controller: DraftController | None = None,
    constraint: Constraint | None = None,
    pipelining: bool = True,
) -> Iterator[Event]:
    """Generate after `prompt`; yield TokenEvent per emitted token, RoundEvent per round, and
    one FinishEvent last. Reuses whatever prefix of `prompt` the target has already evaluated.
    A sampled generation without a seed draws one; the FinishEvent's stats report it.
    `constraint`: a fresh matcher (`Grammar.start`) the answer must satisfy. `pipelining`
    False: never draft on a second thread (a server's slot, whose decodes are batched).
    """
    if not prompt:
        raise UsageError("the prompt is empty")
    if max_tokens < 1:
        raise UsageError(f"max tokens must be at least 1, got {max_tokens}")
    check_prompt_fits(prompt, target.n_ctx)
    controller = controller or FixedLength(0)
    params = params.with_seed()
    context = list(prompt)
    stats = GenerationStats(drafter=drafter.name, n_prompt=len(prompt), seed=params.effective_seed)

    started = time.perf_counter()
    target.sync(context[:-1])
    stats.prefill_s = time.perf_counter() - started
    target_s0 = target.decode_seconds
    draft_s0 = drafter.decode_seconds

    started = time.perf_counter()
    reason = "length"
    ahead = DraftAhead()
    try:
        while stats.n_generated < max_tokens:
            room = target.n_ctx - len(context)  # the verify batch holds pending + k drafts
            if room < 0:
                reason = "context"
                break
            round_started, waited = time.perf_counter(), target.waited_seconds
            left = max_tokens - stats.n_generated
            most = max(0, min(left - 1, room, _rollback_limit(target)))
            forced = _forced(constraint, drafter, most)
            passed_over: tuple[str, list[int]] = ("", [])
            if forced:
                plan = _Plan(GRAMMAR, len(forced), 0)
            else:
                options = drafter.sources(context)
                controller.in_batch(target.batch_price())
                source, k = controller.choose(options, remaining=left, generated=stats.n_generated)
                k = max(0, min(k, most))
                ahead_max = _ahead_max(controller, source, k, left, room) if pipelining else 0
                plan = _Plan(source, k, ahead_max)
                passed_over = _passed_over(drafter, options, plan, context)
            round_ = _round(
                target, drafter, context, plan, controller, params, ahead, constraint, forced
            )
            wall_s = time.perf_counter() - round_started - (target.waited_seconds - waited)
            event = replace(round_.event, wall_s=wall_s, k=plan.k)
            if passed_over[0]:
                event = _in_hindsight(event, *passed_over, round_.new_tokens)
            if forced:
                stats.n_forced += event.n_accepted
            else:
                controller.observe(event)
            stats.record_round(event.n_drafted, event.n_accepted)
            stats.draft_hidden_s += max(event.ahead_s - event.wait_s, 0.0)
            yield event
            for j, token in enumerate(round_.new_tokens):
                if target.is_eog(token):
                    reason = "stop"
                    break
                context.append(token)
                stats.n_generated += 1
                yield TokenEvent(token, from_draft=j < event.n_accepted)
                if stats.n_generated >= max_tokens:
                    break
            if reason == "stop":
                break
        stats.finish_reason = reason
    finally:
        ahead.close()
        # Leave both contexts holding only what was emitted, even if the consumer stopped early.
        target.rollback(min(target.n_past, len(context) - 1))
        drafter.rewind(context)
        stats.time_s = time.perf_counter() - started
        stats.target_s = target.decode_seconds - target_s0
        stats.draft_s = drafter.decode_seconds - draft_s0
    yield FinishEvent(reason, stats)


def _passed_over(
    drafter: Drafter, options: Sequence[SourceOption], plan: _Plan, context: list[int]
) -> tuple[str, list[int]]:
    """The n-gram source offered but not drafted from this round, and what it would have
    drafted (as many tokens as the round can emit): a lookup costs nothing to make, so what
    the round emits tells the controller how it would have done, without a round spent on it.
    ("", []) when the round drafts from it, or there is none."""
    if kind_of(plan.source if plan.k else "") == NGRAM or not hasattr(drafter, "peek"):
        return "", []
    name = next((name for name, _ in options if kind_of(name) == NGRAM), "")
    return (name, drafter.peek(context, plan.k + 1)) if name else ("", [])


def _in_hindsight(
    event: RoundEvent, source: str, proposal: list[int], emitted: list[int]
) -> RoundEvent:
    """The round's event with how `source`'s `proposal` fared against what it emitted."""
    seen = min(len(proposal), len(emitted))
    right = common_prefix_length(proposal[:seen], emitted[:seen])
    return replace(event, hindsight=source, hindsight_right=right, hindsight_seen=seen)


def _forced(constraint: Constraint | None, drafter: Drafter, n_max: int) -> list[int]:
    """What the constraint allows alone from here, as a free draft (none for the target
    alone, which drafts nothing)."""
    if constraint is None or isinstance(drafter, NoDrafter):
        return []
    return constraint.forced(n_max)


def _rollback_limit(target: LlamaBackend) -> int:
    """The most drafts a verify batch may carry: as many as the target can drop again (a
    recurrent state keeps only so many snapshots; none where llama.cpp keeps none)."""
    limit = target.max_rollback
    return limit if limit is not None else 1 << 30


@dataclass(frozen=True)
class _Plan:
    source: str  # who drafts ("" for nobody)
    k: int  # how many tokens
    ahead_max: int  # how many to draft ahead beside the verify (0: not pipelined)


def _ahead_max(controller: DraftController, source: str, k: int, left: int, room: int) -> int:
    """Pipelined draft-model rounds draft ahead the guess of the target's token and a next
    draft of k, within the tokens still wanted after this round and the context's room; not
    at all when that leaves no next draft."""
    if not (controller.pipelined and k and kind_of(source) == MODEL):
        return 0
    n = min(k + 1, left - k - 1, room - k)
    return n if n > 1 else 0


@dataclass
class _Round:
    event: RoundEvent
    new_tokens: list[int]  # accepted draft tokens, then the target's own token


def _round(
    target: LlamaBackend,
    drafter: Drafter,
    context: list[int],
    plan: _Plan,
    controller: DraftController,
    params: SamplingParams,
    ahead: DraftAhead,
    constraint: Constraint | None = None,
    forced: list[int] | None = None,
) -> _Round:
    if forced:
        ahead.drop()
        draft, draft_s, carried = Draft(list(forced)), 0.0, False
    else:
        draft, draft_s, carried = _draft(
            drafter, context, plan, controller, params, ahead, constraint
        )
        if constraint is not None:  # a forbidden token could never be accepted: cut there
            draft = draft[: constraint.valid_prefix(draft.tokens)]
    if plan.ahead_max and draft.tokens and not target.is_eog(draft.tokens[-1]):
        tokens = [*context, *draft.tokens]
        p_min = controller.min_confidence
        ahead.start(
            drafter, tokens, plan.ahead_max, params, source=plan.source, min_confidence=p_min
        )

    target_clock = target.decode_seconds
    batch = [context[-1], *draft.tokens]
    rows = target.decode(batch, range(len(batch)), copy=False)  # read before the next decode
    target_s = target.decode_seconds - target_clock

    n_accepted, next_token = verify(rows, draft, params, len(context), constraint)
    # Keep pending + accepted drafts evaluated; next_token becomes the new pending token.
    target.rollback(len(context) + n_accepted)
    report = ahead.finish(n_accepted == len(draft), next_token)  # empty if none was started
    event = RoundEvent(
        len(draft),
        n_accepted,
        draft_s,
        target_s,
        plan.source if plan.k else "",
        carried=carried,
        n_ahead=report.n_ahead,
        ahead_s=report.ahead_s,
        wait_s=report.wait_s,
    )
    return _Round(event, [*draft.tokens[:n_accepted], next_token])


def _draft(
    drafter: Drafter,
    context: list[int],
    plan: _Plan,
    controller: DraftController,
    params: SamplingParams,
    ahead: DraftAhead,
    constraint: Constraint | None = None,
) -> tuple[Draft, float, bool]:
    """The round's draft, the seconds it took to make, and whether it was made ahead last
    round (a draft model's draft is, when the last round went as its draft ahead guessed)."""
    if kind_of(plan.source) != MODEL:
        ahead.drop()
    elif (carried := ahead.take(context, plan.k)) is not None:
        return carried, 0.0, True
    if not plan.k:
        return Draft(), 0.0, False
    clock = drafter.decode_seconds
    p_min = controller.min_confidence
    draft = drafter.propose(
        context, plan.k, params, source=plan.source, min_confidence=p_min, constraint=constraint
    )
    return draft, drafter.decode_seconds - clock, False
