"""gpt-oss's channels, read by hand: thinking, text and calls, whole and streamed."""

from __future__ import annotations

import json
import random

from specllama.family.call_stream import parse_answer
from specllama.family.harmony import HarmonyFormat, HarmonyReader
from specllama.family.reader import read_whole
from specllama.tool_calls import Tool, special_by_text

THOUGHT = "<|channel|>analysis<|message|>They want the weather.<|end|><|start|>assistant"
CALL = (
    "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Oslo"}<|call|>'
)


def streamed(text: str, seed: int):
    reader, rng, pos = HarmonyReader(), random.Random(seed), 0
    pieces = []
    while pos < len(text):
        step = rng.randint(1, 6)
        pieces += reader.feed(text[pos : pos + step])
        pos += step
    return pieces + reader.finish(), reader.result()


def test_thinking_then_a_call():
    reading = read_whole(HarmonyReader(), THOUGHT + CALL)
    assert reading.thinking == "They want the weather." and reading.content is None
    assert [(c.name, json.loads(c.arguments)) for c in reading.calls] == [
        ("get_weather", {"city": "Oslo"})
    ]
    for seed in range(5):
        pieces, result = streamed(THOUGHT + CALL, seed)
        assert result == reading.__class__(reading.thinking, None, result.calls, False)
        assert "".join(p.text for p in pieces if p.kind == "thinking") == reading.thinking
        assert [p.kind for p in pieces].count("call") == 1


def test_the_recipient_before_the_channel_and_two_calls():
    first = ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "A"}<|call|>'
    second = "<|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}<|call|>"
    reading = read_whole(HarmonyReader(), first + second)
    assert [c.name for c in reading.calls] == ["get_weather", "now"]


def test_final_text_streams_and_markup_never_shows():
    text = THOUGHT + "<|channel|>final<|message|>It is sunny in Oslo."
    for seed in range(5):
        pieces, result = streamed(text, seed)
        shown = "".join(p.text for p in pieces if p.kind == "text")
        assert shown == "It is sunny in Oslo." and result.thinking == "They want the weather."


def test_a_broken_call_is_text_and_broken():
    text = CALL.replace('{"city": "Oslo"}', '{"city": ')
    reading = read_whole(HarmonyReader(), text)
    assert reading.calls == [] and reading.broken and reading.content == '{"city": '


def test_an_answer_without_channels_is_text():
    assert read_whole(HarmonyReader(), "Plain words.").content == "Plain words."


def test_the_format_reads_calls_through_the_call_stream_and_forces_them():
    fmt = HarmonyFormat([Tool("get_weather")])
    assert [c.name for c in parse_answer(fmt, THOUGHT + CALL).calls] == ["get_weather"]
    rules = "\n".join(
        fmt.rules([Tool("get_weather")], parallel=False, special=special_by_text(["<|call|>"]))
    )
    assert "to=functions.get_weather" in rules and "<|call|>" in rules
