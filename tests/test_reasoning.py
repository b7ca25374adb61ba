"""Thinking told from an answer, whole or streamed in any pieces."""

from __future__ import annotations

import pytest

from specllama.reasoning import ThinkingSplit, opens_thinking, split_thinking, template_thinks


def streamed(text: str, size: int, inside: bool) -> tuple[str, str]:
    split = ThinkingSplit(inside=inside)
    pieces = []
    for at in range(0, len(text), size):
        pieces += split.feed(text[at : at + size])
    pieces += split.finish()
    kinds = [kind for kind, _ in pieces]
    assert kinds == sorted(kinds, reverse=True), kinds  # thinking first, then text, never back
    thinking = "".join(t for kind, t in pieces if kind == "thinking")
    return thinking, "".join(t for kind, t in pieces if kind == "text")


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
@pytest.mark.parametrize(
    ("text", "inside", "thinking", "said"),
    [
        ("<think>Plan it.</think>\n\nThe answer.", False, "Plan it.", "The answer."),
        ("\n<think>a < b</think>x", False, "a < b", "x"),
        ("Plan it.</think>The answer.", True, "Plan it.", "The answer."),
        ("No tags at all <think>", False, "", "No tags at all <think>"),
        ("<thi", False, "", "<thi"),  # cut before the tag is whole: text after all
        ("Cut off while thinking </thi", True, "Cut off while thinking </thi", ""),
    ],
)
def test_thinking_and_text_whatever_the_pieces(text, inside, thinking, said, size):
    assert streamed(text, size, inside) == (thinking, said)
    whole = split_thinking(text, inside=inside)
    assert whole == (thinking or None, said)


def test_templates_and_prompts_that_think():
    assert template_thinks("{{ '<think>' }}...{{ '</think>' }}")
    assert not template_thinks("{{ messages }}") and not template_thinks(None)
    assert opens_thinking("<|im_start|>assistant\n<think>\n")
    assert not opens_thinking("<|im_start|>assistant\n")
