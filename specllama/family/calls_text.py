"""Reading learnt markers in a model's text: matched as the template writes them, or with the
blanks around and inside them as the model chose (models do not copy every newline); a text
that ends inside a marker asks for more.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from specllama.json_text import decoded, find
from specllama.tool_calls import Special

BRACKETED = re.compile(r"<[^<>]*>|\[[A-Z_]+\]")


class More(Exception):
    """The text ends before it can be told: wait for more."""


class Bad(Exception):
    """The text is not what the syntax writes here."""


def skip_blanks(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def expect(text: str, pos: int, literal: str) -> int:
    """Where `literal` ends when it is written at `pos` (blanks being free)."""
    if not literal or text.startswith(literal, pos):
        return pos + len(literal)
    if literal.startswith(text[pos:]):
        raise More
    for word in literal.split():
        pos = skip_blanks(text, pos)
        if text.startswith(word, pos):
            pos += len(word)
        elif pos == len(text) or word.startswith(text[pos:]):
            raise More
        else:
            raise Bad
    return skip_blanks(text, pos) if literal[-1].isspace() else pos


def peek(text: str, pos: int, literal: str) -> bool | None:
    """Whether `literal` is written at `pos`: None when the text ends before it can tell."""
    try:
        expect(text, pos, literal)
    except More:
        return None
    except Bad:
        return False
    return True


def first_word(literal: str) -> str:
    words = literal.split()
    return words[0] if words else ""


def read_until(text: str, pos: int, stops: list[str], limit: int = 200) -> tuple[str, int]:
    """The text from `pos` up to the earliest of `stops` (by their first word), and where that
    stop begins; a stop not yet written asks for more (up to `limit` characters)."""
    found = [find(text, w, pos) for w in {first_word(s) for s in stops} if w]
    found = [f for f in found if f != -1]
    if not found:
        if len(text) - pos > limit:
            raise Bad
        raise More
    end = min(found)
    return text[pos:end], end


def read_name(text: str, pos: int, stops: list[str]) -> tuple[str, int]:
    if not any(first_word(s) for s in stops):  # nothing marks its end: a name's characters
        match = re.compile(r"[\w.\-]+").match(text, pos)
        if match is None or match.end() == len(text):
            raise More if pos == len(text) or match else Bad
        return match.group(), match.end()
    raw, end = read_until(text, pos, stops)
    name = raw.strip()
    if not name or any(c.isspace() for c in name):
        raise Bad
    return name, end


def read_json(text: str, pos: int, closers: list[str], final: bool) -> tuple[Any, int]:
    """The JSON value at `pos`. When it does not parse, it is not whole yet unless a closing
    marker is already written after it (or the answer is over)."""
    pos = skip_blanks(text, pos)
    if pos == len(text):
        raise More
    if text[pos] not in "{[":
        raise Bad
    found = decoded(text, pos)
    if found is not None:
        return found
    if final or any(w and find(text, w, pos) != -1 for w in map(first_word, closers)):
        raise Bad
    raise More


def typed(raw: str, schema: dict[str, Any] | None, string_marked: bool, quote: str = "") -> Any:
    """A value the syntax wrote untyped, typed by its parameter's schema: a string stays one
    (and so does what does not parse); anything else is read as JSON, as a Python literal (as
    templates that print values write objects), or in the family's own quoting (`quote`)."""
    if string_marked or is_string_schema(schema):
        return raw
    text = raw.strip()
    if quote and quote != '"':
        text = _BARE_KEY.sub(r'\1"\2":', text.replace(quote, '"'))
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return raw
    return value if isinstance(value, dict | list | int | float | bool) else raw


_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w]*)\s*:")


def is_string_schema(schema: dict[str, Any] | None) -> bool:
    if not isinstance(schema, dict):
        return False
    kind = schema.get("type")
    if kind == "string" or kind == ["string"]:
        return True
    return "enum" in schema and all(isinstance(v, str) for v in schema["enum"])


def markers_in(literals: list[str]) -> tuple[str, ...]:
    """The bracketed pieces (`<tool_call>`, `[ARGS]`...) of the literals: those a vocabulary
    may hold as one special token."""
    found: dict[str, None] = {}
    for literal in literals:
        for match in BRACKETED.finditer(literal):
            found[match.group()] = None
    return tuple(found)


# -- writing Lark -----------------------------------------------------------------------------


def lark_literal(text: str, special: Special) -> str:
    """`text` as Lark: its special tokens as `<token>`, the rest as quoted strings ("" when
    `text` is empty)."""
    if not text:
        return '""'
    pieces: list[str] = []
    rest = text
    while rest:
        hits = [(rest.find(s), s) for s in special if s and rest.find(s) != -1]
        if not hits:
            pieces.append(json.dumps(rest))
            break
        at, token = min(hits, key=lambda h: (h[0], -len(h[1])))
        if at:
            pieces.append(json.dumps(rest[:at]))
        pieces.append(special[token])
        rest = rest[at + len(token) :]
    return " ".join(pieces)


_REGEX_META = set("\\.+*?()|[]{}^$#&-~/")


def regex_escape(text: str) -> str:
    return "".join("\\" + c if c in _REGEX_META else c for c in text)


def text_without(stops: list[str]) -> str:
    """A Lark terminal: any text that holds none of `stops`."""
    words = [w for w in dict.fromkeys(first_word(s) for s in stops) if w]
    if not words:
        return "/(?s:.*)/"
    barred = " & ".join(f"~/(?s:.*){regex_escape(w)}(?s:.*)/" for w in words)
    return f"/(?s:.*)/ & {barred}"
