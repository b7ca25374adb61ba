"""What the reading of a learnt format's section of calls saw before its text ran out: the
calls begun and how far each is written (`LearntFormat.partial`), so that a call streams as
the model writes it, read by the very code that reads it whole.

The reading tells a `Seen` what it reads as it goes; a plain one forgets it (a whole scan), a
`Progress` keeps it: each call's name once it is whole, its arguments' JSON as far as it is
settled (a JSON call, or the JSON after a tagged name), or for tagged arguments the JSON
object built so far, one member per argument read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from specllama.chat import ToolCall
from specllama.family.analysis import CallSyntax
from specllama.json_text import elements, members, skip_blanks
from specllama.tool_calls import Partial, json_partial, settled_arguments


def arguments_json(pairs: Sequence[tuple[str, Any]], *, closed: bool = True) -> str:
    """Tagged arguments as a JSON object's text, member by member as `json.dumps` writes the
    object (the members so far, when not `closed`; nothing before the first)."""
    if not pairs and not closed:
        return ""
    written = ", ".join(
        f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}"
        for key, value in pairs
    )
    return "{" + written + ("}" if closed else "")


class Seen:
    """Told what a section's reading reads as it goes; this one forgets it."""

    def named(self, name: str) -> None:
        """A call's name (and its id, where written before its arguments) is read."""

    def json_at(self, start: int) -> None:
        """The named call's arguments are JSON from `start`."""

    def argument(self, key: str, value: Any) -> None:
        """The named call's next tagged argument is read whole."""

    def objects(self, start: int, *, array: bool) -> None:
        """A call written as one JSON object (or the calls as one array) begins at `start`."""

    def done(self, calls: list[ToolCall]) -> None:
        """These calls are read whole."""


class Progress(Seen):
    """Keeps what the reading of `text` saw: `calls`, whole or begun, in order."""

    def __init__(self, text: str, syntax: CallSyntax, markers: Sequence[str]) -> None:
        self.text = text
        self.syntax = syntax
        self.markers = markers
        self._whole: list[Partial] = []
        self._open: list[Partial] = []  # the calls being read
        self._pairs: list[tuple[str, Any]] = []

    @property
    def calls(self) -> list[Partial]:
        return [*self._whole, *self._open]

    def named(self, name: str) -> None:
        self._open, self._pairs = [Partial(name)], []

    def json_at(self, start: int) -> None:
        start = skip_blanks(self.text, start)
        if self._open and self.text.startswith("{", start):
            name = self._open[0].name
            self._open = [Partial(name, settled_arguments(self.text, start, self.markers))]

    def argument(self, key: str, value: Any) -> None:
        if self._open:
            self._pairs.append((key, value))
            name = self._open[0].name
            self._open = [Partial(name, arguments_json(self._pairs, closed=False))]

    def objects(self, start: int, *, array: bool) -> None:
        start = skip_blanks(self.text, start)
        if not array:
            self._open = self._object(start)
            return
        if not self.text.startswith("[", start):
            self._open = self._object(start)  # one call written without its array
            return
        self._open = []
        for begin, end in elements(self.text, start)[0]:
            call = self._object(begin)
            self._open += call
            if not call or end is None:
                return

    def _object(self, start: int) -> list[Partial]:
        text, s = self.text, self.syntax
        if not text.startswith("{", start):
            return []
        if not s.name_is_key:
            call = json_partial(
                text, start, self.markers, name_path=s.name_path, args_paths=(s.args_path,)
            )
            return [call] if call else []
        written, _ = members(text, start)  # {"f": {...arguments}}
        if not written:
            return []
        first = written[0]
        if not text.startswith("{", first.start):
            return [Partial(first.key)]
        return [Partial(first.key, settled_arguments(text, first.start, self.markers))]

    def done(self, calls: list[ToolCall]) -> None:
        self._whole += [Partial(call.name, call.arguments) for call in calls]
        self._open, self._pairs = [], []
