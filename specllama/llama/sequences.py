"""Several sequences in one context, decoded together: a server's slots.

Each slot runs the one-sequence speculative loop on its own thread, over `SequenceView`s of the
shared models: a view keeps its sequence's bookkeeping (`EvaluatedTokens`) and hands its
decodes to the `Stepper`. The stepper's thread (the only one that calls llama_decode: llama.cpp
starts an OpenMP team per calling thread, and a second team slows the first) waits until every
slot that is running is waiting for a decode, then evaluates all that is asked of each model in
ONE llama_decode per model: the slots' verify batches (and prompt chunks) together in the
target, their draft tokens together in the draft model. A slot's long prompt goes in chunks of
`chunk` tokens, one per step, so the others' answers keep flowing meanwhile.

Everything else a view does to its sequence (cut it back, save or load its state) happens under
the model's lock, between steps.

What a step cost is charged to its sequences by what each adds to it
(`specllama.llama.step_costs`), not the whole step to each: a slot's speculation is then weighed
on what its drafts cost the batch, so that drafts are long where a wider step costs little more
(a GPU's slack) and none where a drafted token costs what the step's own tokens do (a CPU's
full cores).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specllama.llama.backend import LlamaBackend
from specllama.llama.evaluated import EvaluatedTokens, Part, SavedState
from specllama.llama.step_costs import StepCosts


@dataclass
class _Request:
    model: LlamaBackend
    part: Part
    done: threading.Event = field(default_factory=threading.Event)
    rows: np.ndarray | None = None
    error: BaseException | None = None
    seconds: float = 0.0  # its share of the step's time (`StepCosts.charges`)


class Stepper:
    """Gathers the slots' decodes into one batched step per model (see the module's doc)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._running = 0  # slots in a generation: each is computing or has one request pending
        self._stopping = False
        self.locks: dict[int, threading.Lock] = {}  # per model: llama.cpp calls off the step
        self.costs: dict[int, StepCosts] = {}  # per model
        self._prompting: dict[int, frozenset[int]] = {}  # per model: prompts in its last step
        self.steps = 0

    def lock(self, model: LlamaBackend) -> threading.Lock:
        with self._cond:
            return self.locks.setdefault(id(model), threading.Lock())

    # -- the slots' side ------------------------------------------------------------------

    def enter(self) -> None:
        """A slot starts a generation: steps wait for it too from now on."""
        with self._cond:
            self._running += 1

    def leave(self) -> None:
        """A slot's generation is over (its thread decodes nothing until it enters again)."""
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def decode(self, model: LlamaBackend, part: Part) -> tuple[np.ndarray, float]:
        """From a slot's thread: evaluate `part` in the next step; its logits rows (a copy)
        and its share of the step's seconds."""
        request = _Request(model, part)
        with self._cond:
            self._pending.append(request)
            self._cond.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.rows is not None
        return request.rows, request.seconds

    # -- the stepper's thread -------------------------------------------------------------

    def run(self, until: Callable[[], bool]) -> None:
        """Step until `until()` is true and no slot is running (on the thread that does
        every decode)."""
        while True:
            with self._cond:
                while not self._ready():
                    if until() and not self._running:
                        return
                    self._cond.wait(timeout=0.1)
                batch, self._pending = self._pending, []
            self._step(batch)

    def alone(self) -> bool:
        """Whether at most one slot is in a generation (the one asking)."""
        with self._cond:
            return self._running <= 1

    def price(self, model: LlamaBackend, seq: int) -> tuple[float, float] | None:
        """What sequence `seq`'s next round in a step of `model` may expect to be charged: (its
        share of a step of every running slot's pending token, what each drafted token adds up
        to three times as many: `StepCosts.price`); None while at most one slot runs, or
        before the model's first step.

        While another slot's prompt is going in, a drafted token is priced out of reach: it
        would delay that client's first token by what it adds to the step, and a client
        waiting for its first token waits on the whole prompt (prefill first, as
        llama-server's slots, which decode one token a step meanwhile)."""
        with self._cond:
            slots = self._running
            costs = self.costs.get(id(model))
            prompting = self._prompting.get(id(model), frozenset()) - {seq}
        if slots <= 1 or costs is None:
            return None
        share, per_token = costs.price(slots, 4 * slots)
        return (share, math.inf) if prompting else (share, per_token)

    def _ready(self) -> bool:
        # Every running slot is waiting: nothing more will join this step.
        return bool(self._pending) and len(self._pending) >= self._running

    def _step(self, requests: list[_Request]) -> None:
        by_model: dict[int, list[_Request]] = {}
        for request in requests:
            by_model.setdefault(id(request.model), []).append(request)
        for group in by_model.values():
            model = group[0].model
            prompts = frozenset(r.part.seq for r in group if _is_prompt(r.part))
            with self._cond:
                self._prompting[id(model)] = prompts
            for chunk in _fitting(group, model.n_batch):
                started = time.perf_counter()
                try:
                    with self.lock(model):
                        rows = model.decode_parts([request.part for request in chunk])
                except BaseException as exc:  # each slot in the step sees the failure
                    for request in chunk:
                        request.error = exc
                        request.done.set()
                    continue
                seconds = time.perf_counter() - started
                sizes = [len(request.part.tokens) for request in chunk]
                costs = self.costs.setdefault(id(model), StepCosts())
                costs.add(sum(sizes), seconds)
                for request, own, charge in zip(chunk, rows, costs.charges(sizes, seconds)):
                    request.rows, request.seconds = own, charge
                    request.done.set()
        self.steps += 1


def _is_prompt(part: Part) -> bool:
    """A chunk of a prompt (logits at its last token at most), not a verify or one token."""
    return len(part.tokens) > 1 and len(part.logits_at) < len(part.tokens)


def _fitting(requests: list[_Request], n_batch: int) -> list[list[_Request]]:
    """The requests in batches of at most n_batch tokens (each request is at most that)."""
    batches: list[list[_Request]] = [[]]
    used = 0
    for request in requests:
        n = len(request.part.tokens)
        if used + n > n_batch and batches[-1]:
            batches.append([])
            used = 0
        batches[-1].append(request)
        used += n
    return batches


@dataclass
class WaitClock:
    """The time a slot's decodes (in both models) spent on other slots' tokens."""

    seconds: float = 0.0


class SequenceView(EvaluatedTokens):
    """Sequence `seq` of a shared model, as the loop sees a model of its own. Decodes go
    through the stepper; what the loop reads of the model (vocabulary, name, ...) is the
    shared model's. `clock`: shared by a slot's views, so that its target's `waited_seconds`
    counts the draft model's waits too (the loop reads the target's)."""

    def __init__(
        self,
        model: LlamaBackend,
        seq: int,
        stepper: Stepper,
        chunk: int,
        clock: WaitClock | None = None,
    ) -> None:
        self.model = model
        self.clock = clock or WaitClock()
        self.seq = seq
        self.stepper = stepper
        self.chunk = max(1, min(chunk, model.n_batch))
        self.tokens = []
        self.n_ctx = model.n_ctx  # this sequence's own share of the context
        self.decode_seconds = 0.0
        self.max_rollback = None
        model.forget(seq, 0)  # its bookkeeping starts empty: so does the sequence

    @property
    def waited_seconds(self) -> float:  # type: ignore[override]
        return self.clock.seconds

    def batch_price(self) -> tuple[float, float] | None:
        return self.stepper.price(self.model, self.seq)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)  # vocabulary, name, chat template, ...

    def decode(
        self, tokens: Sequence[int], logits_at: Sequence[int] = (), *, copy: bool = True
    ) -> np.ndarray:
        """As `LlamaBackend.decode`, in chunks of at most `chunk` tokens, one per step (a
        whole batch's worth while no other slot runs); the rows are always copies."""
        self.model.check_fits(self.n_past + len(tokens))
        wanted = sorted(set(logits_at))
        pieces = []  # each chunk's rows (copies already: a verify's one chunk is returned as is)
        start = 0
        while start < len(tokens):
            if start:  # a prompt, one chunk a step: its client may have gone meanwhile
                self.stop_if_interrupted()
            # Alone, a prompt goes in the widest chunks the context takes (fewer, fuller
            # decodes: prefill at llama.cpp's speed); beside other slots, in small ones, so
            # that their answers keep flowing.
            size = self.model.n_batch if self.stepper.alone() else self.chunk
            chunk = list(tokens[start : start + size])
            start += len(chunk)
            first = start - len(chunk)
            in_chunk = [i - first for i in wanted if first <= i < start]
            part = Part(self.seq, self.n_past, chunk, in_chunk)
            asked = time.perf_counter()
            rows, seconds = self.stepper.decode(self.model, part)
            self.clock.seconds += max(time.perf_counter() - asked - seconds, 0.0)
            if in_chunk:
                pieces.append(rows)
            self.tokens.extend(chunk)
            self.decode_seconds += seconds
        out = self._joined(pieces)
        if list(logits_at) == wanted:
            return out
        row_of = {position: row for row, position in enumerate(wanted)}
        return out[[row_of[i] for i in logits_at]]

    def _joined(self, pieces: list[np.ndarray]) -> np.ndarray:
        """The chunks' rows as one array: one chunk's as they came (a copy already)."""
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:
            return np.empty((0, self.model.n_vocab), dtype=np.float32)
        return np.concatenate(pieces)

    def _forget(self, n_past: int) -> None:
        with self.stepper.lock(self.model):
            self.model.forget(self.seq, n_past)

    def state_size(self) -> int:
        with self.stepper.lock(self.model):
            return self.model.sequence_state_size(self.seq)

    def save_state(self) -> SavedState:
        with self.stepper.lock(self.model):
            return self.model.save_sequence(self.seq, self.tokens)

    def load_state(self, saved: SavedState) -> bool:
        self.tokens = []
        with self.stepper.lock(self.model):
            loaded = self.model.load_sequence(self.seq, saved)
        if loaded:
            self.tokens = list(saved.tokens)
        return loaded
