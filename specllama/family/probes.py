"""The probes a family's template is rendered with, to learn its call syntax (`analysis`): the
same assistant turn with a known call and with plain text, and what the call's rendering has in
place of the plain one (as llama.cpp's template analysis does).

The call uses distinctive names and values (`special_function`, `arg1` = 4567, `arg2` =
"Blue sky"), so that each can be found again in what the template wrote; what is around them
are the family's markers, cut so that none is left half (`<...`, `[...`).
"""

from __future__ import annotations

import json
from typing import Any

from specllama.chat import Message, ToolCall, render_chat

NAME, OTHER = "special_function", "other_function"
INT_KEY, STR_KEY = "arg1", "arg2"
INT_VALUE, STR_VALUE, OTHER_VALUE = 4567, "Blue sky", 8901
IDS = ("call00001", "call00002")  # nine alphanumerics, as Mistral's templates insist
PLAIN = "I will help you with that."


class NotLearnt(Exception):
    """The template's rendering of a call has no shape this analysis knows."""


# -- rendering ------------------------------------------------------------------------------


def _tools() -> list[dict[str, Any]]:
    params = {
        "type": "object",
        "properties": {INT_KEY: {"type": "integer"}, STR_KEY: {"type": "string"}},
        "required": [INT_KEY],
    }
    other = {"type": "object", "properties": {INT_KEY: {"type": "integer"}}}
    return [
        {"type": "function", "function": {"name": NAME, "description": "d", "parameters": params}},
        {"type": "function", "function": {"name": OTHER, "description": "d", "parameters": other}},
    ]


def rendered_answer(template: str, last: Message) -> str:
    """The assistant turn as the template writes it, after its generation prompt."""
    question = [Message("user", "Hello, please help me.")]
    kwargs = {"bos_token": "<s>", "eos_token": "</s>", "tools": _tools()}
    head = render_chat(template, question, add_generation_prompt=True, **kwargs)
    whole = render_chat(template, [*question, last], add_generation_prompt=False, **kwargs)
    if whole.startswith(head):
        return whole[len(head) :]
    return whole[cut_head(whole, common_prefix(head, whole)) :]


def calls_turn(*calls: tuple[str, dict[str, Any]]) -> Message:
    """An assistant turn of these calls, (name, arguments) pairs, with the probe ids."""
    made = tuple(ToolCall(IDS[i], name, json.dumps(args)) for i, (name, args) in enumerate(calls))
    return Message("assistant", "", tool_calls=made)


# -- text helpers ---------------------------------------------------------------------------

_OPEN, _CLOSE = "<[", ">]"


def common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def common_suffix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _inside_marker(text: str) -> bool:
    """Whether `text` ends inside an unclosed `<...` or `[...`."""
    opened = max(text.rfind(c) for c in _OPEN)
    return opened > max(text.rfind(c) for c in _CLOSE)


def cut_head(text: str, n: int) -> int:
    """The longest head of `text` up to `n` characters that does not end inside a marker."""
    while n > 0 and _inside_marker(text[:n]):
        n -= 1
    return n


def cut_tail(text: str, n: int) -> int:
    """The longest tail of `text` up to `n` characters that does not begin inside a marker."""
    while n > 0 and _inside_marker(text[: len(text) - n]):
        n -= 1
    return n


def call_region(plain: str, call: str) -> str:
    """What the call's answer has in place of the plain one, its markers whole."""
    head = cut_head(call, min(common_prefix(plain, call), len(call)))
    tail = common_suffix(plain[head:], call[head:])
    tail = cut_tail(call, tail)
    return call[head : len(call) - tail]


def json_at(text: str, pos: int) -> tuple[Any, int] | None:
    try:
        return json.JSONDecoder().raw_decode(text, pos)
    except ValueError:
        return None


def json_spans(text: str, wanted: Any) -> list[tuple[int, int]]:
    """Where JSON equal to `wanted` is written in `text`."""
    spans = []
    for i, ch in enumerate(text):
        if ch in "{[":
            found = json_at(text, i)
            if found is not None and found[0] == wanted:
                spans.append((i, found[1]))
    return spans


def locate(text: str, needle: str, start: int = 0) -> int:
    """Where `needle` is in `text` from `start` (NotLearnt where it is not)."""
    at = text.find(needle, start)
    if at == -1:
        raise NotLearnt(f"{needle!r} not found")
    return at


# -- what a model trained on the template writes ----------------------------------------


def written_calls(template: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """What the template writes for an assistant turn of these calls, where a plain answer
    would be (after the generation prompt, before the end of turn): the text a model trained
    on it writes. `calls`: (name, arguments) pairs."""
    plain = rendered_answer(template, Message("assistant", PLAIN))
    made = tuple(ToolCall(IDS[i % 2], n, json.dumps(a)) for i, (n, a) in enumerate(calls))
    return call_region(plain, rendered_answer(template, Message("assistant", "", tool_calls=made)))
