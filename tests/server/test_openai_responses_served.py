"""The Responses API through a real `specllama serve`, asked with the official `openai` SDK's
`responses.create`: text, a stream, a function call and its output, json_schema output, and
errors by name. The server is the F32 SmolLM2 wearing a Hermes tool template with its Q4_1 file
drafting: greedy text equals Chat Completions' for the same conversation, whoever drafts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from serving import Server, serve, smollm2_f32_tools

pytestmark = pytest.mark.slow

SYSTEM = "You are a helpful assistant."
ASK = "Name three fruits."
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}},
    "required": ["city"],
}
TOOL = {"type": "function", "name": "get_weather", "parameters": WEATHER, "strict": True}
FORCED = {"type": "function", "name": "get_weather"}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
}


@pytest.fixture(scope="module")
def server(smol_q4: Path, tmp_path_factory) -> Iterator[Server]:
    extra = ["--draft", str(smol_q4), "--fixed", "--draft-max", "4"]
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    yield from serve(smollm2_f32_tools(), extra, log, ctx=1024)


def respond(server: Server, input=ASK, max_output_tokens: int = 32, drafter=None, **kw):
    extra = dict(kw.pop("extra_body", {}))
    if drafter is not None:
        extra["specllama"] = {"drafter": drafter}
    return server.client().responses.create(
        model="gpt-5-codex",  # any name: the server answers with its own model
        instructions=SYSTEM,
        input=input,
        max_output_tokens=max_output_tokens,
        extra_body=extra or None,
        **kw,
    )


def chat_text(server: Server, max_tokens: int = 32, **kw) -> tuple[str, int]:
    answer = server.client().chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": ASK}],
        max_tokens=max_tokens,
        extra_body={"specllama": {"drafter": "none"}, **kw},
    )
    return answer.choices[0].message.content, answer.usage.completion_tokens


@pytest.mark.parametrize("drafter", ["model", "ngram", "none"])
def test_greedy_responses_equal_chat_completions_whoever_drafts(server: Server, drafter: str):
    text, n_generated = chat_text(server)
    response = respond(server, drafter=drafter)
    assert response.output_text == text and response.model == server.model
    assert response.usage.output_tokens == n_generated
    assert response.status == ("incomplete" if n_generated == 32 else "completed")
    (message,) = response.output
    assert message.type == "message" and message.role == "assistant"
    assert response.model_extra["specllama"]["drafter"] == drafter


def test_a_seed_gives_chat_completions_sampled_text(server: Server):
    sampled = {"temperature": 0.8, "top_p": 0.95}
    text, _ = chat_text(server, seed=11, **sampled)
    assert respond(server, extra_body={"seed": 11}, **sampled).output_text == text


def test_the_stream_is_its_event_sequence_and_the_same_text(server: Server):
    whole = respond(server)
    events = list(respond(server, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == f"response.{whole.status}"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [item.content[0].text for item in done] == [whole.output_text]
    final = events[-1].response
    assert final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens_details.cached_tokens > 0  # the same prompt, just before


def test_a_function_call_and_its_output(server: Server):
    first = respond(server, tools=[TOOL], tool_choice=FORCED, max_output_tokens=60)
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and set(json.loads(call.arguments)) == {"city"}
    streamed = list(
        respond(server, tools=[TOOL], tool_choice=FORCED, max_output_tokens=60, stream=True)
    )
    arguments = "".join(
        e.delta for e in streamed if e.type == "response.function_call_arguments.delta"
    )
    assert arguments == call.arguments
    turns = [
        {"role": "user", "content": ASK},
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"},
    ]
    second = respond(server, input=turns, tools=[TOOL], tool_choice="none")
    assert second.output_text and not [i for i in second.output if i.type == "function_call"]


def test_json_schema_output_is_closed_json_of_the_schema(server: Server):
    response = respond(
        server,
        input="Describe a person.",
        max_output_tokens=60,
        text={"format": {"type": "json_schema", "name": "person", "schema": PERSON}},
    )
    person = json.loads(response.output_text)
    assert set(person) <= {"name", "age"}  # no invented fields: the object is closed


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"input": ASK, "previous_response_id": "resp_1"}, "previous_response_id"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0].type",
        ),
    ],
)
def test_bad_requests_are_refused_by_name_and_the_next_is_answered(server: Server, fields, param):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().responses.create(model="m", max_output_tokens=8, **fields)
    assert caught.value.status_code == 400 and caught.value.body["param"] == param
    assert respond(server).output_text == chat_text(server)[0]
