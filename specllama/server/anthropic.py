"""Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`), as Claude Code
and the anthropic SDK speak it: requests read into the one request type (here), answers written
back as a `message`, whole or as its event stream, and errors in Anthropic's envelope
(`specllama.server.anthropic_answer`).

A conversation's blocks become the chat template's messages: text joins into one message per
turn; an assistant's `tool_use` blocks are its tool calls and a user's `tool_result` blocks the
tool messages before its text (as OpenAI's tool messages, which the templates know); its
`thinking` blocks passed back are its reasoning (templates that keep it render it, and the prompt
then matches the cache), `redacted_thinking` (encrypted for Anthropic's servers) is dropped. An
image or a document
stands as a placeholder ([image], [document]) in an earlier message, and is refused in the last
one (see request.Attachments). `output_config.format` (a JSON Schema for the answer) and a
tool's `strict` go to the constraint. Fields current clients send that mean nothing here
(`cache_control`, `metadata`, `service_tier`, `output_config.effort`, `context_management`) are
accepted and ignored; any other unknown field is refused, as Anthropic's API refuses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from specllama.chat import Message, ToolCall
from specllama.engine.constraint import ConstraintSpec
from specllama.server.anthropic_answer import MessageAnswer, error_body
from specllama.server.fields import ApiError, Fields, off, unsupported
from specllama.server.request import (
    Attachments,
    GenerationRequest,
    check_choice,
    extension,
    function_name,
    sampling,
    stops,
    unique_tools,
)
from specllama.server.wire import Wire
from specllama.tool_calls import Tool

PATH = "/v1/messages"
ROLES = ("user", "assistant", "system")  # "system" mid-conversation: Claude Code sends it
TOOL_CHOICES = {"auto": "auto", "any": "required", "tool": "function", "none": "none"}
# Request fields without a local meaning: prompt caching is automatic here (the KV cache and
# the memory), there is no billing or tier, and the context is managed by the client.
IGNORED = ("metadata", "service_tier", "context_management")
NEUTRAL = {"mcp_servers": off, "container": off}
BLOCK_IGNORED = ("cache_control", "citations")
ATTACHMENTS = ("image", "document")  # blocks that stand as a placeholder (request.Attachments)
TOOL_IGNORED = ("cache_control", "defer_loading", "input_examples")
# Claude Code's first system block carries its billing stamp, which changes with every request
# (cch=...): metadata for Anthropic's servers, and a prompt that is new each time to a cache.
BILLING_HEADER = "x-anthropic-billing-header:"


def envelope_for(path: str) -> Callable[[ApiError], dict[str, Any]]:
    """The error envelope of the API a path belongs to."""
    return error_body if path.startswith(PATH) else ApiError.body


# -- requests -----------------------------------------------------------------------------------


def parse_messages(body: dict[str, Any]) -> GenerationRequest:
    fields = Fields(body, neutral=NEUTRAL)
    if fields.object.get("max_tokens") is None:
        raise ApiError(
            400,
            "max_tokens: Field required (the Messages API asks every request for its limit).",
            param="max_tokens",
            code="missing_required_parameter",
        )
    return _conversation(
        fields,
        max_tokens=fields.int("max_tokens", minimum=1),
        stream=bool(fields.get("stream", bool, "a boolean")),
    )


def parse_count(body: dict[str, Any]) -> GenerationRequest:
    """count_tokens: a Messages request without max_tokens, stream or sampling."""
    return _conversation(Fields(body, neutral=NEUTRAL), max_tokens=None)


def _conversation(fields: Fields, **specific: Any) -> GenerationRequest:
    system = _system(fields.get("system", (str, list), "a string or an array of text blocks"))
    turns = _messages(fields.get("messages", list, "an array", required=True))
    tools = _tools(fields.get("tools", list, "an array"))
    choice, forced, parallel = _tool_choice(fields.get("tool_choice", dict, "an object"))
    check_choice(choice, forced, tools, "tool_choice", "tool_choice.name")
    reasoning, budget = _thinking(fields.get("thinking", dict, "an object"))
    rule = _output_format(fields.get("output_config", dict, "an object"))
    fields.read.update(IGNORED)
    asked = GenerationRequest(
        model=fields.get("model", str, "a string", required=True),
        sampling=sampling(fields),
        stop=stops(fields.get("stop_sequences", list, "an array of strings"), "stop_sequences"),
        messages=(*system, *turns),
        drafter=extension(fields.get("specllama", dict, "an object")),
        tools=tools,
        tool_choice=choice,
        forced_function=forced,
        parallel_tool_calls=parallel,
        reasoning=reasoning,
        reasoning_budget=budget,
        rule=rule,
        rule_param="output_config.format" if rule is not None else None,
        **specific,
    )
    fields.refuse_unread()
    return asked.checked()


def _thinking(value: dict[str, Any] | None) -> tuple[str | None, int | None]:
    """`thinking`: enabled (with its budget of tokens), disabled, or adaptive (the server's
    choice)."""
    if value is None:
        return None, None
    given = Fields(value, "thinking")
    kind = given.get("type", str, "a string", required=True)
    budget = given.int("budget_tokens", minimum=0)
    given.read.update(("display",))
    given.refuse_unread()
    if kind not in ("enabled", "disabled", "adaptive"):
        message = f"thinking.type: expected 'enabled', 'disabled' or 'adaptive', got {kind!r}"
        raise ApiError(400, message, param="thinking.type", code="invalid_value")
    if kind == "disabled":
        return "off", None
    return ("on" if kind == "enabled" else None), budget


def _output_format(value: dict[str, Any] | None) -> ConstraintSpec | None:
    """`output_config`: its `format`, {"type": "json_schema", "schema": {...}}, is the answer's
    rule; its `effort` is the model's own here (as anything else it may come to hold)."""
    if value is None:
        return None
    given = Fields(value, "output_config").get("format", dict, "an object")
    if given is None:
        return None
    format_ = Fields(given, "output_config.format")
    kind = format_.get("type", str, "a string", required=True)
    if kind != "json_schema":
        raise ApiError(
            400,
            f"Invalid value for 'output_config.format.type': {kind!r}; expected 'json_schema'.",
            param="output_config.format.type",
            code="invalid_value",
        )
    schema = format_.get("schema", dict, "an object", required=True)
    format_.refuse_unread()
    return ConstraintSpec.json_schema(schema)


def _system(value: str | list[Any] | None) -> tuple[Message, ...]:
    if value is None:
        return ()
    blocks = [value] if isinstance(value, str) else _texts(value, "system")
    text = "\n".join(b for b in blocks if not b.startswith(BILLING_HEADER))
    return (Message("system", text),) if text else ()


def _texts(blocks: list[Any], where: str, attachments: Attachments.Turn | None = None) -> list[str]:
    """Text blocks (a system prompt, a tool's result): their texts; images and documents in a
    message (`attachments`) stand as placeholders."""
    texts = []
    for i, item in enumerate(blocks):
        block = Fields(item, f"{where}[{i}]")
        kind = block.get("type", str, "a string", required=True)
        if kind in ATTACHMENTS and attachments is not None:
            texts.append(attachments.placeholder(kind, f"{where}[{i}].type"))
        elif kind != "text":
            raise _not_text(kind, f"{where}[{i}].type")
        else:
            texts.append(_text(block))
    return texts


def _text(block: Fields) -> str:
    text = block.get("text", str, "a string", required=True)
    block.read.update(BLOCK_IGNORED)
    block.refuse_unread()
    return text


def _not_text(kind: str, param: str) -> ApiError:
    if kind in ("image", "document", "search_result"):
        return unsupported(param, f"content of type '{kind}' (the models served read text only)")
    return ApiError(
        400,
        f"Invalid value for '{param}': {kind!r}; expected 'text' here.",
        param=param,
        code="invalid_value",
    )


def _messages(items: list[Any]) -> list[Message]:
    if not items:
        raise ApiError(
            400, "'messages' must hold at least one message", param="messages", code="invalid_value"
        )
    messages: list[Message] = []
    called: set[str] = set()  # the ids of the tool_use blocks so far
    attachments = Attachments()
    for i, item in enumerate(items):
        fields = Fields(item, f"messages[{i}]")
        role = fields.one_of("role", ROLES)
        content = fields.get(
            "content", (str, list), "a string or an array of blocks", required=True
        )
        fields.refuse_unread()
        if isinstance(content, str):
            messages.append(Message(role, content))
        else:
            messages += _turn(role, content, f"messages[{i}].content", called, attachments.at(i))
    attachments.refuse_in(len(items) - 1)
    return messages


def _turn(
    role: str, blocks: list[Any], where: str, called: set[str], attachments: Attachments.Turn
) -> list[Message]:
    """One turn's blocks: the tool results it carries, then its text (and an assistant's
    calls) as one message."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    thoughts: list[str] = []
    for j, item in enumerate(blocks):
        at = f"{where}[{j}]"
        block = Fields(item, at)
        kind = block.get("type", str, "a string", required=True)
        if kind == "text":
            texts.append(_text(block))
        elif kind in ATTACHMENTS:
            texts.append(attachments.placeholder(kind, f"{at}.type"))
        elif kind == "tool_use" and role == "assistant":
            calls.append(_tool_use(block))
            called.add(calls[-1].id)
        elif kind == "tool_result" and role == "user":
            results.append(_tool_result(block, at, called, attachments))
        elif kind == "thinking" and role == "assistant":
            thoughts.append(_thinking_block(block))
        elif kind == "redacted_thinking" and role == "assistant":
            continue  # only Anthropic's servers can read it
        elif kind in ("tool_use", "tool_result", "thinking", "redacted_thinking"):
            raise ApiError(
                400,
                f"A '{kind}' block cannot be in a {role} message ('{at}').",
                param=f"{at}.type",
                code="invalid_value",
            )
        else:
            raise _unknown_block(kind, f"{at}.type")
    if not (texts or calls or thoughts):
        return results
    reasoning = "\n".join(t for t in thoughts if t) or None
    return [*results, Message(role, "\n".join(texts), tool_calls=tuple(calls), reasoning=reasoning)]


def _thinking_block(block: Fields) -> str:
    """A thinking block's text (its signature is for Anthropic's servers)."""
    text = block.get("thinking", str, "a string", required=True)
    block.read.update(("signature", *BLOCK_IGNORED))
    block.refuse_unread()
    return text


def _unknown_block(kind: str, param: str) -> ApiError:
    if kind in ("image", "document", "search_result"):
        return _not_text(kind, param)
    return ApiError(
        400,
        f"Invalid value for '{param}': {kind!r}; expected one of text, tool_use, tool_result, "
        "thinking, redacted_thinking.",
        param=param,
        code="invalid_value",
    )


def _tool_use(block: Fields) -> ToolCall:
    call_id = block.get("id", str, "a string", required=True)
    name = block.get("name", str, "a string", required=True)
    arguments = block.get("input", dict, "an object", required=True)
    block.read.update(BLOCK_IGNORED)
    block.refuse_unread()
    return ToolCall(call_id, name, json.dumps(arguments, ensure_ascii=False))


def _tool_result(
    block: Fields, where: str, called: set[str], attachments: Attachments.Turn
) -> Message:
    call_id = block.get("tool_use_id", str, "a string", required=True)
    if call_id not in called:
        raise ApiError(
            400,
            f"'{where}.tool_use_id' is {call_id!r}, but no tool_use block before it has that id.",
            param=f"{where}.tool_use_id",
            code="invalid_value",
        )
    content = block.get("content", (str, list), "a string or an array of text blocks")
    texts = (
        [content or ""]
        if not isinstance(content, list)
        else _texts(content, f"{where}.content", attachments)
    )
    failed = block.get("is_error", bool, "a boolean")
    block.read.update(BLOCK_IGNORED)
    block.refuse_unread()
    text = "\n".join(texts)
    # The templates have no place for a failure: the result says so itself.
    return Message("tool", f"Error: {text}" if failed else text, tool_call_id=call_id)


def _tools(items: list[Any] | None) -> tuple[Tool, ...]:
    tools = tuple(_tool(item, f"tools[{i}]") for i, item in enumerate(items or []))
    return unique_tools(tools, "tools[{i}].name")


def _tool(item: object, where: str) -> Tool:
    fields = Fields(item, where)
    kind = fields.get("type", str, "a string")
    if kind not in (None, "custom"):
        raise unsupported(f"{where}.type", f"Anthropic's server tool {kind!r} (custom tools only)")
    name = function_name(fields, f"{where}.name", longest=128)
    description = fields.get("description", str, "a string")
    schema = fields.get("input_schema", dict, "an object", required=True)
    strict = bool(fields.get("strict", bool, "a boolean"))
    fields.read.update(TOOL_IGNORED)
    fields.refuse_unread()
    return Tool(name, description, schema, strict)


def _tool_choice(value: dict[str, Any] | None) -> tuple[str, str | None, bool]:
    """(choice, the tool it forces, whether calls may be parallel)."""
    if value is None:
        return "auto", None, True
    fields = Fields(value, "tool_choice")
    kind = fields.one_of("type", TOOL_CHOICES)
    name = fields.get("name", str, "a string", required=kind == "tool")
    single = fields.get("disable_parallel_tool_use", bool, "a boolean")
    fields.refuse_unread()
    return TOOL_CHOICES[kind], name if kind == "tool" else None, not single


MESSAGES = Wire("messages", parse_messages, MessageAnswer, error_body)
