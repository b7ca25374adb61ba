"""Tool calls in the syntax learnt from a family's template (`analysis.CallSyntax`): read from
the answer whole or as it streams, and forced by a Lark grammar that writes the same syntax.

A section of calls is held from its first marker until it is whole (then its calls go out) or
cannot be one (then, at the end of the answer, its text goes out as text, broken). The markers
that end a section may be missing at the very end of the answer: a family's end-of-call marker
is often its end-of-generation token (gpt-oss' `<|call|>`, Llama's `<|eom_id|>`), which the
engine stops at.

A call streams as it is written (`partial`): the same reading, run on the text so far, tells
a `calls_seen.Progress` how far it got.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

from specllama.chat import ToolCall
from specllama.family.analysis import SLOT_ARGS, SLOT_ID, SLOT_NAME, CallSyntax
from specllama.family.calls_seen import Progress, Seen, arguments_json
from specllama.family.calls_text import (
    Bad,
    More,
    expect,
    first_word,
    is_string_schema,
    lark_literal,
    markers_in,
    peek,
    read_json,
    read_name,
    read_until,
    regex_escape,
    skip_blanks,
    text_without,
    typed,
)
from specllama.json_text import Growing, elements, find, members
from specllama.tool_calls import (
    Partial,
    Scan,
    Segment,
    Special,
    Tool,
    ToolFormat,
    arguments_rule,
    arguments_text,
    held_prefix,
    new_call_id,
)

UNSEEN = Seen()

JSON_KIND, STRING_KIND = 0, 1  # indexes of CallSyntax.key_suffix and value_suffix


class LearntFormat(ToolFormat):
    """The calls of a family whose markers were learnt from its template."""

    def __init__(self, syntax: CallSyntax, tools: Sequence[Tool | str] = ()) -> None:
        super().__init__(tools)
        self.syntax = syntax
        self.name = f"learnt-{syntax.style}"
        self.markers = markers_in(syntax.literals())
        # Gemma 4 quotes strings with its own marker, in nested values too: `{k:<|"|>v<|"|>}`
        j, s = syntax.key_suffix
        self._quote = s[len(j) :] if s.startswith(j) and s != j else ""

    # -- reading --------------------------------------------------------------------------

    def scan(self, text: str, start: int, final: bool) -> Scan:
        trigger = self.syntax.trigger
        if not trigger:
            return Scan([Segment(text[start:])], len(text))
        segments: list[Segment] = []
        pos = start
        while True:
            at = find(text, trigger, pos)
            if at == -1:
                tail = text[max(pos, len(text) - len(trigger)) :]
                hold = 0 if final else held_prefix(tail, trigger)
                segments.append(Segment(text[pos : len(text) - hold]))
                return Scan(segments, len(text) - hold)
            segments.append(Segment(text[pos:at]))
            try:
                calls, pos = self._section(text, at, final, self._seen(text, at, final))
            except (More, Bad):  # not whole yet, or broken: held, and text at the end
                if not final:
                    return Scan(segments, at)
                segments.append(Segment(text[at:]))
                return Scan(segments, len(text), broken=True)
            segments += [Segment(call=call) for call in calls]

    def partial(self, text: str, start: int) -> list[Partial]:
        """The calls of the section at `start` as far as its reading got (the scan's own
        reading of this very text, where it kept it)."""
        kept = text.reads.kept.get(("progress", start)) if isinstance(text, Growing) else None
        if kept is not None and kept[0] == len(text):
            return kept[1].calls
        progress = Progress(text, self.syntax, self.markers)
        with contextlib.suppress(More, Bad):
            self._section(text, start, False, progress)
        return progress.calls

    def _seen(self, text: str, at: int, final: bool) -> Seen:
        """What the scan's reading of the section at `at` tells: kept for `partial`, which
        asks for the same reading of a growing text that is not over."""
        if final or not isinstance(text, Growing):
            return UNSEEN
        progress = Progress(text, self.syntax, self.markers)
        text.reads.kept[("progress", at)] = (len(text), progress)
        return progress

    def _section(
        self, text: str, pos: int, final: bool, seen: Seen = UNSEEN
    ) -> tuple[list[ToolCall], int]:
        s = self.syntax
        pos = expect(text, pos, s.section_start.lstrip())
        if s.style == "json" and s.in_array:
            return self._array(text, pos, final, seen)
        calls = []
        first = s.call_start if s.section_start.strip() else s.call_start.lstrip()
        pos = expect(text, pos, first)
        while True:
            call, pos = self._call(text, pos, final, seen)
            seen.done([call])
            calls.append(call)
            pos = _closing(text, pos, s.call_end, final)
            if s.section_end.strip() and peek(text, pos, s.section_end):
                return calls, expect(text, pos, s.section_end)
            again = peek(text, pos, s.call_sep + s.call_start)
            if again is None and not final and (s.call_sep + s.call_start).strip():
                raise More
            if again:
                pos = expect(text, pos, s.call_sep + s.call_start)
                continue
            if s.section_end.strip():
                return calls, _closing(text, pos, s.section_end, final)
            return calls, pos

    def _array(self, text: str, pos: int, final: bool, seen: Seen) -> tuple[list[ToolCall], int]:
        s = self.syntax
        start = skip_blanks(text, pos)
        seen.objects(start, array=True)
        data, pos = read_json(text, start, [s.section_end], final)
        if isinstance(data, list):
            items = list(zip(data, [at for at, _ in elements(text, start)[0]], strict=True))
        else:
            items = [(data, start)]
        calls = [self._json_call(item, text, at) for item, at in items]
        if not calls:
            raise Bad
        seen.done(calls)
        return calls, _closing(text, pos, s.section_end, final)

    def _call(self, text: str, pos: int, final: bool, seen: Seen) -> tuple[ToolCall, int]:
        s = self.syntax
        if s.style == "json":
            start = skip_blanks(text, pos)
            seen.objects(start, array=False)
            data, pos = read_json(text, start, [s.call_end, s.section_end], final)
            return self._json_call(data, text, start), pos
        if s.id_slot == "before_name":
            _, pos = read_until(text, pos, [s.id_suffix])
            pos = expect(text, pos, s.id_suffix)
        if s.style == "tag_json":
            return self._tag_json_call(text, pos, final, seen)
        return self._tagged_call(text, pos, final, seen)

    def _json_call(self, data: Any, text: str, start: int) -> ToolCall:
        """The call in `data`, read from the JSON written at `start`: its arguments kept as
        the text the model wrote."""
        s = self.syntax
        if s.name_is_key:
            if not isinstance(data, dict) or len(data) != 1:
                raise Bad
            ((name, arguments),) = data.items()
            first = members(text, start)[0][0]
            return _made(name, arguments, text[first.start : first.end])
        name, arguments = _at(data, s.name_path), _at(data, s.args_path)
        return _made(name, arguments, arguments_text(text, start, s.args_path))

    def _skip_id(self, text: str, pos: int, after: list[str]) -> int:
        """Past the id written after the name (a call id, or Kimi's index)."""
        s = self.syntax
        pos = expect(text, pos, s.name_suffix)
        _, pos = read_until(text, pos, after)
        return pos

    def _tag_json_call(self, text: str, pos: int, final: bool, seen: Seen) -> tuple[ToolCall, int]:
        s = self.syntax
        name, pos = read_name(text, pos, [s.name_suffix])
        if s.id_slot == "after_name":
            pos = expect(text, self._skip_id(text, pos, [s.id_suffix]), s.id_suffix)
        else:
            pos = expect(text, pos, s.name_suffix)
        seen.named(name)
        start = skip_blanks(text, pos)
        seen.json_at(start)
        arguments, pos = read_json(text, start, [s.call_end, s.section_end], final)
        return _made(name, arguments, text[start:pos]), pos

    def _tagged_call(self, text: str, pos: int, final: bool, seen: Seen) -> tuple[ToolCall, int]:
        s = self.syntax
        after_id = s.id_slot == "after_name"
        head = s.args_start if after_id else s.name_suffix
        empty = s.empty_args + s.call_end
        name, pos = read_name(text, pos, [s.name_suffix] if after_id else [head, empty])
        if after_id:
            pos = self._skip_id(text, pos, [head, s.empty_args])
        seen.named(name)
        if peek(text, pos, empty):
            return _made(name, {}), expect(text, pos, s.empty_args)
        if not peek(text, pos, head):
            raise More if None in (peek(text, pos, head), peek(text, pos, empty)) else Bad
        pos = expect(text, pos, head)
        schema = self.tools[name].parameters.get("properties", {}) if name in self.tools else {}
        pairs: list[tuple[str, Any]] = []  # as written: the call's JSON is built in this order
        while True:
            key, value, pos = self._argument(text, pos, schema, final)
            pairs.append((key, value))
            seen.argument(key, value)
            if peek(text, pos, s.call_end) and not peek(text, pos, s.arg_sep):
                return _made(name, {}, arguments_json(pairs)), pos
            if peek(text, pos, s.arg_sep):
                pos = expect(text, pos, s.arg_sep)
                continue
            if final and skip_blanks(text, pos) == len(text):
                return _made(name, {}, arguments_json(pairs)), len(text)
            if peek(text, pos, s.call_end) is None or peek(text, pos, s.arg_sep) is None:
                raise More
            raise Bad

    def _argument(
        self, text: str, pos: int, schema: dict[str, Any], final: bool
    ) -> tuple[str, Any, int]:
        s = self.syntax
        raw_key, pos = read_until(text, pos, list(s.key_suffix))
        key = raw_key.strip()
        marked = s.key_suffix[0] != s.key_suffix[1] or s.value_suffix[0] != s.value_suffix[1]
        kind = _kind(text, pos, s.key_suffix, schema.get(key))
        if kind is None:  # a type named in neither learnt marker (Kimi K3's type="object")
            shared = _shared_tail(*s.key_suffix)
            _, pos = read_until(text, pos, [shared])
            kind = STRING_KIND if _string_schema(schema.get(key)) else JSON_KIND
            marked = False
            pos = expect(text, pos, shared)
        else:
            pos = expect(text, pos, s.key_suffix[kind])
        suffix = s.value_suffix[kind]
        if kind == JSON_KIND and not first_word(suffix) and marked:  # bare JSON (Gemma 4)
            try:
                value, end = read_json(text, pos, [s.arg_sep, s.call_end], final)
                return key, value, expect(text, end, suffix)
            except Bad:
                pass
        stops = [suffix] if first_word(suffix) else [s.arg_sep, s.call_end]
        raw, end = read_until(text, pos, stops, limit=1_000_000)
        lead = suffix[: len(suffix) - len(suffix.lstrip())]
        if lead and raw.endswith(lead):
            raw = raw[: -len(lead)]
        value = typed(raw, schema.get(key), marked and kind == STRING_KIND, self._quote)
        return key, value, expect(text, end, suffix.lstrip()) if first_word(suffix) else end

    # -- forcing --------------------------------------------------------------------------

    def rules(self, tools: Sequence[Tool], *, parallel: bool, special: Special) -> list[str]:
        s = self.syntax

        def lit(text: str) -> str:
            return lark_literal(text, special)

        if s.style == "json" and s.in_array:
            head, sep, tail = s.section_start + s.array_open, s.array_sep, s.array_close
            tail += s.section_end
        else:
            head, sep, tail = s.section_start, s.call_end + s.call_sep, s.call_end + s.section_end
        many = f"call ({lit(sep)} call)*" if parallel else "call"
        rules = [
            f"calls: {lit(head)} {many} {lit(tail)}",
            "call: " + " | ".join(f"call_{i}" for i in range(len(tools))),
        ]
        for i, tool in enumerate(tools):
            rules += self._call_rules(i, tool, lit, special)
        return rules

    def _call_rules(self, i: int, tool: Tool, lit: Any, special: Special) -> list[str]:
        s = self.syntax
        ident = "/[0-9]/" if s.id_kind == "index" else "/[a-zA-Z0-9]{9}/"
        args = f"args_{i}"
        if s.style == "json":
            body = []
            for piece in s.pattern:
                if piece == SLOT_NAME:
                    body.append(lit(json.dumps(tool.name)[1:-1]))
                elif piece == SLOT_ARGS:
                    body.append(args)
                elif piece == SLOT_ID:
                    body.append(ident)
                else:
                    body.append(lit(piece))
            prefix = lit(s.call_start) if not s.in_array else '""'
            return [f"call_{i}: {prefix} {' '.join(body)}", f"{args}: {arguments_rule(tool)}"]
        before = f"{ident} {lit(s.id_suffix)} " if s.id_slot == "before_name" else ""
        name = lit(tool.name)
        if s.style == "tag_json":
            after = lit(s.name_suffix)
            if s.id_slot == "after_name":
                after += f" {ident} {lit(s.id_suffix)}"
            return [
                f"call_{i}: {lit(s.call_start)} {before}{name} {after} {args}",
                f"{args}: {arguments_rule(tool)}",
            ]
        return self._tagged_rules(i, tool, lit, before, ident, special)

    def _tagged_rules(
        self, i: int, tool: Tool, lit: Any, before: str, ident: str, special: Special
    ) -> list[str]:
        s = self.syntax
        props: dict[str, Any] = (tool.parameters or {}).get("properties") or {}
        required = set((tool.parameters or {}).get("required") or [])
        after_id = s.id_slot == "after_name"
        head = f"{lit(s.name_suffix)} {ident} " if after_id else ""
        start = f"call_{i}: {lit(s.call_start)} {before}{lit(tool.name)} {head}"
        if not props:
            return [start + lit(s.empty_args)]
        opener = lit(s.args_start if after_id else s.name_suffix)
        rules = [start + f"{opener} args_{i}"]
        names = list(props)
        for j, key in enumerate(names):
            kind = JSON_KIND if not _string_schema(props[key]) else STRING_KIND
            suffix = lit(s.value_suffix[kind])
            if kind == STRING_KIND:
                value, suffix = _string_value(f"{i}_{j}", s, special, lit, rules, props[key])
            else:
                value = f"val_{i}_{j}"
                rules.append(f"{value}: %json {json.dumps(_styled(props[key]))}")
            key_text = lit(key) + " " + lit(s.key_suffix[kind])
            rules.append(f"arg_{i}_{j}: {key_text} {value} {suffix}")
        firsts = []  # the first argument written, and those after it in order
        for j, key in enumerate(names):
            rest = [
                f"{lit(s.arg_sep)} arg_{i}_{k}"
                if names[k] in required
                else f"({lit(s.arg_sep)} arg_{i}_{k})?"
                for k in range(j + 1, len(names))
            ]
            firsts.append(" ".join([f"arg_{i}_{j}", *rest]))
            if key in required:
                break
        rules.append(f"args_{i}: " + " | ".join(f"({f})" for f in firsts))
        return rules


# -- helpers --------------------------------------------------------------------------------


def _string_value(
    tag: str, s: CallSyntax, special: Special, lit: Any, rules: list[str], schema: Any
) -> tuple[str, str]:
    """A bare string value and what ends it, as Lark: (value rule, suffix). The value ends
    where the first word of its end marker first comes, as the reader reads it (blanks before
    the marker are the value's: the reader drops those the template writes): text is matched
    lazily with the value, a special token ends any text by itself. The string's own schema
    (enum, const, pattern, length) bounds what the value may be."""
    body = s.value_suffix[STRING_KIND].lstrip()
    word = first_word(body)
    cut = min([word.find(m) for m in special if m in word] or [len(word)])
    head = word[:cut]
    chosen = _string_choices(schema)
    if chosen is not None:  # a few fixed values: each written whole, then the end marker
        rules.append(f"str_{tag}: " + " | ".join(json.dumps(c) for c in chosen))
        return f"str_{tag}", lit(body) if body else ""
    text = _string_regex(schema)
    if head:
        rules.append(f"str_{tag}[lazy]: /{text}{regex_escape(head)}/")
        rest = body[len(head) :]
        return f"str_{tag}", lit(rest) if rest else ""
    if body:
        rules.append(f"STR_{tag}: /{text}/")
        return f"STR_{tag}", lit(body)
    rules.append(f"STR_{tag}: {text_without([s.arg_sep, s.call_end])}")
    return f"STR_{tag}", ""


def _string_choices(schema: Any) -> list[str] | None:
    """The values a string schema allows, when it names them (enum, const)."""
    if not isinstance(schema, dict):
        return None
    if isinstance(schema.get("const"), str):
        return [schema["const"]]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return enum
    return None


def _string_regex(schema: Any) -> str:
    """A regex (for Lark's /.../) of the strings a string schema allows: its pattern (JSON
    Schema's are searched, so an unanchored one may have text around), else any text of its
    length bounds."""
    schema = schema if isinstance(schema, dict) else {}
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        inner = pattern.removeprefix("^").removesuffix("$").replace("/", "\\/")
        before = "" if pattern.startswith("^") else "(?s:.*)"
        after = "" if pattern.endswith("$") and not pattern.endswith("\\$") else "(?s:.*)"
        return f"{before}(?:{inner}){after}"
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    if isinstance(high, int) or (isinstance(low, int) and low > 0):
        return f"(?s:.{{{int(low or 0)},{'' if high is None else int(high)}}})"
    return "(?s:.*)"


def _closing(text: str, pos: int, literal: str, final: bool) -> int:
    """Past a closing marker; at the end of the answer it may be missing (an end-of-generation
    token), and a model that goes on without it has still made its call."""
    if not literal.strip():
        return expect(text, pos, literal) if peek(text, pos, literal) else pos
    try:
        return expect(text, pos, literal)
    except More:
        if final:
            return len(text)
        raise
    except Bad:
        return pos


def _at(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            raise Bad
        data = data[key]
    return data


def _made(name: object, arguments: object, written: str | None = None) -> ToolCall:
    """A call; `written`: its arguments' JSON text as the model wrote it (or as built)."""
    if isinstance(arguments, str):  # arguments written as JSON text
        try:
            arguments = json.loads(arguments)
        except ValueError:
            raise Bad from None
        written = None
    if not isinstance(name, str) or not name or not isinstance(arguments, dict):
        raise Bad
    text = written if written is not None else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(new_call_id(), name, text)


def _kind(text: str, pos: int, suffixes: tuple[str, str], schema: Any) -> int | None:
    """Which value follows: told by its marker where the family marks strings apart, else by
    the parameter's schema."""
    if suffixes[0] == suffixes[1]:
        return STRING_KIND if _string_schema(schema) else JSON_KIND
    order = sorted((JSON_KIND, STRING_KIND), key=lambda k: -len(suffixes[k]))
    for kind in order:
        seen = peek(text, pos, suffixes[kind])
        if seen:
            return kind
        if seen is None:
            raise More
    return None


def _shared_tail(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return a[len(a) - n :]


def _string_schema(schema: Any) -> bool:
    return is_string_schema(schema if isinstance(schema, dict) else None)


def _styled(schema: dict[str, Any]) -> dict[str, Any]:
    from specllama.tool_calls import JSON_STYLE

    return {**schema, "x-guidance": JSON_STYLE}
