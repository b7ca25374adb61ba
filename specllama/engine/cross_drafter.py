"""A draft model with another tokenizer: it drafts text, which the target verifies as its tokens.

The verifier keeps a draft token only when it is the target's own draw (`speculative.verify`),
whoever proposed it, so a draft model need not share the target's vocabulary: it may propose
text. Each round:

1. The target's context, spelled as text (control tokens as their text: the target's rendered
   prompt), is read in the draft's vocabulary (`text_bridge.ReadTokens`). The draft model's
   context is brought to those tokens: rolled back to the longest common prefix of what it has
   evaluated and them, the rest evaluated. So it never drifts from what the target wrote, and
   its own drafts, rejected or tokenised otherwise than the text reads now, are dropped.
2. The draft model continues greedily (a deterministic proposal, as the n-gram lookup's: greedy
   and seeded sampling stay the target alone's tokens, and sampling its distribution) until its
   words re-tokenise into more target tokens than asked for, an unconfident token, an
   end-of-generation token, or twice the steps asked for.
3. Its words become whole target tokens (`text_bridge.retokenise`).

The draft reads the same text the target reads, not the conversation rendered by its own chat
template: a draft that is to guess the target's next words does best on the target's words.

Its costs, as every draft model's: `decode_seconds` is its decodes plus the time spent between
text and tokens, so the adaptive policy weighs a round by what it cost, re-tokenising included,
and learns how many draft steps a target token takes (`LiveCosts.draft_scale`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence

import numpy as np

from specllama.engine.constraint import Constraint
from specllama.engine.drafters import Draft
from specllama.engine.sampling import SamplingParams, argmax, top_probability
from specllama.engine.text_bridge import (
    ReadTokens,
    SpelledTokens,
    TextMismatch,
    TextVocab,
    retokenise,
)
from specllama.llama.backend import LlamaBackend


class CrossTokenizerDrafter:
    """A small model of another vocabulary, drafting text for the target (module docstring).
    `target` gives the target's vocabulary (its tokens are never evaluated here)."""

    name = "model"

    def __init__(self, model: LlamaBackend, target: TextVocab, min_confidence: float = 0.0) -> None:
        self.model = model
        self.target = target
        self.min_confidence = min_confidence
        self._spelled = SpelledTokens(target)
        self._read = ReadTokens(model)
        self.text_seconds = 0.0  # between text and tokens, both ways
        self.n_unreadable = 0  # rounds that drafted nothing: a text one side cannot spell

    @property
    def decode_seconds(self) -> float:
        return self.model.decode_seconds + self.text_seconds

    def sources(self, context: Sequence[int]) -> list[tuple[str, int]]:
        """("model", backlog): the draft's tokens of the text it has not evaluated."""
        read = self._follow(context)
        if read is None:
            return []
        return [("model", len(read) - self.model.common_prefix(read))]

    def propose(
        self,
        context: Sequence[int],
        n_max: int,
        params: SamplingParams,
        *,
        source: str | None = None,
        min_confidence: float | None = None,
        stop: threading.Event | None = None,
        constraint: Constraint | None = None,
    ) -> Draft:
        """Up to `n_max` target tokens. `params` and `constraint` do not change the proposal:
        it is the draft's greedy text (the loop cuts it at the first token the constraint
        forbids)."""
        read = self._follow(context) if n_max > 0 else None
        steps = 2 * (n_max + 1)
        if not read or len(read) + steps > self.model.n_ctx:
            return Draft()
        p_min = self.min_confidence if min_confidence is None else min_confidence
        logits = self.model.sync(read, logits_at_last=True)
        words, ended = bytearray(), False
        tokens: list[int] = []
        for step in range(steps):
            token = _confident_argmax(logits, p_min)
            if token is None:
                break
            ended = self.model.is_eog(token)
            with self._text_clock():
                words += self.model.token_bytes(token, special=True)
                tokens = retokenise(self.target, bytes(words), ended=ended, n_max=n_max)
            if ended or len(tokens) >= n_max or (stop is not None and stop.is_set()):
                break
            if step + 1 < steps:
                logits = self.model.decode([token], [0], copy=False)[0]
        return Draft(tokens)

    def rewind(self, context: Sequence[int]) -> None:
        read = self._follow(context)
        self.model.rollback(self.model.common_prefix(read) if read else 0)

    def _follow(self, context: Sequence[int]) -> list[int] | None:
        """The draft's tokens of the text `context` spells, or None when they cannot be made
        (the text ends inside a character, or the draft's vocabulary cannot spell it)."""
        try:
            with self._text_clock():
                self._spelled.sync(context)
                read = self._read.follow(self._spelled.text)
        except TextMismatch:
            self.n_unreadable += 1
            return None
        if len(self._read.read) != len(self._spelled.text):
            return None  # the draft would have to go on from inside a character
        return read

    @contextlib.contextmanager
    def _text_clock(self) -> Iterator[None]:
        """Count the time inside as the draft's (`text_seconds`)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.text_seconds += time.perf_counter() - started


def _confident_argmax(logits: np.ndarray, p_min: float) -> int | None:
    """The draft's most likely token, or None when its probability is under `p_min`."""
    if p_min > 0 and top_probability(logits) < p_min:
        return None
    return argmax(logits)
