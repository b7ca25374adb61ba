"""A call streamed through each API's answer as the model writes it, token by token: Chat
Completions' first tool-call delta names it (id, type, name, empty arguments) and the next
ones carry pieces of its arguments; Responses adds a function_call item, streams
function_call_arguments.delta events and closes it with .done (arguments and name); Messages
opens a tool_use block, streams input_json_delta pieces and stops it. Put together as clients
do, each is the whole answer's call. No model: the answer's text is fed to the answer."""

from __future__ import annotations

import json

import pytest

from specllama.engine.stats import GenerationStats
from specllama.family.hand_written import Hermes
from specllama.family.reader import AnswerReader
from specllama.server.anthropic import parse_messages
from specllama.server.anthropic_answer import MessageAnswer
from specllama.server.driver import Done, Text
from specllama.server.openai_chat import parse_chat
from specllama.server.openai_chat_answer import ChatAnswer
from specllama.server.openai_responses import parse_responses
from specllama.server.openai_responses_answer import ResponseAnswer
from specllama.server.wire import Served
from specllama.tool_calls import Tool

ARGUMENTS = '{"city": "Paris", "note": "a long enough text, written token by token"}'
ANSWER = f'I will look.\n<tool_call>\n{{"name": "get_weather", "arguments": {ARGUMENTS}}}\n'
ANSWER += "</tool_call>"
TOOL = Tool("get_weather", "w", {"type": "object", "properties": {"city": {"type": "string"}}})


def served() -> Served:
    return Served("m", lambda: AnswerReader(calls=Hermes([TOOL])), n_prompt=9)


def done(reason: str = "stop") -> Done:
    return Done(GenerationStats(n_prompt=9, n_generated=30, finish_reason=reason), 0)


def streamed(answer, text: str, step: int = 3) -> list:
    """The answer's events, its text fed `step` characters at a time."""
    events = answer.opening()
    for at in range(0, len(text), step):
        events += answer.text(Text([(text[at : at + step], "target")]))
    return events


def chat_answer():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    body["tools"] = [{"type": "function", "function": {"name": "get_weather"}}]
    return ChatAnswer(parse_chat(body), served(), chat=True)


def test_chat_streams_a_call_as_openai_does():
    answer = chat_answer()
    events = streamed(answer, ANSWER) + answer.final(done())
    deltas = [
        part
        for _, data in events
        for choice in data.get("choices", [])
        for part in choice["delta"].get("tool_calls", [])
    ]
    first, *rest = deltas
    assert first["id"].startswith("call_") and first["type"] == "function"
    assert first["function"] == {"name": "get_weather", "arguments": ""}
    assert len(rest) > 3 and all(set(p) == {"index", "function"} for p in rest)
    assert "".join(p["function"]["arguments"] for p in rest) == ARGUMENTS
    whole = chat_answer().whole(ANSWER, done())["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["arguments"] for c in whole] == [ARGUMENTS]
    finish = [c["finish_reason"] for _, d in events for c in d.get("choices", [])]
    assert finish[-1] == "tool_calls"


def responses_answer():
    body = {"model": "m", "input": "hi", "stream": True}
    body["tools"] = [{"type": "function", "name": "get_weather"}]
    return ResponseAnswer(parse_responses(body), served())


def test_responses_streams_a_function_call_item():
    answer = responses_answer()
    events = streamed(answer, ANSWER) + answer.final(done())
    kinds = [name for name, _ in events]
    numbers = [data["sequence_number"] for _, data in events]
    assert numbers == list(range(len(events)))
    added = [d for n, d in events if n == "response.output_item.added"]
    call_added = [d for d in added if d["item"]["type"] == "function_call"]
    assert [d["item"]["arguments"] for d in call_added] == [""]
    pieces = [d for n, d in events if n == "response.function_call_arguments.delta"]
    assert len(pieces) > 3 and "".join(d["delta"] for d in pieces) == ARGUMENTS
    (args_done,) = [d for n, d in events if n == "response.function_call_arguments.done"]
    assert (args_done["arguments"], args_done["name"]) == (ARGUMENTS, "get_weather")
    item_id = call_added[0]["item"]["id"]
    assert {d["item_id"] for d in pieces} == {item_id}
    # the message item closed before the call's was added, the call's closed before the end
    start = kinds.index("response.function_call_arguments.delta")
    assert kinds.index("response.output_text.done") < start
    completed = events[-1][1]["response"]
    assert completed["status"] == "completed"
    assert [i["arguments"] for i in completed["output"] if i["type"] == "function_call"] == [
        ARGUMENTS
    ]


def messages_answer():
    body = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
    body["tools"] = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    return MessageAnswer(parse_messages(body), served())


def test_messages_streams_a_tool_use_block():
    answer = messages_answer()
    events = streamed(answer, ANSWER) + answer.final(done())
    blocks: dict[int, list] = {}
    open_block = None
    for name, data in events:
        if name == "content_block_start":
            assert open_block is None, "one block at a time"
            open_block = data["index"]
            blocks[open_block] = [data["content_block"]]
        elif name == "content_block_delta":
            assert data["index"] == open_block
            blocks[open_block].append(data["delta"])
        elif name == "content_block_stop":
            assert data["index"] == open_block
            open_block = None
    start, *pieces = blocks[1]
    assert start == {"type": "tool_use", "id": start["id"], "name": "get_weather", "input": {}}
    assert len(pieces) > 3 and {p["type"] for p in pieces} == {"input_json_delta"}
    assert "".join(p["partial_json"] for p in pieces) == ARGUMENTS
    whole = messages_answer().whole(ANSWER, done())
    assert [b["input"] for b in whole["content"] if b["type"] == "tool_use"] == [
        json.loads(ARGUMENTS)
    ]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize("make", [chat_answer, responses_answer, messages_answer])
def test_a_call_cut_by_max_tokens_ends_and_the_answer_says_length(make):
    cut = ANSWER[: ANSWER.index("token by")]
    answer = make()
    events = streamed(answer, cut) + answer.final(done("length"))
    text = json.dumps([data for _, data in events])
    assert "get_weather" in text and "</tool_call>" not in text
    if make is responses_answer:
        (item_done,) = [
            d["item"]
            for n, d in events
            if n == "response.output_item.done" and d["item"]["type"] == "function_call"
        ]
        assert item_done["status"] == "incomplete" and ARGUMENTS.startswith(item_done["arguments"])
        assert events[-1][1]["response"]["status"] == "incomplete"
    elif make is messages_answer:
        assert [n for n, _ in events].count("content_block_start") == [n for n, _ in events].count(
            "content_block_stop"
        )
        assert events[-2][1]["delta"]["stop_reason"] == "max_tokens"
    else:
        finish = [c["finish_reason"] for _, d in events for c in d.get("choices", [])]
        assert finish[-1] == "length"
