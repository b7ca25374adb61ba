"""An answer's thinking passed back by the client, through all three APIs of a real
`specllama serve` whose template keeps earlier reasoning (as Qwen3's does in a tool loop): the
next prompt renders with the thinking the model wrote, so it begins with the tokens the cache
holds (the first prompt and the answer), and reuses them; without the thinking it is shorter, and
the cache holds no more than the first prompt of it.

The model is the F32 SmolLM2 wearing a template that opens the thinking in its generation
prompt and writes an assistant turn as `<think>{reasoning}</think>{text}`: the answer to the
first question begins inside the thinking, as it will be written back. The thinking is read
without the whitespace around it (as llama.cpp reads it; real templates write back the newline
their models write there): the question is one this model answers without a newline first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import pytest
from model_factory import cache_dir, copy_gguf
from serving import KEY, Server, serve

pytestmark = pytest.mark.slow

QUESTION = "What is 2+2?"
FOLLOW_UP = "And 3+3?"
KEEPS_REASONING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' %}<think>{{ m.reasoning_content or '' }}</think>"
    "{% endif %}{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>{% endif %}"
)
N = 24


@pytest.fixture(scope="module")
def server(smol_f32: Path, tmp_path_factory) -> Iterator[Server]:
    version = hashlib.sha256(KEEPS_REASONING.encode()).hexdigest()[:8]
    path = cache_dir() / f"SmolLM2-135M-Instruct.F32.keeps-reasoning-{version}.gguf"
    if not path.exists():
        partial = path.with_suffix(".partial")
        copy_gguf(smol_f32, partial, chat_template=KEEPS_REASONING)
        partial.replace(path)
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    yield from serve(path, ["--drafter", "ngram"], log)


@dataclass
class First:
    """The first answer: what the client got, and what it cost."""

    thought: str
    said: str
    n_prompt: int
    n_generated: int


@dataclass
class Again:
    """The next request's prompt: its tokens and how many the cache held."""

    n_prompt: int
    n_cached: int


def user(text: str) -> dict:
    return {"role": "user", "content": text}


# -- each API: the first question, then the next with the answer passed back -----------------


def chat_first(server: Server) -> First:
    answer = server.client().chat.completions.create(
        model="m", messages=[user(QUESTION)], max_tokens=N
    )
    message, counts = answer.choices[0].message, answer.usage
    thought = message.model_extra.get("reasoning_content") or ""
    return First(thought, message.content or "", counts.prompt_tokens, counts.completion_tokens)


def chat_again(server: Server, first: First, thinking: bool) -> Again:
    said = {"role": "assistant", "content": first.said}
    if thinking:
        said["reasoning_content"] = first.thought
    answer = server.client().chat.completions.create(
        model="m", messages=[user(QUESTION), said, user(FOLLOW_UP)], max_tokens=1
    )
    counts = answer.usage
    return Again(counts.prompt_tokens, counts.prompt_tokens_details.cached_tokens)


def responses_first(server: Server) -> tuple[First, list[dict]]:
    """The first answer, and its output items as a client passes them back."""
    response = server.client().responses.create(model="m", input=QUESTION, max_output_tokens=N)
    thought = "".join(c.text for i in response.output if i.type == "reasoning" for c in i.content)
    counts = response.usage
    first = First(thought, response.output_text, counts.input_tokens, counts.output_tokens)
    return first, [item.model_dump(exclude_none=True) for item in response.output]


def responses_again(server: Server, output: list[dict], thinking: bool) -> Again:
    items = [item for item in output if thinking or item["type"] != "reasoning"]
    if not any(item["type"] == "message" for item in items):  # an answer all thinking
        items.append({"type": "message", "role": "assistant", "content": ""})
    response = server.client().responses.create(
        model="m", input=[user(QUESTION), *items, user(FOLLOW_UP)], max_output_tokens=1
    )
    counts = response.usage
    return Again(counts.input_tokens, counts.input_tokens_details.cached_tokens)


def messages_client(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)


def messages_first(server: Server) -> tuple[First, list[dict]]:
    """The first answer, and its content blocks as a client passes them back."""
    message = messages_client(server).messages.create(
        model="m", messages=[user(QUESTION)], max_tokens=N
    )
    thought = "".join(b.thinking for b in message.content if b.type == "thinking")
    said = "".join(b.text for b in message.content if b.type == "text")
    counts = message.usage
    n_prompt = counts.input_tokens + counts.cache_read_input_tokens
    first = First(thought, said, n_prompt, counts.output_tokens)
    return first, [block.model_dump(exclude_none=True) for block in message.content]


def messages_again(server: Server, blocks: list[dict], thinking: bool) -> Again:
    kept = [block for block in blocks if thinking or block["type"] != "thinking"]
    said = {"role": "assistant", "content": kept or ""}
    message = messages_client(server).messages.create(
        model="m", messages=[user(QUESTION), said, user(FOLLOW_UP)], max_tokens=1
    )
    counts = message.usage
    n_cached = counts.cache_read_input_tokens
    return Again(counts.input_tokens + n_cached, n_cached)


def through_chat(server: Server) -> tuple[First, Again, Again]:
    first = chat_first(server)
    return first, chat_again(server, first, True), chat_again(server, first, False)


def through_responses(server: Server) -> tuple[First, Again, Again]:
    first, output = responses_first(server)
    return first, responses_again(server, output, True), responses_again(server, output, False)


def through_messages(server: Server) -> tuple[First, Again, Again]:
    first, blocks = messages_first(server)
    return first, messages_again(server, blocks, True), messages_again(server, blocks, False)


@pytest.mark.parametrize("api", [through_chat, through_responses, through_messages])
def test_the_thinking_passed_back_renders_and_the_cache_holds_it(server: Server, api):
    first, kept, dropped = api(server)
    assert first.thought  # the answer began inside the thinking that the prompt opened
    # With the thinking, the next prompt begins as the first prompt and the answer did: the
    # cache holds both (all but the answer's last token or two, which may join what follows).
    assert kept.n_cached >= first.n_prompt + first.n_generated - 2
    # Without it, the prompt is shorter, and the cache holds no more than the first prompt of it.
    assert dropped.n_prompt < kept.n_prompt
    assert dropped.n_cached <= first.n_prompt


def test_the_three_apis_render_the_same_next_prompt(server: Server):
    """The same answer passed back in each API's own shape is the same conversation."""
    chat, responses, messages = (
        through_chat(server),
        through_responses(server),
        through_messages(server),
    )
    assert chat[0].thought == responses[0].thought == messages[0].thought
    assert chat[1].n_prompt == responses[1].n_prompt == messages[1].n_prompt
