"""OpenAI's Responses API (`POST /v1/responses`), as Codex CLI and the openai SDK speak it:
requests read into the one request type (here), answers written back as a `response` object,
whole or as its event stream (`specllama.server.openai_responses_answer`).

Stateless: nothing is stored (`store` is accepted either way), so a `previous_response_id` is
refused by name; a client sends the whole conversation in `input`, as Codex does. Input items:
messages (text parts), `function_call` and `function_call_output` items (an assistant's calls
and their results), and `reasoning` items passed back: the thinking of the assistant turn the
next message or call opens or continues (templates that keep it render it, and the prompt then
matches the cache), or a turn of its own when none follows (an answer that ended inside its
thinking). Tools of other types than `function` (web_search, namespaces and the like run on
OpenAI's side) are left out of what the model is told, with a line in the log.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from specllama.chat import Message, ToolCall
from specllama.engine.constraint import ConstraintSpec
from specllama.server.fields import ApiError, Fields, off, unsupported
from specllama.server.openai_chat import function_tool
from specllama.server.openai_responses_answer import ResponseAnswer
from specllama.server.request import (
    PLACEHOLDERS,
    Attachments,
    GenerationRequest,
    check_choice,
    extension,
    json_format,
    reasoning_from,
    sampling,
    template_kwargs,
    tool_choice,
    unique_tools,
)
from specllama.server.wire import Wire
from specllama.tool_calls import Tool

log = logging.getLogger("specllama.server.app")

ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
ITEMS = ("message", "function_call", "function_call_output", "reasoning")
# Fields without a local meaning: nothing is stored, reasoning is the model's own, caching is
# automatic here.
IGNORED = (
    "store",
    "include",
    "prompt_cache_key",
    "prompt_cache_retention",
    "client_metadata",
    "metadata",
    "user",
    "safety_identifier",
    "service_tier",
)
NEUTRAL = {
    "top_logprobs": off,
    "background": off,
    "truncation": lambda v: v in (None, "disabled", "auto"),
    "max_tool_calls": lambda v: v is None,
}
STATELESS = ("previous_response_id", "conversation")


def parse_responses(body: dict[str, Any]) -> GenerationRequest:
    fields = Fields(body, neutral=NEUTRAL)
    for name in STATELESS:
        if not off(fields.get(name, (str, dict), "a string")):
            raise unsupported(
                name,
                f"'{name}' (this server stores no responses: send the whole conversation in "
                "'input')",
            )
    instructions = fields.get("instructions", str, "a string")
    given = fields.get("input", (str, list), "a string or an array of items", required=True)
    system = (Message("system", instructions),) if instructions else ()
    tools = _tools(fields.get("tools", list, "an array"))
    choice, forced = tool_choice(
        fields.get("tool_choice", (str, dict), "a string or an object"), nested=False
    )
    check_choice(choice, forced, tools, "tool_choice", "tool_choice.name")
    parallel = fields.get("parallel_tool_calls", bool, "a boolean")
    rule = _text_format(fields.get("text", dict, "an object"))
    kwargs = template_kwargs(fields.get("chat_template_kwargs", dict, "an object"))
    reasoning = _reasoning(fields.get("reasoning", dict, "an object"), kwargs)
    fields.read.update(IGNORED)
    asked = GenerationRequest(
        model=fields.get("model", str, "a string", required=True),
        max_tokens=fields.int("max_output_tokens", minimum=1),
        sampling=sampling(fields),
        stream=bool(fields.get("stream", bool, "a boolean")),
        messages=(*system, *_input(given)),
        drafter=extension(fields.get("specllama", dict, "an object")),
        tools=tools,
        tool_choice=choice,
        forced_function=forced,
        parallel_tool_calls=True if parallel is None else parallel,
        rule=rule,
        rule_param="text.format" if rule is not None else None,
        template_kwargs=kwargs,
        reasoning=reasoning,
    )
    fields.refuse_unread()
    return asked.checked()


def _reasoning(value: dict[str, Any] | None, kwargs: dict[str, Any]) -> str | None:
    """`reasoning`: its effort, as Chat Completions' reasoning_effort (its summary is the
    model's own thinking here: the reasoning item carries it whole)."""
    if value is None:
        return reasoning_from(None, kwargs)
    given = Fields(value, "reasoning")
    effort = given.get("effort", str, "a string")
    given.read.update(("summary", "generate_summary"))
    given.refuse_unread()
    return reasoning_from(effort, kwargs)


def _input(value: str | list[Any]) -> list[Message]:
    if isinstance(value, str):
        return [Message("user", value)]
    if not value:
        raise ApiError(
            400, "'input' must hold at least one item", param="input", code="invalid_value"
        )
    messages: list[Message] = []
    attachments = Attachments()
    thought: list[str] = []  # reasoning items that wait for their assistant turn
    for i, item in enumerate(value):
        where = f"input[{i}]"
        fields = Fields(item, where)
        kind = fields.get("type", str, "a string") or "message"
        fields.read.update(("id", "status"))  # what a client echoes of an earlier output
        at = len(messages)
        if kind == "reasoning":
            thought.append(_reasoning_text(fields, where))
        elif kind == "message":
            messages.append(_message(fields, where, attachments.at(i)))
        elif kind == "function_call":
            _add_call(messages, _function_call(fields))
        elif kind == "function_call_output":
            call_id = fields.get("call_id", str, "a string", required=True)
            output = fields.get("output", (str, list), "a string or an array", required=True)
            said = _text(output, f"{where}.output", attachments.at(i))
            messages.append(Message("tool", said, tool_call_id=call_id))
        else:
            raise ApiError(
                400,
                f"Invalid value for '{where}.type': {kind!r}; expected one of {', '.join(ITEMS)}.",
                param=f"{where}.type",
                code="invalid_value",
            )
        fields.refuse_unread()
        if kind != "reasoning":
            assistant = kind != "function_call_output" and messages[-1].role == "assistant"
            _give_thought(messages, thought, at, assistant=assistant)
    _give_thought(messages, thought, len(messages), assistant=False)
    attachments.refuse_in(len(value) - 1)
    return messages


def _give_thought(messages: list[Message], thought: list[str], at: int, *, assistant: bool) -> None:
    """The reasoning items read (`thought`, emptied) go to the assistant message the item
    just read made or continued (`assistant`); after any other item, or none, they are an
    assistant turn of their own, before that item (at `at`)."""
    reasoning = _joined(*thought)
    thought.clear()
    if reasoning is None:
        return
    if assistant:
        last = messages[-1]
        messages[-1] = dataclasses.replace(last, reasoning=_joined(last.reasoning, reasoning))
    else:
        messages.insert(at, Message("assistant", "", reasoning=reasoning))


def _message(fields: Fields, where: str, attachments: Attachments.Turn) -> Message:
    role = fields.one_of("role", ROLES)
    content = fields.get("content", (str, list), "a string or an array", required=True)
    return Message(ROLES[role], _text(content, f"{where}.content", attachments))


def _text(content: str | list[Any], where: str, attachments: Attachments.Turn) -> str:
    """A message's content: a string, or parts of which only text can be served; an image or
    a file stands as a placeholder."""
    if isinstance(content, str):
        return content
    texts = []
    for i, item in enumerate(content):
        part = Fields(item, f"{where}[{i}]")
        kind = part.get("type", str, "a string", required=True)
        if kind in ("input_text", "output_text"):
            texts.append(part.get("text", str, "a string", required=True))
            part.read.update(("annotations", "logprobs"))
        elif kind == "refusal":
            texts.append(part.get("refusal", str, "a string", required=True))
        elif kind in PLACEHOLDERS:
            texts.append(attachments.placeholder(kind, f"{where}[{i}].type"))
            continue  # what it holds (a URL, a file's data) is not read
        else:
            raise unsupported(f"{where}[{i}].type", f"content of type '{kind}' (text only)")
        part.refuse_unread()
    return "\n".join(texts)


def _function_call(fields: Fields) -> ToolCall:
    call_id = fields.get("call_id", str, "a string", required=True)
    name = fields.get("name", str, "a string", required=True)
    arguments = fields.get("arguments", str, "a string", required=True)
    return ToolCall(call_id, name, arguments)


def _add_call(messages: list[Message], call: ToolCall) -> None:
    """A call joins the assistant message before it, as the Chat API holds calls."""
    if messages and messages[-1].role == "assistant":
        last = messages[-1]
        messages[-1] = dataclasses.replace(last, tool_calls=(*last.tool_calls, call))
    else:
        messages.append(Message("assistant", "", tool_calls=(call,)))


def _reasoning_text(fields: Fields, where: str) -> str:
    """A reasoning item's thinking: its reasoning_text parts (this server's and llama-server's
    items carry it whole), else its summary's texts (what OpenAI's own models give back). Its
    encrypted content is for OpenAI's servers."""
    fields.read.add("encrypted_content")
    content = _part_texts(fields, "content", "reasoning_text", where)
    summary = _part_texts(fields, "summary", "summary_text", where)
    return "\n".join(content) if content else "\n\n".join(summary)


def _part_texts(fields: Fields, name: str, kind: str, where: str) -> list[str]:
    """The texts of the parts (each of type `kind`) in an item's field `name`."""
    texts = []
    for i, item in enumerate(fields.get(name, list, "an array") or []):
        part = Fields(item, f"{where}.{name}[{i}]")
        part.one_of("type", (kind,))
        texts.append(part.get("text", str, "a string", required=True))
        part.refuse_unread()
    return texts


def _joined(*thoughts: str | None) -> str | None:
    """Thinking in several pieces as one (none when there is no text)."""
    return "\n".join(t for t in thoughts if t) or None


def _tools(items: list[Any] | None) -> tuple[Tool, ...]:
    tools = []
    for i, item in enumerate(items or []):
        fields = Fields(item, f"tools[{i}]")
        kind = fields.get("type", str, "a string", required=True)
        if kind == "function":
            tools.append(function_tool(fields, f"tools[{i}]"))
        else:
            log.info("tools[%d]: a %r tool runs on OpenAI's side: left out", i, kind)
    return unique_tools(tuple(tools), "tools[{i}].name")


def _text_format(value: dict[str, Any] | None) -> ConstraintSpec | None:
    """`text`: {"format": {"type": "text" | "json_object" | "json_schema", ...}}."""
    if value is None:
        return None
    fields = Fields(value, "text")
    fields.read.add("verbosity")  # how long answers should be: the model's own
    given = fields.get("format", dict, "an object")
    fields.refuse_unread()
    if given is None:
        return None
    format_ = Fields(given, "text.format")
    kind = format_.get("type", str, "a string", required=True)
    if kind == "json_schema":
        return json_format(format_, "schema", required=True)
    format_.refuse_unread()
    if kind == "json_object":
        return ConstraintSpec("json_object")
    if kind != "text":
        raise ApiError(
            400,
            f"Invalid value for 'text.format.type': {kind!r}; expected one of text, "
            "json_object, json_schema.",
            param="text.format.type",
            code="invalid_value",
        )
    return None


RESPONSES = Wire("responses", parse_responses, ResponseAnswer, ApiError.body, fails_in_stream=True)
