"""OpenAI API requests, read and checked field by field, and the errors a client can get back.

Every mistake a client can make is an ApiError: it renders as OpenAI's error body,
{"error": {"message", "type", "param", "code"}}, with its HTTP status. A parameter specllama
cannot honour (n > 1, logprobs, images...) is refused by name, never ignored: only its
"off" value (null, false, 0, empty, n = 1) is accepted, as clients often send those.

Function tools (`tools`, `tool_choice`, `parallel_tool_calls`, assistant `tool_calls` and
`tool` messages) and output rules (`response_format`, and llama-server's `grammar`, GBNF) are
read here into plain values; the server decides what the model's template makes of them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specllama.chat import Message, ToolCall
from specllama.engine.constraint import ConstraintSpec
from specllama.engine.noise import SEED_LIMIT
from specllama.engine.sampling import SamplingParams
from specllama.tool_calls import Tool

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # the OpenAI reference's default for /v1/completions
# OpenAI allows 4 stop strings; editor plugins send more. Each costs checks on every token.
MAX_STOPS = 32
MAX_STOP_CHARS = 256
RANDOM_SEED = -1  # llama.cpp's convention for "no seed", which some clients send
FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")  # OpenAI's rule for function names
TOOL_CHOICES = ("none", "auto", "required")


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return "server_error" if self.status >= 500 else "invalid_request_error"

    def body(self) -> dict[str, Any]:
        error = {"message": self.message, "type": self.type, "param": self.param}
        return {"error": {**error, "code": self.code}}


def unsupported(param: str, what: str) -> ApiError:
    return ApiError(
        400, f"{what} is not supported by specllama", param=param, code="unsupported_parameter"
    )


def _off(value: object) -> bool:
    """What a client sends for a feature it does not use."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value == 0
    return value is None or value in ("", [], {})


def _one(value: object) -> bool:
    return value is None or (type(value) is int and value == 1)


# OpenAI parameters specllama cannot honour, accepted only at their "off" value.
NEUTRAL: dict[str, Callable[[object], bool]] = {
    "n": _one,
    "best_of": _one,
    "frequency_penalty": _off,
    "presence_penalty": _off,
    "logit_bias": _off,
    "logprobs": _off,
    "top_logprobs": _off,
    "echo": _off,
    "suffix": _off,
    "functions": _off,  # the deprecated form of tools
    "function_call": lambda v: _off(v) or v in ("none", "auto"),
    "modalities": lambda v: _off(v) or v == ["text"],
    "audio": _off,
    "reasoning_effort": _off,
    "web_search_options": _off,
}
ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
}
# Message fields a client echoes back from an answer (the openai package does): only null.
MESSAGE_NEUTRAL = ("refusal", "audio", "function_call", "annotations", "name")


@dataclass(frozen=True)
class GenerationRequest:
    """What a chat or text completion request asks for, checked."""

    model: str
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
    # response_format (json_object, json_schema) or grammar (GBNF); `rule_param` names which
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


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(
            400,
            f"We could not parse the JSON body of your request: {exc}",
            code="invalid_json",
        ) from None
    return _Fields(body).object


def parse_chat(body: dict[str, Any]) -> GenerationRequest:
    fields = _Fields(body)
    newer = fields.int("max_completion_tokens", minimum=1)
    older = fields.int("max_tokens", minimum=1)
    messages = _messages(fields.get("messages", list, "an array", required=True))
    tools = _tools(fields.get("tools", list, "an array"))
    choice, forced = _tool_choice(fields.get("tool_choice", (str, dict), "a string or an object"))
    _check_choice(choice, forced, tools)
    parallel = fields.get("parallel_tool_calls", bool, "a boolean")
    return _request(
        fields,
        max_tokens=older if newer is None else newer,
        messages=messages,
        tools=tools,
        tool_choice=choice,
        forced_function=forced,
        parallel_tool_calls=True if parallel is None else parallel,
    )


def parse_completion(body: dict[str, Any]) -> GenerationRequest:
    fields = _Fields(body)
    max_tokens = fields.int("max_tokens", minimum=1)
    return _request(
        fields,
        max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
        prompt=_prompt(fields.get("prompt", (str, list), "a string", required=True)),
    )


def _request(fields: _Fields, **specific: Any) -> GenerationRequest:
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
        stream_options = _Fields(options, "stream_options")
        include_usage = bool(stream_options.get("include_usage", bool, "a boolean"))
        stream_options.refuse_unread()
    fields.get("user", str, "a string")  # an end-user id for abuse monitoring: no effect here
    rule, rule_param = _rule(fields)
    asked = GenerationRequest(
        drafter=_extension(fields.get("specllama", dict, "an object")),
        model=fields.get("model", str, "a string", required=True),
        sampling=_sampling(fields),
        stop=_stop(fields.get("stop", (str, list), "a string or an array of strings")),
        stream=stream,
        include_usage=include_usage,
        rule=rule,
        rule_param=rule_param,
        prediction=_prediction(fields.get("prediction", dict, "an object")),
        **specific,
    )
    fields.refuse_unread()
    if asked.forces_call and rule is not None:
        raise ApiError(
            400,
            f"'{rule_param}' cannot be combined with a forced tool call (tool_choice "
            f"{json.dumps(asked.tool_choice if not asked.forced_function else 'function')}): "
            "the answer is the call. Send one or the other.",
            param=rule_param,
            code="unsupported_combination",
        )
    if asked.uses_tools and rule_param == "grammar":
        raise ApiError(
            400,
            "'grammar' cannot be combined with tools (unless tool_choice is \"none\").",
            param="grammar",
            code="unsupported_combination",
        )
    return asked


# -- output rules ---------------------------------------------------------------------------


def _rule(fields: _Fields) -> tuple[ConstraintSpec | None, str | None]:
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
    fields = _Fields(value, "response_format")
    kind = fields.get("type", str, "a string", required=True)
    spec = None
    if kind == "json_object":
        spec = ConstraintSpec("json_object")
    elif kind == "json_schema":
        described = _Fields(
            fields.get("json_schema", dict, "an object", required=True),
            "response_format.json_schema",
        )
        described.get("name", str, "a string")
        described.get("description", str, "a string")
        described.get("strict", bool, "a boolean")  # always strict here: the schema is enforced
        schema = described.get("schema", (dict, bool), "an object")
        described.refuse_unread()
        any_object = schema is None
        spec = ConstraintSpec("json_object") if any_object else ConstraintSpec.json_schema(schema)
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
    names = [t.name for t in tools]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ApiError(
                400,
                f"Invalid 'tools[{i}].function.name': the name {name!r} is given twice.",
                param=f"tools[{i}].function.name",
                code="invalid_value",
            )
    return tools


def _tool(item: object, where: str) -> Tool:
    fields = _Fields(item, where)
    kind = fields.get("type", str, "a string", required=True)
    if kind != "function":
        raise unsupported(f"{where}.type", f"a tool of type {kind!r} (function tools only)")
    function = _Fields(_required_object(fields, "function"), f"{where}.function")
    fields.refuse_unread()
    name = _function_name(function, f"{where}.function.name")
    description = function.get("description", str, "a string")
    parameters = function.get("parameters", dict, "an object")
    strict = bool(function.get("strict", bool, "a boolean"))
    function.refuse_unread()
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    return Tool(name, description, parameters, strict)


def _function_name(fields: _Fields, where: str) -> str:
    name = fields.get("name", str, "a string", required=True)
    if not FUNCTION_NAME.fullmatch(name):
        raise ApiError(
            400,
            f"Invalid '{where}': {name!r}; a function name is 1 to 64 letters, digits, "
            "underscores or dashes.",
            param=where,
            code="invalid_value",
        )
    return name


def _tool_choice(value: str | dict[str, Any] | None) -> tuple[str, str | None]:
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
    fields = _Fields(value, "tool_choice")
    kind = fields.get("type", str, "a string", required=True)
    if kind != "function":
        raise unsupported("tool_choice.type", f"a tool choice of type {kind!r}")
    function = _Fields(_required_object(fields, "function"), "tool_choice.function")
    fields.refuse_unread()
    name = function.get("name", str, "a string", required=True)
    function.refuse_unread()
    return "function", name


def _required_object(fields: _Fields, name: str) -> dict[str, Any]:
    return fields.get(name, dict, "an object", required=True)


def _check_choice(choice: str, forced: str | None, tools: tuple[Tool, ...]) -> None:
    if choice in ("required", "function") and not tools:
        raise ApiError(
            400,
            "'tool_choice' asks for a tool call, but the request has no 'tools'.",
            param="tool_choice",
            code="invalid_value",
        )
    if forced is not None and forced not in {t.name for t in tools}:
        raise ApiError(
            400,
            f"Invalid value for 'tool_choice.function.name': no tool is named {forced!r}.",
            param="tool_choice.function.name",
            code="invalid_value",
        )


def _sampling(fields: _Fields) -> dict[str, Any]:
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


def _prediction(value: dict[str, Any] | None) -> str | None:
    """OpenAI's `prediction`: {"type": "content", "content": text or text parts}."""
    if value is None:
        return None
    fields = _Fields(value, "prediction")
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


def _extension(value: dict[str, Any] | None) -> str | None:
    """specllama's own request fields, {"drafter": "none"}: OpenAI clients send them as extra
    body. "auto" (or nothing) is the server's own choice."""
    if value is None:
        return None
    fields = _Fields(value, "specllama")
    drafter = fields.get("drafter", str, "a string")
    fields.refuse_unread()
    return None if drafter in (None, "auto") else drafter


def _stop(value: str | list[Any] | None) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else (value or [])
    if len(stops) > MAX_STOPS:
        message = f"At most {MAX_STOPS} stop strings are allowed."
        raise ApiError(400, message, param="stop", code="invalid_value")
    for i, stop in enumerate(stops):
        if not isinstance(stop, str):
            raise _invalid_type(f"stop[{i}]", "a string", stop)
        if len(stop) > MAX_STOP_CHARS:
            raise ApiError(
                400,
                f"A stop string may have at most {MAX_STOP_CHARS} characters.",
                param=f"stop[{i}]" if isinstance(value, list) else "stop",
                code="invalid_value",
            )
    return tuple(stops)


def _messages(items: list[Any]) -> tuple[Message, ...]:
    if not items:
        raise ApiError(
            400, "'messages' must hold at least one message", param="messages", code="invalid_value"
        )
    return tuple(_message(item, f"messages[{i}]") for i, item in enumerate(items))


def _message(item: object, where: str) -> Message:
    fields = _Fields(item, where)
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
    call_id = fields.get("tool_call_id", str, "a string", required=True) if role == "tool" else None
    if role == "tool":
        fields.get("name", str, "a string")  # the function's name, which some clients add
    for name, value in fields.object.items():
        if name not in ("role", "content", "tool_calls", "tool_call_id") and not (
            name in fields.read or (name in MESSAGE_NEUTRAL and value is None)
        ):
            raise unsupported(f"{where}.{name}", f"'{name}' in a message")
    if content is None and role != "assistant":
        raise ApiError(
            400,
            f"Missing required parameter: '{where}.content'.",
            param=f"{where}.content",
            code="missing_required_parameter",
        )
    text = _text_content(content, f"{where}.content")
    return Message(ROLES[role], text, tool_calls=calls, tool_call_id=call_id)


def _message_calls(fields: _Fields, where: str) -> tuple[ToolCall, ...]:
    """An assistant message's tool_calls: {id, type: "function", function: {name, arguments}}."""
    items = fields.get("tool_calls", list, "an array") or []
    calls = []
    for i, item in enumerate(items):
        at = f"{where}.tool_calls[{i}]"
        call = _Fields(item, at)
        call_id = call.get("id", str, "a string", required=True)
        kind = call.get("type", str, "a string") or "function"
        if kind != "function":
            raise unsupported(f"{at}.type", f"a tool call of type {kind!r}")
        function = _Fields(_required_object(call, "function"), f"{at}.function")
        call.refuse_unread()
        name = function.get("name", str, "a string", required=True)
        arguments = function.get("arguments", str, "a string") or "{}"
        function.refuse_unread()
        calls.append(ToolCall(call_id, name, arguments))
    return tuple(calls)


def _text_content(content: str | list[Any] | None, where: str) -> str:
    """A message's content: a string, or content parts of which only text can be served."""
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for i, part in enumerate(content):
        fields = _Fields(part, f"{where}[{i}]")
        kind = fields.get("type", str, "a string", required=True)
        if kind != "text":
            raise unsupported(f"{where}[{i}]", f"content of type '{kind}' (text only)")
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
    raise _invalid_type("prompt", "a string", value)


class _Fields:
    """One JSON object's fields, read by type; each error names its parameter."""

    def __init__(self, value: object, where: str = "") -> None:
        if not isinstance(value, dict):
            name = f"'{where}'" if where else "The request body"
            raise ApiError(
                400, f"{name} must be a JSON object", param=where or None, code="invalid_type"
            )
        self.object: dict[str, Any] = value
        self._where = where
        self.read: set[str] = set()

    def _path(self, name: str) -> str:
        return f"{self._where}.{name}" if self._where else name

    def refuse_unread(self) -> None:
        """Refuse every field not read, except OpenAI's parameters at their off value."""
        for name, value in self.object.items():
            if name in self.read:
                continue
            if name in NEUTRAL:
                if NEUTRAL[name](value):
                    continue
                raise unsupported(self._path(name), f"'{name}' = {json.dumps(value)}")
            raise ApiError(
                400,
                f"Unrecognized request argument supplied: {self._path(name)}",
                param=self._path(name),
                code="unknown_parameter",
            )

    def get(
        self,
        name: str,
        kinds: type | tuple[type, ...],
        expected: str,
        *,
        required: bool = False,
    ) -> Any:
        self.read.add(name)
        value = self.object.get(name)
        if value is None:
            if required:
                raise ApiError(
                    400,
                    f"Missing required parameter: '{self._path(name)}'.",
                    param=self._path(name),
                    code="missing_required_parameter",
                )
            return None
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        # JSON true/false are Python ints too: only a boolean field takes them.
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise _invalid_type(self._path(name), expected, value)
        return value

    def int(self, name: str, *, minimum: int, maximum: int | None = None) -> int | None:
        value = self.get(name, int, "an integer")
        self._check_range(name, value, minimum, maximum)
        return value

    def number(
        self, name: str, *, minimum: float, maximum: float, below_maximum: bool = False
    ) -> float | None:
        value = self.get(name, (int, float), "a number")
        self._check_range(name, value, minimum, maximum, below_maximum)
        return None if value is None else float(value)

    def _check_range(
        self,
        name: str,
        value: float | None,
        minimum: float,
        maximum: float | None = None,
        below_maximum: bool = False,
    ) -> None:
        if value is None:
            return
        too_big = maximum is not None and (value >= maximum if below_maximum else value > maximum)
        if value < minimum or too_big:
            bound = f"at least {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            bound += " (exclusive)" if below_maximum else ""
            raise ApiError(
                400,
                f"Invalid value for '{self._path(name)}': expected {bound}, but got {value}.",
                param=self._path(name),
                code="invalid_value",
            )


def _invalid_type(param: str, expected: str, value: object) -> ApiError:
    return ApiError(
        400,
        f"Invalid type for '{param}': expected {expected}, but got {_json_type(value)} instead.",
        param=param,
        code="invalid_type",
    )


def _json_type(value: object) -> str:
    kinds = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    kinds |= {list: "an array", dict: "an object"}
    return kinds.get(type(value), "null")
