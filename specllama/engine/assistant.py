"""Drafting with Gemma 4's assistant, `specllama.llama.assistant.AssistantHead`.

A round's draft is one assistant decode per token and nothing else: the assistant reads the
target's own KV cache, so nothing has to catch up on what the target verified. The first decode
pairs the pending token with the target's row of the token before it; each further guess is
paired with the assistant's own row (`draft_chain`, as an MTP head's draft). A one-token text
drafts nothing: there is no row before its token.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from specllama.engine.constraint import Constraint
from specllama.engine.drafters import Draft, draft_chain
from specllama.engine.sampling import SamplingParams
from specllama.llama.assistant import AssistantHead

SOURCE = "assistant"


class AssistantDrafter:
    """A Gemma 4 assistant as a drafter; its source is "assistant" (an MTP-like kind for the
    costs, with no backlog ever)."""

    name = SOURCE

    def __init__(self, head: AssistantHead, min_confidence: float = 0.0) -> None:
        self.head = head
        self.min_confidence = min_confidence

    def sources(self, context: Sequence[int]) -> list[tuple[str, int]]:
        return [(SOURCE, 0)] if len(context) >= 2 else []

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
        if n_max <= 0 or len(context) < 2:
            return Draft()
        p_min = self.min_confidence if min_confidence is None else min_confidence
        first, row = self.head.first_guess(context)

        def after(token: int) -> np.ndarray:
            nonlocal row  # each guess goes in with the assistant's own row of the one before
            logits, row = self.head.step(token, row)
            return logits

        target, position = self.head.target, len(context)
        return draft_chain(first, after, position, n_max, params, p_min, target, stop, constraint)

    @property
    def decode_seconds(self) -> float:
        return self.head.decode_seconds

    def rewind(self, context: Sequence[int]) -> None:
        pass  # it keeps nothing of its own: its cache is the target's
