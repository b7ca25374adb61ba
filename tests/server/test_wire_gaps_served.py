"""The wire-format gaps agents found (issue 51, item 5), each through a real `specllama serve`
with the official `openai` and `anthropic` SDKs or a raw request: a Responses stream over the
context ends in response.failed (context_length_exceeded), output_config.format and strict
tools constrain the answer, tool_choice "none" keeps the tools in the prompt, a body nested too
deep is a 400, images in earlier turns stand as placeholders, and nulls are accepted. The
server is the F32 SmolLM2 wearing a Hermes tool template (its `<tool_call>` is plain text)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from serving import KEY, Server, serve, smollm2_f32_tools

from specllama.engine.constraint import ConstraintSpec, compile_constraint
from specllama.family.hand_written import Hermes
from specllama.llama.backend import LlamaBackend
from specllama.llama.grammar import tokenizer_for
from specllama.server.fields import MAX_DEPTH
from specllama.server.strict_calls import lazy_call_grammar
from specllama.tool_calls import Tool

pytestmark = pytest.mark.slow

CTX = 512
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 24}},
    "required": ["city"],
}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
ASK = [{"role": "user", "content": "Name three fruits."}]
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    yield from serve(smollm2_f32_tools(), ["--drafter", "none"], log, ctx=CTX)


def claude(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)


def chat_tools(server: Server, strict: bool, **kw):
    function = {"name": "get_weather", "parameters": WEATHER, "strict": strict}
    weather = [{"role": "user", "content": "What is the weather in Paris?"}]
    return server.client().chat.completions.create(
        model="m",
        messages=weather,
        tools=[{"type": "function", "function": function}],
        max_tokens=48,
        **kw,
    )


def test_a_responses_stream_over_the_context_ends_in_response_failed(server: Server):
    """Codex compacts the conversation on this event; on a stream without it, it retries."""
    long = "tell me more " * CTX
    events = list(server.client().responses.create(model="m", input=long, stream=True))
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.failed"
    failed = events[-1].response
    assert failed.status == "failed"
    assert failed.error.code == "context_length_exceeded"
    assert f"maximum context length is {CTX} tokens" in failed.error.message
    # Without a stream it stays the 400 every API gives
    status, _, body = server.request("POST", "/v1/responses", {"model": "m", "input": long})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"


def test_anthropic_output_config_format_constrains_the_answer(server: Server):
    schema = {**PERSON, "additionalProperties": False}
    answer = claude(server).messages.create(
        model="m",
        max_tokens=48,
        messages=[{"role": "user", "content": "Invent a person."}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    person = json.loads(answer.content[0].text)
    assert set(person) == {"name", "age"} and isinstance(person["age"], int)


def test_strict_tools_under_auto_leave_free_text_free(server: Server):
    """The grammar of strict tools lets text through as the model writes it: when the model
    writes no call, the greedy answer is the one without the constraint, token for token."""
    loose, strict = chat_tools(server, strict=False), chat_tools(server, strict=True)
    if loose.choices[0].message.tool_calls:  # the model calls: the strict call follows WEATHER
        (call,) = strict.choices[0].message.tool_calls
        assert set(json.loads(call.function.arguments)) == {"city"}
    else:
        assert strict.choices[0].message.content == loose.choices[0].message.content


def test_strict_grammar_lets_text_through_and_holds_a_call_to_its_schema(smol_q4: Path):
    """The grammar lazy_call_grammar builds, on the test model's own vocabulary."""
    backend = LlamaBackend(smol_q4, n_ctx=64, n_threads=1)
    tool = Tool("get_weather", None, WEATHER, strict=True)
    lark = lazy_call_grammar(Hermes(["get_weather"]), [tool], parallel=True, special={})
    grammar = compile_constraint(
        ConstraintSpec("lark", lark), tokenizer_for(backend), backend.n_vocab
    )

    def allowed(text: str) -> bool:
        tokens = backend.tokenize(text, add_bos=False, special=False)
        constraint = grammar.start()
        return constraint.valid_prefix(tokens) == len(tokens)

    call = '<tool_call>\n{{"name": "get_weather", "arguments": {{"{key}": "Paris"}}}}\n</tool_call>'
    assert allowed("Free text, with <b>tags</b> and a <tool of its own.")
    assert allowed("Let me look. " + call.format(key="city"))
    assert not allowed("Let me look. " + call.format(key="town"))
    assert not allowed(call.format(key="town"))


def test_tool_choice_none_keeps_the_tools_in_the_prompt(server: Server):
    """The same prompt as with "auto", so the next turn's prefix matches the prompt cache."""
    auto = chat_tools(server, strict=False, tool_choice="auto", max_completion_tokens=1)
    none = chat_tools(server, strict=False, tool_choice="none")
    assert none.usage.prompt_tokens == auto.usage.prompt_tokens
    bare = server.client().chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        max_tokens=1,  # only its prompt is counted
    )
    assert none.usage.prompt_tokens > bare.usage.prompt_tokens + 20  # the tools are in it
    assert not none.choices[0].message.tool_calls


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": ASK}),
        ("/v1/messages", {"model": "m", "max_tokens": 8, "messages": ASK}),
        ("/v1/responses", {"model": "m", "input": "hi"}),
    ],
)
def test_a_body_nested_too_deep_is_a_400_in_the_apis_envelope(server: Server, path, body):
    deep = json.dumps({**body, "metadata": [[]]}).replace("[[]]", "[" * 5000 + "]" * 5000)
    status, _, answer = server.request("POST", path, deep.encode())
    assert status == 400
    error = answer["error"]
    assert f"more than {MAX_DEPTH} levels" in error["message"]
    assert answer.get("type", "error") == "error"  # Anthropic's envelope names itself


def test_an_earlier_screenshot_stands_as_a_placeholder_the_last_is_refused(server: Server):
    earlier = [
        {"role": "user", "content": [{"type": "text", "text": "See this:"}, IMAGE]},
        {"role": "assistant", "content": "I cannot see images."},
        {"role": "user", "content": "Then name three fruits."},
    ]
    answer = claude(server).messages.create(model="m", max_tokens=8, messages=earlier)
    assert answer.content[0].text
    last = [{"role": "user", "content": [{"type": "text", "text": "And this?"}, IMAGE]}]
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude(server).messages.create(model="m", max_tokens=8, messages=last)
    assert "'image'" in str(refused.value) and "[image]" in str(refused.value)


def test_fields_the_sdks_send_as_null_are_accepted(server: Server):
    nulls = {"metadata": None, "stop": None, "seed": None, "response_format": None}
    chat = server.client().chat.completions.create(
        model="m", messages=ASK, max_tokens=4, extra_body=nulls
    )
    assert chat.choices[0].message.content
    responses = server.client().responses.create(
        model="m",
        input="hi",
        max_output_tokens=4,
        extra_body={"previous_response_id": None, "text": {"format": None}, "tools": None},
    )
    assert responses.status in ("completed", "incomplete")
    message = claude(server).messages.create(
        model="m",
        max_tokens=4,
        messages=ASK,
        extra_body={"system": None, "output_config": None, "tool_choice": None},
    )
    assert message.content
