"""Tool calls in each model family's own syntax: told from the chat template, parsed back from
the answer (whole, or as it streams), and forced by a grammar when the client requires a call.

A chat template that uses `tools` teaches the model one way to write a call:
- Hermes (Qwen2.5/3, Hermes, SmolLM3...): any number of
  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, with text around;
- Llama 3.x: the whole answer is `{"name": ..., "parameters": {...}}` (after an optional
  `<|python_tag|>`; several joined by `;`);
- Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` at the end of the answer (the
  marker is a control token, so the text may begin at the `[`).
A template that uses `tools` in none of these ways gets the Hermes syntax: it is plain JSON in
tags, which the grammar can force and the parser read.

A call the model broke off (cut by max_tokens, or JSON that does not parse) is no call: its raw
text stays in the content, and the finish reason is the generation's own ("length", "stop").

A call's arguments are the JSON text the model wrote (where it writes JSON), so that streamed
as it is written (`partial`, read by `family.call_stream.CallStream`) its pieces join to the
same text.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specllama.chat import ToolCall
from specllama.chat_template import fields_read, template_variables
from specllama.json_text import (
    Member,
    elements,
    member_at,
    settled_end,
    skip_blanks,
    string_at,
    value_end,
)
from specllama.schemas import closed

# Compact JSON, as the templates write it (and as the constraint's own JSON options).
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


@dataclass(frozen=True)
class Tool:
    """One function a client offers: its name, what it does, its parameters' JSON Schema."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    strict: bool = False

    def as_openai(self) -> dict[str, Any]:
        """The tool as OpenAI's API (and the chat templates trained on it) writes it."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = self.parameters
        return {"type": "function", "function": function}


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def template_knows_tools(template: str) -> bool:
    """Whether the template shows the tools or writes calls (SmolLM2's does neither); one that
    only writes calls (DeepSeek V3.1's) is shown the tools in its system message."""
    return "tools" in template_variables(template) or "tool_calls" in fields_read(template)


# -- what a parse gives ---------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """A settled piece of an answer: text for `content`, or one whole call."""

    text: str = ""
    call: ToolCall | None = None


@dataclass(frozen=True)
class Scan:
    """Segments settled from `start` up to `end`; text after `end` is held (a call may begin
    there). `broken`: a call began but cannot be read (only when the answer is final)."""

    segments: list[Segment]
    end: int
    broken: bool = False


@dataclass(frozen=True)
class Parsed:
    content: str | None  # None: no text besides the calls
    calls: list[ToolCall]
    broken: bool  # a call was broken off: its raw text is in `content`


@dataclass(frozen=True)
class Partial:
    """A call being written: its name, and its arguments' JSON as far as it is settled (never
    ahead of what the model wrote, never text that what comes next could take back)."""

    name: str
    arguments: str = ""


def _call(name: object, arguments: object, written: str | None = None) -> ToolCall | None:
    """A call read from the model's JSON, or None when it does not have the shape of one.
    `written`: the arguments object's text as the model wrote it, kept as the call's."""
    if not isinstance(name, str) or not name or not isinstance(arguments, dict | str):
        return None
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
        if not isinstance(arguments, dict):
            return None
        written = None
    text = written if written is not None else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(new_call_id(), name, text)


# Where a JSON call object keeps its arguments, in the order the readers look.
ARGUMENTS = (("arguments",), ("parameters",))


def _json_call(text: str) -> ToolCall | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    return _call(data.get("name"), *_arguments_of(data, text, 0, ARGUMENTS))


def _arguments_of(
    data: dict[str, Any], text: str, start: int, paths: Sequence[tuple[str, ...]]
) -> tuple[Any, str | None]:
    """A call object's arguments (the first of `paths` it holds; none: {}) and their text as
    written in the object at `start`."""
    for path in paths:
        if path[0] in data:
            return data[path[0]], arguments_text(text, start, path)
    return {}, None


def arguments_text(text: str, start: int, path: Sequence[str]) -> str | None:
    """The text of the whole value at `path` in the object at `start`, as written."""
    member = member_at(text, start, path)
    if member is None or member.end is None:
        return None
    return text[member.start : member.end]


def _named_call(data: object, names: frozenset[str], text: str, start: int) -> ToolCall | None:
    """A bare JSON object (written at `start`) that is a call to one of `names` (with its
    arguments), or None."""
    if not isinstance(data, dict) or data.get("name") not in names:
        return None
    if "arguments" not in data and "parameters" not in data:
        return None
    return _call(data["name"], *_arguments_of(data, text, start, ARGUMENTS))


def settled_arguments(text: str, start: int, markers: Sequence[str]) -> str:
    """The arguments' JSON written from `start` (an object) as far as it is settled: up to
    its end, and short of any of the family's `markers` (a reader may end the call at one,
    wherever it is written) or of the text that may begin one."""
    limit = len(text)
    for marker in markers:
        at = text.find(marker, start)
        limit = min(limit, at if at != -1 else len(text) - held_prefix(text[start:], marker))
    end, _ = settled_end(text, start, limit)
    return text[start:end]


def json_partial(
    text: str,
    start: int,
    markers: Sequence[str],
    *,
    name_path: tuple[str, ...] = ("name",),
    args_paths: Sequence[tuple[str, ...]] = ARGUMENTS,
    names: frozenset[str] | None = None,
) -> Partial | None:
    """The call being written as a JSON object at `start`, once its name is whole (one of
    `names`, when given); its arguments streamed only where they are an object."""
    read: dict[int, list[Member]] = {}  # each object's members, read once
    name = string_at(text, member_at(text, start, name_path, read))
    if not name or (names is not None and name not in names):
        return None
    for path in args_paths:
        member = member_at(text, start, path, read)
        if member is not None:
            if not text.startswith("{", member.start):  # a JSON string: whole at the end
                return Partial(name)
            return Partial(name, settled_arguments(text, member.start, markers))
    return Partial(name)


def _bare_start(text: str) -> str:
    """Whether `text` begins a bare JSON call, `{"name"` (maybe in a ```json fence): "yes",
    "maybe" (the text so far is too short to tell), or "no"."""
    rest = text
    if rest.startswith("```"):
        rest = rest[3:]
        if len(rest) < 4 and "json".startswith(rest):
            return "maybe"
        rest = rest.removeprefix("json").lstrip()
    elif "```".startswith(rest):
        return "maybe"
    if not rest:
        return "maybe"
    if not rest.startswith("{"):
        return "no"
    after, key = rest[1:].lstrip(), '"name"'
    if len(after) < len(key):
        return "maybe" if key.startswith(after) else "no"
    return "yes" if after.startswith(key) else "no"


def held_prefix(text: str, marker: str) -> int:
    """How many characters at the end of `text` could be the beginning of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


# The markers that are one special token of the vocabulary, each with how llguidance's Lark
# writes that token: by its text where the text is `<...>`, else by its id (`<[5]>`).
Special = Mapping[str, str]


def special_by_text(markers: Iterable[str]) -> dict[str, str]:
    """Markers written `<...>`, which Lark names by their text."""
    return {marker: marker for marker in markers}


def _lark_string(text: str) -> str:
    return json.dumps(text)


def arguments_rule(tool: Tool) -> str:
    schema = closed(tool.parameters) if tool.parameters else {"type": "object"}
    if isinstance(schema, dict):
        schema = {**schema, "x-guidance": JSON_STYLE}
    return f"%json {json.dumps(schema)}"


# -- the formats ----------------------------------------------------------------------------


class ToolFormat:
    """One family's syntax. `scan` reads the answer from `start` (where the last scan ended);
    `final` says that no more text will come. `tools`: the offered tools (or their names), whose
    schemas type the values a syntax writes untyped."""

    name = ""
    markers: tuple[str, ...] = ()  # texts that may be one special token of the vocabulary

    def __init__(self, tools: Sequence[str | Tool] = ()) -> None:
        self.tools = {t.name: t for t in tools if isinstance(t, Tool)}
        self.names = frozenset(t if isinstance(t, str) else t.name for t in tools)

    def scan(self, text: str, start: int, final: bool) -> Scan:
        raise NotImplementedError

    def partial(self, text: str, start: int) -> list[Partial]:
        """The calls begun in the text held from `start` (where a scan stopped, the answer not
        over), as far as they are written, in order. None here: such a format's calls go out
        whole."""
        return []

    def rules(self, tools: Sequence[Tool], *, parallel: bool, special: Special) -> list[str]:
        """Lark rules (llguidance's dialect) whose `calls` is one call to one of `tools` (or one
        or more when `parallel`), each call's arguments following its schema. `special`: the
        markers that are special tokens of the vocabulary, with how Lark writes each (else
        they are written as text)."""
        raise NotImplementedError


class Hermes(ToolFormat):
    """Calls in `<tool_call>` tags; also, as llama-server reads this format, a bare JSON call
    (`{"name": ..., "arguments": ...}`, or in a ```json fence), which small models write instead.
    A bare one counts only when it names an offered tool, so JSON in an answer stays text."""

    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    markers = (OPEN, CLOSE)

    def scan(self, text: str, start: int, final: bool) -> Scan:
        segments: list[Segment] = []
        pos = start
        while True:
            begin, kind = self._next_call(text, pos)
            if kind == "" or (kind == "maybe" and final):
                segments.append(Segment(text[pos:]))
                return Scan(segments, len(text))
            segments.append(Segment(text[pos:begin]))
            if kind == "maybe":
                return Scan(segments, begin)
            read = self._tagged(text, begin, final) if kind == "tag" else self._bare(text, begin)
            if read is None:  # not whole yet: held
                return Scan(segments, begin)
            segment, pos, broken = read
            if broken and not final:
                return Scan(segments, begin)
            segments.append(segment)
            if broken:
                return Scan(segments, len(text), broken=True)

    def _next_call(self, text: str, pos: int) -> tuple[int, str]:
        """Where the next call begins from `pos`: (index, "tag" | "bare"), or (index, "maybe")
        where the text so far may still become one, or (-1, "")."""
        for i in range(pos, len(text)):
            if text[i] not in "<`{":
                continue
            rest = text[i:]
            if rest.startswith(self.OPEN):
                return i, "tag"
            if self.OPEN.startswith(rest):
                return i, "maybe"
            bare = _bare_start(rest)
            if bare != "no":
                return i, "bare" if bare == "yes" else "maybe"
        return -1, ""

    def _tagged(self, text: str, begin: int, final: bool) -> tuple[Segment, int, bool] | None:
        body_start = begin + len(self.OPEN)
        closed = text.find(self.CLOSE, body_start)
        if closed == -1 and not final:
            return None
        body = text[body_start:] if closed == -1 else text[body_start:closed]
        call = _json_call(body.strip())
        if call is None:  # broken off, or not JSON: the rest stays text
            return Segment(text[begin:]), len(text), True
        return Segment(call=call), len(text) if closed == -1 else closed + len(self.CLOSE), False

    def _bare(self, text: str, begin: int) -> tuple[Segment, int, bool] | None:
        brace = text.index("{", begin)
        try:
            data, end = json.JSONDecoder().raw_decode(text, brace)
        except ValueError:  # not whole yet (or never: then text, and broken, at the end)
            return Segment(text[begin:]), len(text), True
        call = _named_call(data, self.names, text, brace)
        if call is None:  # JSON, but no call to an offered tool: text
            return Segment(text[begin:end]), end, False
        if brace > begin:  # fenced: the closing fence belongs to the call
            after = text[end:].lstrip()
            if "```".startswith(after) and len(after) < 3:
                return None
            if after.startswith("```"):
                end = len(text) - len(after) + 3
        return Segment(call=call), end, False

    def partial(self, text: str, start: int) -> list[Partial]:
        """A call in tags, or a bare one to an offered tool, once its name is whole."""
        if text.startswith(self.OPEN, start):
            brace, names = skip_blanks(text, start + len(self.OPEN)), None
        elif _bare_start(text[start:]) == "yes":
            brace, names = text.index("{", start), self.names
        else:
            return []
        if not text.startswith("{", brace):
            return []
        found = json_partial(text, brace, self.markers, names=names)
        return [found] if found else []

    def rules(self, tools: Sequence[Tool], *, parallel: bool, special: Special) -> list[str]:
        def tag(marker: str) -> str:
            return special[marker] if marker in special else _lark_string(marker)

        rules = [
            'calls: call ("\\n" call)*' if parallel else "calls: call",
            "call: " + " | ".join(f"call_{i}" for i in range(len(tools))),
        ]
        for i, tool in enumerate(tools):
            head = _lark_string(f'\n{{"name": {json.dumps(tool.name)}, "arguments": ')
            rules.append(f'call_{i}: {tag(self.OPEN)} {head} args_{i} "}}\\n" {tag(self.CLOSE)}')
            rules.append(f"args_{i}: {arguments_rule(tool)}")
        return rules


class Llama3(ToolFormat):
    """The answer is a call as a whole, or text: told apart by how it begins."""

    name = "llama3"
    TAG = "<|python_tag|>"
    markers = (TAG,)

    def scan(self, text: str, start: int, final: bool) -> Scan:
        if start > 0:  # already told to be text
            return Scan([Segment(text[start:])], len(text))
        head = text.lstrip()
        maybe_call = head.startswith(("{", self.TAG)) or self.TAG.startswith(head)
        if not maybe_call:
            return Scan([Segment(text)], len(text))
        if not final:
            return Scan([], 0)
        calls = _llama3_calls(head.removeprefix(self.TAG).strip())
        if calls is None:
            return Scan([Segment(text)], len(text), broken=head.startswith(("{", self.TAG)))
        return Scan([Segment(call=c) for c in calls], len(text))

    def partial(self, text: str, start: int) -> list[Partial]:
        """The calls to offered tools written so far (the whole answer is calls)."""
        pos = skip_blanks(text, start)
        if text.startswith(self.TAG, pos):
            pos = skip_blanks(text, pos + len(self.TAG))
        found: list[Partial] = []
        while text.startswith("{", pos):
            call = json_partial(text, pos, self.markers, args_paths=_PARAMETERS, names=self.names)
            end = value_end(text, pos)
            if call is None:
                break
            found.append(call)
            if end is None:
                break
            pos = end
            while pos < len(text) and text[pos] in "; \n\t":
                pos += 1
        return found

    def rules(self, tools: Sequence[Tool], *, parallel: bool, special: Special) -> list[str]:
        rules = [
            'calls: call ("; " call)*' if parallel else "calls: call",
            "call: " + " | ".join(f"call_{i}" for i in range(len(tools))),
        ]
        for i, tool in enumerate(tools):
            head = _lark_string(f'{{"name": {json.dumps(tool.name)}, "parameters": ')
            rules.append(f'call_{i}: {head} args_{i} "}}"')
            rules.append(f"args_{i}: {arguments_rule(tool)}")
        return rules


_PARAMETERS = (("parameters",), ("arguments",))  # Llama 3 writes `parameters`


def _llama3_calls(text: str) -> list[ToolCall] | None:
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    pos = 0
    while pos < len(text):
        start = pos
        try:
            data, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return None
        call = (
            _call(data.get("name"), *_arguments_of(data, text, start, _PARAMETERS))
            if (isinstance(data, dict))
            else None
        )
        if call is None:
            return None
        calls.append(call)
        while pos < len(text) and text[pos] in "; \n\t":
            pos += 1
    return calls or None


class Mistral(ToolFormat):
    """`[TOOL_CALLS]` then a JSON array of calls; the marker is a control token, which the
    answer's text may not show, so an answer beginning with `[{` is read as calls too."""

    name = "mistral"
    MARK = "[TOOL_CALLS]"

    def scan(self, text: str, start: int, final: bool) -> Scan:
        marked = text.find(self.MARK, start)
        if marked == -1 and not text[:start].strip():  # only blanks so far: `[{` may begin
            head = text.lstrip()
            if head.startswith("[{"):
                marked = len(text) - len(head)
            elif not final and head in ("", "["):
                return Scan([], start)
        if marked == -1:
            hold = 0 if final else held_prefix(text[start:], self.MARK)
            return Scan([Segment(text[start : len(text) - hold])], len(text) - hold)
        if not final:
            return Scan([Segment(text[start:marked])], marked)
        calls = _mistral_calls(text[marked:].removeprefix(self.MARK).strip())
        if calls is None:
            return Scan([Segment(text[start:])], len(text), broken=True)
        return Scan([Segment(text[start:marked]), *(Segment(call=c) for c in calls)], len(text))

    def partial(self, text: str, start: int) -> list[Partial]:
        """The calls of the array written so far."""
        pos = start + len(self.MARK) if text.startswith(self.MARK, start) else start
        pos = skip_blanks(text, pos)
        if not text.startswith("[", pos):
            return []
        found: list[Partial] = []
        for begin, end in elements(text, pos)[0]:
            call = json_partial(text, begin, (self.MARK,)) if text.startswith("{", begin) else None
            if call is None:
                break
            found.append(call)
            if end is None:
                break
        return found

    def rules(self, tools: Sequence[Tool], *, parallel: bool, special: Special) -> list[str]:
        rules = [
            'calls: "[" call (", " call)* "]"' if parallel else 'calls: "[" call "]"',
            "call: " + " | ".join(f"call_{i}" for i in range(len(tools))),
        ]
        for i, tool in enumerate(tools):
            head = _lark_string(f'{{"name": {json.dumps(tool.name)}, "arguments": ')
            rules.append(f'call_{i}: {head} args_{i} "}}"')
            rules.append(f"args_{i}: {arguments_rule(tool)}")
        return rules


def _mistral_calls(body: str) -> list[ToolCall] | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, list) or not data:
        return None
    starts = [begin for begin, _ in elements(body, 0)[0]]
    calls = [
        _call(d.get("name"), d.get("arguments", {}), arguments_text(body, at, ("arguments",)))
        for d, at in zip(data, starts, strict=True)
        if isinstance(d, dict)
    ]
    found = [c for c in calls if c is not None]
    return found if len(found) == len(data) else None


def call_grammar(
    fmt: ToolFormat,
    tools: Sequence[Tool],
    *,
    parallel: bool,
    special: Special,
    or_json: dict[str, Any] | None = None,
) -> str:
    """The Lark grammar of a forced answer: the call(s); or, with `or_json` (a JSON Schema),
    either a JSON answer following it or the call(s): tools offered beside a response_format."""
    rules = fmt.rules(tools, parallel=parallel, special=special)
    if or_json is None:
        return "\n".join(["start: calls", *rules]) + "\n"
    reply = f"reply: %json {json.dumps({**or_json, 'x-guidance': JSON_STYLE})}"
    return "\n".join(["start: reply | calls", reply, *rules]) + "\n"


FORMATS: dict[str, type[ToolFormat]] = {"hermes": Hermes, "llama3": Llama3, "mistral": Mistral}


def detect_format(template: str, names: Sequence[str] = ()) -> ToolFormat:
    """The tool-call syntax the template teaches (Hermes when it teaches none we know), for
    tools called `names`."""
    if "[TOOL_CALLS]" in template:
        return Mistral(names)
    if "<tool_call>" in template:
        return Hermes(names)
    if "<|python_tag|>" in template or (
        "<|start_header_id|>" in template and '"parameters"' in template
    ):
        return Llama3(names)
    return Hermes(names)
