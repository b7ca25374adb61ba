"""The markers learnt from real templates, checked against what llama.cpp's own tests expect
of the same families (tests/test-chat.cpp in its sources)."""

from __future__ import annotations

import pytest
from chat_templates import all_templates

from specllama.family.analysis import analyse
from specllama.family.detect import tool_format
from specllama.family.hand_written import Hermes, Llama3, Mistral
from specllama.family.harmony import HarmonyFormat
from specllama.tool_calls import Tool

CASES = {
    # name: (style, the call's first marker, what ends an argument's value)
    "Qwen3-Coder": ("tagged", "<tool_call>", "</parameter>"),
    "GLM-4.6": ("tagged", "<tool_call>", "</arg_value>"),
    "MiniMax-M2": ("tagged", "<minimax:tool_call>", "</parameter>"),
    "deepseek-ai-DeepSeek-V3.2": ("tagged", "<｜DSML｜function_calls>", "</｜DSML｜parameter>"),
    "ByteDance-Seed-OSS": ("tagged", "<seed:tool_call>", "</parameter>"),
    "deepseek-ai-DeepSeek-V3.1": ("tag_json", "<｜tool▁calls▁begin｜>", ""),
    "unsloth-mistral-Devstral-Small-2507": ("tag_json", "[TOOL_CALLS]", ""),
    "Apertus-8B-Instruct": ("json", "<|tools_prefix|>", ""),
    "NVIDIA-Nemotron-Nano-v2": ("json", "<TOOLCALL>", ""),
}


@pytest.mark.parametrize("name", CASES)
def test_the_markers_are_learnt(name):
    style, trigger, value_end = CASES[name]
    syntax = analyse(all_templates()[name])
    assert syntax is not None and syntax.style == style and syntax.trigger.startswith(trigger)
    if style == "tagged":
        assert all(value_end in suffix for suffix in syntax.value_suffix)


def test_dsml_and_gemma_mark_strings_apart():
    dsml = analyse(all_templates()["deepseek-ai-DeepSeek-V3.2"])
    assert dsml.key_suffix == ('" string="false">', '" string="true">')
    gemma = analyse(all_templates()["google-gemma-4-31B-it"])
    assert gemma.value_suffix[1] == '<|"|>' and gemma.call_start.startswith("<|tool_call>")


def test_kimi_k2_writes_an_index_after_the_name():
    kimi = analyse(all_templates()["moonshotai-Kimi-K2"])
    assert (kimi.section_start, kimi.call_start) == (
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>functions.",
    )
    assert kimi.id_kind == "index" and kimi.id_suffix == "<|tool_call_argument_begin|>"


def test_a_template_without_calls_learns_nothing():
    assert analyse("{% for m in messages %}{{ m.content }}{% endfor %}") is None


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("openai-gpt-oss-120b", HarmonyFormat),
        ("meta-llama-Llama-3.1-8B-Instruct", Llama3),
        ("mistralai-Mistral-Nemo-Instruct-2407", Mistral),
        ("Qwen-Qwen2.5-7B-Instruct", Hermes),
    ],
)
def test_hand_written_formats_where_they_read_more(name, kind):
    assert type(tool_format(all_templates()[name], [Tool("f")])) is kind
