"""The loop that turns one generation's engine events into the answer's outputs: its text as it
comes, in pieces (stop strings cut out, each token's origin kept), then Done with the figures,
or nothing more once it is cancelled (the queue then says Failed(Cancelled())).

A cancelled generation stops at its next event, or within one chunk of its prompt while that is
evaluated (`EvaluatedTokens.interrupted`): what was evaluated stays in the slot's contexts, so
that a retry of the same prompt goes on from there. Either way /metrics counts what it did
(`ServerMetrics.on_cancelled`): the prompt tokens it evaluated and the seconds they took.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from specllama.engine.constraint import Grammar
from specllama.engine.control import kind_of
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.prediction import predicted_in
from specllama.engine.sampling import SamplingParams
from specllama.engine.stats import GenerationStats, LiveCounter
from specllama.engine.stops import StopMatcher
from specllama.llama.evaluated import DecodeInterrupted
from specllama.server.metrics import ServerMetrics, Unfinished
from specllama.server.origins import Piece, TokenTape, origin
from specllama.session import Engine

log = logging.getLogger("specllama.server.app")

# The loop's finish reasons -> OpenAI's: a full context is a length limit too.
FINISH_REASONS = {"stop": "stop", "stop_string": "stop", "length": "length", "context": "length"}


class Cancelled(Exception):
    """The job's client went away, or the server is stopping."""


@dataclass(frozen=True)
class Work:
    """One generation: prompt tokens and how to continue them."""

    prompt: list[int]
    params: SamplingParams
    max_tokens: int
    stop: tuple[str, ...] = ()
    drafter: str | None = None  # one of the engine's drafter_choices(); None: its current one
    constraint: Grammar | None = None  # the rule every answer token must follow (compiled)
    prediction: list[int] | None = None  # the answer the client expects (drafted from)
    markers: tuple[str, ...] = ()  # the family's markers, written as text even when special
    thinking_budget: int | None = None  # the most thinking tokens, then its end is written


@dataclass(frozen=True)
class Text:
    """A piece of the answer: its tokens with their origins, and the figures so far."""

    pieces: list[Piece]
    progress: dict[str, object] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(text for text, _ in self.pieces)


@dataclass(frozen=True)
class Done:
    stats: GenerationStats  # finish_reason: "stop", "stop_string", "length" or "context"
    n_prompt_reused: int  # prompt tokens found in the target's KV cache
    stop_sequence: str | None = None  # the stop string that ended the answer
    # The prediction's tokens that appear in the answer and those that do not (OpenAI's
    # accepted and rejected prediction tokens); None: no prediction
    predicted: tuple[int, int] | None = None

    @property
    def finish_reason(self) -> str:
        return FINISH_REASONS[self.stats.finish_reason]


@dataclass(frozen=True)
class Failed:
    error: Exception


Output = Text | Done | Failed


def answer(
    engine: Engine, work: Work, cancelled: threading.Event, metrics: ServerMetrics | None = None
) -> Iterator[Output]:
    """Run one generation: its text (stop strings cut out), then Done. Returns early once
    `cancelled` is set: at the next event, with both contexts rolled back to what was emitted,
    or within a chunk of the prompt, with what was evaluated of it kept.

    Text goes out once per round: a round's tokens are all known at once, and each hand-over
    wakes the event loop, which competes for the cores with the next round's decode.
    """
    reused = min(engine.target.common_prefix(work.prompt), len(work.prompt) - 1)
    metrics = metrics or ServerMetrics()  # what /metrics counts: its rounds and its end
    drafter = engine.make_drafter(work.drafter) if work.drafter else engine.drafter
    text = engine.target_text_stream(preserved=work.markers)
    stops = StopMatcher(work.stop)
    tape = TokenTape()
    counter = LiveCounter(drafter.name)  # the stats when a stop string ends it early
    finish: FinishEvent | None = None
    pieces: list[Piece] = []  # this round's tokens, as far as the stop strings let them out
    round_: RoundEvent | None = None
    to_come = 0  # this round's tokens not seen yet
    written: list[int] = []  # the answer's tokens
    params = work.params.with_seed()  # drawn here, so that an answer cut short reports it too
    started = time.perf_counter()
    prefilled: float | None = None  # when the prompt was all evaluated (the first round began)
    events = engine.generate_thinking(
        work.prompt,
        params,
        max_tokens=work.max_tokens,
        budget=work.thinking_budget,
        drafter=drafter,
        constraint=work.constraint,
        prediction=work.prediction,
    )
    try:
        with _stops_between_chunks(engine, cancelled):
            for event in events:
                if cancelled.is_set():
                    log.info("cancelled after %d tokens", counter.stats.n_generated)
                    prompt_s = (prefilled or time.perf_counter()) - started
                    metrics.on_cancelled(_cut_in_answer(work, reused, prompt_s, counter))
                    return
                if isinstance(event, RoundEvent):
                    if prefilled is None:
                        prefilled = time.perf_counter() - event.draft_s - event.target_s
                    metrics.on_round(event)
                    counter.on_round(
                        event.n_drafted, event.n_accepted, event.draft_s, event.target_s
                    )
                    round_, to_come = event, event.n_accepted + 1  # accepted drafts + target's
                elif isinstance(event, TokenEvent):
                    counter.on_token()
                    written.append(event.token)
                    to_come -= 1
                    assert round_ is not None, "a round comes before its tokens"
                    piece = text.feed(event.token)
                    tape.add(piece, origin(round_.source, event.from_draft))
                    pieces += tape.release(stops.feed(piece))
                    if stops.stopped:
                        break
                    if to_come == 0 and _has_text(pieces):
                        yield Text(pieces, _progress(counter, round_))
                        pieces = []
                elif isinstance(event, FinishEvent):
                    finish = event
    except DecodeInterrupted:
        held = min(engine.target.n_past, len(work.prompt))
        log.info("cancelled with %d of the prompt's %d tokens evaluated", held, len(work.prompt))
        elapsed = time.perf_counter() - started
        metrics.on_cancelled(Unfinished(max(held - reused, 0), reused, elapsed, prompt_done=False))
        return
    finally:
        events.close()  # stopping early: the generator rolls both contexts back

    if finish is None:  # a stop string ended it
        stats = counter.snapshot("stop_string")
        stats.seed = params.effective_seed
        stats.prefill_s = (prefilled or started) - started
    else:
        stats = finish.stats
        tape.extend_last(flushed := text.flush())
        pieces += tape.release(stops.feed(flushed) + stops.flush())
        if stops.stopped:
            stats.finish_reason = "stop_string"
    pieces += tape.finish()
    if pieces:
        yield Text(pieces, _progress(counter, round_))
    stats.n_prompt = len(work.prompt)
    predicted = None
    if work.prediction is not None:
        found = predicted_in(work.prediction, written)
        predicted = (found, len(work.prediction) - found)
    metrics.on_answer(stats, reused)
    yield Done(stats, reused, stops.matched, predicted)


@contextlib.contextmanager
def _stops_between_chunks(engine: Engine, cancelled: threading.Event) -> Iterator[None]:
    """Meanwhile a long decode (the prompt, in the target and in the draft model) stops
    between its chunks once `cancelled` is set."""
    models = [model for model in (engine.target, engine.draft_model) if model is not None]
    for model in models:
        model.interrupted = cancelled.is_set
    try:
        yield
    finally:
        for model in models:
            model.interrupted = None


def _cut_in_answer(work: Work, reused: int, prompt_s: float, counter: LiveCounter) -> Unfinished:
    """A generation cancelled after its prompt: the prompt, and the tokens it wrote."""
    stats = counter.snapshot()
    evaluated = max(len(work.prompt) - reused, 0)
    return Unfinished(evaluated, reused, prompt_s, True, stats.n_generated, stats.time_s)


def _has_text(pieces: list[Piece]) -> bool:
    return any(text for text, _ in pieces)


def _progress(counter: LiveCounter, round_: RoundEvent | None) -> dict[str, object]:
    """The figures so far, for a live display: counts, speed and the last round's choice."""
    stats = counter.snapshot()
    return {
        "n_generated": stats.n_generated,
        "n_drafted": stats.n_drafted,
        "n_accepted": stats.n_accepted,
        "n_rounds": stats.n_rounds,
        "time_s": round(stats.time_s, 4),
        "tokens_per_s": round(stats.tokens_per_s, 3),
        "acceptance_rate": round(stats.acceptance_rate, 4),
        "draft_length": round_.k if round_ else 0,  # what the policy chose last round
        "draft_source": kind_of(round_.source) if round_ and round_.k else "",
    }
