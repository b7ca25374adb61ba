"""Drafting with an EAGLE-3 head, `specllama.llama.eagle3.Eagle3Head`.

A round is an MTP round (`specllama.engine.mtp`): one head decode catches the head up on what
the target verified since the last round (the target's rows fused by one encode first) and
guesses the first token; each further token is one head decode of the last guess paired with
the head's own row. Only the source name differs, and a one-token text drafts nothing (the
head pairs each token with the row of the token before it).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from specllama.engine.constraint import Constraint
from specllama.engine.drafters import Draft
from specllama.engine.mtp import MtpDrafter
from specllama.engine.sampling import SamplingParams
from specllama.llama.eagle3 import Eagle3Head

SOURCE = "eagle3"


class Eagle3Drafter(MtpDrafter):
    """An EAGLE-3 head as a drafter; its source is "eagle3" (an MTP-like kind for the costs)."""

    name = SOURCE

    def __init__(self, head: Eagle3Head, min_confidence: float = 0.0) -> None:
        super().__init__(head, min_confidence)  # type: ignore[arg-type]  # the same protocol

    def sources(self, context: Sequence[int]) -> list[tuple[str, int]]:
        return [(SOURCE, backlog) for _, backlog in super().sources(context[1:])]

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
        if len(context) < 2:
            return Draft()
        draft = super().propose(
            context, n_max, params, source=source, min_confidence=min_confidence, stop=stop,
            constraint=constraint,
        )  # fmt: skip
        self._drafted_at = len(context) - 1  # in the head's terms: the text shifted by one
        return draft

    def rewind(self, context: Sequence[int]) -> None:
        super().rewind(context[1:])
