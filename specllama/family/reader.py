"""The one answer reader: the engine's text in, typed pieces out (thinking, text, calls).

Thinking is split off first, so a call written inside the thinking is never a call; the text
after it goes through the family's call syntax. Every face writes these pieces out; none reads
a finished answer again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from specllama.family.call_stream import CallStream
from specllama.family.pieces import Piece, Reader, Reading, piece_of
from specllama.tool_calls import ToolFormat


class Split(Protocol):
    """Splits an answer's text into ("thinking" | "text", str) pieces as it streams."""

    def feed(self, text: str) -> list[tuple[str, str]]: ...
    def finish(self) -> list[tuple[str, str]]: ...


class AnswerReader:
    """Thinking (when `split` is given), then text and calls (when `calls` is given)."""

    def __init__(self, *, split: Split | None = None, calls: ToolFormat | None = None) -> None:
        self._split = split
        self._calls = CallStream(calls) if calls is not None else None
        self._thinking: list[str] | None = None  # None until the answer thinks
        self._text: list[str] = []

    def feed(self, text: str) -> list[Piece]:
        if self._split is None:
            return self._said(text)
        return self._pieces(self._split.feed(text))

    def finish(self) -> list[Piece]:
        pieces = self._pieces(self._split.finish()) if self._split else []
        if self._calls is not None:
            pieces += [piece_of(d) for d in self._calls.finish()]
        return pieces

    def result(self) -> Reading:
        thinking = "".join(self._thinking) if self._thinking is not None else None
        if self._calls is None:
            return Reading(thinking, "".join(self._text))
        parsed = self._calls.result()
        return Reading(thinking, parsed.content, parsed.calls, parsed.broken)

    def _pieces(self, split: list[tuple[str, str]]) -> list[Piece]:
        pieces: list[Piece] = []
        for kind, text in split:
            if kind == "thinking":
                self._thinking = [*(self._thinking or []), text]
                pieces.append(Piece("thinking", text))
            else:
                pieces += self._said(text)
        return pieces

    def _said(self, text: str) -> list[Piece]:
        if self._calls is None:
            self._text.append(text)
            return [Piece("text", text)] if text else []
        return [piece_of(d) for d in self._calls.feed(text)]


def read_whole(reader: Reader, text: str) -> Reading:
    """A finished answer, read."""
    reader.feed(text)
    reader.finish()
    return reader.result()


ReaderFactory = Callable[[], Reader]
