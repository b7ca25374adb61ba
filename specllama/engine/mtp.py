"""Drafting with the target model's own draft head (MTP), `specllama.llama.mtp.MtpHead`.

A round's draft: one head decode catches the head up on the tokens the target has verified
since the last round (each paired with the target's hidden row of the position before) and
guesses the first token; each further token is one head decode of the last guess paired with
the head's own hidden row. llama.cpp catches up and drafts in separate decodes; one decode
fewer a round is what a one-layer head's rounds are made of.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from specllama.engine.constraint import Constraint
from specllama.engine.drafters import Draft, draft_chain
from specllama.engine.sampling import SamplingParams
from specllama.llama.mtp import MtpHead


class MtpDrafter:
    """The target's MTP head as a drafter; its source is "mtp"."""

    name = "mtp"

    def __init__(self, head: MtpHead, min_confidence: float = 0.0) -> None:
        self.head = head
        self.min_confidence = min_confidence
        self._drafted_at = -1  # the length of the text it drafted after last

    def sources(self, context: Sequence[int]) -> list[tuple[str, int]]:
        """("mtp", backlog): the tokens the head has yet to catch up on, beyond those of the
        last round, which its first draft step evaluates at no extra cost."""
        caught_up = min(self.head.common_prefix(context), self.head.n_exact)
        steady = caught_up == self._drafted_at
        return [("mtp", 0 if steady else len(context) - caught_up)]

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
        first, row = self.head.catch_up(context)
        self._drafted_at = len(context)

        def after(token: int) -> np.ndarray:
            nonlocal row  # each guess goes in with the head's own row of the one before
            logits, row = self.head.step(token, row)
            return logits

        target = self.head.target
        position = len(context)
        return draft_chain(first, after, position, n_max, params, p_min, target, stop, constraint)

    @property
    def decode_seconds(self) -> float:
        return self.head.decode_seconds

    def rewind(self, context: Sequence[int]) -> None:
        self.head.rollback(min(self.head.common_prefix(context), self.head.n_exact))
