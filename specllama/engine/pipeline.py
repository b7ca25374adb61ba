"""Pipelined drafting: the draft model drafts the next round while the target verifies this one.

A round verifies [pending, d1..dk] in one target decode. Beside it, on a worker thread, the draft
model goes on from dk as if the target were going to accept all k drafts: it evaluates dk,
guesses the target's own next token g, and drafts on after g (`DraftAhead.start`). llama.cpp
releases the GIL inside llama_decode, so the two decodes run at once where the hardware has room
for both (a GPU; not CPU cores that one decode already fills, where the controller never
pipelines: `specllama.policy.costs`).

When the target accepts all k drafts and its own token is g, the tokens drafted after g are a
draft for exactly the context that follows: the next round verifies them without drafting first
(`DraftAhead.take`). Otherwise they are dropped (a rejection stops the draft ahead at its next
step), and the draft model's next `sync` brings its context back to the kept tokens.

Sampling needs nothing of its own here: a drafted-ahead token is drawn with the noise of its
position (speculative.py), and the next round keeps it only if it is the target's own draw there,
so what is emitted does not depend on what was drafted ahead, nor on where a rejection stopped it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from specllama.engine.drafters import Draft, Drafter
from specllama.engine.sampling import SamplingParams


@dataclass(frozen=True)
class AheadReport:
    """What the draft ahead of one round did."""

    n_ahead: int = 0  # tokens it drafted (the guess of the target's token included)
    ahead_s: float = 0.0  # the draft model's decode time for them, beside the verify
    wait_s: float = 0.0  # how long the loop waited for it after verifying


@dataclass
class _Running:
    future: Future[tuple[Draft, float]]
    stop: threading.Event
    start: int  # the length of the context + draft it continues


class DraftAhead:
    """One generation's draft ahead: a worker thread, the job under way, and the draft it left
    for the next round."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._running: _Running | None = None
        self._carry: Draft | None = None
        self._carry_for = -1  # the context length the carried draft follows

    def take(self, context: Sequence[int], k: int) -> Draft | None:
        """The draft made ahead for `context` (at most k tokens), or None; it is used once."""
        carry, self._carry = self._carry, None
        if carry is None or k < 1 or self._carry_for != len(context):
            return None
        return carry[:k]

    def drop(self) -> None:
        self._carry = None

    def start(
        self,
        drafter: Drafter,
        context: Sequence[int],
        n: int,
        params: SamplingParams,
        *,
        source: str,
        min_confidence: float | None,
    ) -> None:
        """Draft up to `n` tokens after `context` (the round's context and its draft) on the
        worker thread, while the caller verifies."""
        assert self._running is None, "one draft ahead at a time"
        stop = threading.Event()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="specllama-draft-ahead")
        future = self._pool.submit(
            _draft, drafter, list(context), n, params, source, min_confidence, stop
        )
        self._running = _Running(future, stop, len(context))

    def finish(self, all_accepted: bool, next_token: int) -> AheadReport:
        """Wait for the draft ahead (stopping it first when the round rejected a draft) and
        keep what follows `next_token` when the round went as it guessed."""
        running = self._running
        if running is None:
            return AheadReport()
        if not all_accepted:
            running.stop.set()
        started = time.perf_counter()
        # Still the job under way while waiting: a Ctrl-C here leaves close() to stop it.
        ahead, seconds = running.future.result()
        self._running = None
        wait = time.perf_counter() - started
        if all_accepted and len(ahead) > 1 and ahead.tokens[0] == next_token:
            self._carry = carried(ahead)
            self._carry_for = running.start + 1
        return AheadReport(len(ahead), seconds, wait)

    def close(self) -> None:
        """Stop and wait for any job, and end the worker thread."""
        if self._running is not None:
            self._running.stop.set()
            self._running.future.exception()  # waits; the loop is already failing or done
            self._running = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._carry = None


def carried(ahead: Draft) -> Draft:
    """The next round's draft: what the draft ahead made after its guess of the target's
    token."""
    return ahead[1:]


def _draft(
    drafter: Drafter,
    context: list[int],
    n: int,
    params: SamplingParams,
    source: str,
    min_confidence: float | None,
    stop: threading.Event,
) -> tuple[Draft, float]:
    before = drafter.decode_seconds
    draft = drafter.propose(
        context, n, params, source=source, min_confidence=min_confidence, stop=stop
    )
    return draft, drafter.decode_seconds - before
