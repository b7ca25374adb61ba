"""Tool calls through a real `specllama serve`, asked with the official `openai` client.

Two models, for two reasons:
- Qwen2.5-Coder-0.5B-Instruct (the default pair's draft, fetched once from the package index
  and cached), served as the target with n-gram drafting: its own chat template knows tools
  (Hermes `<tool_call>` syntax, as special tokens), and it calls a tool when asked in words,
  so "auto" can be tested on a real model's own choice.
- The F32 SmolLM2 wearing a Hermes tool template (tests/serving.py), with its Q4_1 file as the
  draft: on F32 a forced call's greedy text must be the same, token for token, whoever drafts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from serving import Server, serve, smollm2_f32_tools

from specllama.models import hub
from specllama.models.catalog import load_catalog

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
GET_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": WEATHER,
        "strict": True,
    },
}
NOW = {"type": "function", "function": {"name": "now", "description": "The current time"}}
TOOLS = [GET_WEATHER, NOW]
ASK = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> Iterator[Server]:
    _, draft, _ = hub.resolve_pair(load_catalog(), None)
    assert draft is not None
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    yield from serve(draft, ["--drafter", "ngram"], log, ctx=2048)


@pytest.fixture(scope="module")
def smol_tools(smol_q4: Path, tmp_path_factory) -> Iterator[Server]:
    extra = ["--draft", str(smol_q4), "--fixed", "--draft-max", "4"]
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    yield from serve(smollm2_f32_tools(), extra, log, ctx=1024)


def call(server: Server, messages=ASK, max_tokens: int = 80, drafter: str | None = None, **kw):
    extra = {"specllama": {"drafter": drafter}} if drafter else None
    return server.client().chat.completions.create(
        model=server.model,
        messages=messages,
        tools=kw.pop("tools", TOOLS),
        max_tokens=max_tokens,
        temperature=0,
        extra_body=extra,
        **kw,
    )


def assert_weather_call(answer, city: str | None = None) -> dict:
    """One call to get_weather whose arguments follow WEATHER; its arguments."""
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert len(choice.message.tool_calls) == 1
    made = choice.message.tool_calls[0]
    assert made.type == "function" and made.id.startswith("call_")
    assert made.function.name == "get_weather"
    arguments = json.loads(made.function.arguments)
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
    assert isinstance(arguments["city"], str) and len(arguments["city"]) <= 24
    if city is not None:
        assert arguments["city"] == city
    return arguments


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_a_forced_call_follows_its_schema(qwen: Server, choice):
    # A named function is one call even with parallel calls allowed (null: OpenAI's default).
    parallel = False if choice == "required" else None
    answer = call(qwen, tool_choice=choice, parallel_tool_calls=parallel)
    assert_weather_call(answer, "Paris")
    assert answer.choices[0].message.content is None
    assert answer.model_extra["specllama"]["n_forced"] > 0  # the call's markup and keys


def test_auto_the_model_calls_when_asked_and_none_gets_text(qwen: Server):
    """Under "auto" the call is the model's own choice (this 0.5B model calls a tool for
    almost anything, so "answers in words otherwise" is left to larger models); under "none"
    it is told of no tools and its answer is not read for calls."""
    assert_weather_call(call(qwen), "Paris")
    chat = call(
        qwen, messages=[{"role": "user", "content": "Say hello in French."}], tool_choice="none"
    )
    assert chat.choices[0].finish_reason == "stop" and not chat.choices[0].message.tool_calls
    assert chat.choices[0].message.content.strip()


def streamed(server: Server, **kw) -> tuple[str | None, list[dict], str, list]:
    """A streamed answer put together as a client does: (content, calls, finish, chunks)."""
    chunks = list(call(server, stream=True, **kw))
    content, calls, finish = "", {}, None
    for chunk in chunks:
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for part in delta.tool_calls or []:
            made = calls.setdefault(part.index, {"id": part.id, "name": "", "arguments": ""})
            if part.id is not None:  # only the first delta of a call names it
                assert made["arguments"] == "" and part.function.arguments == ""
                made["name"] = part.function.name
            made["arguments"] += part.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return content or None, [calls[i] for i in sorted(calls)], finish, chunks


@pytest.mark.parametrize("tool_choice", ["auto", "required"])
def test_a_streamed_call_put_together_is_the_whole_answer(qwen: Server, tool_choice: str):
    # One call: forced with parallel calls allowed, this 0.5B model repeats its call until
    # max_tokens (the grammar lets it; the last one is cut, so the answer ends "length").
    whole = call(qwen, tool_choice=tool_choice, parallel_tool_calls=False).choices[0]
    content, calls, finish, chunks = streamed(
        qwen, tool_choice=tool_choice, parallel_tool_calls=False
    )
    assert finish == whole.finish_reason == "tool_calls"
    assert content == whole.message.content
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (c.function.name, c.function.arguments) for c in whole.message.tool_calls
    ]
    assert all(c["id"].startswith("call_") for c in calls)
    # The call's text (in `<tool_call>` tags when forced, in a json fence when this model
    # chooses) never reached the content; the tokens that made it still came, coloured.
    assert not any('"name"' in (c.choices[0].delta.content or "") for c in chunks)
    tokens = [t for c in chunks for t in (c.model_extra.get("specllama") or {}).get("tokens", [])]
    assert '"name": "get_weather"' in "".join(text for text, _ in tokens)


def test_a_second_turn_with_the_tool_result_is_answered(qwen: Server):
    first = call(qwen, tool_choice="required", parallel_tool_calls=False).choices[0].message
    result = {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "Sunny, 21 C"}
    # The assistant message goes back as the openai package sends it (with refusal: null).
    turn = [*ASK, first, result]
    auto = call(qwen, messages=turn, max_tokens=48)  # the model may call again
    assert auto.choices[0].finish_reason in ("stop", "tool_calls", "length")
    # "none": no call is read from the answer (this small model tends to write one all the
    # same: it stays text), and the tools stay in the prompt, as llama-server renders them, so
    # that the prompt is the one "auto" gives (the next turn's prefix matches the cache).
    answer = call(qwen, messages=turn, max_tokens=48, tool_choice="none")
    assert answer.choices[0].finish_reason == "stop" and not answer.choices[0].message.tool_calls
    assert answer.choices[0].message.content
    assert answer.usage.prompt_tokens == auto.usage.prompt_tokens > 40


def test_a_call_cut_by_max_tokens_is_no_call_and_its_text_is_the_content(qwen: Server):
    answer = call(qwen, tool_choice="required", max_tokens=8).choices[0]
    assert answer.finish_reason == "length" and not answer.message.tool_calls
    assert answer.message.content.startswith("<tool_call>\n{")
    content, calls, finish, _ = streamed(qwen, tool_choice="required", max_tokens=8)
    assert (content, calls, finish) == (answer.message.content, [], "length")


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        (  # malformed: parameters must be an object
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
            "tools[0].function.parameters",
            "invalid_type",
        ),
        ({"tools": [{"type": "function"}]}, "tools[0].function", "missing_required_parameter"),
        (  # a schema the engine cannot compile, forced
            {
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": {"$ref": "#/x"}}}
                ],
                "tool_choice": "required",
            },
            "tools",
            "invalid_schema",
        ),
    ],
)
def test_bad_tools_are_one_400_and_the_next_call_is_right(qwen: Server, fields, param, code):
    with pytest.raises(openai.BadRequestError) as caught:
        qwen.client().chat.completions.create(
            model=qwen.model, messages=ASK, max_tokens=8, **fields
        )
    error = caught.value.body
    assert (caught.value.status_code, error["param"], error["code"]) == (400, param, code)
    assert_weather_call(call(qwen, tool_choice="required", parallel_tool_calls=False), "Paris")


@pytest.mark.parametrize("parallel", [False, True])
def test_a_forced_call_is_the_same_whoever_drafts_it(smol_tools: Server, parallel: bool):
    answers = {
        drafter: call(
            smol_tools,
            tools=[GET_WEATHER],
            tool_choice="required",
            parallel_tool_calls=parallel,
            drafter=drafter,
            max_tokens=120,
        )
        for drafter in ("none", "ngram", "model")
    }
    raw = {
        d: [(c.function.name, c.function.arguments) for c in a.choices[0].message.tool_calls or []]
        for d, a in answers.items()
    }
    assert raw["none"] == raw["ngram"] == raw["model"], raw
    counts = {d: a.usage.completion_tokens for d, a in answers.items()}
    assert len(set(counts.values())) == 1, counts
    if not parallel:  # one call, ended by the grammar
        assert_weather_call(answers["none"])
    assert answers["model"].model_extra["specllama"]["n_forced"] > 0
