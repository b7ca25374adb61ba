"""The hand-written call syntaxes (Hermes, Llama 3, Mistral): told from templates' text, read
back from answers whole and streamed (markup never in the content), broken calls kept as text.
No model needed; the grammars are compiled against a real vocabulary in
tests/server/test_tools.py."""

from __future__ import annotations

import json

import pytest

from specllama.family.call_stream import CallStream, parse_answer
from specllama.family.hand_written import Hermes, Llama3, Mistral, detect_format
from specllama.tool_calls import Tool, call_grammar, held_prefix, special_by_text

NAMES = ("get_weather", "now")
QWEN_LIKE = "{% if tools %}{{ tools | tojson }}<tool_call>{% endif %}{{ messages }}"
LLAMA_LIKE = "{% if tools %}<|start_header_id|>ipython{% endif %}{{ '<|python_tag|>' }}"
MISTRAL_LIKE = "{% for t in tools %}[AVAILABLE_TOOLS]{% endfor %}[TOOL_CALLS]"


def streamed(fmt, text: str, step: int = 1):
    """The answer fed `step` characters at a time: (content deltas joined, calls, result)."""
    stream = CallStream(fmt)
    deltas = []
    for i in range(0, len(text), step):
        deltas += stream.feed(text[i : i + step])
    deltas += stream.finish()
    content = "".join(d.content for d in deltas if d.call is None)
    calls = [(d.index, d.call.name, d.call.arguments) for d in deltas if d.kind == "call"]
    assert all(d.broken == stream.result().broken for d in deltas if d.kind == "call")
    return content, calls, stream.result()


def test_the_format_is_told_from_the_template():
    assert isinstance(detect_format(QWEN_LIKE), Hermes)
    assert isinstance(detect_format(LLAMA_LIKE), Llama3)
    assert isinstance(detect_format(MISTRAL_LIKE), Mistral)
    assert isinstance(detect_format("{{ tools }}"), Hermes)  # unknown: the Hermes syntax


@pytest.mark.parametrize(
    ("fmt", "text", "content", "calls"),
    [
        (
            Hermes(NAMES),
            'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
            '\n</tool_call>\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>',
            "Let me look.",
            [("get_weather", {"city": "Paris"}), ("now", {})],
        ),
        (  # the way small Qwen models write a call: bare JSON in a fence
            Hermes(NAMES),
            '```json\n{\n  "name": "get_weather",\n  "arguments": {"city": "Oslo"}\n}\n```',
            None,
            [("get_weather", {"city": "Oslo"})],
        ),
        (  # JSON that names no offered tool is text
            Hermes(NAMES),
            'As JSON: {"name": "Bob", "arguments": {}} and ```python\nx = {1}\n```',
            'As JSON: {"name": "Bob", "arguments": {}} and ```python\nx = {1}\n```',
            [],
        ),
        (
            Llama3(NAMES),
            '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Rome"}}; '
            '{"name": "now", "parameters": {}}',
            None,
            [("get_weather", {"city": "Rome"}), ("now", {})],
        ),
        (Llama3(NAMES), "It is sunny {probably}.", "It is sunny {probably}.", []),
        (
            Mistral(NAMES),
            'Checking. [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Lima"}}]',
            "Checking.",
            [("get_weather", {"city": "Lima"})],
        ),
        (  # the marker is a control token: the text may show only the array
            Mistral(NAMES),
            '[{"name": "now", "arguments": {}}]',
            None,
            [("now", {})],
        ),
    ],
)
def test_answers_are_read_whole_and_streamed_alike(fmt, text, content, calls):
    parsed = parse_answer(fmt, text)
    assert parsed.content == content and not parsed.broken
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == calls
    assert all(c.id.startswith("call_") for c in parsed.calls)
    assert len({c.id for c in parsed.calls}) == len(calls)
    for step in (1, 3, 7, len(text)):
        streamed_content, streamed_calls, result = streamed(fmt, text, step)
        assert streamed_content == (content or "")
        assert [(i, n, json.loads(a)) for i, n, a in streamed_calls] == [
            (i, n, a) for i, (n, a) in enumerate(calls)
        ]
        assert result.content == content


def test_fenced_json_naming_no_offered_tool_is_sent_on_once_its_name_is_whole():
    # What Qwen2.5-Coder-0.5B wrote for Claude Code: held whole, its client heard nothing
    # for the 110 tokens of it.
    head = '```json\n{\n  "name": "gitStatus",'
    text = head + '\n  "arguments": {"path": "/tmp/repo", "verbose": true}\n}\n```'
    stream = CallStream(Hermes(NAMES))
    sent = "".join(d.content for ch in head for d in stream.feed(ch))
    assert sent == head  # before the object's end
    rest = "".join(d.content for ch in text[len(head) :] for d in stream.feed(ch))
    assert sent + rest + "".join(d.content for d in stream.finish()) == text
    assert stream.result().calls == [] and not stream.result().broken
    # An offered tool's name is not known to be one until its string is whole: held.
    stream = CallStream(Hermes(NAMES))
    assert "".join(d.content for ch in '```json\n{"name": "get_weat' for d in stream.feed(ch)) == ""


def test_markup_never_reaches_the_content_while_streaming():
    text = 'Sure.\n<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>'
    stream = CallStream(Hermes(NAMES))
    for ch in text:
        for delta in stream.feed(ch):
            assert "<" not in delta.content and "{" not in delta.content


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        (Hermes(NAMES), 'OK <tool_call>\n{"name": "get_weather", "arguments": {"ci'),
        (
            Hermes(NAMES),
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": }}\n</tool_call>',
        ),
        (Hermes(NAMES), '```json\n{"name": "get_weather", "arguments": {"city": "Pa'),
        (Llama3(NAMES), '{"name": "get_weather", "parameters": {"city"'),
        (Mistral(NAMES), '[TOOL_CALLS][{"name": "now", "arguments": {'),
    ],
)
def test_a_broken_call_is_no_call_and_its_text_stays(fmt, text):
    parsed = parse_answer(fmt, text)
    assert parsed.broken and parsed.calls == []
    assert parsed.content is not None and parsed.content.strip() in text
    assert text.rstrip().endswith(parsed.content.strip()[-5:])  # the raw text, to its end
    content, calls, result = streamed(fmt, text, 2)
    assert result == parsed
    # Streamed, a call that began (its name was whole) ends broken, with the arguments sent:
    # the text before it is the content; one that never began is text.
    if calls:
        ((_, name, arguments),) = calls
        assert name in text and arguments in text
        assert text.startswith(content) and name not in content
    else:
        assert content == parsed.content


def test_a_whole_call_then_a_broken_one_keeps_the_whole_one():
    text = (
        '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "argu'
    )
    parsed = parse_answer(Hermes(NAMES), text)
    assert [c.name for c in parsed.calls] == ["now"] and parsed.broken
    assert parsed.content.startswith("<tool_call>\n") and "get_weather" in parsed.content


def test_text_only_answers_keep_their_whitespace():
    text = "  Hello,\n\nworld.  \n"
    assert parse_answer(Hermes(NAMES), text).content == text
    assert streamed(Hermes(NAMES), text, 2)[0] == text


def test_the_forced_grammar_names_each_tool_and_embeds_its_schema():
    weather = {"type": "object", "properties": {"city": {"type": "string"}}}
    tools = [Tool("get_weather", "w", weather), Tool("now")]
    one = call_grammar(
        Hermes(NAMES), tools, parallel=False, special=special_by_text(["<tool_call>"])
    )
    assert one.startswith("start: calls\ncalls: call\ncall: call_0 | call_1\n")
    assert "call_0: <tool_call> " in one and '"</tool_call>"' in one  # text: not special
    assert '"properties": {"city": {"type": "string"}}' in one
    many = call_grammar(Llama3(NAMES), tools, parallel=True, special={}, or_json=weather)
    assert many.startswith('start: reply | calls\nreply: %json {"type": "object"')
    assert 'calls: call ("; " call)*' in many and '\\"parameters\\": ' in many


def test_streamed_arguments_hold_what_may_begin_the_end_marker():
    """Hermes ends a call at the first `</tool_call>`, even inside a string: a piece of the
    arguments never holds text that may yet begin it, and the call then ends broken."""
    head = '<tool_call>\n{"name": "get_weather", "arguments": {"html": "<b>x</b> '
    text = head + "</tool_call>"
    stream, sent = CallStream(Hermes(NAMES)), ""
    for i, char in enumerate(text):
        sent += "".join(d.arguments for d in stream.feed(char) if d.kind == "call_args")
        arguments = text[text.index('{"html"') : i + 1]  # as far as they are written
        assert arguments.startswith(sent)
        assert len(sent) <= len(arguments) - held_prefix(arguments, "</tool_call>")
    assert sent == '{"html": "<b>x</b> '
    ended = [d for d in stream.finish() if d.kind == "call"]
    assert [(d.call.name, d.call.arguments, d.broken) for d in ended] == [
        ("get_weather", sent, True)
    ]
    assert stream.result().broken and stream.result().calls == []
