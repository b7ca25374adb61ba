"""Chat templates rendered as llama.cpp renders them: the environment, and the messages in the
shapes each family's template reads.

A chat template comes from the GGUF file, so it is untrusted: it runs in jinja2's sandbox, which
refuses attribute tricks (`__class__`, `__globals__`, `mro`...) and ranges past 100,000 items; on
top of it, strings, lists and numbers that would fill the memory are refused where they are built
(`*`, `**`, `+`, `.append`, `.extend`...; not `~`, which jinja does not let a sandbox see), and an
unsafe attribute fails the render instead of printing nothing. It does not bound time: loops
within loops may run long. Unlike Hugging Face's immutable sandbox, a template may change lists
and dicts (`.append`, `.update`, `.pop`...), as llama.cpp's own engine lets it: real templates do
(Kimi K2's), and all it can reach are the fresh copies of the messages and tools that each
render is given. The extras real templates call are here too:
`raise_exception`, `strftime_now`, loop controls, `{% generation %}` blocks (rendered as their
body), a `tojson` that writes JSON as Python's json does, and `+` that reads an undefined or
none value beside a string as "" (llama.cpp's engine does; Command R+ adds a parameter's
missing description).

What a template needs of the messages is learnt once per template, as llama.cpp's capability
probes do (`TemplateNeeds`): a call's arguments as an object or as JSON text, call ids in the
family's shape (Mistral's 9 alphanumerics, Kimi K2's `functions.NAME:INDEX`), a call's empty
text as "" or none, and where an earlier turn's reasoning goes (llama.cpp's `reasoning_content`,
gpt-oss's `thinking`, Solar's `reasoning`, Ministral 3's `thinking` content block).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import operator
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from jinja2 import Template, TemplateError, Undefined, meta, nodes
from jinja2.ext import Extension
from jinja2.parser import Parser
from jinja2.sandbox import MAX_RANGE, SandboxedEnvironment, SecurityError

# The most a template may build: far past any prompt, far short of filling the memory.
MAX_TEXT = 16 * 1024 * 1024  # characters in one string (`*`, `+`)
MAX_ITEMS = 10 * MAX_RANGE  # items in one list or dict (`*`, `+`, `.append`, `.extend`...)
MAX_POWER_BITS = 64 * 1024  # bits in a number `**` gives


class GenerationBlocks(Extension):
    """`{% generation %}...{% endgeneration %}` (Hugging Face marks the assistant's tokens for
    training with it; LFM2.5's and Laguna's templates use it): rendered as its body."""

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)  # the `generation` name
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class TemplateSandbox(SandboxedEnvironment):
    """jinja2's sandbox, loud about unsafe attributes, with what `*`, `**`, `+` and a list's or
    dict's methods build bounded (`'x' * 10**10` would fill the memory), and `+` forgiving a
    missing value beside a string."""

    intercepted_binops = frozenset({"+", "*", "**"})

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        """An unsafe attribute fails the render at once (jinja's sandbox would hand back an
        undefined value that prints as nothing, and the template would go on)."""
        raise SecurityError(f"the sandbox refuses {attribute!r} of a {type(obj).__name__}")

    def call_binop(self, context: Any, op: str, left: Any, right: Any) -> Any:
        if op == "+":
            return _bounded(_plus(left, right))
        if op == "*":
            _check_repeat(left, right)
            _check_repeat(right, left)
            return operator.mul(left, right)
        if op == "**":
            _check_power(left, right)
            return operator.pow(left, right)
        return super().call_binop(context, op, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        result = super().call(__context, __obj, *args, **kwargs)
        _bounded(getattr(__obj, "__self__", None))  # the list or dict a method changed
        return result


def _plus(left: Any, right: Any) -> Any:
    if isinstance(left, str) and _is_nothing(right):
        return left
    if isinstance(right, str) and _is_nothing(left):
        return right
    return left + right


def _is_nothing(value: Any) -> bool:
    return value is None or isinstance(value, Undefined)


def _bounded(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_TEXT:
        raise SecurityError(f"the sandbox refuses strings longer than {MAX_TEXT} characters")
    if isinstance(value, list | dict) and len(value) > MAX_ITEMS:
        raise SecurityError(f"the sandbox refuses lists or dicts longer than {MAX_ITEMS} items")
    return value


def _check_repeat(sequence: Any, times: Any) -> None:
    if not (isinstance(sequence, str | list | tuple) and isinstance(times, int)):
        return
    limit = MAX_TEXT if isinstance(sequence, str) else MAX_ITEMS
    if len(sequence) * times > limit:
        raise SecurityError(f"the sandbox refuses sequences longer than {limit} items")


def _check_power(base: Any, exponent: Any) -> None:
    integers = isinstance(base, int) and isinstance(exponent, int) and exponent > 0
    if integers and max(abs(base), 2).bit_length() * exponent > MAX_POWER_BITS:
        raise SecurityError(f"the sandbox refuses numbers past {MAX_POWER_BITS} bits")


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _as_json_value(value: object) -> object:
    """What json cannot write on its own: jinja's lazy results (`map`, `select`...) are written
    as the lists they yield, an undefined value as null."""
    if isinstance(value, Undefined):
        return None
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(f"tojson cannot write a {type(value).__name__}")


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """`tojson` as Hugging Face renders templates: plain JSON in the given key order (jinja's
    own sorts keys and escapes `<`, `>`, `&` and `'` for HTML, which the models never saw)."""
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
        default=_as_json_value,
    )


@functools.cache
def template_environment() -> TemplateSandbox:
    """The one environment every chat template is parsed and rendered in (it holds no state a
    render could change: its globals are functions only)."""
    env = TemplateSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=["jinja2.ext.loopcontrols", GenerationBlocks],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


@functools.lru_cache(maxsize=8)
def compiled_template(template: str) -> Template:
    """Compiling a template costs ~12 ms (Qwen2.5's): once per template, not per prompt."""
    return template_environment().from_string(template)


@functools.lru_cache(maxsize=16)
def template_variables(template: str) -> frozenset[str]:
    """The variables the template reads from outside (`tools`, `enable_thinking`...), parsed as
    it is rendered; none when it cannot be parsed."""
    try:
        parsed = template_environment().parse(template)
    except TemplateError:
        return frozenset()
    return frozenset(meta.find_undeclared_variables(parsed))


# -- what a template needs of the messages ------------------------------------------------------

# How a call's id reaches the template.
IDS_AS_GIVEN = "as given"
IDS_NINE_ALPHANUMERICS = "nine alphanumerics"  # Mistral's templates refuse any other id
# Kimi K2's templates number their calls so, and one prints a result's id as it is given.
IDS_KIMI = "functions.NAME:INDEX"

# Where an earlier turn's reasoning goes: llama.cpp's field, then the names other families read.
REASONING_FIELD = "reasoning_content"
OTHER_REASONING_FIELDS = ("reasoning", "thinking")


@dataclass(frozen=True)
class TemplateNeeds:
    text_arguments: bool = False  # a call's arguments as JSON text (Functionary v3.2 adds them)
    call_ids: str = IDS_AS_GIVEN
    reasoning_fields: tuple[str, ...] = (REASONING_FIELD,)
    # The reasoning as a `thinking` block before the text (Ministral 3 reads content blocks).
    reasoning_blocks: bool = False
    # A message with calls and no text has content none (DeepSeek R1's templates write the calls
    # only then; llama.cpp passes "", as most templates want).
    null_call_content: bool = False


@functools.lru_cache(maxsize=64)
def template_needs(template: str) -> TemplateNeeds:
    """What this template needs of the messages, learnt by rendering a known tool conversation
    in each shape (as llama.cpp's capability probes do) and reading which fields it names: the
    first shape that shows the call, else the first that renders, else the defaults."""
    blocks = _reads_thinking_blocks(template)
    reasoning = (
        (REASONING_FIELD,) if blocks else (REASONING_FIELD, *_other_reasoning_field(template))
    )
    defaults = TemplateNeeds(reasoning_fields=reasoning, reasoning_blocks=blocks)
    if "tool_calls" not in fields_read(template):
        return defaults  # it writes no calls: nothing to learn
    id_shapes = [IDS_KIMI] if _writes_kimi_ids(template) else [IDS_AS_GIVEN, IDS_NINE_ALPHANUMERICS]
    rendered = None
    for call_ids in id_shapes:
        for null_call_content in (False, True):
            for text_arguments in (False, True):
                needs = TemplateNeeds(
                    text_arguments, call_ids, reasoning, blocks, null_call_content
                )
                shown = _probe_shows_the_call(template, needs)
                if shown:
                    return needs
                if shown is not None and rendered is None:
                    rendered = needs
    return rendered or defaults


def _other_reasoning_field(template: str) -> tuple[str, ...]:
    """The other name the template reads the reasoning under, when it does not read llama.cpp's
    (gpt-oss: `thinking`); none when it reads llama.cpp's, so that it is not written twice."""
    read = fields_read(template)
    if REASONING_FIELD in read:
        return ()
    return tuple(name for name in OTHER_REASONING_FIELDS if name in read)[:1]


def _reads_thinking_blocks(template: str) -> bool:
    """Whether the template reads reasoning only from content blocks (`block.type ==
    'thinking'`), not from any field of the message."""
    if REASONING_FIELD in fields_read(template):
        return False
    try:
        parsed = template_environment().parse(template)
    except TemplateError:
        return False
    return any(
        _is_type_of_block(compare.expr) and op.op == "eq" and _is_thinking(op.expr)
        for compare in parsed.find_all(nodes.Compare)
        for op in compare.ops
    )


def _is_type_of_block(node: nodes.Node) -> bool:
    if isinstance(node, nodes.Getattr):
        return node.attr == "type"
    return (
        isinstance(node, nodes.Getitem)
        and isinstance(node.arg, nodes.Const)
        and node.arg.value == "type"
    )


def _is_thinking(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Const) and node.value == "thinking"


def _writes_kimi_ids(template: str) -> bool:
    return "<|tool_call_begin|>" in template and (
        "'functions.'" in template or '"functions."' in template
    )


@functools.lru_cache(maxsize=64)
def fields_read(template: str) -> frozenset[str]:
    """The names the template reads off its values: `m.x`, `m['x']` and `m.get('x')`."""
    try:
        parsed = template_environment().parse(template)
    except TemplateError:
        return frozenset()
    names = {node.attr for node in parsed.find_all(nodes.Getattr)}
    for node in parsed.find_all(nodes.Getitem):
        if isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
            names.add(node.arg.value)
    for call in parsed.find_all(nodes.Call):
        if isinstance(call.node, nodes.Getattr) and call.node.attr == "get" and call.args:
            key = call.args[0]
            if isinstance(key, nodes.Const) and isinstance(key.value, str):
                names.add(key.value)
    return frozenset(names)


# llama.cpp's probe: a call, its result, an answer after it (Mistral's templates want one before
# the next question), a new question.
_PROBE_ARGUMENTS = {"arg": "probe-argument-value"}
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "tool1",
            "description": "Tool description",
            "parameters": {
                "type": "object",
                "properties": {"arg": {"type": "string", "description": "Arg description"}},
                "required": ["arg"],
            },
        },
    }
]


def _probe_messages(text_arguments: bool) -> list[dict[str, Any]]:
    arguments: Any = json.dumps(_PROBE_ARGUMENTS) if text_arguments else dict(_PROBE_ARGUMENTS)
    call = {
        "id": "call_probe_1",
        "type": "function",
        "function": {"name": "tool1", "arguments": arguments},
    }
    return [
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "Tool response", "tool_call_id": "call_probe_1"},
        {"role": "assistant", "content": "The tool response was 'tool response'"},
        {"role": "user", "content": "User message"},
    ]


def _probe_shows_the_call(template: str, needs: TemplateNeeds) -> bool | None:
    """Whether the probe, in these shapes, renders with the call's arguments in it (not as
    Python's repr of a dict: a template that adds them as they come wants text); None when the
    template refuses it."""
    messages = shape_messages(_probe_messages(needs.text_arguments), needs)
    try:
        text = compiled_template(template).render(
            messages=messages, tools=copy.deepcopy(_PROBE_TOOLS), add_generation_prompt=True,
            bos_token="", eos_token="",
        )  # fmt: skip
    except Exception:  # a probe the template refuses, whatever it raised
        return None
    return repr(_PROBE_ARGUMENTS) not in text and _PROBE_ARGUMENTS["arg"] in text


# -- the messages in those shapes ----------------------------------------------------------------


def shape_messages(messages: list[dict[str, Any]], needs: TemplateNeeds) -> list[dict[str, Any]]:
    """The messages (as `Message.as_dict` writes them, arguments already in the shape `needs`
    asks for) with call ids reshaped and the reasoning under every name the template reads. The
    same ids always give the same shapes, so that the next turn's prompt begins with this one."""
    ids = _id_map(messages, needs.call_ids)
    shaped = []
    for message in messages:
        message = dict(message)
        if "tool_calls" in message:
            message["tool_calls"] = [
                {**call, "id": ids.get(call.get("id"), call.get("id"))}
                for call in message["tool_calls"]
            ]
        if needs.null_call_content and message.get("tool_calls") and message["content"] == "":
            message["content"] = None
        if message.get("tool_call_id") is not None:
            message["tool_call_id"] = ids.get(message["tool_call_id"], message["tool_call_id"])
        if REASONING_FIELD in message:
            for name in needs.reasoning_fields:
                message.setdefault(name, message[REASONING_FIELD])
            if needs.reasoning_blocks:
                message["content"] = _with_thinking_block(message)
        shaped.append(message)
    return shaped


def _with_thinking_block(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = [{"type": "thinking", "thinking": message[REASONING_FIELD]}]
    if message["content"]:
        blocks.append({"type": "text", "text": message["content"]})
    return blocks


def _id_map(messages: list[dict[str, Any]], call_ids: str) -> dict[str, str]:
    if call_ids == IDS_AS_GIVEN:
        return {}
    ids: dict[str, str] = {}
    for message in messages:
        for index, call in enumerate(message.get("tool_calls") or ()):
            given = call.get("id")
            if not isinstance(given, str):
                continue
            if call_ids == IDS_KIMI:
                ids[given] = _kimi_id(given, call["function"]["name"], index)
            else:
                ids[given] = nine_alphanumerics(given)
    if call_ids == IDS_NINE_ALPHANUMERICS:  # a result whose call is no longer in the messages
        for message in messages:
            given = message.get("tool_call_id")
            if isinstance(given, str) and given not in ids:
                ids[given] = nine_alphanumerics(given)
    return ids


_KIMI_ID = re.compile(r"functions\.[^:]+:\d+")
_NINE = re.compile(r"[A-Za-z0-9]{9}")
_ALPHANUMERICS = string.digits + string.ascii_letters


def _kimi_id(given: str, name: str, index: int) -> str:
    """Kimi K2's id: the function's name and the call's place in its message, as the template
    numbers the calls it writes (an id already in that shape stays)."""
    return given if _KIMI_ID.fullmatch(given) else f"functions.{name}:{index}"


def nine_alphanumerics(given: str) -> str:
    """Mistral's id: nine letters and digits, the same for the same id (one already in that
    shape stays)."""
    if _NINE.fullmatch(given):
        return given
    number = int.from_bytes(hashlib.sha256(given.encode()).digest()[:8], "big")
    digits = []
    for _ in range(9):
        number, digit = divmod(number, len(_ALPHANUMERICS))
        digits.append(_ALPHANUMERICS[digit])
    return "".join(digits)
