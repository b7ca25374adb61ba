"""OpenAI requests read field by field: what is accepted, and the 400 that names the parameter
for everything else. No model needed."""

from __future__ import annotations

import json

import pytest

from specllama.chat import Message, ToolCall
from specllama.engine.constraint import ConstraintSpec
from specllama.engine.sampling import SamplingParams
from specllama.server.fields import ApiError, parse_json
from specllama.server.openai_chat import parse_chat, parse_completion

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
JSON = {"type": "json_object"}


def named_choice(name: str) -> dict:
    return {"type": "function", "function": {"name": name}}


def chat(**fields):
    return parse_chat({**CHAT, **fields})


def refused(parse, body) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(body)
    return caught.value


def test_a_chat_request_with_openai_fields():
    asked = chat(
        messages=[
            {"role": "developer", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {"role": "assistant", "content": None},
        ],
        max_completion_tokens=12,
        max_tokens=99,
        temperature=0.5,
        top_p=0.9,
        seed=3,
        stop="\n\n",
        stream=True,
        stream_options={"include_usage": True},
        user="someone",
    )
    assert asked.messages == (
        Message("system", "Be brief."),
        Message("user", "a\nb"),
        Message("assistant", ""),
    )
    assert asked.max_tokens == 12  # max_completion_tokens takes precedence
    assert asked.stop == ("\n\n",) and asked.stream and asked.include_usage
    assert asked.sampling == {"temperature": 0.5, "top_p": 0.9, "seed": 3}


def test_sampling_params_are_the_server_defaults_with_what_the_client_set():
    defaults = SamplingParams(temperature=0.0, top_k=20, min_p=0.1)
    assert chat().sampling_params(defaults) == defaults
    assert chat(temperature=0.7, seed=5).sampling_params(defaults) == SamplingParams(
        temperature=0.7, top_k=20, min_p=0.1, seed=5
    )
    assert chat(top_p=0, temperature=1.0).sampling_params(defaults).greedy
    assert chat(seed=-1).sampling == {}  # llama.cpp's "no seed"
    assert chat(seed=2**64 - 1).sampling == {"seed": 2**64 - 1}


def test_completion_defaults_to_16_tokens_as_the_openai_reference():
    asked = parse_completion({"model": "m", "prompt": ["once upon a time"]})
    assert asked.prompt == "once upon a time" and asked.max_tokens == 16
    assert chat().max_tokens is None  # chat: until the context is full


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"tools": [{"type": "custom", "custom": {"name": "f"}}]}, "tools[0].type"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"logprobs": True}, "logprobs"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": "x", "name": "bob"}]}, "messages[0].name"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "what is this?"},
                            {"type": "image_url", "image_url": {"url": "data:..."}},
                        ],
                    }
                ]
            },
            "messages[0].content[1]",
        ),
    ],
)
def test_unsupported_parameters_are_refused_by_name(fields, param):
    error = refused(parse_chat, {**CHAT, **fields})
    assert (error.status, error.param, error.code) == (400, param, "unsupported_parameter")
    assert "not supported" in error.message


def test_unsupported_parameters_at_their_off_value_are_accepted():
    off = {"n": 1, "tools": [], "logprobs": False, "frequency_penalty": 0, "tool_choice": "none"}
    assert chat(**off).messages == (Message("user", "hi"),)


def test_an_unknown_parameter_is_named():
    error = refused(parse_chat, {**CHAT, "temprature": 0.5})
    assert (error.param, error.code) == ("temprature", "unknown_parameter")


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"max_tokens": "10"}, "max_tokens", "invalid_type"),
        ({"max_tokens": 2.0}, "max_tokens", "invalid_type"),
        ({"max_tokens": 0}, "max_tokens", "invalid_value"),
        ({"temperature": 2.5}, "temperature", "invalid_value"),
        ({"temperature": True}, "temperature", "invalid_type"),
        ({"stream": "yes"}, "stream", "invalid_type"),
        ({"stop": ["a", 1]}, "stop[1]", "invalid_type"),
        ({"messages": []}, "messages", "invalid_value"),
        ({"messages": "hi"}, "messages", "invalid_type"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "invalid_value"),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "missing_required_parameter"),
        ({"stop": ["."] * 33}, "stop", "invalid_value"),
        ({"model": None}, "model", "missing_required_parameter"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),
        ({"stop": "x" * 300}, "stop", "invalid_value"),
        ({"seed": -2}, "seed", "invalid_value"),
        ({"seed": 2**64}, "seed", "invalid_value"),  # the noise's key is 64 bits
        (
            {"messages": [{"role": "tool", "content": "x"}]},
            "messages[0].tool_call_id",
            "missing_required_parameter",
        ),
        ({"tools": [{"type": "function"}]}, "tools[0].function", "missing_required_parameter"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name", None),
        ({"tools": [TOOL, TOOL]}, "tools[1].function.name", "invalid_value"),
        ({"tools": "get_weather"}, "tools", "invalid_type"),
        ({"tools": [{**TOOL, "function": {"name": "a b"}}]}, "tools[0].function.name", None),
        ({"tools": [TOOL], "tool_choice": "always"}, "tool_choice", "invalid_value"),
        ({"tool_choice": "required"}, "tool_choice", "invalid_value"),
        ({"tools": [TOOL], "tool_choice": named_choice("nope")}, "tool_choice.function.name", None),
        ({"response_format": {"type": "xml"}}, "response_format.type", "invalid_value"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", None),
        ({"grammar": 'root ::= "a"', "response_format": JSON}, "grammar", None),
        (
            {"tools": [TOOL], "tool_choice": "required", "response_format": JSON},
            "response_format",
            None,
        ),
        ({"tools": [TOOL], "grammar": 'root ::= "a"'}, "grammar", "unsupported_combination"),
    ],
)
def test_wrong_values_and_types_name_the_parameter(fields, param, code):
    error = refused(parse_chat, {**CHAT, **fields})
    assert (error.status, error.param) == (400, param)
    assert code is None or error.code == code


@pytest.mark.parametrize(
    ("prompt", "code"),
    [
        (["a", "b"], "unsupported_parameter"),
        ([1, 2, 3], "unsupported_parameter"),
        (5, "invalid_type"),
    ],
)
def test_completion_prompts_other_than_one_string_are_refused(prompt, code):
    error = refused(parse_completion, {"model": "m", "prompt": prompt})
    assert (error.param, error.code) == ("prompt", code)


@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe", b"[1, 2]", b'"text"'])
def test_a_body_that_is_not_a_json_object_is_a_400(raw):
    error = refused(parse_json, raw)
    assert error.status == 400 and error.code in ("invalid_json", "invalid_type")


def test_errors_render_in_openai_shape():
    error = refused(parse_chat, {**CHAT, "n": 3})
    body = json.loads(json.dumps(error.body()))
    assert body == {
        "error": {
            "message": error.message,
            "type": "invalid_request_error",
            "param": "n",
            "code": "unsupported_parameter",
        }
    }
    assert ApiError(503, "busy").body()["error"]["type"] == "server_error"


def test_tools_tool_choice_and_the_messages_of_a_call():
    asked = chat(
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "refusal": None,  # what the openai package echoes back from an answer
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
        ],
        tools=[TOOL, {"type": "function", "function": {"name": "now", "strict": True}}],
        tool_choice=named_choice("get_weather"),
        parallel_tool_calls=False,
    )
    assert asked.messages[1] == Message(
        "assistant", "", tool_calls=(ToolCall("call_1", "get_weather", '{"city": "Paris"}'),)
    )
    assert asked.messages[2] == Message("tool", "sunny, 21 C", tool_call_id="call_1")
    assert [t.name for t in asked.tools] == ["get_weather", "now"]
    assert asked.tools[0].parameters == WEATHER and not asked.tools[0].strict
    assert asked.tools[1].strict and asked.tools[1].parameters["type"] == "object"
    assert asked.forces_call and [t.name for t in asked.forced_tools()] == ["get_weather"]
    assert not asked.parallel_tool_calls
    assert chat(tools=[TOOL]).uses_tools and not chat(tools=[TOOL]).forces_call
    assert not chat(tools=[TOOL], tool_choice="none").uses_tools
    assert chat(tools=[TOOL], tool_choice="required").forced_tools() == chat(tools=[TOOL]).tools


def test_response_format_and_grammar_become_rules():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    described = {"name": "thing", "schema": schema, "strict": True}
    asked = chat(response_format={"type": "json_schema", "json_schema": described})
    assert asked.rule == ConstraintSpec.json_schema(schema)
    assert asked.rule_param == "response_format"
    assert chat(response_format=JSON).rule == ConstraintSpec("json_object")
    assert chat(response_format={"type": "text"}).rule is None
    gbnf = 'root ::= "yes" | "no"'
    assert chat(grammar=gbnf).rule == ConstraintSpec("gbnf", gbnf)
    assert parse_completion({"model": "m", "prompt": "x", "grammar": gbnf}).rule_param == "grammar"
    # A JSON answer or a call: response_format beside tools the model may call.
    assert chat(tools=[TOOL], response_format=JSON).rule == ConstraintSpec("json_object")
