"""Thinking: its markers learnt from every real template, turned off by the template's own
switch, and told from the answer, whole or streamed in any pieces."""

from __future__ import annotations

import random

import pytest
from chat_templates import all_templates

from specllama.chat import Message, render_chat
from specllama.family.thinking import (
    ANSWER,
    KNOWN,
    THOUGHT,
    USER,
    ThinkingSplit,
    ThinkingSyntax,
    opens_thinking,
    split_thinking,
    template_thinking,
    thinking_settings,
)

THINK = KNOWN[0]

# What each family that thinks marks its thinking with (every other template: no thinking).
THINKERS = {
    "Apriel-1.6-15b-Thinker-fixed": ("", "[BEGIN FINAL RESPONSE]"),
    "Bielik-11B-v3.0-Instruct": ("<think>", "</think>"),
    "ByteDance-Seed-OSS": ("<seed:think>", "</seed:think>"),
    "Cohere2MoE": ("<|START_THINKING|>", "<|END_THINKING|>"),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("<|START_THINKING|>", "<|END_THINKING|>"),
    "GLM-4.6": ("<think>", "</think>"),
    "GLM-4.7-Flash": ("<think>", "</think>"),
    "HuggingFaceTB-SmolLM3-3B": ("<think>", "</think>"),
    "Kimi-K2-Thinking": ("<think>", "</think>"),
    "Kimi-K3": ("<|open|>think<|sep|>", "<|close|>think<|sep|>"),
    "LFM2.5-8B-A1B": ("<think>", "</think>"),
    "LFM2.5-Instruct": ("<think>", "</think>"),
    "MiniMax-M2": ("<think>", "</think>"),
    "MiniMax-M3": ("<mm:think>", "</mm:think>"),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("<think>", "</think>"),
    "NVIDIA-Nemotron-Nano-v2": ("<think>", "</think>"),
    "Qwen-QwQ-32B": ("<think>", "</think>"),
    "Qwen-Qwen3-0.6B": ("<think>", "</think>"),
    "Qwen3.5-4B": ("<think>", "</think>"),
    "Reka-Edge": ("<think>", "</think>"),
    "Spark2.5": ("<think>", "</think>"),
    "StepFun3.5-Flash": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-V3.1": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-V3.2": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-V4-Flash-0731": ("<think>", "</think>"),
    "deepseek-ai-DeepSeek-V4": ("<think>", "</think>"),
    "google-gemma-4-31B-it-interleaved": ("<|channel>thought", "<channel|>"),
    "google-gemma-4-31B-it": ("<|channel>thought", "<channel|>"),
    "ibm-granite-granite-3.3-2B-Instruct": ("<think>", "</think>"),
    "inclusionai-ling-3.0-flash": ("<think>", "</think>"),
    "llama-cpp-deepseek-r1": ("<think>", "</think>"),
    "llama-cpp-rwkv-world": ("<think>", "</think>"),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("[THINK]", "[/THINK]"),
    "openbmb-MiniCPM5-1B": ("<think>", "</think>"),
    "poolside-Laguna-S-2.1": ("<think>", "</think>"),
    "poolside-Laguna-XS-2.1": ("<think>", "</think>"),
    "poolside-Laguna-XS.2": ("<think>", "</think>"),
    "tencent-Hy3": ("<think:opensource>", "</think:opensource>"),
    "upstage-Solar-Open-100B": ("<|think|>", "<|end|>"),
}
# Thinking that is no `start ... end` block: gpt-oss's analysis channel and muse's `to=self`
# message are read by the harmony reader; Apertus's inner tokens are not rendered by its template.
CHANNELS = {"openai-gpt-oss-120b", "muse-glimmer"}


def names() -> list[str]:
    return list(all_templates())


def thinkers() -> list[str]:
    return [name for name in all_templates() if name in THINKERS]


def prompt(template: str, **kwargs: object) -> str:
    user = [Message("user", USER)]
    return render_chat(template, user, template_kwargs=kwargs or None)


# -- which templates think, and their markers -------------------------------------------------


@pytest.mark.parametrize("name", names())
def test_every_template_thinks_or_not_as_its_family_does(name):
    known = template_thinking(all_templates()[name])
    found = (known.syntax.start, known.syntax.end) if known is not None else None
    assert found == THINKERS.get(name), name


def test_the_families_the_issue_names_all_think():
    families = ["Qwen3", "Qwen3.5", "DeepSeek-R1", "DeepSeek-V3", "GLM", "Kimi-K2-Thinking",
                "MiniMax", "Seed-OSS", "Ministral-3-14B-Reasoning", "gemma-4", "Nemotron",
                "granite-3.3", "Cohere", "Kimi-K3"]  # fmt: skip
    for family in families:
        matches = [name for name in all_templates() if family in name]
        assert matches and any(name in THINKERS for name in matches), family
    assert set(all_templates()) >= CHANNELS  # thinking read elsewhere (harmony)


# -- turning it off ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", thinkers())
def test_off_renders_the_templates_own_switch_or_closes_the_block(name):
    template = all_templates()[name]
    known = template_thinking(template)
    off = thinking_settings(template, "off")
    closed = prompt(template, **off.template_kwargs) + off.prefill
    assert not opens_thinking(known.syntax, closed)
    if known.switch is not None:  # the template's own: its prompt changes, nothing is added
        assert off.template_kwargs == {known.switch.name: known.switch.off} and not off.prefill
        on = thinking_settings(template, "on")
        assert prompt(template, **on.template_kwargs) != closed
    else:  # an empty block, closed after the generation prompt
        assert off.prefill.rstrip().endswith(known.syntax.end)
        assert known.syntax.end not in prompt(template)[-len(off.prefill) - 8 :]
    assert thinking_settings(template, "auto").template_kwargs == {}


def test_qwen3_off_is_enable_thinking_and_a_prompt_without_a_switch_gets_the_block():
    templates = all_templates()
    qwen3 = thinking_settings(templates["Qwen-Qwen3-0.6B"], "off")
    assert qwen3.template_kwargs == {"enable_thinking": False} and qwen3.prefill == ""
    r1 = thinking_settings(templates["llama-cpp-deepseek-r1"], "off")  # the prompt opened it
    assert r1.template_kwargs == {} and r1.prefill.startswith("</think>")
    kimi = thinking_settings(templates["Kimi-K2-Thinking"], "off")
    assert kimi.prefill == "<think></think>"
    assert thinking_settings(templates["Qwen-Qwen2.5-7B-Instruct"], "off").prefill == ""


def test_deepseek_v3_1_and_granite_switch_with_thinking():
    templates = all_templates()
    for name in ("deepseek-ai-DeepSeek-V3.1", "ibm-granite-granite-3.3-2B-Instruct"):
        off = thinking_settings(templates[name], "off").template_kwargs
        assert off in ({"enable_thinking": False}, {"thinking": False}), name
        assert prompt(templates[name], **off) != prompt(templates[name], thinking=True)


# -- splitting an answer as the template writes it ---------------------------------------------


def written_answer(template: str) -> tuple[str, bool]:
    """An answer with thinking, as the model writes it after the generation prompt (cut from
    the template's rendering of a turn with reasoning, where that begins with the prompt), and
    whether the prompt left it inside the thinking."""
    known = template_thinking(template)
    user = Message("user", USER)
    reasoned = Message("assistant", ANSWER, reasoning=THOUGHT)
    gen = prompt(template, enable_thinking=True)
    inside = opens_thinking(known.syntax, gen)
    whole = render_chat(
        template,
        [user, reasoned],
        add_generation_prompt=False,
        template_kwargs={"enable_thinking": True},
    )
    if whole.startswith(gen) and THOUGHT in whole:
        return whole[len(gen) : whole.index(ANSWER) + len(ANSWER)], inside
    start = "" if inside else known.syntax.start + "\n"
    return f"{start}{THOUGHT}\n{known.syntax.end}\n\n{ANSWER}", inside


def pieces_of(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 30))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def streamed(syntax: ThinkingSyntax, pieces: list[str], inside: bool) -> tuple[str, str]:
    split = ThinkingSplit(syntax, inside=inside)
    said = [p for piece in pieces for p in split.feed(piece)] + split.finish()
    kinds = [kind for kind, _ in said]
    assert kinds == sorted(kinds, reverse=True), kinds  # thinking first, then text, never back
    thinking = "".join(t for kind, t in said if kind == "thinking")
    return thinking, "".join(t for kind, t in said if kind == "text")


@pytest.mark.parametrize("name", thinkers())
def test_an_answer_in_the_templates_own_writing_splits_the_same_in_any_pieces(name):
    """The thinking, then the answer (Cohere and Kimi K3 wrap it in markers of their own, which
    are the text's to read, not the thinking's)."""
    template = all_templates()[name]
    syntax = template_thinking(template).syntax
    text, inside = written_answer(template)
    thinking, said = split_thinking(text, syntax, inside=inside)
    assert thinking == THOUGHT and said.endswith(ANSWER), text
    assert syntax.end not in said and (not syntax.start or syntax.start not in said)
    rng = random.Random(name)
    for _ in range(20):
        assert streamed(syntax, pieces_of(text, rng), inside) == (thinking, said), text


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
@pytest.mark.parametrize(
    ("text", "inside", "thinking", "said"),
    [
        ("<think>Plan it.</think>\n\nThe answer.", False, "Plan it.", "The answer."),
        ("\n<think>\na < b\n</think>x", False, "a < b", "x"),
        ("Plan it.</think>The answer.", True, "Plan it.", "The answer."),
        ("<think>\nPlan it.</think>The answer.", True, "Plan it.", "The answer."),  # again
        ("No tags at all <think>", False, "", "No tags at all <think>"),
        ("<thi", False, "", "<thi"),  # cut before the tag is whole: text after all
        ("Cut off while thinking </thi", True, "Cut off while thinking </thi", ""),
        ("<think>\n\n</think>\n\nDirect.", False, "", "Direct."),  # an empty block: no thinking
        ("A  b \n\n c</think>d", True, "A  b \n\n c", "d"),  # whitespace inside is kept
    ],
)
def test_thinking_and_text_whatever_the_pieces(text, inside, thinking, said, size):
    pieces = [text[at : at + size] for at in range(0, len(text), size)]
    assert streamed(THINK, pieces, inside) == (thinking, said)
    assert split_thinking(text, THINK, inside=inside) == (thinking or None, said)


def test_other_markers_and_a_syntax_without_a_start():
    seed = ThinkingSyntax("<seed:think>", "</seed:think>")
    assert split_thinking("<seed:think>hmm</seed:think>ok", seed, inside=False) == ("hmm", "ok")
    apriel = ThinkingSyntax("", "[BEGIN FINAL RESPONSE]")
    text = "steps\n[BEGIN FINAL RESPONSE]\nDone."
    assert split_thinking(text, apriel, inside=False) == ("steps", "Done.")


def test_prompts_that_open_the_thinking():
    assert opens_thinking(THINK, "<|im_start|>assistant\n<think>\n")
    assert not opens_thinking(THINK, "<|im_start|>assistant\n")
    assert not opens_thinking(THINK, "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not template_thinking(None) and not template_thinking("{{ messages }}")
