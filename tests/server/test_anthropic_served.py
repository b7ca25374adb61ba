"""The Messages API through a real `specllama serve`, asked with the official `anthropic` SDK:
create, stream, a tool loop, count_tokens, and the errors in Anthropic's envelope.

The server is the F32 SmolLM2 wearing a Hermes tool template, with its Q4_1 file drafting a
fixed 4 tokens a round: on F32 the greedy text through /v1/messages must be Chat Completions'
for the same conversation, token for token, whoever drafts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from serving import KEY, Server, serve, smollm2_f32_tools

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Name three fruits."}]
SYSTEM = "You are a helpful assistant."
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}},
    "required": ["city"],
}
TOOL = {"name": "get_weather", "description": "The weather in a city", "input_schema": WEATHER}
FORCED = {"type": "tool", "name": "get_weather"}


@pytest.fixture(scope="module")
def server(smol_q4: Path, tmp_path_factory) -> Iterator[Server]:
    extra = ["--draft", str(smol_q4), "--fixed", "--draft-max", "4"]
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    yield from serve(smollm2_f32_tools(), extra, log, ctx=1024)


def client(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)


def create(server: Server, messages=ASK, max_tokens: int = 32, drafter: str | None = None, **kw):
    extra = dict(kw.pop("extra_body", {}))
    if drafter is not None:
        extra["specllama"] = {"drafter": drafter}
    return client(server).messages.create(
        model="claude-sonnet-4-5",  # any name: the server answers with its own model
        system=kw.pop("system", SYSTEM),
        messages=messages,
        max_tokens=max_tokens,
        extra_body=extra or None,
        **kw,
    )


def chat_text(server: Server, max_tokens: int = 32, **kw) -> tuple[str, int]:
    """Chat Completions' greedy answer to the same conversation (the target alone)."""
    messages = [{"role": "system", "content": SYSTEM}, *ASK]
    answer = server.client().chat.completions.create(
        model="gpt-4o",
        messages=messages,
        max_tokens=max_tokens,
        extra_body={"specllama": {"drafter": "none"}, **kw},
    )
    return answer.choices[0].message.content, answer.usage.completion_tokens


@pytest.mark.parametrize("drafter", ["model", "ngram", "none"])
def test_greedy_messages_equal_chat_completions_whoever_drafts(server: Server, drafter: str):
    text, n_generated = chat_text(server)
    message = create(server, drafter=drafter)
    assert message.content[0].type == "text" and message.content[0].text == text
    assert len(message.content) == 1 and message.role == "assistant"
    assert message.usage.output_tokens == n_generated
    assert message.stop_reason == ("max_tokens" if n_generated == 32 else "end_turn")
    assert message.model == server.model  # the model that answered, whatever was asked for
    stats = message.model_extra["specllama"]
    assert stats["drafter"] == drafter and stats["n_generated"] == n_generated


def test_a_seed_gives_chat_completions_sampled_text(server: Server):
    sampled = {"temperature": 0.8, "top_p": 0.95, "seed": 7}
    text, _ = chat_text(server, **sampled)
    assert create(server, extra_body=sampled).content[0].text == text


def test_the_stream_is_the_whole_event_sequence_and_the_same_text(server: Server):
    whole = create(server)
    with client(server).messages.stream(
        model="m", system=SYSTEM, messages=ASK, max_tokens=32
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[kinds.index("content_block_start") - 1] in ("message_start", "ping")
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 1
    assert final.content[0].text == whole.content[0].text
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == (
        whole.content[0].text
    )
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    # the prompt was the same a moment ago: read from the KV cache, as Anthropic reports it
    assert final.usage.cache_read_input_tokens > 0
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == (
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens
    )


def test_a_stop_sequence_is_named(server: Server):
    text, _ = chat_text(server)
    stop = text.strip().split()[1]  # the second word of the answer
    message = create(server, stop_sequences=["zzz", stop])
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == stop
    assert stop not in message.content[0].text and text.startswith(message.content[0].text)


def test_a_tool_loop(server: Server):
    """A forced call comes back as a tool_use block; its result sent back gets an answer in
    words; the same turns through Chat Completions give the same text."""
    first = create(server, tools=[TOOL], tool_choice=FORCED, max_tokens=60)
    assert first.stop_reason == "tool_use"
    (use,) = [block for block in first.content if block.type == "tool_use"]
    assert use.name == "get_weather" and set(use.input) == {"city"}
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 21 C"}
    turns = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [result]},
    ]
    second = create(server, messages=turns, tools=[TOOL], tool_choice={"type": "none"})
    assert second.stop_reason in ("end_turn", "max_tokens") and second.content[0].type == "text"
    call = {
        "id": use.id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps(use.input)},
    }
    chat = server.client().chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": SYSTEM},
            *ASK,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": use.id, "content": "Sunny, 21 C"},
        ],
        tools=[
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": TOOL["description"],
                    "parameters": WEATHER,
                },
            }
        ],
        tool_choice="none",
        max_tokens=32,
    )
    assert second.content[0].text == chat.choices[0].message.content


def test_a_streamed_tool_use_comes_as_input_json(server: Server):
    whole = create(server, tools=[TOOL], tool_choice=FORCED, max_tokens=60)
    with client(server).messages.stream(
        model="m", system=SYSTEM, messages=ASK, max_tokens=60, tools=[TOOL], tool_choice=FORCED
    ) as stream:
        events = list(stream)
        final = stream.get_final_message()
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert any(d.type == "input_json_delta" for d in deltas)
    uses = [b for b in final.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [
        (b.name, b.input) for b in whole.content if b.type == "tool_use"
    ]
    assert final.stop_reason == "tool_use"


def test_count_tokens_counts_the_prompt_a_create_reads(server: Server):
    counted = client(server).messages.count_tokens(
        model="m", system=SYSTEM, messages=ASK, tools=[TOOL]
    )
    message = create(server, tools=[TOOL], max_tokens=4)
    assert counted.input_tokens == (
        message.usage.input_tokens + message.usage.cache_read_input_tokens
    )
    without = client(server).messages.count_tokens(model="m", system=SYSTEM, messages=ASK)
    assert 0 < without.input_tokens < counted.input_tokens


def raw_message(server: Server, body: dict, headers: dict | None = None):
    return server.request("POST", "/v1/messages", body, headers)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"messages": ASK}, "max_tokens"),
        (
            {
                "max_tokens": 8,
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}
                ],
            },
            "tool_use_id",
        ),
        ({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "gif"}]}]}, "gif"),
        (
            {
                "max_tokens": 8,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "source": {"type": "url", "url": "x"}}],
                    }
                ],
            },
            "image",
        ),
    ],
)
def test_bad_requests_are_one_error_in_anthropics_envelope(server: Server, body, words):
    status, _, reply = raw_message(server, {"model": "m", **body})
    assert status == 400 and reply["type"] == "error", reply
    assert reply["error"]["type"] == "invalid_request_error" and words in reply["error"]["message"]
    if "max_tokens" in body:  # as the SDK sees it
        with pytest.raises(anthropic.BadRequestError):
            create(server, messages=body["messages"], max_tokens=body["max_tokens"])
    text, _ = chat_text(server)
    assert create(server).content[0].text == text  # and the next request is answered right


def test_the_key_goes_as_x_api_key_and_a_wrong_one_is_an_authentication_error(server: Server):
    body = {"model": "m", "max_tokens": 4, "messages": ASK}
    bearer_only = {"Authorization": ""}
    assert raw_message(server, body, {**bearer_only, "x-api-key": KEY})[0] == 200
    status, _, reply = raw_message(server, body, {**bearer_only, "x-api-key": "wrong"})
    assert status == 401 and reply["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.url, api_key="nope", max_retries=0).messages.create(
            model="m", max_tokens=4, messages=ASK
        )


def test_claude_codes_own_routes_are_answered_at_once(server: Server):
    """Before it starts Claude Code calls HEAD /api/hello at the base URL (without its
    non-essential traffic off, event logging too): answered, never a 404 it retries."""
    import http.client

    connection = http.client.HTTPConnection(*server.address, timeout=10)
    connection.request("HEAD", "/api/hello")
    assert connection.getresponse().status == 200
    connection.close()
    status, _, body = server.request("POST", "/api/event_logging/batch", {"events": []})
    assert (status, body) == (200, {})
