"""Which slot a job goes to, and what cancel and shutdown see, on fake slots (no model).

A slot whose job is cancelled (its client gave up mid-prefill, maybe to retry) is free within a
chunk and holds what it evaluated: a retry of that prompt goes there, not to an empty slot. A
job handed to a slot but not started yet is still waiting: cancel and shutdown answer it.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

from specllama.engine.sampling import SamplingParams
from specllama.llama.evaluated import EvaluatedTokens
from specllama.server.driver import Cancelled, Failed, Work
from specllama.server.queue import GenerationQueue, Job
from specllama.server.slots import Slot, SlotPool

PROMPT = list(range(100, 400))


class Held(EvaluatedTokens):
    """A sequence that holds `tokens` (no decoding here)."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = list(tokens)


def slot(tokens: list[int], *, job: object = None) -> Slot:
    return Slot(SimpleNamespace(target=Held(tokens)), job=job)


def running(cancelled: bool) -> SimpleNamespace:
    event = threading.Event()
    if cancelled:
        event.set()
    return SimpleNamespace(cancelled=event, state="running")


def pool(*slots: Slot) -> SlotPool:
    chosen = SlotPool(SimpleNamespace(n_seq=1))
    chosen.slots = list(slots)
    return chosen


def test_a_retry_goes_to_the_slot_whose_cancelled_job_evaluated_most_of_it():
    empty = slot([])
    ending = slot(PROMPT[:256], job=running(cancelled=True))
    assert pool(empty, ending).best_free(PROMPT, prefer=empty) is ending


def test_a_running_job_keeps_its_slot_however_much_it_holds():
    empty = slot([])
    busy = slot(PROMPT[:256], job=running(cancelled=False))
    assert pool(empty, busy).best_free(PROMPT, prefer=empty) is empty


def test_an_ending_slot_is_not_taken_for_a_prompt_it_does_not_hold():
    empty = slot([])
    ending = slot([7] * 256, job=running(cancelled=True))
    assert pool(empty, ending).best_free(PROMPT, prefer=empty) is empty


def test_a_job_handed_to_a_slot_is_answered_by_cancel_all():
    async def handed_then_cancelled() -> object:
        queue = object.__new__(GenerationQueue)  # its bookkeeping alone, no thread
        queue._cond, queue._jobs, queue.waiting = threading.Condition(), [], 1
        job = Job(Work(PROMPT, SamplingParams(), 8))
        queue.pool = pool(slot([], job=running(cancelled=True)))
        queue.pool.slots[0].handed = job
        queue.cancel_all()
        assert queue.pool.slots[0].handed is None and queue.waiting == 0
        return await anext(job.outputs())

    output = asyncio.run(handed_then_cancelled())
    assert isinstance(output, Failed) and isinstance(output.error, Cancelled)
