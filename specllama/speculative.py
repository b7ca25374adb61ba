"""The speculative loop: draft -> verify in one target batch -> accept/reject -> rollback.

No I/O. `generate` is a generator of events; the caller prints, counts or stops as it likes.

Invariant between rounds: the target context has evaluated every token of `context` except the
last one (the "pending" token). A round feeds [pending, d1..dk] in ONE decode and reads logits at
all k+1 positions: row i is the target's distribution for the token after position i, so row i
checks draft token d(i+1), and row k gives a bonus token when every draft token is accepted.

Convention for sampling (Leviathan et al. 2023; Chen et al. 2023): p is the TARGET's probability
and q the DRAFT's, both after the same temperature/top-k/top-p/min-p transform. A draft token x
is accepted with probability min(1, p(x) / q(x)); on rejection the replacement is drawn from
norm(max(p - q, 0)). A deterministic draft (greedy draft model, n-gram) has q = one-hot(x).
The emitted tokens then follow p exactly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specllama.backend import LlamaBackend
from specllama.controller import DraftController, FixedLength
from specllama.drafters import Draft, Drafter
from specllama.errors import ContextOverflowError, UsageError
from specllama.sampling import (
    Distribution,
    SamplingParams,
    argmax,
    make_rng,
    probabilities,
    residual,
    sample,
)
from specllama.stats import GenerationStats


@dataclass(frozen=True)
class TokenEvent:
    token: int
    from_draft: bool  # True: a draft token the target accepted; False: the target's own choice


@dataclass(frozen=True)
class RoundEvent:
    n_drafted: int
    n_accepted: int
    draft_s: float  # time in the draft's decode this round
    target_s: float  # time in the target's verify decode this round
    source: str = ""  # who was asked to draft ("model", "ngramN"; "" when nobody was asked)
    wall_s: float = 0.0  # the whole round, from choosing what to draft to the rollback


@dataclass(frozen=True)
class FinishEvent:
    reason: str  # "stop" (end-of-generation token), "length" (max_tokens), "context" (full)
    stats: GenerationStats


Event = TokenEvent | RoundEvent | FinishEvent


def verify(rows: np.ndarray, draft: Draft, params: SamplingParams, rng: np.random.Generator):
    """Check the draft against the target's logits rows; return (n_accepted, next_token).

    rows[i] is the target's logits for the position of draft.tokens[i]; rows[len(draft)] is for
    the position after the last draft token.
    """
    if params.greedy:
        for i, x in enumerate(draft.tokens):
            best = argmax(rows[i])
            if best != x:
                return i, best
        return len(draft), argmax(rows[len(draft)])

    for i, x in enumerate(draft.tokens):
        p = probabilities(rows[i], params)
        q = draft.q[i] if draft.q is not None else Distribution.one_hot(x)
        if rng.random() < min(1.0, p[x] / q[x]):
            continue
        return i, sample(residual(p, q), rng)
    return len(draft), sample(probabilities(rows[len(draft)], params), rng)


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
    rng: np.random.Generator | None = None,
) -> Iterator[Event]:
    """Generate after `prompt`; yield TokenEvent per emitted token, RoundEvent per round, and
    one FinishEvent last. Reuses whatever prefix of `prompt` the target has already evaluated.
    """
    if not prompt:
        raise UsageError("the prompt is empty")
    if max_tokens < 1:
        raise UsageError(f"max tokens must be at least 1, got {max_tokens}")
    check_prompt_fits(prompt, target.n_ctx)
    controller = controller or FixedLength(0)
    rng = rng if rng is not None else make_rng(params)
    context = list(prompt)
    stats = GenerationStats(drafter=drafter.name, n_prompt=len(prompt))

    started = time.perf_counter()
    target.sync(context[:-1])
    stats.prefill_s = time.perf_counter() - started
    target_s0 = target.decode_seconds
    draft_s0 = drafter.decode_seconds

    started = time.perf_counter()
    reason = "length"
    try:
        while stats.n_generated < max_tokens:
            room = target.n_ctx - len(context)  # the verify batch holds pending + k drafts
            if room < 0:
                reason = "context"
                break
            round_started = time.perf_counter()
            left = max_tokens - stats.n_generated
            source, k = controller.choose(
                drafter.sources(context), remaining=left, generated=stats.n_generated
            )
            k = max(0, min(k, left - 1, room))
            round_ = _round(target, drafter, context, k, source, controller, params, rng)
            round_.event = replace(round_.event, wall_s=time.perf_counter() - round_started)
            controller.observe(round_.event)
            stats.record_round(round_.event.n_drafted, round_.event.n_accepted)
            yield round_.event
            for j, token in enumerate(round_.new_tokens):
                if target.is_eog(token):
                    reason = "stop"
                    break
                context.append(token)
                stats.n_generated += 1
                yield TokenEvent(token, from_draft=j < round_.event.n_accepted)
                if stats.n_generated >= max_tokens:
                    break
            if reason == "stop":
                break
        stats.finish_reason = reason
    finally:
        # Leave both contexts holding only what was emitted, even if the consumer stopped early.
        target.rollback(min(target.n_past, len(context) - 1))
        drafter.rewind(context)
        stats.time_s = time.perf_counter() - started
        stats.target_s = target.decode_seconds - target_s0
        stats.draft_s = drafter.decode_seconds - draft_s0
    yield FinishEvent(reason, stats)


@dataclass
class _Round:
    event: RoundEvent
    new_tokens: list[int]  # accepted draft tokens, then the target's own token


def _round(
    target: LlamaBackend,
    drafter: Drafter,
    context: list[int],
    k: int,
    source: str,
    controller: DraftController,
    params: SamplingParams,
    rng: np.random.Generator,
) -> _Round:
    draft_clock = drafter.decode_seconds
    draft = Draft()
    if k:
        p_min = controller.min_confidence
        draft = drafter.propose(context, k, params, rng, source=source, min_confidence=p_min)
    draft_s = drafter.decode_seconds - draft_clock

    target_clock = target.decode_seconds
    batch = [context[-1], *draft.tokens]
    rows = target.decode(batch, range(len(batch)), copy=False)  # read before the next decode
    target_s = target.decode_seconds - target_clock

    n_accepted, next_token = verify(rows, draft, params, rng)
    # Keep pending + accepted drafts evaluated; next_token becomes the new pending token.
    target.rollback(len(context) + n_accepted)
    event = RoundEvent(len(draft), n_accepted, draft_s, target_s, source if k else "")
    return _Round(event, [*draft.tokens[:n_accepted], next_token])
