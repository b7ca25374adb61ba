"""Which tool-call syntax a chat template teaches: written by hand where the template cannot
tell (gpt-oss's channels), or where the hand-written reader reads more than the template
shows (Hermes' bare JSON, which small Qwen models write; Llama 3's whole-answer JSON; Mistral's
array whose marker the text may not show); else learnt from the template; Hermes when nothing
is learnt.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from specllama.family.analysis import CallSyntax, analyse
from specllama.family.calls import LearntFormat
from specllama.family.hand_written import Hermes, Mistral, detect_format
from specllama.family.harmony import HarmonyFormat
from specllama.tool_calls import Tool, ToolFormat


def tool_format(template: str, tools: Sequence[Tool]) -> ToolFormat:
    """The syntax `template` teaches, for these offered tools (their schemas type the values
    a syntax writes untyped). The analysis renders the template a few times: once per
    template, cached."""
    if is_harmony(template):
        return HarmonyFormat(tools)
    syntax = learnt_syntax(template)
    if syntax is None or not syntax.trigger:  # no markers to find a call by
        return detect_format(template, tools)
    if _is_hermes(syntax):
        return Hermes(tools)
    if syntax.style == "json" and syntax.in_array and syntax.trigger == Mistral.MARK:
        return Mistral(tools)
    return LearntFormat(syntax, tools)


@functools.lru_cache(maxsize=16)
def learnt_syntax(template: str) -> CallSyntax | None:
    return analyse(template)


def is_harmony(template: str) -> bool:
    return "<|channel|>" in template and "<|message|>" in template


def _is_hermes(syntax: CallSyntax) -> bool:
    return (
        syntax.style == "json"
        and not syntax.in_array
        and syntax.call_start.strip() == Hermes.OPEN
        and syntax.call_end.strip() == Hermes.CLOSE
        and not syntax.section_start.strip()
        and syntax.name_path == ("name",)
        and syntax.args_path == ("arguments",)
    )
