"""JSON as a model writes it, read while it is still being written: how far a value is
settled (no text to come can change what is written up to there), and the members of an
object or the elements of an array as far as they go.

A model's call writes its arguments as JSON text; streamed, that text goes out as it is
settled, so that the pieces joined are the arguments exactly as written. An answer read again
at each new piece is a `Growing` text: what was read of it is kept (a value's scan, a search
for a marker), so each reading resumes where the last stopped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from json.decoder import scanstring
from typing import Any

# A string's inside, up to its closing quote or a backslash at the very end (the unrolled loop:
# a long string is read without backtracking, and Python 3.10 has no possessive quantifiers);
# what JSON may hold outside its strings and brackets: blanks, separators, numbers, literals.
_STRING_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.S)
_PLAIN = re.compile(r"[ \t\r\n,:0-9.eE+\-truflasn]+")
_BLANKS = re.compile(r"[ \t\r\n]*")
_DECODER = json.JSONDecoder()


def skip_blanks(text: str, pos: int) -> int:
    match = _BLANKS.match(text, pos)
    return match.end() if match else pos


class Growing(str):
    """A text that only grows (an answer as it streams), carrying what was read of it
    (`Reads`), which each longer version shares: reading it again resumes where the last
    reading stopped, so that a feed costs what its new text costs, not the whole text again.
    A plain `str` is read afresh each time."""

    reads: Reads

    def __new__(cls, text: str, reads: Reads | None = None) -> Growing:
        grown = super().__new__(cls, text)
        grown.reads = reads if reads is not None else Reads()
        return grown

    def grown(self, more: str) -> Growing:
        """This text with `more` written after it, sharing what was read."""
        return Growing(str.__add__(self, more), self.reads)


class Reads:
    """What was read of a growing text, by where each reading began: none of it can change
    as text is added after it. `kept`: results a reader keeps for the same reason."""

    def __init__(self) -> None:
        self.scans: dict[int, ValueScan] = {}
        self.found: dict[tuple[str, int], tuple[int, int]] = {}  # (at or -1, searched to)
        self.decoded: dict[int, tuple[Any, int] | None] = {}
        self.kept: dict[Hashable, Any] = {}


def find(text: str, word: str, start: int) -> int:
    """`text.find(word, start)`; in a growing text, searched only where the last search did
    not look."""
    if not isinstance(text, Growing):
        return text.find(word, start)
    at, searched = text.reads.found.get((word, start), (-1, start))
    if at == -1:
        at = str.find(text, word, max(start, searched - len(word) + 1))
        text.reads.found[(word, start)] = (at, len(text))
    return at


class ValueScan:
    """The object or array (or string) at `start`, scanned as far as it is written: where
    the scan stopped (`pos`), the open brackets (`depth`), whether it is inside a string
    (after a backslash: `escaped`); `end` once the value is whole, `stuck` where the text
    stops being JSON. `advance` resumes where the last one stopped."""

    def __init__(self, start: int) -> None:
        self.pos = start
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.end: int | None = None
        self.stuck = False

    def advance(self, text: str) -> ValueScan:
        """Reads on to the end of `text` (which holds the text scanned before)."""
        pos, depth, limit = self.pos, self.depth, len(text)
        while pos < limit and self.end is None and not self.stuck:
            if self.in_string:
                if self.escaped:  # the character a backslash escapes, whatever it is
                    pos, self.escaped = pos + 1, False
                pos = _STRING_BODY.match(text, pos).end()
                if pos == limit:
                    break
                if text[pos] == "\\":  # a backslash at the very end: its character is to come
                    pos, self.escaped = pos + 1, True
                    continue
                pos, self.in_string = pos + 1, False  # the closing quote
                if depth == 0:
                    self.end = pos
                continue
            char = text[pos]
            if char == '"':
                pos, self.in_string = pos + 1, True
            elif char in "{[":
                depth, pos = depth + 1, pos + 1
            elif char in "}]":
                depth, pos = depth - 1, pos + 1
                if depth <= 0:
                    self.end = pos
            else:
                plain = _PLAIN.match(text, pos)
                if plain is None:
                    self.stuck = True
                else:
                    pos = plain.end()
        self.pos, self.depth = pos, depth
        return self

    def settled(self, text: str) -> int:
        """Where the text that nothing to come can change ends: the value's end, where it
        stops being JSON, or the end of the text (a string being written: all of it so far)."""
        if self.end is not None:
            return self.end
        return len(text) if self.in_string else self.pos


def scan_at(text: str, start: int) -> ValueScan:
    """The value at `start` scanned to the end of `text` (resumed, in a growing text)."""
    if not isinstance(text, Growing):
        return ValueScan(start).advance(text)
    scan = text.reads.scans.get(start)
    if scan is None:
        scan = text.reads.scans[start] = ValueScan(start)
    return scan.advance(text)


def settled_end(text: str, start: int, limit: int) -> tuple[int, bool]:
    """How far the object or array at `start` is written, up to `limit`: (where the settled
    text ends, whether the value is whole there). Anything that is not JSON ends what is
    settled: a value that goes wrong is never read past it."""
    scan = scan_at(text, start)
    end = scan.settled(text)
    if end > limit:
        return limit, False
    return end, scan.end is not None


def decoded(text: str, start: int) -> tuple[Any, int] | None:
    """The JSON value at `start` and where it ends, or None while it does not parse (not
    whole yet, or not JSON). In a growing text an object, array or string is decoded once,
    when its scan finds it whole."""
    if not isinstance(text, Growing) or not text.startswith(('"', "{", "["), start):
        try:
            return _DECODER.raw_decode(text, start)
        except ValueError:
            return None
    if start in text.reads.decoded:
        return text.reads.decoded[start]
    if scan_at(text, start).end is None:
        return None
    try:
        found = _DECODER.raw_decode(text, start)
    except ValueError:
        found = None
    text.reads.decoded[start] = found
    return found


def value_end(text: str, start: int) -> int | None:
    """Where the whole JSON value at `start` ends, or None while it is not whole (or is no
    JSON). A number at the very end of the text may go on: not whole yet."""
    found = decoded(text, start)
    if found is None:
        return None
    end = found[1]
    if end == len(text) and text[start] not in '"{[':
        return None
    return end


@dataclass(frozen=True)
class Member:
    """One member of an object: its key, where its value begins, and where it ends (None
    while it is being written)."""

    key: str
    start: int
    end: int | None


def members(text: str, start: int) -> tuple[list[Member], int | None]:
    """The members of the object at `start` as far as they are written, and where the object
    ends (None while it is not whole, or where it stops being JSON)."""
    found: list[Member] = []
    pos = skip_blanks(text, start + 1)
    if text.startswith("}", pos):
        return found, pos + 1
    while text.startswith('"', pos):
        try:
            key, pos = scanstring(text, pos + 1)
        except ValueError:
            break
        pos = skip_blanks(text, pos)
        if not text.startswith(":", pos):
            break
        value = skip_blanks(text, pos + 1)
        if value == len(text):
            break
        end = value_end(text, value)
        found.append(Member(key, value, end))
        if end is None:
            break
        pos = skip_blanks(text, end)
        if text.startswith("}", pos):
            return found, pos + 1
        if not text.startswith(",", pos):
            break
        pos = skip_blanks(text, pos + 1)
    return found, None


def elements(text: str, start: int) -> tuple[list[tuple[int, int | None]], int | None]:
    """The elements of the array at `start` as far as they are written, each (where it
    begins, where it ends or None), and where the array ends (None while it is not whole)."""
    found: list[tuple[int, int | None]] = []
    pos = skip_blanks(text, start + 1)
    if text.startswith("]", pos):
        return found, pos + 1
    while pos < len(text):
        end = value_end(text, pos)
        found.append((pos, end))
        if end is None:
            break
        pos = skip_blanks(text, end)
        if text.startswith("]", pos):
            return found, pos + 1
        if not text.startswith(",", pos):
            break
        pos = skip_blanks(text, pos + 1)
    return found, None


def member_at(
    text: str, start: int, path: Sequence[str], read: dict[int, list[Member]] | None = None
) -> Member | None:
    """The member at `path` (keys, outermost first) of the object at `start`, as far as it
    is written; None while it is not (or where there is no object). `read`: the members of
    the objects read already, by where they begin (kept across calls on the same text)."""
    read = {} if read is None else read
    member = None
    for key in path:
        if not text.startswith("{", start):
            return None
        if start not in read:
            read[start] = members(text, start)[0]
        written = read[start]
        member = next((m for m in written if m.key == key), None)
        if member is None:
            return None
        start = member.start
    return member


def string_at(text: str, member: Member | None) -> str | None:
    """The member's value when it is a whole string, else None."""
    if member is None or member.end is None or not text.startswith('"', member.start):
        return None
    value = json.loads(text[member.start : member.end])
    return value if isinstance(value, str) else None
