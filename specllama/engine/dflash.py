"""Drafting with a DFlash head, `specllama.llama.dflash.DFlashHead`.

A round's draft costs two head decodes, whatever its length: the target's features of what it
verified since the last round are written to the head's cache, then one decode of the block
[last token, mask x n] guesses the n tokens after it at once. The tokens are chosen from the
block's rows in order, as a draft model's would be (`draft_chain`): each row was guessed without
the tokens before it, so a draft may stop early (an unconfident row, an end of generation, a
constraint's forbidden token) but never needs another decode.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from specllama.engine.constraint import Constraint
from specllama.engine.drafters import Draft, draft_chain
from specllama.engine.sampling import SamplingParams
from specllama.llama.dflash import DFlashHead

SOURCE = "dflash"


class DFlashDrafter:
    """A DFlash head as a drafter; its source is "dflash" (an MTP-like kind for the costs)."""

    name = SOURCE

    def __init__(self, head: DFlashHead, min_confidence: float = 0.0) -> None:
        self.head = head
        self.min_confidence = min_confidence

    def sources(self, context: Sequence[int]) -> list[tuple[str, int]]:
        """("dflash", backlog): the verified tokens whose features the head has yet to read."""
        return [(SOURCE, max(0, len(context) - 1 - self.head.common_prefix(context[:-1])))]

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
        n = min(n_max, self.head.max_draft)
        if n <= 0 or not context:
            return Draft()
        p_min = self.min_confidence if min_confidence is None else min_confidence
        self.head.catch_up(context)
        rows = iter(self.head.guess_block(context[-1], n))

        def after(_token: int) -> np.ndarray:
            return next(rows)  # the block guessed every position at once

        first = next(rows)
        target = self.head.target
        return draft_chain(first, after, len(context), n, params, p_min, target, stop, constraint)

    @property
    def decode_seconds(self) -> float:
        return self.head.decode_seconds

    def rewind(self, context: Sequence[int]) -> None:
        self.head.rollback(self.head.common_prefix(context))
