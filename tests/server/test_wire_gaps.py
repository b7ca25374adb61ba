"""The wire-format gaps agents found (issue 51, item 5), read without a model: bodies nested too
deep, a Responses json_schema without its schema, images and documents in a conversation,
fields sent as null, Anthropic's output_config.format and strict tools, and the grammar that
keeps strict tools' calls to their schemas while the answer stays free text. The same through
a real server and the official SDKs: test_wire_gaps_served.py."""

from __future__ import annotations

import json

import pytest

from specllama.chat import Message
from specllama.engine.constraint import ConstraintSpec
from specllama.family.hand_written import Hermes, Llama3
from specllama.server.anthropic import parse_messages
from specllama.server.fields import MAX_DEPTH, ApiError, parse_json
from specllama.server.openai_chat import parse_chat
from specllama.server.openai_responses import parse_responses
from specllama.server.strict_calls import lazy_call_grammar
from specllama.tool_calls import Tool, special_by_text

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def refused(parse, body) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(body)
    return caught.value


def nested(depth: int) -> bytes:
    """A body whose `messages` nest `depth` levels deep (the body itself is the first)."""
    inner = "[" * (depth - 1) + "]" * (depth - 1)
    return f'{{"model": "m", "messages": {inner}}}'.encode()


# -- nesting -----------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1_000, 100_000])
def test_a_body_nested_too_deep_is_a_400_that_says_so(depth):
    error = refused(parse_json, nested(depth))
    assert (error.status, error.code) == (400, "invalid_json")
    assert f"more than {MAX_DEPTH} levels" in error.message


def test_a_body_nested_as_deep_as_allowed_is_read():
    assert parse_json(nested(MAX_DEPTH))["model"] == "m"


# -- Responses' text.format ---------------------------------------------------------------------


def test_a_responses_json_schema_without_its_schema_is_refused():
    text = {"format": {"type": "json_schema", "name": "person"}}
    error = refused(parse_responses, {"model": "m", "input": "x", "text": text})
    assert (error.status, error.param) == (400, "text.format.schema")
    assert error.code == "missing_required_parameter"


def test_chat_json_schema_without_a_schema_stays_any_json_object():
    """Chat Completions' json_schema.schema is optional: without it, any JSON object."""
    rule = {"type": "json_schema", "json_schema": {"name": "anything"}}
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": rule}
    assert parse_chat(body).rule == ConstraintSpec("json_object")


# -- attachments --------------------------------------------------------------------------------

IMAGE_URL = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
ANTHROPIC_IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png"}}
PDF = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf"}}


def test_chat_an_image_or_a_file_in_an_earlier_message_is_a_placeholder():
    file = {"type": "file", "file": {"file_data": "x", "filename": "a.pdf"}}
    shown = [{"type": "text", "text": "What is this?"}, IMAGE_URL, file]
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": shown},
            {"role": "assistant", "content": "I cannot see it."},
            {"role": "user", "content": "Fine."},
        ],
    }
    asked = parse_chat(body)
    assert asked.messages[0] == Message("user", "What is this?\n[image]\n[file]")


def test_chat_an_image_in_the_message_to_answer_is_refused_by_name():
    body = {"model": "m", "messages": [{"role": "user", "content": [IMAGE_URL]}]}
    error = refused(parse_chat, body)
    assert (error.status, error.param, error.code) == (
        400,
        "messages[0].content[0]",
        "unsupported_parameter",
    )
    assert "[image]" in error.message  # says what an earlier one becomes


def test_responses_images_and_files_earlier_are_placeholders_also_in_a_tool_output():
    output = [{"type": "input_file", "file_data": "x", "filename": "r.pdf"}]
    body = {
        "model": "m",
        "input": [
            {
                "role": "user",
                "content": [{"type": "input_image", "image_url": "x", "detail": "auto"}],
            },
            {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": output},
            {"role": "user", "content": "Go on."},
        ],
    }
    said = [m.content for m in parse_responses(body).messages]
    assert said == ["[image]", "", "[file]", "Go on."]


def test_responses_an_image_in_the_last_item_is_refused():
    body = {"model": "m", "input": [{"role": "user", "content": [{"type": "input_image"}]}]}
    error = refused(parse_responses, body)
    assert (error.param, error.code) == ("input[0].content[0].type", "unsupported_parameter")


def test_anthropic_screenshots_and_documents_earlier_are_placeholders():
    """Claude Code keeps a pasted screenshot, and an image a tool read, in its history."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.png"}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [ANTHROPIC_IMAGE]}
    turns = [
        {"role": "user", "content": [{"type": "text", "text": "Look:"}, ANTHROPIC_IMAGE, PDF]},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [result]},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."},
    ]
    asked = parse_messages({"model": "m", "max_tokens": 8, "messages": turns})
    assert asked.messages[0] == Message("user", "Look:\n[image]\n[document]")
    assert asked.messages[2] == Message("tool", "[image]", tool_call_id="toolu_1")


@pytest.mark.parametrize(
    ("content", "param"),
    [
        ([ANTHROPIC_IMAGE], "messages[0].content[0].type"),
        ([{"type": "text", "text": "Read it"}, PDF], "messages[0].content[1].type"),
    ],
)
def test_anthropic_an_attachment_in_the_message_to_answer_is_refused(content, param):
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": content}]}
    error = refused(parse_messages, body)
    assert (error.status, error.param) == (400, param)


# -- nulls --------------------------------------------------------------------------------------


def test_chat_fields_sent_as_null_are_as_if_absent():
    echoed = {"role": "assistant", "content": "hi", "parsed": None, "reasoning": None}
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}, echoed, {"role": "user", "content": "?"}],
        "tools": None,
        "tool_choice": None,
        "stop": None,
        "seed": None,
        "stream_options": None,
        "response_format": None,
        "metadata": None,
        "service_tier": None,
    }
    asked = parse_chat(body)
    assert [m.content for m in asked.messages] == ["hi", "hi", "?"] and asked.tools == ()


def test_responses_fields_sent_as_null_are_as_if_absent():
    echoed = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": None}
    body = {
        "model": "m",
        "input": [{"role": "user", "content": "hi"}, echoed],
        "instructions": None,
        "previous_response_id": None,
        "text": {"format": None, "verbosity": None},
        "reasoning": None,
        "tools": None,
        "tool_choice": None,
        "max_tool_calls": None,
        "prompt": None,
    }
    assert parse_responses(body).messages == (Message("user", "hi"),)


def test_anthropic_fields_sent_as_null_are_as_if_absent():
    text = {"type": "text", "text": "hi", "citations": None, "cache_control": None}
    tool = {"name": "f", "input_schema": WEATHER, "strict": None, "type": None}
    body = {
        "model": "m",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": [text]}],
        "system": None,
        "tools": [tool],
        "tool_choice": None,
        "thinking": None,
        "output_config": None,
        "top_k": None,
        "container": None,
    }
    asked = parse_messages(body)
    assert asked.messages == (Message("user", "hi"),) and not asked.tools[0].strict


# -- output rules and strict tools --------------------------------------------------------------


def test_anthropic_output_config_format_is_the_answers_rule():
    format_ = {"type": "json_schema", "schema": WEATHER}
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    asked = parse_messages({**body, "output_config": {"format": format_, "effort": "low"}})
    assert asked.rule == ConstraintSpec.json_schema(WEATHER)
    assert asked.rule_param == "output_config.format"
    wrong = {**body, "output_config": {"format": {"type": "yaml", "schema": WEATHER}}}
    assert refused(parse_messages, wrong).param == "output_config.format.type"
    missing = {**body, "output_config": {"format": {"type": "json_schema"}}}
    assert refused(parse_messages, missing).param == "output_config.format.schema"


@pytest.mark.parametrize("strict", [True, False])
def test_a_tools_strict_is_read_in_every_api(strict):
    anthropic_tool = {"name": "f", "input_schema": WEATHER, "strict": strict}
    function = {"name": "f", "parameters": WEATHER, "strict": strict}
    user = [{"role": "user", "content": "x"}]
    read = [
        parse_messages(
            {"model": "m", "max_tokens": 8, "messages": user, "tools": [anthropic_tool]}
        ),
        parse_chat(
            {"model": "m", "messages": user, "tools": [{"type": "function", "function": function}]}
        ),
        parse_responses({"model": "m", "input": "x", "tools": [{"type": "function", **function}]}),
    ]
    assert [asked.tools[0].strict for asked in read] == [strict] * 3


STRICT = Tool("get_weather", None, WEATHER, strict=True)
LOOSE = Tool("note", None, {"type": "object", "properties": {"text": {"type": "string"}}})


def test_no_strict_tool_no_grammar():
    assert lazy_call_grammar(Hermes(["note"]), [LOOSE], parallel=True, special={}) is None


def test_a_family_whose_calls_open_with_no_marker_gets_no_grammar():
    fmt = Llama3(["get_weather"])
    assert lazy_call_grammar(fmt, [STRICT], parallel=True, special={}) is None


def test_strict_grammar_text_marker_ends_the_free_text_at_the_marker():
    grammar = lazy_call_grammar(
        Hermes(["get_weather", "note"]), [STRICT, LOOSE], parallel=True, special={}
    )
    assert grammar is not None
    assert grammar.startswith(
        'start: TEXT? | lead calls\nTEXT: /(?s:.+)/\nlead[stop="<tool_call>"]'
    )
    schemas = [
        json.loads(line.split("%json ", 1)[1]) for line in grammar.splitlines() if "%json" in line
    ]
    assert schemas[0]["properties"] == WEATHER["properties"]  # the strict tool's own schema
    assert "properties" not in schemas[1]  # the loose one: any object


def test_strict_grammar_special_marker_begins_the_calls():
    grammar = lazy_call_grammar(
        Hermes(["get_weather"]),
        [STRICT],
        parallel=False,
        special=special_by_text(["<tool_call>", "</tool_call>"]),
    )
    assert grammar is not None and grammar.startswith("start: TEXT? calls?\n")
    assert "call_0: <tool_call> " in grammar and "stop=" not in grammar
