"""What an answer is made of, once read: thinking, text for the user, and tool calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from specllama.chat import ToolCall
from specllama.family.call_stream import Delta

# A call comes as it is written: "call_start" (its id and name), "call_args" (each piece of its
# arguments' JSON, as it is settled), "call" (its end, whole). A face that writes whole calls
# only reads "call" pieces that are not `broken`.
Kind = Literal["thinking", "text", "call_start", "call_args", "call"]


@dataclass(frozen=True)
class Piece:
    """One streamed piece of an answer: thinking or text (`text`); or, for the `index`-th call
    of the answer, its start (`call`: id and name, arguments empty), a piece of its arguments
    (`text`), its end (`call` whole: its arguments are the pieces joined). A call that began
    and was broken off ends `broken` (`call` has the arguments sent); `Reading` has its text
    as content."""

    kind: Kind
    text: str = ""
    call: ToolCall | None = None
    index: int = 0
    broken: bool = False


def piece_of(delta: Delta) -> Piece:
    """A call reader's delta as a piece."""
    if delta.kind == "text":
        return Piece("text", delta.content)
    if delta.kind == "call_args":
        return Piece("call_args", delta.arguments, index=delta.index)
    return Piece(delta.kind, call=delta.call, index=delta.index, broken=delta.broken)


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
