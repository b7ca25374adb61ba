"""JSON as a model writes it, read while it is still being written: how far a value is
settled (no text to come can change what is written up to there), and the members of an
object or the elements of an array as far as they go.

A model's call writes its arguments as JSON text; streamed, that text goes out as it is
settled, so that the pieces joined are the arguments exactly as written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from json.decoder import scanstring

# What JSON may hold outside its strings and brackets: blanks, separators, numbers, literals.
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"', re.S)  # possessive: a long string, read fast
_PLAIN = re.compile(r"[ \t\r\n,:0-9.eE+\-truflasn]+")
_BLANKS = re.compile(r"[ \t\r\n]*")
_DECODER = json.JSONDecoder()


def skip_blanks(text: str, pos: int) -> int:
    match = _BLANKS.match(text, pos)
    return match.end() if match else pos


def settled_end(text: str, start: int, limit: int) -> tuple[int, bool]:
    """How far the object or array at `start` is written, reading no further than `limit`:
    (where the settled text ends, whether the value is whole there). Anything that is not
    JSON ends what is settled: a value that goes wrong is never read past it."""
    depth, pos = 0, start
    while pos < limit:
        char = text[pos]
        if char == '"':
            string = _STRING.match(text, pos, limit)
            if string is None:  # a string still being written: all of it so far
                return limit, False
            pos = string.end()
        elif char in "{[":
            depth, pos = depth + 1, pos + 1
        elif char in "}]":
            depth, pos = depth - 1, pos + 1
            if depth <= 0:
                return pos, True
        else:
            plain = _PLAIN.match(text, pos, limit)
            if plain is None:
                return pos, False
            pos = plain.end()
    return limit, False


def value_end(text: str, start: int) -> int | None:
    """Where the whole JSON value at `start` ends, or None while it is not whole (or is no
    JSON). A number at the very end of the text may go on: not whole yet."""
    try:
        _, end = _DECODER.raw_decode(text, start)
    except ValueError:
        return None
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
