"""What an answer is made of, once read: thinking, text for the user, and tool calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from specllama.chat import ToolCall

Kind = Literal["thinking", "text", "call"]


@dataclass(frozen=True)
class Piece:
    """One streamed piece of an answer: thinking or text (`text`), or the `index`-th call of
    the answer, whole (`call`)."""

    kind: Kind
    text: str = ""
    call: ToolCall | None = None
    index: int = 0


@dataclass(frozen=True)
class Reading:
    """A whole answer, read."""

    thinking: str | None  # None: the answer did not think
    content: str | None  # None: no text besides the calls
    calls: list[ToolCall] = field(default_factory=list)
    broken: bool = False  # a call was broken off: its raw text is in `content`


class Reader(Protocol):
    """Reads one answer as it streams: `feed` each new piece of text, `finish` once at the end
    (what was held comes out), then `result` for the whole."""

    def feed(self, text: str) -> list[Piece]: ...
    def finish(self) -> list[Piece]: ...
    def result(self) -> Reading: ...
