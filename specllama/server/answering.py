"""A queued job's outputs, taken to its client: streamed as server-sent events (with a keepalive
after each stretch of silence, while a long prompt is evaluated) or collected into one body;
a generation that failed, as the API's error; one log line per answer.

The app (app) reads, prepares and queues a request, then hands its job here with the API's
Answer, which turns the outputs into the API's events. Whichever way the response ends (done,
failed, or the client gone), the job is cancelled with it, so that its slot stops at the next
round or prompt chunk.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator

from starlette.requests import Request

from specllama.server.driver import Cancelled, Done, Failed, Text
from specllama.server.fields import ApiError
from specllama.server.queue import GenerationQueue, Job
from specllama.server.wire import Answer, Wire, sse

log = logging.getLogger("specllama.server.app")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def stream(
    queue: GenerationQueue, job: Job, answer: Answer, wire: Wire, keepalive_s: float
) -> AsyncIterator[str]:
    """The answer's server-sent events as `job`'s outputs arrive, and the API's keepalive
    after each `keepalive_s` seconds without one."""
    # On a client disconnect Starlette cancels this generator at its await: `finally`
    # then cancels the job, which stops at the next round or prompt chunk.
    try:
        for event in answer.opening():
            yield sse(event)
        async for output in job.outputs(every=keepalive_s):
            if output is None:  # nothing for a while: the prompt is long
                yield answer.keepalive()
                continue
            if isinstance(output, Text):
                events = answer.text(output)
            elif isinstance(output, Done):
                report(wire, output)
                events = answer.final(output)
            else:  # headers are sent: the error goes in the stream
                events = answer.failure(failure(output))
            for event in events:
                yield sse(event)
        yield answer.closing()
    finally:
        queue.cancel(job)


async def collect(
    request: Request, queue: GenerationQueue, job: Job, answer: Answer, wire: Wire
) -> dict[str, object]:
    """The whole answer, once `job` is done (cancelled if the client goes away meanwhile)."""
    watcher = asyncio.create_task(_on_disconnect(request, lambda: queue.cancel(job)))
    try:
        pieces: list[str] = []
        async for output in job.outputs():
            if isinstance(output, Text):
                pieces.append(output.text)
            elif isinstance(output, Done):
                report(wire, output)
                return answer.whole("".join(pieces), output)
            else:
                raise failure(output)
        raise AssertionError("a job always ends with Done or Failed")
    finally:
        watcher.cancel()
        queue.cancel(job)


def failed_stream(answer: Answer, error: ApiError) -> Iterator[str]:
    """A stream that opens and fails at once (a request refused where its API says so in the
    stream, not with an HTTP error)."""
    failed = [*answer.opening(), *answer.failure(error)]
    return iter([*map(sse, failed), answer.closing()])


def report(wire: Wire, done: Done) -> None:
    s = done.stats
    accepted = f", accepted {s.acceptance_rate:.0%} of {s.n_drafted}" if s.n_drafted else ""
    log.info(
        "%s: %d tokens in %.2f s (%.1f tok/s), drafter %s%s, prompt %d tokens (%d cached), "
        "finish %s",
        wire.name,
        s.n_generated,
        s.time_s,
        s.tokens_per_s,
        s.drafter,
        accepted,
        s.n_prompt,
        done.n_prompt_reused,
        s.finish_reason,
    )


def failure(output: Failed) -> ApiError:
    """A generation that failed: the server's fault, not the request's."""
    if isinstance(output.error, Cancelled):  # nobody is listening, or the server stops
        return ApiError(503, "The generation was cancelled.", code="cancelled")
    log_unexpected("the generation failed", output.error)
    return ApiError(500, f"The generation failed: {output.error}", code="generation_failed")


def log_unexpected(what: str, exc: BaseException) -> None:
    """One error line; the traceback too with SPECLLAMA_DEBUG=1."""
    debug = os.environ.get("SPECLLAMA_DEBUG") == "1"
    log.error("%s: %s: %s", what, type(exc).__name__, exc, exc_info=exc if debug else None)


async def _on_disconnect(request: Request, then: Callable[[], None]) -> None:
    """Call `then` when the client closes the connection (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    then()
