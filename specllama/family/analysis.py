"""A family's tool-call syntax, learnt from its chat template: the markers around the known
call's name and arguments in what the template wrote for it (`probes`), classified.

Three shapes, as llama.cpp's autoparser names them:
- "json": the whole call is JSON (`{"name": ..., "arguments": {...}}`, possibly nested, the name
  as a key, or several in one array), maybe in tags (Hermes, Apriel, Mistral Nemo, Apertus);
- "tag_json": the name in markers, the arguments one JSON object (DeepSeek V3.1, Kimi K2,
  Devstral's `[TOOL_CALLS]f[ARGS]{...}`, Functionary);
- "tagged": the arguments in markers too, string values written bare (Qwen3-Coder's
  `<parameter=k>`, GLM's `<arg_key>`, MiniMax-M2's `<invoke>`, DeepSeek's DSML, Seed-OSS).
Rendering one call and two calls tells the markers around all calls (a section) from those
around each call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from specllama.chat import Message
from specllama.errors import SpecllamaError
from specllama.family.probes import (
    IDS,
    INT_KEY,
    INT_VALUE,
    NAME,
    OTHER,
    OTHER_VALUE,
    PLAIN,
    STR_KEY,
    STR_VALUE,
    NotLearnt,
    call_region,
    calls_turn,
    common_prefix,
    common_suffix,
    cut_head,
    cut_tail,
    json_at,
    json_spans,
    locate,
    rendered_answer,
)

Style = Literal["json", "tag_json", "tagged"]
IdSlot = Literal["", "before_name", "after_name"]
IdKind = Literal["", "call_id", "index"]


@dataclass(frozen=True)
class CallSyntax:
    """The markers of one family's calls. A whole answer's calls are written
    `section_start call (call_sep call)* section_end`, each call
    `call_start [id id_suffix] name name_suffix [id id_suffix] arguments call_end`.

    The arguments: "json" writes the whole call as one JSON object `pattern` (the name and the
    arguments at `name_path` and `args_path`); "tag_json" one JSON object; "tagged" writes
    `args_start key key_suffix value value_suffix (arg_sep key ...)*`, or `empty_args` for a
    call without any, where `key_suffix` and `value_suffix` are (for JSON values, for strings):
    DeepSeek's DSML and Gemma 4 mark the strings apart."""

    style: Style
    section_start: str = ""
    section_end: str = ""
    call_sep: str = ""
    call_start: str = ""
    call_end: str = ""
    name_suffix: str = ""
    id_slot: IdSlot = ""
    id_kind: IdKind = ""
    id_suffix: str = ""
    # "json": where the name and the arguments are in a call's object
    name_path: tuple[str, ...] = ("name",)
    args_path: tuple[str, ...] = ("arguments",)
    name_is_key: bool = False  # {"f": {...arguments}}
    in_array: bool = False  # the calls are one JSON array
    array_open: str = "["
    array_sep: str = ", "
    array_close: str = "]"
    pattern: tuple[str, ...] = ()  # a call's object as text: literals around "\0name", "\0args"
    # "tagged"
    args_start: str = ""
    empty_args: str = ""
    arg_sep: str = ""
    key_suffix: tuple[str, str] = ("", "")
    value_suffix: tuple[str, str] = ("", "")

    @property
    def trigger(self) -> str:
        """What the answer's calls begin with (leading blanks aside)."""
        return self.section_start.lstrip() or self.call_start.lstrip()

    def literals(self) -> list[str]:
        return [
            self.section_start,
            self.section_end,
            self.call_sep,
            self.call_start,
            self.call_end,
            self.name_suffix,
            self.id_suffix,
            self.args_start,
            self.empty_args,
            self.arg_sep,
            *self.key_suffix,
            *self.value_suffix,
            *(p for p in self.pattern if not p.startswith("\0")),
        ]


SLOT_NAME, SLOT_ARGS, SLOT_ID = "\0name", "\0args", "\0id"


# -- the analysis ---------------------------------------------------------------------------


def analyse(template: str) -> CallSyntax | None:
    """The template's call syntax, or None when it writes no call this analysis can read
    (it fails to render one, or writes it in a shape none of the three)."""
    try:
        return _analyse(template)
    except (SpecllamaError, NotLearnt, ValueError, TypeError, KeyError, IndexError):
        return None


def _analyse(template: str) -> CallSyntax | None:
    plain = rendered_answer(template, Message("assistant", PLAIN))

    def region(*calls: tuple[str, dict[str, Any]]) -> str:
        return call_region(plain, rendered_answer(template, calls_turn(*calls)))

    both = {INT_KEY: INT_VALUE, STR_KEY: STR_VALUE}
    one = region((NAME, both))
    if NAME not in one:
        return None
    try:  # some templates refuse two calls in a turn (Llama 3.x): then no section is told
        two = region((NAME, {INT_KEY: INT_VALUE}), (OTHER, {INT_KEY: OTHER_VALUE}))
    except SpecllamaError:
        two = ""
    if OTHER not in two:
        two = ""
    if _json_call_object(one) is not None:
        return _learn_json(one, two)
    style: Style = "tag_json" if json_spans(one, both) else "tagged"
    if style == "tag_json":
        return _learn_tag_json(one, two)
    return _learn_tagged(
        one,
        two,
        only_int=region((NAME, {INT_KEY: INT_VALUE})),
        only_str=region((NAME, {STR_KEY: STR_VALUE})),
        empty=region((NAME, {})),
    )


# -- "json" ---------------------------------------------------------------------------------


def _path_to(data: Any, wanted: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    if data == wanted:
        return path
    if isinstance(data, str) and isinstance(wanted, dict):  # arguments as JSON text
        try:
            return path if json.loads(data) == wanted else None
        except ValueError:
            return None
    if isinstance(data, dict):
        for key, value in data.items():
            found = _path_to(value, wanted, (*path, key))
            if found is not None:
                return found
    return None


def _json_objects(text: str) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """Every JSON object that begins in `text`: (start, end, the object), by start."""
    for i, ch in enumerate(text):
        if ch == "{" and (found := json_at(text, i)) is not None and isinstance(found[0], dict):
            yield i, found[1], found[0]


def _json_call_object(region: str) -> tuple[int, int, dict[str, Any]] | None:
    """The smallest JSON object in `region` that holds the call's name (as a value, or as the
    key of its arguments) and its arguments."""
    best = None
    for i, end, data in _json_objects(region):
        named = _path_to(data, NAME) is not None or NAME in data
        whole = named and _path_to(data, {INT_KEY: INT_VALUE, STR_KEY: STR_VALUE}) is not None
        if whole and (best is None or end - i < best[1] - best[0]):
            best = (i, end, data)
    return best


def _learn_json(one: str, two: str) -> CallSyntax:
    start, end, data = _json_call_object(one)  # type: ignore[misc]
    args = {INT_KEY: INT_VALUE, STR_KEY: STR_VALUE}
    name_is_key = NAME in data and _path_to(data, NAME) is None
    name_path = () if name_is_key else _path_to(data, NAME)
    args_path = _path_to(data, args)
    assert name_path is not None and args_path is not None
    pattern = _object_pattern(one[start:end], args)
    arrays = [s for s in _json_spans_containing(one, start, end) if one[s[0]] == "["]
    if arrays:  # the calls are one array: its brackets are the section's
        a_start, a_end = arrays[-1]
        o_start, o_end, _ = _json_call_object_in(two, (NAME, OTHER))
        array_open, array_close = one[a_start:start], one[end:a_end]
        arr2 = _json_spans_containing(two, o_start, o_end)
        sep = ", "
        if arr2:
            second = two.find("{", o_end)
            sep = two[o_end:second] if second != -1 else sep
        return CallSyntax(
            "json",
            section_start=one[:a_start],
            section_end=one[a_end:],
            name_path=name_path,
            args_path=args_path,
            name_is_key=name_is_key,
            in_array=True,
            array_open=array_open,
            array_sep=sep,
            array_close=array_close,
            pattern=pattern,
        )
    spans = []
    pos = 0
    for name in (NAME, OTHER) if two else ():
        s, e, _ = _json_call_object_in(two[pos:], (name,))
        spans.append((pos + s, pos + e))
        pos += e
    markers = _split_markers(one[:start], one[end:], two, spans)
    return CallSyntax(
        "json",
        name_path=name_path,
        args_path=args_path,
        name_is_key=name_is_key,
        pattern=pattern,
        **markers,
    )


def _json_spans_containing(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """JSON values in `text` that hold the span (start, end), outermost first."""
    spans = []
    for i in range(start):
        if text[i] in "{[":
            found = json_at(text, i)
            if found is not None and found[1] >= end:
                spans.append((i, found[1]))
    return spans


def _json_call_object_in(text: str, names: tuple[str, ...]) -> tuple[int, int, Any]:
    """The smallest JSON object in `text` that names one of `names` (as a value or a key)."""
    best = None
    for i, end, data in _json_objects(text):
        if any(_path_to(data, n) is not None or n in data for n in names):
            if best is None or (i >= best[0] and end <= best[1]):
                best = (i, end, data)
            elif i >= best[1]:
                break
    if best is None:
        raise NotLearnt("no call object")
    return best


def _object_pattern(text: str, args: dict[str, Any]) -> tuple[str, ...]:
    """A call's JSON object as literals around its slots (name, arguments, id)."""
    spans = json_spans(text, args)
    if not spans:
        raise NotLearnt("arguments written as text")  # e.g. a JSON string of JSON
    a_start, a_end = spans[-1]
    pieces: list[str] = []
    head, tail = text[:a_start], text[a_end:]
    for part, slot in ((head, SLOT_ARGS), (tail, None)):
        pieces += _slots(part, [(json.dumps(NAME)[1:-1], SLOT_NAME), (IDS[0], SLOT_ID)])
        if slot:
            pieces.append(slot)
    return tuple(p for p in pieces if p)


def _slots(text: str, needles: list[tuple[str, str]]) -> list[str]:
    """`text` with each needle replaced by its slot."""
    out = [text]
    for needle, slot in needles:
        split: list[str] = []
        for piece in out:
            if piece.startswith("\0"):
                split.append(piece)
                continue
            parts = piece.split(needle)
            for k, part in enumerate(parts):
                if k:
                    split.append(slot)
                split.append(part)
        out = split
    return out


def _split_markers(
    before: str, after: str, two: str, spans: list[tuple[int, int]]
) -> dict[str, str]:
    """Section and per-call markers: `before` and `after` are what one call has around it;
    `two` holds two calls at `spans`. What comes between the two calls and also before (after)
    the one call belongs to each call; the rest of before (after) to the section."""
    if not spans:  # one call per turn: its markers are the call's own
        return {"call_start": before, "call_end": after}
    (_, e1), (s2, _) = spans
    middle = two[e1:s2]
    end_n = cut_head(after, common_prefix(after, middle))
    call_end = after[:end_n]
    rest = middle[end_n:]
    start_n = cut_tail(before, min(common_suffix(before, rest), len(rest)))
    call_start = before[len(before) - start_n :]
    return {
        "section_start": before[: len(before) - start_n],
        "section_end": after[end_n:],
        "call_start": call_start,
        "call_end": call_end,
        "call_sep": rest[: len(rest) - start_n],
    }


# -- "tag_json" and "tagged": the name in markers -------------------------------------------


def _head(region: str, name: str, start: int = 0) -> tuple[int, int, int, int]:
    """(call start, name start, name end, id position or -1) of the call to `name`."""
    at = locate(region, name, start)
    ident = -1
    for candidate in IDS:
        found = region.find(candidate, start)
        if found != -1:
            ident = found
            break
    begin = ident if -1 < ident < at else at
    return begin, at, at + len(name), ident


def _id_split(text: str, ident: int, offset: int) -> tuple[str, str] | None:
    """`text` (at `offset` in the region) split around the call id found at `ident`."""
    if ident < offset or ident >= offset + len(text):
        return None
    i = ident - offset
    return text[:i], text[i + len(IDS[0]) :]


def _learn_tag_json(one: str, two: str) -> CallSyntax:
    args = {INT_KEY: INT_VALUE, STR_KEY: STR_VALUE}
    begin, _, name_end, ident = _head(one, NAME)
    a_start, a_end = next(s for s in json_spans(one, args) if s[0] >= name_end)
    name_suffix, id_slot, id_kind, id_suffix = _name_suffix(one, name_end, a_start, ident)
    if id_slot == "before_name":
        id_suffix = one[ident + len(IDS[0]) : one.index(NAME, ident)]
    spans = []
    pos = 0
    for name, value in ((NAME, INT_VALUE), (OTHER, OTHER_VALUE)) if two else ():
        b, _, n_end, _ = _head(two, name, pos)
        e = next(s[1] for s in json_spans(two, {INT_KEY: value}) if s[0] >= n_end)
        spans.append((b, e))
        pos = e
    if not id_slot and spans:
        id_slot, id_kind, name_suffix, id_suffix = _index_slot(two, name_suffix, spans)
    markers = _split_markers(one[:begin], one[a_end:], two, spans)
    return CallSyntax(
        "tag_json",
        name_suffix=name_suffix,
        id_slot=id_slot,
        id_kind=id_kind,
        id_suffix=id_suffix,
        **markers,
    )


def _name_suffix(
    region: str, name_end: int, body: int, ident: int
) -> tuple[str, IdSlot, IdKind, str]:
    text = region[name_end:body]
    split = _id_split(text, ident, name_end)
    if split is not None:
        return split[0], "after_name", "call_id", split[1]
    if -1 < ident < name_end:
        return text, "before_name", "call_id", ""
    return text, "", "", ""


def _index_slot(
    two: str, name_suffix: str, spans: list[tuple[int, int]]
) -> tuple[IdSlot, IdKind, str, str]:
    """Kimi K2 writes each call's index after its name (`functions.f:0`, `functions.g:1`):
    where the text after the second name differs from the first's, there is a slot."""
    second = two.index(OTHER, spans[1][0]) + len(OTHER)
    other_suffix = two[second : second + len(name_suffix) + 4]
    n = common_prefix(name_suffix, other_suffix)
    if n == len(name_suffix):
        return "", "", name_suffix, ""
    tail = name_suffix[n:]
    digits = len(tail) - len(tail.lstrip("0123456789"))
    if digits == 0:
        return "", "", name_suffix, ""
    return "after_name", "index", name_suffix[:n], tail[digits:]


def _learn_tagged(one: str, two: str, *, only_int: str, only_str: str, empty: str) -> CallSyntax:
    begin, _, name_end, ident = _head(one, NAME)
    keys = {
        "j": (locate(one, INT_KEY, name_end), str(INT_VALUE)),
        "s": (locate(one, STR_KEY, name_end), STR_VALUE),
    }
    values = {k: locate(one, v, at + len(INT_KEY)) for k, (at, v) in keys.items()}
    first, last = sorted(keys, key=lambda k: keys[k][0])
    key_suffix = {k: one[keys[k][0] + len(INT_KEY) : values[k]] for k in keys}
    value_end = {k: values[k] + len(keys[k][1]) for k in keys}
    between = one[value_end[first] : keys[last][0]]
    tails = {"j": _after(only_int, str(INT_VALUE)), "s": _after(only_str, STR_VALUE)}
    common = common_suffix(tails["j"], tails["s"])
    value_suffix = {k: tails[k][: len(tails[k]) - common] for k in tails}
    rest = tails["j"][len(value_suffix["j"]) :]
    if not between.startswith(value_suffix[first]):
        raise NotLearnt("arguments' separator")
    arg_sep = between[len(value_suffix[first]) :]
    shared = cut_head(rest, common_prefix(arg_sep, rest))
    value_suffix = {k: v + rest[:shared] for k, v in value_suffix.items()}
    arg_sep, rest = arg_sep[shared:], rest[shared:]
    name_suffix, id_slot, id_kind, args_start = _name_suffix(one, name_end, keys[first][0], ident)
    id_suffix = ""
    if id_slot == "before_name":
        id_suffix = one[ident + len(IDS[0]) : one.index(NAME, ident)]
    # the two-call rendering: each call ends after its value's suffix
    spans = []
    pos = 0
    for name, value in ((NAME, INT_VALUE), (OTHER, OTHER_VALUE)) if two else ():
        b, _, n_end, _ = _head(two, name, pos)
        v = locate(two, str(value), n_end)
        spans.append((b, v + len(str(value)) + len(value_suffix["j"])))
        pos = spans[-1][1]
    if not id_slot and spans:
        id_slot, id_kind, name_suffix, args_start = _index_slot(two, name_suffix, spans)
    markers = _split_markers(one[:begin], rest, two, spans)
    _, _, e_end, _ = _head(empty, NAME)
    closing = markers["call_end"] + markers["section_end"]
    empty_text = empty[e_end:]
    if id_slot == "after_name":  # the id is read apart: what is after it
        empty_text = empty_text[len(name_suffix) :]
        empty_text = empty_text[len(empty_text) - len(empty_text.lstrip("0123456789")) :]
        empty_text = empty_text.removeprefix(IDS[0])
    closed = empty_text.endswith(closing)
    empty_args = empty_text[: len(empty_text) - len(closing)] if closed else ""
    return CallSyntax(
        "tagged",
        name_suffix=name_suffix,
        id_slot=id_slot,
        id_kind=id_kind,
        id_suffix=id_suffix,
        args_start=args_start,
        empty_args=empty_args,
        arg_sep=arg_sep,
        key_suffix=(key_suffix["j"], key_suffix["s"]),
        value_suffix=(value_suffix["j"], value_suffix["s"]),
        **markers,
    )


def _after(region: str, value: str) -> str:
    return region[locate(region, value, region.find(NAME)) + len(value) :]
