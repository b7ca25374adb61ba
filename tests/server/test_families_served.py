"""Each family's own chat template on a real small model served by `specllama serve`: a call
the client forces comes back as a tool call through all three APIs (written in the family's
own syntax, forced by its grammar, read by its reader), streamed as it is written (in several
pieces of arguments, which each SDK puts together into the very call the whole answer has),
and a greedy answer is the same text, thinking apart, through each.

The model is a 2-layer F32 copy of SmolLM2 wearing each real template from llama.cpp's sources
(`tests/chat_templates.py`): what it writes means nothing, but it is written token by token by
a real model under the family's grammar and read back by the family's reader. Forced calls ask
for no thinking (each API's own switch), so that the grammar's optional thinking does not
leave a 2-layer model wandering in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import pytest
from chat_templates import all_templates
from model_factory import cache_dir, copy_gguf, smollm2_f32_layers
from serving import KEY, Server, serve

pytestmark = pytest.mark.slow

# One template per call syntax (and thinking syntax) the issue names.
FAMILIES = [
    "Qwen-Qwen2.5-7B-Instruct",  # Hermes JSON in <tool_call>
    "Qwen3-Coder",  # <function=f><parameter=k>
    "Qwen3.5-4B",  # the same calls, thinking opened in the prompt
    "openai-gpt-oss-120b",  # harmony channels
    "google-gemma-4-31B-it",  # <|tool_call>call:f{k:<|"|>v<|"|>}
    "GLM-4.6",  # f<arg_key>k</arg_key><arg_value>v</arg_value>
    "deepseek-ai-DeepSeek-V3.1",  # <｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}
    "deepseek-ai-DeepSeek-V3.2",  # DSML invoke/parameter
    "moonshotai-Kimi-K2",  # functions.f:0<|tool_call_argument_begin|>{...}
    "MiniMax-M2",  # <minimax:tool_call><invoke name=...>
    "unsloth-mistral-Devstral-Small-2507",  # [TOOL_CALLS]f[ARGS]{...}
    "mistralai-Mistral-Nemo-Instruct-2407",  # [TOOL_CALLS][{...}]
    "meta-llama-Llama-3.1-8B-Instruct",  # the whole answer is the JSON call
    "ByteDance-Seed-OSS",  # <seed:tool_call><function=f>
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",  # Qwen3-Coder's XML, thinking
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CITY = {"type": "string", "pattern": "^[A-Za-z]{1,8}$"}
WEATHER = {"type": "object", "properties": {"city": CITY}, "required": ["city"]}
DESCRIPTION = "The weather in a city"
N = 160


@pytest.fixture(scope="module", params=FAMILIES)
def served(request, tmp_path_factory) -> Iterator[Server]:
    name = request.param
    path = cache_dir() / f"SmolLM2-135M.F32.2layers.{name}.gguf"
    if not path.exists():
        partial = path.with_suffix(".partial")
        copy_gguf(smollm2_f32_layers(2), partial, chat_template=all_templates()[name])
        partial.replace(path)
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    yield from serve(path, ["--drafter", "none"], log, ctx=4096)


def chat_call(server: Server) -> tuple[str, dict]:
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}}
    tool["function"]["description"] = DESCRIPTION
    answer = server.client().chat.completions.create(
        model="m",
        messages=ASK,
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=N,
        reasoning_effort="none",
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls
    return call.function.name, json.loads(call.function.arguments)


def responses_call(server: Server) -> tuple[str, dict]:
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER}
    response = server.client().responses.create(
        model="m",
        input=ASK,
        tools=[{**tool, "description": DESCRIPTION}],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=N,
        reasoning={"effort": "none"},
    )
    (call,) = [item for item in response.output if item.type == "function_call"]
    return call.name, json.loads(call.arguments)


def messages_call(server: Server) -> tuple[str, dict]:
    client = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)
    tool = {"name": "get_weather", "description": DESCRIPTION, "input_schema": WEATHER}
    message = client.messages.create(
        model="m",
        messages=ASK,
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
        max_tokens=N,
        thinking={"type": "disabled"},
    )
    assert message.stop_reason == "tool_use", message
    (use,) = [block for block in message.content if block.type == "tool_use"]
    return use.name, use.input


def test_a_forced_call_is_a_call_through_every_api(served: Server):
    name, arguments = chat_call(served)
    assert name == "get_weather" and set(arguments) == {"city"}
    assert responses_call(served) == (name, arguments)
    assert messages_call(served) == (name, arguments)


# -- streamed calls ---------------------------------------------------------------------------


def chat_tool() -> dict:
    function = {"name": "get_weather", "description": DESCRIPTION, "parameters": WEATHER}
    return {"type": "function", "function": function}


def chat_streamed_call(server: Server) -> tuple[str, str, int]:
    """A forced call streamed, put together by the openai SDK's stream helper: (name, arguments,
    how many chunks carried a piece of the arguments)."""
    with server.client().chat.completions.stream(
        model="m",
        messages=ASK,
        tools=[chat_tool()],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=N,
        reasoning_effort="none",
    ) as stream:
        pieces = [
            part.function.arguments
            for chunk in stream
            if chunk.type == "chunk"
            for part in (chunk.chunk.choices[0].delta.tool_calls or [])
            if part.function and part.function.arguments
        ]
        final = stream.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls", final
    (call,) = final.message.tool_calls
    assert "".join(pieces) == call.function.arguments
    return call.function.name, call.function.arguments, len(pieces)


def chat_whole_call(server: Server) -> tuple[str, str]:
    answer = server.client().chat.completions.create(
        model="m",
        messages=ASK,
        tools=[chat_tool()],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=N,
        reasoning_effort="none",
    )
    (call,) = answer.choices[0].message.tool_calls
    return call.function.name, call.function.arguments


def responses_streamed_call(server: Server) -> tuple[str, str, int]:
    tool = {"type": "function", "name": "get_weather", "parameters": WEATHER}
    with server.client().responses.stream(
        model="m",
        input=ASK,
        tools=[{**tool, "description": DESCRIPTION}],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=N,
        reasoning={"effort": "none"},
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    added = [e.item for e in events if e.type == "response.output_item.added"]
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert "".join(pieces) == done.arguments == call.arguments and done.name == call.name
    assert [(a.call_id, a.arguments) for a in added if a.type == "function_call"] == [
        (call.call_id, "")
    ]
    return call.name, call.arguments, len(pieces)


def messages_streamed_call(server: Server) -> tuple[str, dict, int]:
    client = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)
    tool = {"name": "get_weather", "description": DESCRIPTION, "input_schema": WEATHER}
    with client.messages.stream(
        model="m",
        messages=ASK,
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
        max_tokens=N,
        thinking={"type": "disabled"},
    ) as stream:
        pieces = [
            e.delta.partial_json
            for e in stream
            if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
        ]
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use", final
    (use,) = [block for block in final.content if block.type == "tool_use"]
    assert json.loads("".join(pieces)) == use.input
    return use.name, use.input, len(pieces)


def test_a_streamed_call_comes_in_pieces_that_make_the_whole_call(served: Server):
    """Streamed, the arguments come as they are written: more than one piece (the call's
    arguments are a dozen tokens or more), and put together they are the whole answer's."""
    name, arguments = chat_whole_call(served)
    streamed_name, streamed_arguments, n_pieces = chat_streamed_call(served)
    assert (streamed_name, streamed_arguments) == (name, arguments)
    assert n_pieces > 1
    streamed_name, streamed_arguments, n_pieces = responses_streamed_call(served)
    assert (streamed_name, streamed_arguments) == (name, arguments) and n_pieces > 1
    use_name, use_input, n_pieces = messages_streamed_call(served)
    assert (use_name, use_input) == (name, json.loads(arguments)) and n_pieces > 1


def chat_text(server: Server) -> tuple[str | None, str | None]:
    message = (
        server.client()
        .chat.completions.create(model="m", messages=ASK, max_tokens=N)
        .choices[0]
        .message
    )
    return message.model_extra.get("reasoning_content"), message.content or None


def responses_text(server: Server) -> tuple[str | None, str | None]:
    response = server.client().responses.create(model="m", input=ASK, max_output_tokens=N)
    thought = [c.text for i in response.output if i.type == "reasoning" for c in i.content]
    return ("".join(thought) if thought else None), response.output_text or None


def messages_text(server: Server) -> tuple[str | None, str | None]:
    client = anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)
    message = client.messages.create(model="m", messages=ASK, max_tokens=N)
    thought = [b.thinking for b in message.content if b.type == "thinking"]
    said = "".join(b.text for b in message.content if b.type == "text")
    return ("".join(thought) if thought else None), said or None


def test_greedy_text_is_the_same_through_every_api(served: Server):
    answer = chat_text(served)
    assert answer != (None, None)
    assert responses_text(served) == answer
    assert messages_text(served) == answer
