"""The tool-call syntaxes written by hand, where the hand-written reader reads more than the
template shows:
- Hermes (Qwen2.5/3, Hermes, SmolLM3...): any number of
  `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, with text around; also a
  bare JSON call (or one in a ```json fence), which small Qwen models write;
- Llama 3.x: the whole answer is `{"name": ..., "parameters": {...}}` (after an optional
  `<|python_tag|>`; several joined by `;`);
- Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` at the end of the answer (the
  marker is a control token, so the text may begin at the `[`).
A template that uses `tools` in none of these ways, and teaches nothing the analysis learns,
gets the Hermes syntax: it is plain JSON in tags, which the grammar can force and the parser
read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from specllama.chat import ToolCall
from specllama.json_text import (
    decoded,
    elements,
    find,
    member_at,
    skip_blanks,
    string_at,
    value_end,
)
from specllama.tool_calls import (
    ARGUMENTS,
    Partial,
    Scan,
    Segment,
    Special,
    Tool,
    ToolFormat,
    arguments_rule,
    arguments_text,
    held_prefix,
    json_partial,
    new_call_id,
)


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


def _named_call(data: object, names: frozenset[str], text: str, start: int) -> ToolCall | None:
    """A bare JSON object (written at `start`) that is a call to one of `names` (with its
    arguments), or None."""
    if not isinstance(data, dict) or data.get("name") not in names:
        return None
    if "arguments" not in data and "parameters" not in data:
        return None
    return _call(data["name"], *_arguments_of(data, text, start, ARGUMENTS))


def _bare_start(text: str, pos: int = 0) -> str:
    """Whether the text at `pos` begins a bare JSON call, `{"name"` (maybe in a ```json
    fence): "yes", "maybe" (the text so far is too short to tell), or "no". Reads only what
    it needs: a call being written may be long."""
    if text.startswith("```", pos):
        pos += 3
        if len(text) - pos < 4 and "json".startswith(text[pos:]):
            return "maybe"
        pos = _skip_space(text, pos + 4 if text.startswith("json", pos) else pos)
    elif len(text) - pos < 3 and "```".startswith(text[pos:]):
        return "maybe"
    if pos >= len(text):
        return "maybe"
    if text[pos] != "{":
        return "no"
    after, key = _skip_space(text, pos + 1), '"name"'
    if len(text) - after < len(key):
        return "maybe" if key.startswith(text[after:]) else "no"
    return "yes" if text.startswith(key, after) else "no"


def _skip_space(text: str, pos: int) -> int:
    """Past the whitespace at `pos` (as `str.lstrip` skips it)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _lark_string(text: str) -> str:
    return json.dumps(text)


def _json_call_rules(
    tools: Sequence[Tool],
    calls: str,
    key: str,
    *,
    lines: bool = False,
    around: tuple[str, str] | None = None,
) -> list[str]:
    """Lark rules for calls written as `{"name": NAME, KEY: ARGUMENTS}`, one alternative per
    tool, strung together by the rule `calls`; with `lines`, each object on a line of its own,
    and `around`: the rules for the markers that open and close each call."""
    rules = [calls, "call: " + " | ".join(f"call_{i}" for i in range(len(tools)))]
    newline = "\n" if lines else ""
    opening, closing = (f"{around[0]} ", f" {around[1]}") if around else ("", "")
    for i, tool in enumerate(tools):
        head = _lark_string(f'{newline}{{"name": {json.dumps(tool.name)}, {json.dumps(key)}: ')
        tail = _lark_string("}" + newline)
        rules.append(f"call_{i}: {opening}{head} args_{i} {tail}{closing}")
        rules.append(f"args_{i}: {arguments_rule(tool)}")
    return rules


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
            if kind == "tag":
                read = self._tagged(text, begin, final)
            else:
                read = self._bare(text, begin, final)
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
            if text.startswith(self.OPEN, i):
                return i, "tag"
            if len(text) - i < len(self.OPEN) and self.OPEN.startswith(text[i:]):
                return i, "maybe"
            bare = _bare_start(text, i)
            if bare != "no":
                return i, "bare" if bare == "yes" else "maybe"
        return -1, ""

    def _tagged(self, text: str, begin: int, final: bool) -> tuple[Segment, int, bool] | None:
        body_start = begin + len(self.OPEN)
        closed = find(text, self.CLOSE, body_start)
        if closed == -1 and not final:
            return None
        body = text[body_start:] if closed == -1 else text[body_start:closed]
        call = _json_call(body.strip())
        if call is None:  # broken off, or not JSON: the rest stays text
            return Segment(text[begin:]), len(text), True
        return Segment(call=call), len(text) if closed == -1 else closed + len(self.CLOSE), False

    def _bare(self, text: str, begin: int, final: bool) -> tuple[Segment, int, bool] | None:
        brace = text.index("{", begin)
        found = decoded(text, brace)
        if found is None:  # not whole yet: held (or never: then text, and broken, at the end)
            if final:
                return Segment(text[begin:]), len(text), True
            # Once its name is whole and names no offered tool, it is text: sent on at once,
            # not held to its end (a small Qwen model's fenced JSON ran 110 tokens, ~13 s of
            # silence to Claude Code). What follows the name is read on as text is.
            name = member_at(text, brace, ("name",))
            if name is None or name.end is None or string_at(text, name) in self.names:
                return None
            return Segment(text[begin : name.end]), name.end, False
        data, end = found
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
        elif _bare_start(text, start) == "yes":
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

        calls = 'calls: call ("\\n" call)*' if parallel else "calls: call"
        return _json_call_rules(
            tools, calls, "arguments", lines=True, around=(tag(self.OPEN), tag(self.CLOSE))
        )


class Llama3(ToolFormat):
    """The answer is a call as a whole, or text: told apart by how it begins."""

    name = "llama3"
    TAG = "<|python_tag|>"
    markers = (TAG,)

    def scan(self, text: str, start: int, final: bool) -> Scan:
        if start > 0:  # already told to be text
            return Scan([Segment(text[start:])], len(text))
        at = _skip_space(text, 0)  # read from there only: a call being written may be long
        maybe_call = text.startswith(("{", self.TAG), at) or (
            len(text) - at < len(self.TAG) and self.TAG.startswith(text[at:])
        )
        if not maybe_call:
            return Scan([Segment(text)], len(text))
        if not final:
            return Scan([], 0)
        head = text[at:]
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
        calls = 'calls: call ("; " call)*' if parallel else "calls: call"
        return _json_call_rules(tools, calls, "parameters")


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
        marked = find(text, self.MARK, start)
        at = _skip_space(text, 0)
        if marked == -1 and at >= start:  # only blanks so far: `[{` may begin
            if text.startswith("[{", at):
                marked = at
            elif not final and len(text) - at <= 1 and text[at:] in ("", "["):
                return Scan([], start)
        if marked == -1:
            tail = text[max(start, len(text) - len(self.MARK)) :]
            hold = 0 if final else held_prefix(tail, self.MARK)
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
        calls = 'calls: "[" call (", " call)* "]"' if parallel else 'calls: "[" call "]"'
        return _json_call_rules(tools, calls, "arguments")


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
