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


def json_format(fields: Fields, schema_field: str) -> ConstraintSpec:
    """A JSON Schema rule as OpenAI describes one (name, description, strict, the schema in
    `schema_field`); without a schema, any JSON object. Always strict: the schema is enforced."""
    fields.get("name", str, "a string")
    fields.get("description", str, "a string")
    fields.get("strict", bool, "a boolean")
    schema = fields.get(schema_field, (dict, bool), "an object")
    fields.refuse_unread()
    return ConstraintSpec("json_object") if schema is None else ConstraintSpec.json_schema(schema)
