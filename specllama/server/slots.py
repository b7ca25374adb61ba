"""The server's slots: each runs one generation at a time, on its own sequence of the models.

With one slot (`--parallel 1`) the slot is the engine itself, as `run` and `chat` use it. With
N, the contexts hold N sequences and each slot runs the same speculative loop over views of
its own (`specllama.llama.sequences`), with its own drafter and controller and the engine's
calibration and memory; the stepper batches their decodes into one step per model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from specllama.llama.sequences import SequenceView, Stepper, WaitClock
from specllama.server.metrics import DecodeCounts
from specllama.session import Engine

# A long prompt goes into the batch this many tokens a step, so that the other slots' answers
# keep flowing while it is evaluated (a step of this many tokens takes ~1 s on a 2-core CPU
# with a 1.5B target).
PREFILL_CHUNK = 128


@dataclass
class Slot:
    engine: Engine  # the loop's view of the models: its own sequences of them
    job: Any = None  # the queue's Job it runs
    handed: Any = None  # a Job given to it by another slot, not started yet
    last_used: float = 0.0  # when it last started a job (time.monotonic)

    @property
    def free(self) -> bool:
        return self.job is None and self.handed is None

    @property
    def ending(self) -> bool:
        """Its job is cancelled and nothing is handed to it yet: free within a chunk, with
        what it evaluated of that job's prompt still held."""
        return self.job is not None and self.job.cancelled.is_set() and self.handed is None


class SlotPool:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.size = engine.n_seq
        self.stepper = Stepper() if self.size > 1 else None
        self.slots: list[Slot] = [Slot(engine)]  # until `open`: the engine itself

    def open(self) -> None:
        """Make the slots (after calibration, which they share)."""
        if self.stepper is None:
            return
        engine, stepper = self._engine, self.stepper
        self.slots = []
        for seq in range(self.size):
            clock = WaitClock()
            target = SequenceView(engine.target, seq, stepper, PREFILL_CHUNK, clock)
            draft = None
            if engine.draft_model is not None:
                draft = SequenceView(engine.draft_model, seq, stepper, PREFILL_CHUNK, clock)
            self.slots.append(Slot(engine.for_sequences(target, draft)))

    def decode_counts(self) -> dict[str, DecodeCounts]:
        """Per model ("target", "draft"): what /metrics says of how full the batches were."""
        engine = self._engine
        models = {"target": engine.target, "draft": engine.draft_model}
        return {
            role: DecodeCounts(m.n_decodes, m.n_decode_sequences, m.n_decoded, m.decode_seconds)
            for role, m in models.items()
            if m is not None
        }

    def best_free(self, prompt: Sequence[int], *, prefer: Slot) -> Slot:
        """The slot for `prompt`: the free or ending one whose sequence holds the most of it,
        where that is at least half of what it holds (a conversation coming back; a retry of
        a prompt whose client gave up during its prefill); else the free slot used least
        recently, an empty one first, so that a side request does not evict a conversation
        that will come back (llama-server's slot similarity, 0.5). `prefer` (a free slot) wins
        among equals, then any free one."""
        free = [slot for slot in self.slots if slot.free or slot is prefer]
        ending = [slot for slot in self.slots if slot.ending and slot is not prefer]

        def kept(slot: Slot) -> int:
            return slot.engine.target.common_prefix(prompt)

        best = max([*free, *ending], key=lambda slot: (kept(slot), slot is prefer, slot.free))
        if kept(best) and 2 * kept(best) >= best.engine.target.n_past:
            return best
        return min(free, key=lambda slot: (slot.engine.target.n_past > 0, slot.last_used))

    @contextlib.contextmanager
    def generating(self) -> Iterator[None]:
        """Around a slot's generation: the steps wait for its decodes meanwhile."""
        if self.stepper is None:
            yield
            return
        self.stepper.enter()
        try:
            yield
        finally:
            self.stepper.leave()
