"""Who guesses the next tokens: a small draft model, or a lookup in the text so far.

A Drafter proposes up to `n_max` tokens that would follow `context`. It also reports q, the
probability it drew each token with, when it sampled; a deterministic guess (greedy draft, n-gram
lookup) has q = 1 for its token, and the verifier treats it so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specllama.backend import LlamaBackend
from specllama.sampling import SamplingParams, argmax, probabilities, sample


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    # q[i]: the draft's distribution for tokens[i]; None when the guess was deterministic.
    q: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.tokens)


class Drafter(Protocol):
    name: str
    decode_seconds: float  # time spent in a model's decode so far (0 for model-free drafters)

    def propose(
        self, context: Sequence[int], n_max: int, params: SamplingParams, rng: np.random.Generator
    ) -> Draft: ...

    def rewind(self, context: Sequence[int]) -> None:
        """Drop any state past `context` (called when generation stops)."""


class NoDrafter:
    """The target alone, through the same loop: every round drafts nothing."""

    name = "none"
    decode_seconds = 0.0

    def propose(
        self, context: Sequence[int], n_max: int, params: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        return Draft()

    def rewind(self, context: Sequence[int]) -> None:
        pass


class DraftModelDrafter:
    """A small model of the same vocabulary, run token by token in its own context.

    `min_confidence` (llama.cpp's p-min): stop drafting once the draft's top probability falls
    below it, since the target will probably reject what follows.
    """

    name = "model"

    def __init__(self, model: LlamaBackend, min_confidence: float = 0.0) -> None:
        self.model = model
        self.min_confidence = min_confidence

    def propose(
        self, context: Sequence[int], n_max: int, params: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        draft = Draft(q=None if params.greedy else [])
        if n_max <= 0:
            return draft
        logits = self.model.sync(context, logits_at_last=True)
        while True:
            token, q = self._choose(logits, params, rng)
            if token is None:
                break
            draft.tokens.append(token)
            if q is not None:
                draft.q.append(q)
            if len(draft) == n_max or self.model.is_eog(token):
                break
            logits = self.model.decode([token], [0])[0]
        return draft

    def _choose(
        self, logits: np.ndarray, params: SamplingParams, rng: np.random.Generator
    ) -> tuple[int | None, np.ndarray | None]:
        """The next draft token and its q, or None when the draft is not confident enough."""
        if params.greedy:
            token = argmax(logits)
            if self.min_confidence > 0 and _top_probability(logits) < self.min_confidence:
                return None, None
            return token, None
        q = probabilities(logits, params)
        if self.min_confidence > 0 and q.max() < self.min_confidence:
            return None, None
        return sample(q, rng), q

    @property
    def decode_seconds(self) -> float:
        return self.model.decode_seconds

    def rewind(self, context: Sequence[int]) -> None:
        self.model.rollback(self.model.common_prefix(context))


def _top_probability(logits: np.ndarray) -> float:
    shifted = logits - logits.max()
    return float(1.0 / np.exp(shifted, dtype=np.float64).sum())


class NgramDrafter:
    """Prompt lookup: find the latest earlier occurrence of the last n tokens, propose what
    followed it. Free to run, and strong when the answer repeats the prompt (code editing).

    Tries the longest n first (`ngram_max` down to `ngram_min`). The index maps each n-gram to
    the position right after its latest occurrence, and is extended incrementally.
    """

    name = "ngram"
    decode_seconds = 0.0

    def __init__(self, ngram_max: int = 3, ngram_min: int = 1) -> None:
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self._indexed: list[int] = []
        self._index: dict[tuple[int, ...], int] = {}

    def propose(
        self, context: Sequence[int], n_max: int, params: SamplingParams, rng: np.random.Generator
    ) -> Draft:
        if n_max <= 0:
            return Draft()
        self._update_index(context)
        for n in range(self.ngram_max, self.ngram_min - 1, -1):
            if len(context) <= n:
                continue
            follower = self._index.get(tuple(context[-n:]))
            if follower is not None:
                return Draft(tokens=list(context[follower : follower + n_max]))
        return Draft()

    def _update_index(self, context: Sequence[int]) -> None:
        """Index every n-gram that has a continuation, i.e. ends before the last token."""
        if self._indexed != list(context[: len(self._indexed)]):
            self._indexed, self._index = [], {}
        start = len(self._indexed)
        for end in range(max(start, 1), len(context)):  # n-gram = context[end-n:end]
            for n in range(self.ngram_min, self.ngram_max + 1):
                if end >= n:
                    self._index[tuple(context[end - n : end])] = end
        self._indexed = list(context)

    def rewind(self, context: Sequence[int]) -> None:
        pass
