"""Who guesses the next tokens: a small draft model, or a lookup in the text so far.

A Drafter proposes up to `n_max` tokens that would follow `context`. The verifier keeps a draft
token only when it is the target's own draw at its position, so a draft needs no probabilities:
whatever is proposed, the output is the target's. A sampled draft model draws with the target's
noise (the seed, the position) on its own distribution, to guess that draw.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from specllama.engine.constraint import Constraint
from specllama.engine.lookup import CopyIndex, Match
from specllama.engine.memory import TokenMemory
from specllama.engine.prediction import Prediction
from specllama.engine.sampling import (
    SamplingParams,
    argmax,
    gumbel_max,
    probabilities,
    top_probability,
)
from specllama.llama.backend import LlamaBackend


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, part: slice) -> Draft:
        return Draft(self.tokens[part])


class Drafter(Protocol):
    name: str
    decode_seconds: float  # time spent in a model's decode so far (0 for model-free drafters)

    def sources(self, context: Sequence[int]) -> list[tuple[str, int]]:
        """What this drafter could propose after `context`, best first, as (source, backlog):
        the backlog is how many tokens the source must evaluate before it drafts."""

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
        """Up to `n_max` tokens from `source` (None: the first offered); `min_confidence`
        overrides a draft model's p-min for this call; a draft model ends early once `stop`
        is set (pipelined drafting, on another thread), and drafts within `constraint`'s
        rule when there is one (left as it was found)."""

    def rewind(self, context: Sequence[int]) -> None:
        """Drop any state past `context` (called when generation stops)."""

    # A drafter with an n-gram source also has `peek(context, n_max) -> list[int]`: what that
    # source would draft, without drafting it (the loop checks it against what a round emits).


class NoDrafter:
    """The target alone, through the same loop: every round drafts nothing."""

    name = "none"
    decode_seconds = 0.0

    def sources(self, context: Sequence[int]) -> list[tuple[str, int]]:
        return []

    def propose(
        self,
        context: Sequence[int],
        n_max: int,
        params: SamplingParams,
        **_: object,
    ) -> Draft:
        return Draft()

    def rewind(self, context: Sequence[int]) -> None:
        pass


def choose_draft_token(
    logits: np.ndarray, params: SamplingParams, position: int, p_min: float
) -> int | None:
    """A drafter's token at `position`, or None when it is not confident enough.
    Sampling: the Gumbel-max of the drafter's q with the target's noise at that position.
    It is the target's own draw with probability at least (1 - TV) / (1 + TV), TV the
    total variation between q and p, and no coupling without communication does better in
    the worst case (Daliri et al. 2024); the rejection rule's 1 - TV needs q beside p."""
    if params.greedy:
        if p_min > 0 and top_probability(logits) < p_min:
            return None
        return argmax(logits)
    q = probabilities(logits, params)
    if p_min > 0 and q.max() < p_min:
        return None
    assert params.seed is not None, "the loop seeds sampled generations"
    return gumbel_max(q, params.seed, position)


def draft_chain(
    logits: np.ndarray,
    after: Callable[[int], np.ndarray],
    position: int,
    n_max: int,
    params: SamplingParams,
    p_min: float,
    vocab: LlamaBackend,
    stop: threading.Event | None = None,
    constraint: Constraint | None = None,
) -> Draft:
    """A model-made draft, one token at a time: choose a token from `logits` (for `position`),
    then `after(token)` gives the logits for the next, until `n_max` tokens, an unconfident
    one, an end-of-generation token (`vocab.is_eog`) or `stop`. Under a constraint the
    draft chooses among the tokens it allows, as the target will."""
    draft = Draft()
    with contextlib.ExitStack() as scope:
        if constraint is not None:
            scope.enter_context(constraint.lookahead())
        while True:
            if constraint is not None:
                logits = constraint.restrict(logits, params)
            token = choose_draft_token(logits, params, position + len(draft), p_min)
            if token is None:
                break
            draft.tokens.append(token)
            if len(draft) == n_max or vocab.is_eog(token):
                break
            if stop is not None and stop.is_set():
                break
            if constraint is not None:
                constraint.consume([token])
            logits = after(token)
    return draft


class DraftModelDrafter:
    """A small model of the same vocabulary, run token by token in its own context.

    `min_confidence` (llama.cpp's p-min): stop drafting once the draft's top probability falls
    below it, since the target will probably reject what follows.
    """

    name = "model"

    def __init__(self, model: LlamaBackend, min_confidence: float = 0.0) -> None:
        self.model = model
        self.min_confidence = min_confidence

    def sources(self, context: Sequence[int]) -> list[tuple[str, int]]:
        """("model", backlog): the tokens it must evaluate before it can draft."""
        return [("model", len(context) - self.model.common_prefix(context))]

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
        if n_max <= 0:
            return Draft()
        p_min = self.min_confidence if min_confidence is None else min_confidence
        first = self.model.sync(context, logits_at_last=True)

        def after(token: int) -> np.ndarray:
            return self.model.decode([token], [0], copy=False)[0]

        position = len(context)
        return draft_chain(
            first, after, position, n_max, params, p_min, self.model, stop, constraint
        )

    @property
    def decode_seconds(self) -> float:
        return self.model.decode_seconds

    def rewind(self, context: Sequence[int]) -> None:
        self.model.rollback(self.model.common_prefix(context))


class NgramDrafter:
    """Prompt lookup: propose what followed the longest earlier occurrence of the text's end
    (`specllama.engine.lookup`). Free to run, and strong when the answer copies (code editing,
    summaries that quote). Its source is named by the match length, "ngramN", so the policy
    can tell a copy (N in the tens) from a coincidence (N of 1 or 2).

    Beside the text itself it looks in a `memory` of earlier prompts and answers
    (`specllama.engine.memory`, shared by a server's requests) and in the client's
    `prediction` of this answer (`use_prediction`), and drafts from whichever matches longest
    (the text itself among equals, then the prediction)."""

    name = "ngram"
    decode_seconds = 0.0

    def __init__(self, memory: TokenMemory | None = None) -> None:
        self.index = CopyIndex()
        self.memory = memory
        self.prediction: Prediction | None = None
        self.match: Match | None = None  # the last match found in the text itself
        self._found: _Found | None = None  # the longest match of the last text looked at
        self._looked_at: tuple[int, int, int] | None = None  # that text (see `_lookup`)

    def use_prediction(self, prediction: Prediction | None) -> None:
        """Draft from the client's prediction of this answer (None: stop)."""
        self.prediction = prediction
        self._looked_at = None

    def sources(self, context: Sequence[int]) -> list[tuple[str, int]]:
        """("ngramN", 0): the text's last N tokens occurred before; "ngramN-mixed" when their
        earlier occurrences did not all go on the same way."""
        found = self._lookup(context)
        if found is None:
            return []
        return [(f"ngram{found.length}{'' if found.unanimous else '-mixed'}", 0)]

    def propose(
        self,
        context: Sequence[int],
        n_max: int,
        params: SamplingParams,
        **_: object,
    ) -> Draft:
        tokens = self.peek(context, n_max)
        # A draft from the prediction is settled against what the target keeps.
        found = self._found
        if tokens and found and found.origin == "prediction" and self.prediction is not None:
            self.prediction.drafted(len(context), tokens)
        return Draft(tokens=tokens)

    def peek(self, context: Sequence[int], n_max: int) -> list[int]:
        """What `propose` drafts, without drafting it (nothing is counted against a
        prediction): the loop checks it against what the round emits, as free evidence."""
        found = self._lookup(context) if n_max > 0 else None
        return found.continuation(n_max) if found is not None else []

    def _lookup(self, context: Sequence[int]) -> _Found | None:
        # A round looks the same text up twice or three times (its sources, what it passed
        # over, its draft): the text only grows within an answer, so its length and last token
        # tell it again.
        looked_at = (id(context), len(context), context[-1] if context else -1)
        if looked_at == self._looked_at:
            return self._found
        self._looked_at = looked_at
        self.index.sync(context)
        self.match = self.index.longest_match()
        found = []
        if self.match is not None:
            match = self.match
            found.append(
                _Found(match.length, match.unanimous, "text", self._text_continuation(match))
            )
        if self.prediction is not None and (predicted := self.prediction.match(context)):
            length, rest = predicted
            found.append(_Found(length, True, "prediction", lambda n, rest=rest: rest[:n]))
        if self.memory is not None and (recalled := self.memory.longest_match(context)):
            memory = self.memory
            found.append(
                _Found(
                    recalled.length,
                    recalled.occurrences == 1,
                    "memory",
                    lambda n, r=recalled: memory.continuation(r, n, MIN_RECALL_CHANCE),
                )
            )
        self._found = max(found, key=lambda f: f.length, default=None)  # first among equals
        return self._found

    def _text_continuation(self, match: Match) -> Callable[[int], list[int]]:
        return lambda n: self.index.continuation(match, n)

    def rewind(self, context: Sequence[int]) -> None:
        self._looked_at = None  # the answer is over: its text may be built again elsewhere
        if self.prediction is not None:
            self.prediction.settle(context)


# A continuation recalled from memory stops where fewer than this share of the earlier
# occurrences that matched as long went on that way (SuffixDecoding's minimum score).
MIN_RECALL_CHANCE = 0.3


@dataclass(frozen=True)
class _Found:
    """A match of the text's end in one place: the text itself, the prediction, the memory."""

    length: int
    unanimous: bool
    origin: str
    continuation: Callable[[int], list[int]]


class CombinedDrafter:
    """N-gram lookup first when the text so far has a match (free to draft), a model-made
    draft otherwise (a draft model, or the target's own MTP head). The controller picks between
    the sources it offers, round by round."""

    def __init__(self, model: Drafter, ngram: NgramDrafter | None = None) -> None:
        self.model = model
        self.ngram = ngram or NgramDrafter()
        self.name = f"ngram+{model.name}"

    def sources(self, context: Sequence[int]) -> list[tuple[str, int]]:
        return [*self.ngram.sources(context), *self.model.sources(context)]

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
        if source is None or source.startswith("ngram"):
            draft = self.ngram.propose(context, n_max, params)
            if draft.tokens or source is not None:
                return draft
        return self.model.propose(
            context, n_max, params, min_confidence=min_confidence, stop=stop, constraint=constraint
        )

    def peek(self, context: Sequence[int], n_max: int) -> list[int]:
        return self.ngram.peek(context, n_max)

    @property
    def decode_seconds(self) -> float:
        return self.model.decode_seconds

    def rewind(self, context: Sequence[int]) -> None:
        self.model.rewind(context)
