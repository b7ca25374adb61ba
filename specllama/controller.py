"""How many tokens to draft next round."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from specllama.speculative import RoundEvent


class DraftController(Protocol):
    def next_length(self) -> int:
        """Draft length for the coming round (0 = let the target go alone this round)."""

    def observe(self, round_: RoundEvent) -> None:
        """What the last round drafted, what the target kept, and what it cost."""


class FixedLength:
    """Always draft the same number of tokens."""

    def __init__(self, draft_max: int) -> None:
        self.draft_max = draft_max

    def next_length(self) -> int:
        return self.draft_max

    def observe(self, round_: RoundEvent) -> None:
        pass
