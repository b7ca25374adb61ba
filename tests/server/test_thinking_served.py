"""A thinking model's answer through all three APIs of a real `specllama serve`: the thinking
apart (Chat Completions' `reasoning_content`, Responses' `reasoning` item, Messages' `thinking`
block), whole and streamed, the same in each; and thinking turned off per request, by each
API's own switch, through the template's own off switch.

The model is the F32 SmolLM2 wearing a template that opens the thinking in its generation
prompt, as Qwen3's does (and closes it empty when `enable_thinking` is false): its answer
begins inside the thinking, and is thinking up to a `</think>` this small model may never
write.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from model_factory import cache_dir, copy_gguf
from serving import KEY, Server, serve

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Name three fruits."}]
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)
N = 24


@pytest.fixture(scope="module")
def thinker(smol_f32: Path, tmp_path_factory) -> Iterator[Server]:
    path = cache_dir() / "SmolLM2-135M-Instruct.F32.thinking-switch.gguf"
    if not path.exists():
        partial = path.with_suffix(".partial")
        copy_gguf(smol_f32, partial, chat_template=THINKING_TEMPLATE)
        partial.replace(path)
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    yield from serve(path, ["--drafter", "ngram"], log)


def messages_client(server: Server) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0)


def chat(server: Server, **kw) -> tuple[str | None, str | None]:
    answer = (
        server.client()
        .chat.completions.create(model="m", messages=ASK, max_tokens=N, **kw)
        .choices[0]
    )
    return answer.message.model_extra.get("reasoning_content"), answer.message.content or None


def chat_streamed(server: Server, **kw) -> tuple[str, str]:
    stream = server.client().chat.completions.create(
        model="m", messages=ASK, max_tokens=N, stream=True, **kw
    )
    thought, said = [], []
    for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            thought.append((delta.model_extra or {}).get("reasoning_content") or "")
            said.append(delta.content or "")
    return "".join(thought), "".join(said)


def responses(server: Server, **kw) -> tuple[str | None, str | None]:
    response = server.client().responses.create(model="m", input=ASK, max_output_tokens=N, **kw)
    thought = [c.text for i in response.output if i.type == "reasoning" for c in i.content]
    return ("".join(thought) if thought else None), (response.output_text or None)


def messages(server: Server, **kw) -> tuple[str | None, str | None]:
    message = messages_client(server).messages.create(model="m", messages=ASK, max_tokens=N, **kw)
    thought = [b.thinking for b in message.content if b.type == "thinking"]
    said = [b.text for b in message.content if b.type == "text"]
    return ("".join(thought) if thought else None), ("".join(said) or None)


def test_the_thinking_is_apart_and_the_same_in_every_api(thinker: Server):
    thought, said = chat(thinker)
    assert thought  # the prompt opened the thinking: the answer begins inside it
    assert "<think>" not in thought and "</think>" not in (said or "")
    assert chat_streamed(thinker) == (thought, said or "")
    assert responses(thinker) == (thought, said)
    assert messages(thinker, thinking={"type": "enabled", "budget_tokens": 1024}) == (
        thought,
        said,
    )


def test_the_responses_stream_writes_a_reasoning_item(thinker: Server):
    thought, _ = chat(thinker)
    with thinker.client().responses.stream(model="m", input=ASK, max_output_tokens=N) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert "".join(deltas) == thought
    assert final.output[0].type == "reasoning" and final.output[0].content[0].text == thought


def test_the_messages_stream_writes_a_thinking_block(thinker: Server):
    thought, _ = chat(thinker)
    with messages_client(thinker).messages.stream(model="m", messages=ASK, max_tokens=N) as s:
        events = list(s)
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert "".join(d.thinking for d in deltas if d.type == "thinking_delta") == thought
    assert [d.type for d in deltas].count("signature_delta") == 1


@pytest.mark.parametrize(
    ("api", "switch"),
    [
        (chat, {"reasoning_effort": "none"}),
        (chat, {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}),
        (responses, {"reasoning": {"effort": "none"}}),
        (messages, {"thinking": {"type": "disabled"}}),
    ],
)
def test_thinking_off_renders_the_templates_own_switch(thinker: Server, api, switch):
    """Off, the template closes the thinking in the prompt: the answer is all text, and it is
    the answer a prompt with the closed block gives (through the text completion API)."""
    prompt = (
        "<|im_start|>user\nName three fruits.<|im_end|>\n<|im_start|>assistant\n"
        "<think>\n\n</think>\n\n"
    )
    raw = thinker.client().completions.create(model="m", prompt=prompt, max_tokens=N)
    thought, said = api(thinker, **switch)
    assert thought is None
    assert (said or "").strip() == raw.choices[0].text.strip()
