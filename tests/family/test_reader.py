"""The one answer reader: thinking split off first, then text and calls, whole or streamed."""

from __future__ import annotations

import json
import random

from specllama.family.reader import AnswerReader, read_whole
from specllama.family.thinking import KNOWN, ThinkingSplit
from specllama.tool_calls import Hermes

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
THOUGHT = 'Maybe <tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
ANSWER = f"<think>{THOUGHT}</think>\n\nLet me look.\n{CALL}"


def reader() -> AnswerReader:
    return AnswerReader(split=ThinkingSplit(KNOWN[0], inside=False), calls=Hermes(["get_weather"]))


def test_a_call_inside_the_thinking_is_no_call() -> None:
    reading = read_whole(reader(), ANSWER)
    assert reading.thinking == THOUGHT
    assert reading.content == "Let me look."
    assert [(c.name, json.loads(c.arguments)) for c in reading.calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert not reading.broken


def test_streamed_in_random_pieces_reads_as_whole() -> None:
    whole = read_whole(reader(), ANSWER)
    rng = random.Random(7)
    for _ in range(50):
        streamed, pieces, at = reader(), [], 0
        while at < len(ANSWER):
            step = rng.randint(1, 9)
            pieces += streamed.feed(ANSWER[at : at + step])
            at += step
        pieces += streamed.finish()
        thinking = "".join(p.text for p in pieces if p.kind == "thinking")
        text = "".join(p.text for p in pieces if p.kind == "text")
        calls = [(p.call.name, p.call.arguments) for p in pieces if p.kind == "call"]
        assert thinking == whole.thinking
        assert text == whole.content
        assert calls == [(c.name, c.arguments) for c in whole.calls]


def test_without_thinking_or_tools_the_answer_is_text() -> None:
    plain = AnswerReader()
    pieces = plain.feed("<think>not parsed</think> ") + plain.feed("<tool_call>") + plain.finish()
    assert {p.kind for p in pieces} == {"text"}
    reading = plain.result()
    assert (reading.thinking, reading.content, reading.calls) == (
        None,
        "<think>not parsed</think> <tool_call>",
        [],
    )


def test_an_answer_that_begins_inside_the_thinking() -> None:
    inside = AnswerReader(split=ThinkingSplit(KNOWN[0], inside=True))
    reading = read_whole(inside, "plan it</think>\n\nDone.")
    assert (reading.thinking, reading.content) == ("plan it", "Done.")
