"""Anthropic's Messages API read into the one request type: what is accepted, what it becomes,
and the error in Anthropic's envelope for everything else. No model needed; the real server
and the anthropic SDK are in test_anthropic_served.py."""

from __future__ import annotations

import json

import pytest

from specllama.chat import Message, ToolCall
from specllama.server.anthropic import error_body, parse_count, parse_messages
from specllama.server.fields import ApiError

BASE = {"model": "claude-sonnet-4-5", "max_tokens": 64}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOL = {"name": "get_weather", "description": "Weather now", "input_schema": WEATHER}
USE = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}


def messages(*turns, **fields):
    return parse_messages({**BASE, "messages": list(turns), **fields})


def refused(**body) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse_messages({**BASE, **body})
    return caught.value


def user(content):
    return {"role": "user", "content": content}


def test_a_conversation_with_system_blocks_tools_and_results():
    asked = messages(
        user(
            [{"type": "text", "text": "Weather in Paris?", "cache_control": {"type": "ephemeral"}}]
        ),
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "hm", "signature": ""}, USE],
        },
        user(
            [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C"},
                {"type": "text", "text": "And tomorrow?"},
            ]
        ),
        system=[
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=a5145;"},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        ],
        tools=[{**TOOL, "cache_control": {"type": "ephemeral"}, "defer_loading": False}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        stop_sequences=["\n\nHuman:"],
        temperature=0.5,
        top_k=20,
        thinking={"type": "adaptive", "display": "omitted"},
        metadata={"user_id": "u"},
        context_management={"edits": []},
        output_config={"effort": "high"},
        stream=True,
    )
    call = ToolCall("toolu_1", "get_weather", '{"city": "Paris"}')
    assert asked.messages == (
        Message("system", "Be brief."),  # the billing stamp is no instruction: left out
        Message("user", "Weather in Paris?"),
        Message("assistant", "", tool_calls=(call,), reasoning="hm"),
        Message("tool", "18 C", tool_call_id="toolu_1"),
        Message("user", "And tomorrow?"),
    )
    assert asked.max_tokens == 64 and asked.stream and asked.stop == ("\n\nHuman:",)
    assert asked.sampling == {"temperature": 0.5, "top_k": 20}
    assert [t.name for t in asked.tools] == ["get_weather"]
    assert asked.tools[0].parameters == WEATHER
    assert asked.tool_choice == "required" and not asked.parallel_tool_calls


def test_tool_choice_kinds():
    asked = messages(user("hi"), tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"})
    assert (asked.tool_choice, asked.forced_function) == ("function", "get_weather")
    assert messages(user("hi"), tools=[TOOL], tool_choice={"type": "none"}).uses_tools is False
    assert messages(user("hi"), tools=[TOOL]).tool_choice == "auto"


def test_a_failed_tool_result_says_so_and_text_blocks_join():
    asked = messages(
        user("Weather?"),
        {"role": "assistant", "content": [USE]},
        user(
            [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "no"}, {"type": "text", "text": "net"}],
                    "is_error": True,
                }
            ]
        ),
    )
    assert asked.messages[-1] == Message("tool", "Error: no\nnet", tool_call_id="toolu_1")


def test_a_system_message_in_the_conversation_stays_where_it_is():
    """Claude Code sends its environment as a system turn after the first user turn."""
    asked = messages(user("hi"), {"role": "system", "content": [{"type": "text", "text": "env"}]})
    assert asked.messages == (Message("user", "hi"), Message("system", "env"))


def test_count_tokens_reads_the_conversation_without_max_tokens():
    asked = parse_count({"model": "m", "messages": [user("hi")], "system": "s", "tools": [TOOL]})
    assert asked.messages == (Message("system", "s"), Message("user", "hi"))
    assert asked.max_tokens is None and len(asked.tools) == 1


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"messages": [user("hi")], "max_tokens": None}, "max_tokens", "max_tokens"),
        (
            {"messages": [user([{"type": "tool_result", "tool_use_id": "toolu_9"}])]},
            "messages[0].content[0].tool_use_id",
            "toolu_9",
        ),
        ({"messages": [user([{"type": "video", "x": 1}])]}, "messages[0].content[0].type", "video"),
        (
            {"messages": [user([{"type": "image", "source": {"type": "base64", "data": ""}}])]},
            "messages[0].content[0].type",
            "image",
        ),
        (
            {"messages": [{"role": "assistant", "content": [{**USE, "type": "tool_result"}]}]},
            "messages[0].content[0].type",
            "tool_result",
        ),
        (
            {"messages": [user("hi")], "tools": [{**TOOL, "type": "web_search_20250305"}]},
            "tools[0].type",
            "web_search",
        ),
        ({"messages": [user("hi")], "tool_choice": {"type": "tool"}}, "tool_choice.name", None),
        ({"messages": [user("hi")], "tool_choice": {"type": "any"}}, "tool_choice", "no 'tools'"),
        ({"messages": [user("hi")], "stop_sequences": "x"}, "stop_sequences", None),
        ({"messages": [user("hi")], "top_k": -1}, "top_k", None),
        ({"messages": [user("hi")], "invented": 1}, "invented", "invented"),
        ({"messages": [user("hi")], "mcp_servers": [{"url": "x"}]}, "mcp_servers", None),
        ({"messages": []}, "messages", None),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", "robot"),
    ],
)
def test_mistakes_are_refused_by_name(body, param, words):
    error = refused(**body)
    assert error.status == 400 and error.param == param
    assert words is None or words in error.message
    envelope = error_body(error)
    assert envelope == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": error.message},
    }


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, "authentication_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (503, "overloaded_error"),
        (500, "api_error"),
    ],
)
def test_errors_take_anthropic_types_by_status(status, kind):
    assert error_body(ApiError(status, "m"))["error"]["type"] == kind
    assert json.dumps(error_body(ApiError(status, "m")))  # plain JSON
