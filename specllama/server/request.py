"""The server's one request type, whatever API a request came through, and the checks every
wire format applies the same way.

Each wire format (server/openai_chat.py, openai_responses.py, anthropic.py) reads its JSON into
a GenerationRequest; the app, the queue, the engine, the tool-call parser and the constraint
see only this type, so the same conversation gives the same tokens through every API.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from specllama.chat import Message
from specllama.engine.constraint import ConstraintSpec
from specllama.engine.noise import SEED_LIMIT
from specllama.engine.sampling import SamplingParams
from specllama.server.fields import ApiError, Fields, invalid_type, unsupported
from specllama.tool_calls import Tool

# OpenAI allows 4 stop strings; editor plugins send more. Each costs checks on every token.
MAX_STOPS = 32
MAX_STOP_CHARS = 256
TOOL_CHOICES = ("none", "auto", "required")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
RANDOM_SEED = -1  # llama.cpp's convention for "no seed", which some clients send
FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]+")  # OpenAI's and Anthropic's rule for names


@dataclass(frozen=True)
class GenerationRequest:
    """What a request asks for, checked: a chat (messages) or a text completion (prompt)."""

    model: str  # as the client named it: a single-model server answers any name
    max_tokens: int | None  # None: until the context is full
    sampling: dict[str, Any]  # the SamplingParams fields the client set
    stop: tuple[str, ...] = ()
    stream: bool = False
    include_usage: bool = False
    messages: tuple[Message, ...] = ()  # chat
    drafter: str | None = None  # specllama.drafter: who drafts this answer; None: the server's
    prompt: str | None = None  # text completion
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"  # "auto", "none", "required", or "function": `forced_function`
    forced_function: str | None = None
    parallel_tool_calls: bool = True
    # An output rule (a JSON Schema, any JSON object, a grammar); `rule_param` names where
    # the client gave it (response_format, text.format, grammar)
    rule: ConstraintSpec | None = None
    rule_param: str | None = None
    # OpenAI's Predicted Outputs: the answer the client expects (an edited file), drafted from
    prediction: str | None = None
    # The chat template's own variables (chat_template_kwargs), and whether the model thinks:
    # "on", "off", or None (the server's --reasoning); thinking bounded to `reasoning_budget`
    # tokens (None: the server's --reasoning-budget)
    template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    reasoning: str | None = None
    reasoning_budget: int | None = None

    @property
    def uses_tools(self) -> bool:
        """Whether the model is told of tools and its answer read for calls."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def forces_call(self) -> bool:
        return self.uses_tools and self.tool_choice in ("required", "function")

    def forced_tools(self) -> tuple[Tool, ...]:
        """The tools a forced call may be to: the one named, or all of them."""
        if self.tool_choice == "function":
            return tuple(t for t in self.tools if t.name == self.forced_function)
        return self.tools

    def sampling_params(self, defaults: SamplingParams) -> SamplingParams:
        """The server's defaults, with what the client set."""
        return dataclasses.replace(defaults, **self.sampling)

    def checked(self) -> GenerationRequest:
        """The request, once the combinations no API allows are refused."""
        if self.forces_call and self.rule is not None:
            choice = self.tool_choice if not self.forced_function else "function"
            raise ApiError(
                400,
                f"'{self.rule_param}' cannot be combined with a forced tool call (tool_choice "
                f"{choice!r}): the answer is the call. Send one or the other.",
                param=self.rule_param,
                code="unsupported_combination",
            )
        if self.uses_tools and self.rule_param == "grammar":
            raise ApiError(
                400,
                "'grammar' cannot be combined with tools (unless tool_choice is \"none\").",
                param="grammar",
                code="unsupported_combination",
            )
        return self


def template_kwargs(value: dict[str, Any] | None) -> dict[str, Any]:
    """`chat_template_kwargs`: variables for the template, as llama-server takes them."""
    return dict(value or {})


def reasoning_from(effort: str | None, kwargs: dict[str, Any]) -> str | None:
    """Whether a request asks for thinking: OpenAI's `reasoning_effort` ("none" is off; a
    template that reads the effort, gpt-oss's, gets it through `kwargs`), or
    `chat_template_kwargs.enable_thinking`, as llama-server reads it."""
    if effort is not None:
        if effort not in REASONING_EFFORTS:
            choices = ", ".join(repr(e) for e in REASONING_EFFORTS)
            message = f"Invalid 'reasoning_effort': expected one of {choices}, got {effort!r}."
            raise ApiError(400, message, param="reasoning_effort", code="invalid_value")
        if effort == "none":
            return "off"
        kwargs.setdefault("reasoning_effort", effort)
        return "on"
    enabled = kwargs.get("enable_thinking")
    return None if enabled is None else ("on" if enabled else "off")


def sampling(fields: Fields) -> dict[str, Any]:
    """The SamplingParams fields a request sets, under their own names (top_k and min_p as
    llama.cpp's server takes them), with OpenAI's ranges."""
    chosen = {
        "temperature": fields.number("temperature", minimum=0, maximum=2),
        "top_p": fields.number("top_p", minimum=0, maximum=1),
        "top_k": fields.int("top_k", minimum=0),
        "min_p": fields.number("min_p", minimum=0, maximum=1, below_maximum=True),
        "seed": fields.int("seed", minimum=RANDOM_SEED, maximum=SEED_LIMIT - 1),
    }
    if chosen["top_p"] == 0:  # the smallest set of tokens with mass 0: the likeliest alone
        chosen.update(top_p=None, temperature=0.0)
    if chosen["seed"] == RANDOM_SEED:
        chosen["seed"] = None  # the server sets no seed of its own: random
    return {k: v for k, v in chosen.items() if v is not None}


def stops(value: str | list[Any] | None, param: str) -> tuple[str, ...]:
    """Stop strings: one, or an array of them."""
    given = [value] if isinstance(value, str) else (value or [])
    if len(given) > MAX_STOPS:
        message = f"At most {MAX_STOPS} stop strings are allowed."
        raise ApiError(400, message, param=param, code="invalid_value")
    for i, stop in enumerate(given):
        if not isinstance(stop, str):
            raise invalid_type(f"{param}[{i}]", "a string", stop)
        if len(stop) > MAX_STOP_CHARS:
            raise ApiError(
                400,
                f"A stop string may have at most {MAX_STOP_CHARS} characters.",
                param=f"{param}[{i}]" if isinstance(value, list) else param,
                code="invalid_value",
            )
    return tuple(given)


def function_name(fields: Fields, where: str, longest: int = 64) -> str:
    """A tool's name: 1 to `longest` letters, digits, underscores or dashes (OpenAI allows
    64, Anthropic 128)."""
    name = fields.get("name", str, "a string", required=True)
    if not (FUNCTION_NAME.fullmatch(name) and len(name) <= longest):
        raise ApiError(
            400,
            f"Invalid '{where}': {name!r}; a function name is 1 to {longest} letters, digits, "
            "underscores or dashes.",
            param=where,
            code="invalid_value",
        )
    return name


def tool_choice(value: str | dict[str, Any] | None, *, nested: bool) -> tuple[str, str | None]:
    """OpenAI's tool_choice: "auto", "none", "required", or a function named as Chat
    Completions names it, {"type": "function", "function": {"name"}} (`nested`), or as the
    Responses API does, {"type": "function", "name"}. (choice, the function it forces)."""
    if value is None:
        return "auto", None
    if isinstance(value, str):
        if value not in TOOL_CHOICES:
            raise ApiError(
                400,
                f"Invalid value for 'tool_choice': {value!r}; expected one of "
                f"{', '.join(TOOL_CHOICES)}, or an object naming a function.",
                param="tool_choice",
                code="invalid_value",
            )
        return value, None
    fields = Fields(value, "tool_choice")
    kind = fields.get("type", str, "a string", required=True)
    if kind != "function":
        raise unsupported("tool_choice.type", f"a tool choice of type {kind!r}")
    named = fields.child("function") if nested else fields
    name = named.get("name", str, "a string", required=True)
    named.refuse_unread()
    fields.refuse_unread()
    return "function", name


def unique_tools(tools: tuple[Tool, ...], name_param: str) -> tuple[Tool, ...]:
    """The tools, once no name is given twice (`name_param` with {i} for the index)."""
    names = [t.name for t in tools]
    for i, name in enumerate(names):
        if name in names[:i]:
            param = name_param.format(i=i)
            raise ApiError(
                400,
                f"Invalid '{param}': the name {name!r} is given twice.",
                param=param,
                code="invalid_value",
            )
    return tools


def check_choice(
    choice: str, forced: str | None, tools: tuple[Tool, ...], param: str, name_param: str
) -> None:
    """A tool choice must name tools the request has."""
    if choice in ("required", "function") and not tools:
        raise ApiError(
            400,
            f"'{param}' asks for a tool call, but the request has no 'tools'.",
            param=param,
            code="invalid_value",
        )
    if forced is not None and forced not in {t.name for t in tools}:
        raise ApiError(
            400,
            f"Invalid value for '{name_param}': no tool is named {forced!r}.",
            param=name_param,
            code="invalid_value",
        )


def extension(value: dict[str, Any] | None) -> str | None:
    """specllama's own request fields, {"drafter": "none"}: clients send them as extra body.
    "auto" (or nothing) is the server's own choice."""
    if value is None:
        return None
    fields = Fields(value, "specllama")
    drafter = fields.get("drafter", str, "a string")
    fields.refuse_unread()
    return None if drafter in (None, "auto") else drafter


def json_format(fields: Fields, schema_field: str, *, required: bool = False) -> ConstraintSpec:
    """A JSON Schema rule as OpenAI describes one (name, description, strict, the schema in
    `schema_field`); without a schema, any JSON object, unless the schema is `required` (as the
    Responses API requires it). Always strict: the schema is enforced."""
    fields.get("name", str, "a string")
    fields.get("description", str, "a string")
    fields.get("strict", bool, "a boolean")
    schema = fields.get(schema_field, (dict, bool), "an object", required=required)
    fields.refuse_unread()
    return ConstraintSpec("json_object") if schema is None else ConstraintSpec.json_schema(schema)


# What a placeholder says in place of an attachment, by the kind each API names it.
PLACEHOLDERS = {
    "image": "[image]",
    "image_url": "[image]",
    "input_image": "[image]",
    "document": "[document]",
    "file": "[file]",
    "input_file": "[file]",
}


class Attachments:
    """Images and documents in a conversation, which the models served cannot see. One in an
    earlier message becomes a short placeholder text where it was ([image], [document],
    [file]), so that a conversation that once held a screenshot goes on (Claude Code keeps them
    in its history). One in the last message, the one to answer, is refused, as llama-server
    refuses an image without a vision model: the answer would be about what the model never
    saw. Only the last: once the client sends anything after it, the conversation goes on."""

    @dataclass(frozen=True)
    class Turn:
        """Where the attachments of one message (by its index) are found."""

        found: list[tuple[int, str, str]]
        index: int

        def placeholder(self, kind: str, param: str) -> str:
            """The text in place of an attachment of `kind` at `param`."""
            self.found.append((self.index, kind, param))
            return PLACEHOLDERS[kind]

    def __init__(self) -> None:
        self._found: list[tuple[int, str, str]] = []  # (message index, kind, param)

    def at(self, index: int) -> Attachments.Turn:
        """The attachments of message `index`."""
        return Attachments.Turn(self._found, index)

    def refuse_in(self, last: int) -> None:
        """Refuse an attachment in message `last`, the one to answer."""
        for index, kind, param in self._found:
            if index == last:
                raise unsupported(
                    param,
                    f"content of type '{kind}' in the message to answer (the model served "
                    "reads text only; in an earlier message it stands as a placeholder, "
                    f"{PLACEHOLDERS[kind]})",
                )
