"""The queue's hand-off of outputs from the slots' threads to the event loop (`Job.emit`)."""

from __future__ import annotations

import asyncio
import threading

from specllama.server.driver import Failed, Text
from specllama.server.queue import Job


def test_outputs_from_several_threads_reach_each_job_whole_and_in_order():
    """Four slots' threads emit at once, as after a batched step: every job gets every one of
    its outputs, in the order its thread emitted them, however the wake-ups of the loop fall
    (several outputs go in one)."""

    async def main() -> list[list[int]]:
        jobs = [Job(work=None) for _ in range(4)]  # type: ignore[arg-type]
        start = threading.Barrier(len(jobs))

        def slot(job: Job) -> None:
            start.wait()
            for i in range(300):
                job.emit(Text(pieces=[], progress={"i": i}))
            job.emit(Failed(RuntimeError("end")))

        threads = [threading.Thread(target=slot, args=(job,)) for job in jobs]
        for thread in threads:
            thread.start()

        async def received(job: Job) -> list[int]:
            return [out.progress["i"] async for out in job.outputs() if isinstance(out, Text)]

        got = await asyncio.wait_for(asyncio.gather(*(received(job) for job in jobs)), 30)
        for thread in threads:
            thread.join()
        return got

    for got in asyncio.run(main()):
        assert got == list(range(300))
