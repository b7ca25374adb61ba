"""OpenAI's Chat Completions and text Completions: requests read field by field into the one
request type, and answers written back, whole or as stream chunks.

Every mistake a client can make is refused in OpenAI's error body,
{"error": {"message", "type", "param", "code"}}, with its HTTP status. A parameter specllama
cannot honour (n > 1, logprobs, images...) is refused by name, never ignored: only its "off"
value (null, false, 0, empty, n = 1) is accepted, as clients often send those.

Function tools (`tools`, `tool_choice`, `parallel_tool_calls`, assistant `tool_calls` and
`tool` messages) and output rules (`response_format`, and llama-server's `grammar`, GBNF) are
read here into plain values; the server decides what the model's template makes of them. An
assistant message's `reasoning_content` (llama-server's field; `reasoning` as some clients send
it) is the thinking of that earlier answer: templates that keep it render it, and the prompt
then begins with what the model wrote, which the cache holds.

The answers are written in openai_chat_answer.py. Each answer also carries a `specllama`
object: what speculation did for it (drafted, accepted, acceptance rate, tokens/s, rounds,
finish reason, prompt tokens reused from the KV cache). In a stream, each text chunk's
`specllama` object holds the tokens that make up its text, each with its origin ("target", the
drafter whose guess was accepted, or "grammar" for a token the output rule forced), and the
figures so far. OpenAI clients ignore the field.

When the request offers tools, the answer is read for calls in the model's own syntax
(`specllama.tool_calls`): whole, into `message.tool_calls`; streamed, as OpenAI streams them
(a call's first delta names it with empty arguments, the next ones carry the arguments as the
model writes them). Text from where a call may begin is held back, so markup never reaches
`content`; a chunk whose text is held carries its tokens with an empty delta.
"""

from __future__ import annotations

from typing import Any

from specllama.chat import Message, ToolCall
from specllama.engine.constraint import ConstraintSpec
from specllama.server.fields import ApiError, Fields, Neutral, invalid_type, off, unsupported
from specllama.server.openai_chat_answer import ChatAnswer
from specllama.server.request import (
    PLACEHOLDERS,
    Attachments,
    GenerationRequest,
    check_choice,
    extension,
    function_name,
    json_format,
    reasoning_from,
    sampling,
    stops,
    template_kwargs,
    tool_choice,
    unique_tools,
)
from specllama.server.wire import Wire
from specllama.tool_calls import Tool

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # the OpenAI reference's default for /v1/completions


def _one(value: object) -> bool:
    return value is None or (type(value) is int and value == 1)


# OpenAI parameters specllama cannot honour, accepted only at their "off" value.
NEUTRAL: Neutral = {
    "n": _one,
    "best_of": _one,
    "frequency_penalty": off,
    "presence_penalty": off,
    "logit_bias": off,
    "logprobs": off,
    "top_logprobs": off,
    "echo": off,
    "suffix": off,
    "functions": off,  # the deprecated form of tools
    "function_call": lambda v: off(v) or v in ("none", "auto"),
    "modalities": lambda v: off(v) or v == ["text"],
    "audio": off,
    "web_search_options": off,
}
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}


def parse_chat(body: dict[str, Any]) -> GenerationRequest:
    fields = Fields(body, neutral=NEUTRAL)
    newer = fields.int("max_completion_tokens", minimum=1)
    older = fields.int("max_tokens", minimum=1)
    messages = _messages(fields.get("messages", list, "an array", required=True))
    tools = _tools(fields.get("tools", list, "an array"))
    choice, forced = tool_choice(
        fields.get("tool_choice", (str, dict), "a string or an object"), nested=True
    )
    check_choice(choice, forced, tools, "tool_choice", "tool_choice.function.name")
    parallel = fields.get("parallel_tool_calls", bool, "a boolean")
    kwargs = template_kwargs(fields.get("chat_template_kwargs", dict, "an object"))
    reasoning = reasoning_from(fields.get("reasoning_effort", str, "a string"), kwargs)
    return _request(
        fields,
        template_kwargs=kwargs,
        reasoning=reasoning,
        max_tokens=older if newer is None else newer,
        messages=messages,
        tools=tools,
        tool_choice=choice,
        forced_function=forced,
        parallel_tool_calls=True if parallel is None else parallel,
    )


def parse_completion(body: dict[str, Any]) -> GenerationRequest:
    fields = Fields(body, neutral=NEUTRAL)
    max_tokens = fields.int("max_tokens", minimum=1)
    return _request(
        fields,
        max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        prompt=_prompt(fields.get("prompt", (str, list), "a string", required=True)),
    )


def _request(fields: Fields, **specific: Any) -> GenerationRequest:
    """The fields both endpoints share; then any field not read is refused."""
    stream = bool(fields.get("stream", bool, "a boolean"))
    options = fields.get("stream_options", dict, "an object")
    if options is not None and not stream:
        raise ApiError(
            400,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
            code="invalid_value",
        )
    include_usage = False
    if options is not None:
        stream_options = Fields(options, "stream_options")
        include_usage = bool(stream_options.get("include_usage", bool, "a boolean"))
        stream_options.refuse_unread()
    fields.get("user", str, "a string")  # an end-user id for abuse monitoring: no effect here
    rule, rule_param = _rule(fields)
    asked = GenerationRequest(
        drafter=extension(fields.get("specllama", dict, "an object")),
        model=fields.get("model", str, "a string", required=True),
        sampling=sampling(fields),
        stop=stops(fields.get("stop", (str, list), "a string or an array of strings"), "stop"),
        stream=stream,
        include_usage=include_usage,
        rule=rule,
        rule_param=rule_param,
        prediction=_prediction(fields.get("prediction", dict, "an object")),
        **specific,
    )
    fields.refuse_unread()
    return asked.checked()


# -- output rules ---------------------------------------------------------------------------


def _rule(fields: Fields) -> tuple[ConstraintSpec | None, str | None]:
    """response_format (text, json_object, json_schema) or grammar (GBNF): one rule at most."""
    grammar = fields.get("grammar", str, "a string")
    response_format = fields.get("response_format", dict, "an object")
    spec = _response_format(response_format) if response_format is not None else None
    if grammar and spec is not None:
        raise ApiError(
            400,
            "Send either 'response_format' or 'grammar', not both.",
            param="grammar",
            code="unsupported_combination",
        )
    if grammar:
        return ConstraintSpec("gbnf", grammar), "grammar"
    return (spec, "response_format") if spec is not None else (None, None)


def _response_format(value: dict[str, Any]) -> ConstraintSpec | None:
    fields = Fields(value, "response_format")
    kind = fields.get("type", str, "a string", required=True)
    spec = None
    if kind == "json_object":
        spec = ConstraintSpec("json_object")
    elif kind == "json_schema":
        spec = json_format(fields.child("json_schema"), "schema")
    elif kind != "text":
        raise ApiError(
            400,
            f"Invalid value for 'response_format.type': {kind!r}; expected one of text, "
            "json_object, json_schema.",
            param="response_format.type",
            code="invalid_value",
        )
    fields.refuse_unread()
    return spec


# -- tools ----------------------------------------------------------------------------------


def _tools(items: list[Any] | None) -> tuple[Tool, ...]:
    tools = tuple(_tool(item, f"tools[{i}]") for i, item in enumerate(items or []))
    return unique_tools(tools, "tools[{i}].function.name")


def _tool(item: object, where: str) -> Tool:
    fields = Fields(item, where)
    kind = fields.get("type", str, "a string", required=True)
    if kind != "function":
        raise unsupported(f"{where}.type", f"a tool of type {kind!r} (function tools only)")
    function = fields.child("function")
    fields.refuse_unread()
    return function_tool(function, f"{where}.function")


def function_tool(function: Fields, where: str) -> Tool:
    """A function as OpenAI describes one: name, description, parameters, strict."""
    name = function_name(function, f"{where}.name")
    description = function.get("description", str, "a string")
    parameters = function.get("parameters", dict, "an object")
    strict = bool(function.get("strict", bool, "a boolean"))
    function.refuse_unread()
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    return Tool(name, description, parameters, strict)


def _prediction(value: dict[str, Any] | None) -> str | None:
    """OpenAI's `prediction`: {"type": "content", "content": text or text parts}."""
    if value is None:
        return None
    fields = Fields(value, "prediction")
    kind = fields.get("type", str, "a string", required=True)
    if kind != "content":
        raise ApiError(
            400,
            f"Invalid value for 'prediction.type': {kind!r}; expected 'content'.",
            param="prediction.type",
            code="invalid_value",
        )
    content = fields.get("content", (str, list), "a string or an array of text parts")
    fields.refuse_unread()
    if content is None:
        raise ApiError(
            400,
            "Missing required parameter: 'prediction.content'.",
            param="prediction.content",
            code="missing_required_parameter",
        )
    return _text_content(content, "prediction.content") or None


# -- messages -------------------------------------------------------------------------------


def _messages(items: list[Any]) -> tuple[Message, ...]:
    if not items:
        raise ApiError(
            400, "'messages' must hold at least one message", param="messages", code="invalid_value"
        )
    attachments = Attachments()
    messages = tuple(
        _message(item, f"messages[{i}]", i, attachments) for i, item in enumerate(items)
    )
    attachments.refuse_in(len(items) - 1)
    return messages


def _message(item: object, where: str, turn: int, attachments: Attachments) -> Message:
    fields = Fields(item, where)
    role = fields.get("role", str, "a string", required=True)
    if role == "function":
        raise unsupported(f"{where}.role", "the 'function' role (send 'tool' messages)")
    if role not in ROLES:
        raise ApiError(
            400,
            f"Invalid value for '{where}.role': {role!r}; expected one of {', '.join(ROLES)}",
            param=f"{where}.role",
            code="invalid_value",
        )
    content = fields.get("content", (str, list), "a string or an array of content parts")
    calls = _message_calls(fields, where) if role == "assistant" else ()
    reasoning = _reasoning(fields) if role == "assistant" else None
    call_id = fields.get("tool_call_id", str, "a string", required=True) if role == "tool" else None
    if role == "tool":
        fields.get("name", str, "a string")  # the function's name, which some clients add
    for name, value in fields.object.items():
        if name not in ("role", "content", "tool_calls", "tool_call_id") and not (
            name in fields.read or value is None
        ):
            raise unsupported(f"{where}.{name}", f"'{name}' in a message")
    if content is None and role != "assistant":
        raise ApiError(
            400,
            f"Missing required parameter: '{where}.content'.",
            param=f"{where}.content",
            code="missing_required_parameter",
        )
    text = _text_content(content, f"{where}.content", attachments.at(turn))
    return Message(ROLES[role], text, tool_calls=calls, tool_call_id=call_id, reasoning=reasoning)


def _reasoning(fields: Fields) -> str | None:
    """An earlier answer's thinking passed back: llama-server's `reasoning_content`, or the
    `reasoning` some clients send (OpenRouter's field). Empty is none, as llama.cpp has it."""
    given = fields.get("reasoning_content", str, "a string")
    other = fields.get("reasoning", str, "a string")
    return given or other or None


def _message_calls(fields: Fields, where: str) -> tuple[ToolCall, ...]:
    """An assistant message's tool_calls: {id, type: "function", function: {name, arguments}}."""
    items = fields.get("tool_calls", list, "an array") or []
    calls = []
    for i, item in enumerate(items):
        at = f"{where}.tool_calls[{i}]"
        call = Fields(item, at)
        call_id = call.get("id", str, "a string", required=True)
        kind = call.get("type", str, "a string") or "function"
        if kind != "function":
            raise unsupported(f"{at}.type", f"a tool call of type {kind!r}")
        function = call.child("function", f"{at}.function")
        call.refuse_unread()
        name = function.get("name", str, "a string", required=True)
        arguments = function.get("arguments", str, "a string") or "{}"
        function.refuse_unread()
        calls.append(ToolCall(call_id, name, arguments))
    return tuple(calls)


def _text_content(
    content: str | list[Any] | None,
    where: str,
    attachments: Attachments.Turn | None = None,
) -> str:
    """A message's content: a string, or content parts of which only text can be served; an
    image or a file in a conversation (`attachments`) stands as a placeholder."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for i, part in enumerate(content):
        fields = Fields(part, f"{where}[{i}]")
        kind = fields.get("type", str, "a string", required=True)
        if kind in PLACEHOLDERS and attachments is not None:
            texts.append(attachments.placeholder(kind, f"{where}[{i}]"))
        elif kind != "text":
            raise unsupported(f"{where}[{i}]", f"content of type '{kind}' (text only)")
        else:
            texts.append(fields.get("text", str, "a string", required=True))
    return "\n".join(texts)


def _prompt(value: str | list[Any]) -> str:
    """A text completion's prompt: a string, or an array holding one string."""
    if isinstance(value, str):
        return value
    if len(value) == 1 and isinstance(value[0], str):
        return value[0]
    if value and all(type(v) is int for v in value):
        raise unsupported("prompt", "a prompt given as token ids")
    if len(value) > 1 and all(isinstance(v, str) for v in value):
        raise unsupported("prompt", "more than one prompt per request")
    raise invalid_type("prompt", "a string", value)


CHAT = Wire(
    "chat",
    parse_chat,
    lambda asked, served: ChatAnswer(asked, served, chat=True),
    ApiError.body,
)
COMPLETIONS = Wire(
    "completion",
    parse_completion,
    lambda asked, served: ChatAnswer(asked, served, chat=False),
    ApiError.body,
)
