"""Requests in arrival order, each run by one of the server's slots.

`GenerationQueue.submit` queues a Job (or refuses it when too many wait); a free slot runs it
on its thread (the loop of `specllama.server.driver`) and hands its outputs to the job's asyncio
queue. Cancelling a job (its client went away) drops it if it is still waiting (in the queue, or
handed to a slot), or stops its generation at the next event or prompt chunk: what the slot's
contexts evaluated stays there, so that a retry goes on from it. `stop` (the server is
stopping) cancels every job and aborts the decode under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable

from specllama.llama.evaluated import DecodeInterrupted
from specllama.server.driver import Cancelled, Done, Failed, Output, Text, Work, answer
from specllama.server.metrics import DecodeCounts, ServerMetrics
from specllama.server.prompt_cache import PromptCache
from specllama.server.slots import Slot, SlotPool
from specllama.session import Engine

log = logging.getLogger("specllama.server.app")


class QueueFull(Exception):
    pass


class _Handoff:
    """Outputs from the slots' threads to one event loop, with one wake-up of the loop for
    a burst of them: after a step every running slot emits, and a wake-up is a write to the
    loop's socket, a call that lets go of the GIL, which a slot's thread can then wait
    milliseconds to get back beside the others (the step waits for the last slot)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._items: list[tuple[asyncio.Queue[Output], Output]] = []
        self._scheduled = False

    def put(self, queue: asyncio.Queue[Output], output: Output) -> None:
        with self._lock:
            self._items.append((queue, output))
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is stopping
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            items, self._items, self._scheduled = self._items, [], False
        for queue, output in items:
            queue.put_nowait(output)


_handoffs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Handoff] = (
    weakref.WeakKeyDictionary()
)


class Job:
    """A queued or running generation, and the outputs it has produced so far."""

    def __init__(self, work: Work) -> None:
        self.work = work
        self.state = "waiting"  # -> "running" -> "done", or "cancelled"
        self.cancelled = threading.Event()
        self.progress: dict[str, object] = {}  # the answer's figures so far (Text.progress)
        loop = asyncio.get_running_loop()
        self._handoff = _handoffs.get(loop) or _handoffs.setdefault(loop, _Handoff(loop))
        self._outputs: asyncio.Queue[Output] = asyncio.Queue()

    def emit(self, output: Output) -> None:
        """From the worker thread: hand an output to the request's event loop."""
        self._handoff.put(self._outputs, output)

    async def outputs(self, every: float | None = None) -> AsyncIterator[Output | None]:
        """Text pieces, then Done or Failed (Failed(Cancelled()) once cancelled); None after
        each `every` seconds without an output (a stream then says it is alive)."""
        while True:
            try:
                output = await asyncio.wait_for(self._outputs.get(), every)
            except TimeoutError:
                yield None
                continue
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
        self.metrics = ServerMetrics()  # what GET /metrics shows, counted as the slots answer
        self._max_waiting = max_waiting
        self._cond = threading.Condition()  # guards the jobs, the counts and each job's state
        self._jobs: list[Job] = []  # waiting, oldest first
        self._closing = False
        self._stopping = False  # the server is stopping: a job submitted now is cancelled
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

    def decode_counts(self) -> dict[str, DecodeCounts]:
        return self.pool.decode_counts()

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
            if self._stopping:  # prepared while the server began to stop
                self._cancel(job)
            self._cond.notify_all()

    def cancel(self, job: Job) -> None:
        """The client went away (or the response is complete: then this does nothing)."""
        with self._cond:
            self._cancel(job)

    def cancel_all(self) -> None:
        """Each job ends with Failed(Cancelled()), so its response ends by itself: those
        waiting (in the queue or handed to a slot) at once, those running within a chunk."""
        with self._cond:
            handed = [slot.handed for slot in self.pool.slots if slot.handed is not None]
            for job in [*self._jobs, *handed, *self.running]:
                self._cancel(job)

    def stop(self) -> None:
        """The server is stopping: cancel every job, and abort the decode under way (a chunk
        of a long prompt can take seconds on a CPU) and every later one. The engine decodes
        nothing more after this."""
        with self._cond:
            self._stopping = True
        self.cancel_all()
        for model in (self._engine.target, self._engine.draft_model):
            if model is not None:
                model.abort_decodes()

    def _cancel(self, job: Job) -> None:
        """Drop a waiting job; stop a running one at its next event or prompt chunk. Holds
        the lock."""
        if job.state == "waiting":
            job.state = "cancelled"
            self.waiting -= 1
            if job in self._jobs:
                self._jobs.remove(job)
            for slot in self.pool.slots:
                if slot.handed is job:
                    slot.handed = None
            self._cond.notify_all()
            job.emit(Failed(Cancelled()))
        elif job.state == "running":
            job.cancelled.set()
            self._cond.notify_all()  # a slot that would wait for this one's end may now

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
                    return self._start(slot, job)
                if self._jobs:
                    job = self._jobs.pop(0)
                    # A slot whose job is cancelled (its client gone, maybe to retry) counts
                    # as free: it is, within a chunk, and may hold most of this prompt.
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
                for output in answer(engine, job.work, job.cancelled, self.metrics):
                    if isinstance(output, Text):
                        job.progress = output.progress
                    job.emit(output)
                if not isinstance(output, Done):
                    job.emit(Failed(Cancelled()))
            except DecodeInterrupted:  # the server is stopping: what was evaluated stays
                job.emit(Failed(Cancelled()))
            except Exception as exc:
                job.emit(Failed(exc))
                # Whatever half-done state the failure left, the next request starts clean.
                for model in (engine.target, engine.draft_model):
                    if model is not None:
                        model.rollback(0)
