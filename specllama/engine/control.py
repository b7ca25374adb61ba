"""How the loop asks what to draft: the controller protocol, the fixed controller, and the
kinds of sources a drafter offers. The adaptive controller (`specllama.policy`) implements the
protocol; it lives here, with the loop that calls it, so the engine never imports the policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from specllama.engine.events import RoundEvent

MODEL = "model"  # the draft model
NGRAM = "ngram"  # "ngramN": a lookup in the text so far, on a match of N tokens
MTP = "mtp"  # the target's own draft head
# Draft heads in their own file, drafting like an MTP head (their costs and lengths are MTP's).
HEADS = ("eagle3", "dflash", "assistant")
PLAIN = "plain"  # a round that drafts nothing
GRAMMAR = "grammar"  # tokens an output constraint allows alone, drafted without any model
# Kinds whose drafts cost a decode per token (and a catch-up on what they have not seen).
STEPPED = (MODEL, MTP)


def kind_of(source: str) -> str:
    """ "model", "mtp" (also for a head in `HEADS`), "ngram" (for any "ngramN"), "grammar" or
    "plain" (no source)."""
    if not source:
        return PLAIN
    if source.startswith(NGRAM):
        return NGRAM
    if source in HEADS:
        return MTP
    return source if source in (MTP, GRAMMAR) else MODEL


# (source, backlog): what a drafter could propose from the current text, best first. The backlog
# is how many tokens the source must evaluate before drafting (a draft model that fell behind).
SourceOption = tuple[str, int]


class DraftController(Protocol):
    # The draft model stops at a token whose top probability is below this; None: the drafter's.
    min_confidence: float | None
    # Whether the draft model's round chosen last drafts its next draft while the target verifies.
    pipelined: bool

    def choose(
        self, options: Sequence[SourceOption], *, remaining: int, generated: int
    ) -> tuple[str, int]:
        """The source and draft length for the coming round (length 0 = the target alone).
        `remaining`: tokens still allowed; `generated`: tokens generated so far this answer."""

    def observe(self, round_: RoundEvent) -> None:
        """What the last round drafted, what the target kept, and what it cost."""

    def in_batch(self, price: tuple[float, float] | None) -> None:
        """Before a round, beside other slots decoding together (a server's): (this round's
        share of the batched step it joins, the seconds each drafted token adds to it); None
        when the target runs for this answer alone."""


class FixedLength:
    """Always draft the same number of tokens, from the first source offered; `pipelined`:
    the draft model drafts the next round's tokens while the target verifies."""

    min_confidence: float | None = None

    def __init__(self, draft_max: int, *, pipelined: bool = False) -> None:
        self.draft_max = draft_max
        self.pipelined = pipelined

    def choose(
        self, options: Sequence[SourceOption], *, remaining: int = 0, generated: int = 0
    ) -> tuple[str, int]:
        if not options or self.draft_max <= 0:
            return "", 0
        return options[0][0], self.draft_max

    def observe(self, round_: RoundEvent) -> None:
        pass

    def in_batch(self, price: tuple[float, float] | None) -> None:
        pass
