"""OpenAI's Responses API read into the one request type: what is accepted, what it becomes,
and the 400 that names the parameter for everything else. No model needed; the real server and
the openai SDK's responses.create are in test_openai_responses_served.py."""

from __future__ import annotations

import pytest

from specllama.chat import Message, ToolCall
from specllama.engine.constraint import ConstraintSpec
from specllama.server.fields import ApiError
from specllama.server.openai_responses import parse_responses

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": True}


def responses(**fields):
    return parse_responses({"model": "gpt-5", **fields})


def refused(**fields) -> ApiError:
    with pytest.raises(ApiError) as caught:
        responses(**fields)
    return caught.value


def test_a_string_input_with_instructions():
    asked = responses(input="hi", instructions="Be brief.", max_output_tokens=9, temperature=0.2)
    assert asked.messages == (Message("system", "Be brief."), Message("user", "hi"))
    assert asked.max_tokens == 9 and asked.sampling == {"temperature": 0.2}


def test_codex_like_items_become_the_conversation():
    """As Codex sends them: developer messages, reasoning passed back, a call and its output."""
    asked = responses(
        input=[
            {
                "type": "message",
                "id": "m1",
                "role": "developer",
                "content": [{"type": "input_text", "text": "You are a coding agent."}],
            },
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
            {
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Looking.", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city": "Paris"}',
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
        ],
        tools=[TOOL, {"type": "web_search", "external_web_access": False}],
        tool_choice="auto",
        parallel_tool_calls=False,
        store=False,
        stream=True,
        include=["reasoning.encrypted_content"],
        reasoning={"summary": "auto"},
        prompt_cache_key="k",
        client_metadata={"a": "b"},
        text={"verbosity": "low"},
    )
    call = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
    assert asked.messages == (
        Message("system", "You are a coding agent."),
        Message("user", "Weather in Paris?"),
        Message("assistant", "Looking.", tool_calls=(call,)),
        Message("tool", "18 C", tool_call_id="call_1"),
    )
    assert [t.name for t in asked.tools] == ["get_weather"]  # web_search runs at OpenAI's
    assert asked.stream and not asked.parallel_tool_calls and asked.rule is None


def test_a_json_schema_format_and_a_forced_function():
    asked = responses(
        input="x",
        text={"format": {"type": "json_schema", "name": "w", "schema": WEATHER, "strict": True}},
    )
    assert asked.rule == ConstraintSpec.json_schema(WEATHER) and asked.rule_param == "text.format"
    forced = responses(
        input="x", tools=[TOOL], tool_choice={"type": "function", "name": "get_weather"}
    )
    assert (forced.tool_choice, forced.forced_function) == ("function", "get_weather")


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"input": [{"type": "computer_call", "id": "c"}]}, "input[0].type", "invalid_value"),
        (
            {"input": "x", "previous_response_id": "resp_1"},
            "previous_response_id",
            "unsupported_parameter",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
            "unsupported_parameter",
        ),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "invalid_value"),
        ({"input": "x", "tool_choice": "sometimes"}, "tool_choice", "invalid_value"),
        (
            {"input": "x", "tools": [TOOL], "tool_choice": {"type": "function", "name": "nope"}},
            "tool_choice.name",
            "invalid_value",
        ),
        ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type", "invalid_value"),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "invalid_value"),
        ({"input": "x", "invented": 1}, "invented", "unknown_parameter"),
        ({}, "input", "missing_required_parameter"),
    ],
)
def test_mistakes_are_refused_by_name(fields, param, code):
    error = refused(**fields)
    assert (error.status, error.param, error.code) == (400, param, code)
    assert error.body()["error"]["param"] == param
