"""Requests in arrival order, each run by one of the server's slots.

`GenerationQueue.submit` queues a Job (or refuses it when too many wait); a free slot runs it
on its thread and hands its text pieces to the job's asyncio queue. Cancelling a job (its
client went away) drops it if it is still waiting, or stops its generation at the next event:
closing the loop's generator rolls the slot's contexts back to what was emitted, so its next
request starts from a consistent cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field

from specllama.engine.constraint import Grammar
from specllama.engine.control import kind_of
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.prediction import predicted_in
from specllama.engine.sampling import SamplingParams
from specllama.engine.stats import GenerationStats, LiveCounter
from specllama.engine.stops import StopMatcher
from specllama.server.origins import Piece, TokenTape, origin
from specllama.server.prompt_cache import PromptCache
from specllama.server.slots import Slot, SlotPool
from specllama.session import Engine

log = logging.getLogger("specllama.server.app")

# The loop's finish reasons -> OpenAI's: a full context is a length limit too.
FINISH_REASONS = {"stop": "stop", "stop_string": "stop", "length": "length", "context": "length"}


class QueueFull(Exception):
    pass


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


class Job:
    """A queued or running generation, and the outputs it has produced so far."""

    def __init__(self, work: Work) -> None:
        self.work = work
        self.state = "waiting"  # -> "running" -> "done", or "cancelled"
        self.cancelled = threading.Event()
        self.progress: dict[str, object] = {}  # the answer's figures so far (Text.progress)
        self._loop = asyncio.get_running_loop()
        self._outputs: asyncio.Queue[Output] = asyncio.Queue()

    def emit(self, output: Output) -> None:
        """From the worker thread: hand an output to the request's event loop."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is stopping
            self._loop.call_soon_threadsafe(self._outputs.put_nowait, output)

    async def outputs(self) -> AsyncIterator[Output]:
        """Text pieces, then Done or Failed (Failed(Cancelled()) once cancelled)."""
        while True:
            output = await self._outputs.get()
            yield output
            if not isinstance(output, Text):
                return


class GenerationQueue:
    """Requests in arrival order, run by the server's slots (`specllama.server.slots`): one
    slot runs one generation at a time on its own thread; with one slot (the default) it does
    every llama.cpp computation itself, with more the stepper's thread does them, batched.
    `prepare` (measuring the machine's costs) runs on that thread too, before the first job:
    llama.cpp's CPU threads are an OpenMP team per calling thread, and a second team made the
    first generation thread's decodes about 30% slower on a 2-core machine.

    A job waiting for a slot goes to the free slot whose sequence holds the most of its prompt
    (a conversation comes back to the slot that holds it); the prompt cache covers the rest."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_waiting: int,
        prepare: Callable[[], None] | None = None,
        cache: PromptCache | None = None,
    ) -> None:
        self._engine = engine
        self.cache = cache  # brings a slot's contexts to the longest prefix held, before each job
        self._max_waiting = max_waiting
        self._cond = threading.Condition()  # guards the jobs, the counts and each job's state
        self._jobs: list[Job] = []  # waiting, oldest first
        self._closing = False
        self.waiting = 0
        self.pool = SlotPool(engine)
        self._prepare = prepare
        self._prepared = threading.Event()
        self._prepare_error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._main, name="specllama-generation", daemon=True)
        self._thread.start()
        try:
            self._prepared.wait()
        finally:
            if self._prepare_error is not None or not self._prepared.is_set():
                self._thread.join()  # interrupted: the engine must not be freed under it
        if self._prepare_error is not None:
            raise self._prepare_error

    @property
    def running(self) -> list[Job]:
        return [slot.job for slot in self.pool.slots if slot.job is not None]

    def slot_facts(self) -> list[dict[str, object]]:
        """What /slots shows of each slot: busy or free, the tokens its sequence holds, its
        answer's figures so far."""
        facts = []
        for number, slot in enumerate(self.pool.slots):
            job: Job | None = slot.job
            target = slot.engine.target
            fact = {"id": number, "busy": job is not None, "n_ctx": target.n_ctx}
            fact["n_held"] = target.n_past
            if job is not None:
                fact |= {"n_prompt": len(job.work.prompt), **job.progress}
            facts.append(fact)
        return facts

    def full(self) -> bool:
        # While a slot is free, the newest job starts at once rather than waiting.
        free = sum(slot.free for slot in self.pool.slots)
        return self.waiting >= self._max_waiting + free

    def submit(self, job: Job) -> None:
        """Queue `job`, or raise QueueFull when `max_waiting` jobs already wait their turn."""
        with self._cond:
            if self.full():
                raise QueueFull
            self.waiting += 1
            self._jobs.append(job)
            self._cond.notify_all()

    def cancel(self, job: Job) -> None:
        """The client went away (or the response is complete: then this does nothing)."""
        with self._cond:
            self._cancel(job)

    def cancel_all(self) -> None:
        """The server is stopping. Each job ends with Failed(Cancelled()), so its response
        ends by itself."""
        with self._cond:
            for job in [*self._jobs, *self.running]:
                self._cancel(job)

    def _cancel(self, job: Job) -> None:
        """Drop a waiting job; stop a running one at its next event. Holds the lock."""
        if job.state == "waiting":
            job.state = "cancelled"
            self.waiting -= 1
            if job in self._jobs:  # else handed to a slot, which skips it
                self._jobs.remove(job)
            job.emit(Failed(Cancelled()))
        elif job.state == "running":
            job.cancelled.set()

    def close(self) -> None:
        """Cancel everything and wait for the slots to finish: the engine must not be freed
        under them."""
        self.cancel_all()
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()

    def _main(self) -> None:
        try:
            if self._prepare is not None:
                self._prepare()
            self.pool.open()  # after `prepare`: the slots share its calibration
        except BaseException as exc:
            self._prepare_error = exc
            return
        finally:
            self._prepared.set()
        if self.pool.stepper is None:  # one slot: it runs on this thread
            self._serve(self.pool.slots[0])
            return
        self._threads = [
            threading.Thread(target=self._serve, args=(slot,), name=f"specllama-slot-{i}")
            for i, slot in enumerate(self.pool.slots)
        ]
        for thread in self._threads:
            thread.start()
        self.pool.stepper.run(until=lambda: self._closing)
        for thread in self._threads:
            thread.join()

    def _serve(self, slot: Slot) -> None:
        while (job := self._next(slot)) is not None:
            try:
                self._run(slot, job)
            finally:
                with self._cond:
                    job.state = "done"
                    slot.job = None
                    self._cond.notify_all()

    def _next(self, slot: Slot) -> Job | None:
        """The next job for `slot`: one handed to it, or the oldest waiting when this slot is
        the free one that holds the most of its prompt (else it is handed to that one)."""
        with self._cond:
            while not self._closing:
                if slot.handed is not None:
                    job, slot.handed = slot.handed, None
                    if job.state == "cancelled":
                        continue
                    return self._start(slot, job)
                if self._jobs:
                    job = self._jobs.pop(0)
                    best = self.pool.best_free(job.work.prompt, prefer=slot)
                    if best is slot:
                        return self._start(slot, job)
                    best.handed = job
                    self._cond.notify_all()
                    continue
                self._cond.wait()
            return None

    def _start(self, slot: Slot, job: Job) -> Job:
        """Holds the lock."""
        job.state = "running"
        self.waiting -= 1
        slot.job, slot.last_used = job, time.monotonic()
        return job

    def _run(self, slot: Slot, job: Job) -> None:
        engine = slot.engine
        with self.pool.generating():
            try:
                if self.cache is not None:
                    self.cache.restore(job.work.prompt, engine)
                output: Output | None = None
                for output in answer(engine, job.work, job.cancelled):
                    if isinstance(output, Text):
                        job.progress = output.progress
                    job.emit(output)
                if not isinstance(output, Done):
                    job.emit(Failed(Cancelled()))
            except Exception as exc:
                job.emit(Failed(exc))
                # Whatever half-done state the failure left, the next request starts clean.
                for model in (engine.target, engine.draft_model):
                    if model is not None:
                        model.rollback(0)


def answer(engine: Engine, work: Work, cancelled: threading.Event) -> Iterator[Output]:
    """Run one generation: its text (stop strings cut out), then Done. Returns early, with
    both contexts rolled back to what was emitted, once `cancelled` is set.

    Text goes out once per round: a round's tokens are all known at once, and each hand-over
    wakes the event loop, which competes for the cores with the next round's decode.
    """
    reused = min(engine.target.common_prefix(work.prompt), len(work.prompt) - 1)
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
        for event in events:
            if cancelled.is_set():
                log.info("cancelled after %d tokens", counter.stats.n_generated)
                return
            if isinstance(event, RoundEvent):
                counter.on_round(event.n_drafted, event.n_accepted, event.draft_s, event.target_s)
                round_, to_come = event, event.n_accepted + 1  # accepted drafts + the target's
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
    finally:
        events.close()  # stopping early: the generator rolls both contexts back

    if finish is None:  # a stop string ended it
        stats = counter.snapshot("stop_string")
        stats.seed = params.effective_seed
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
    yield Done(stats, reused, stops.matched, predicted)


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
