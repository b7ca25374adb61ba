"""Tool calls, whatever a family's syntax: the tools a client offers, what reading an answer's
calls gives (whole, or as it streams), the reading's shared pieces (a call's JSON, its
arguments as far as they are settled), and the grammar that forces a call when the client
requires one. Each syntax is a `ToolFormat`: learnt from the chat template, or written by hand
(`family.hand_written`: Hermes, Llama 3, Mistral; `family.harmony`: gpt-oss).

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
from specllama.json_text import Growing, Member, find, member_at, settled_end, string_at
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


# Where a JSON call object keeps its arguments, in the order the readers look.
ARGUMENTS = (("arguments",), ("parameters",))


def arguments_text(text: str, start: int, path: Sequence[str]) -> str | None:
    """The text of the whole value at `path` in the object at `start`, as written."""
    member = member_at(text, start, path)
    if member is None or member.end is None:
        return None
    return text[member.start : member.end]


def settled_arguments(text: str, start: int, markers: Sequence[str]) -> str:
    """The arguments' JSON written from `start` (an object) as far as it is settled: up to
    its end, and short of any of the family's `markers` (a reader may end the call at one,
    wherever it is written) or of the text that may begin one. In a growing text, the scan
    and the searches resume where the last reading stopped."""
    limit = len(text)
    for marker in markers:
        at = find(text, marker, start)
        if at == -1:  # only the text's tail may begin a marker
            at = len(text) - held_prefix(text[max(start, len(text) - len(marker)) :], marker)
        limit = min(limit, at)
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
    `names`, when given); its arguments streamed only where they are an object. In a growing
    text, the name and where the arguments begin are read once: only their text is read on."""
    kept = text.reads.kept if isinstance(text, Growing) else {}
    known = ("call", start, name_path, tuple(args_paths), names)
    if known in kept:
        name, at = kept[known]
        return Partial(name, settled_arguments(text, at, markers))
    read: dict[int, list[Member]] = {}  # each object's members, read once
    name = string_at(text, member_at(text, start, name_path, read))
    if not name or (names is not None and name not in names):
        return None
    for path in args_paths:
        member = member_at(text, start, path, read)
        if member is not None:
            if not text.startswith("{", member.start):  # a JSON string: whole at the end
                return Partial(name)
            if path == args_paths[0]:  # the first path read wins: no later member can change it
                kept[known] = (name, member.start)
            return Partial(name, settled_arguments(text, member.start, markers))
    return Partial(name)


def held_prefix(text: str, marker: str) -> int:
    """How many characters at the end of `text` could be the beginning of `marker`. Tried
    only where the marker holds the text's last character: called at every piece streamed."""
    if not text:
        return 0
    last = text[-1]
    k = marker.rfind(last, 0, min(len(marker) - 1, len(text)))
    while k != -1:
        if text.endswith(marker[: k + 1]):  # the marker's first k + 1 characters end it
            return k + 1
        k = marker.rfind(last, 0, k)
    return 0


# The markers that are one special token of the vocabulary, each with how llguidance's Lark
# writes that token: by its text where the text is `<...>`, else by its id (`<[5]>`).
Special = Mapping[str, str]


def special_by_text(markers: Iterable[str]) -> dict[str, str]:
    """Markers written `<...>`, which Lark names by their text."""
    return {marker: marker for marker in markers}


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
