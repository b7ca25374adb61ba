"""What every call syntax shares: whether a template knows tools, a tool as OpenAI writes it, and
a call's arguments as far as they are settled, read afresh or resumed on a growing text alike.
The syntaxes themselves: tests/family/ (test_hand_written.py, test_calls.py)."""

from __future__ import annotations

import json
import random

from specllama.json_text import Growing
from specllama.tool_calls import (
    Tool,
    held_prefix,
    json_partial,
    settled_arguments,
    template_knows_tools,
)

QWEN_LIKE = "{% if tools %}{{ tools | tojson }}<tool_call>{% endif %}{{ messages }}"
MISTRAL_LIKE = "{% for t in tools %}[AVAILABLE_TOOLS]{% endfor %}[TOOL_CALLS]"
SMOLLM2_LIKE = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"
MARKERS = ("<tool_call>", "</tool_call>")


def test_a_template_knows_tools_when_it_shows_them_or_writes_calls():
    assert template_knows_tools(QWEN_LIKE) and template_knows_tools(MISTRAL_LIKE)
    assert not template_knows_tools(SMOLLM2_LIKE)
    assert not template_knows_tools("{% if %}")  # unreadable: no tools either
    assert Tool("now").as_openai() == {
        "type": "function",
        "function": {"name": "now", "parameters": {"type": "object"}},
    }


def test_held_prefix_is_the_longest_tail_that_may_begin_the_marker():
    assert held_prefix("text </tool", "</tool_call>") == 6
    assert held_prefix("text <", "</tool_call>") == 1
    assert held_prefix("text", "</tool_call>") == 0
    assert held_prefix("</tool_call", "</tool_call>") == 11  # never the whole marker
    rng = random.Random(5)
    for marker in ("</tool_call>", "abab", "<<|x|>", "[TOOL_CALLS]"):
        for _ in range(2000):
            text = "".join(rng.choice(marker + "z") for _ in range(rng.randint(0, 9)))
            longest = max(
                [n for n in range(1, len(marker)) if text.endswith(marker[:n])], default=0
            )
            assert held_prefix(text, marker) == longest, (text, marker)


def call_text(arguments: dict) -> str:
    call = {"name": "write", "arguments": arguments}
    return "<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"


ARGUMENTS = {
    "path": "a.py",
    "content": 'x = "\\\\"  # </tool_c\n' * 3 + "é ✓ \\u00e9 ]}",
    "n": [1, -2.5e3, True, None],
}


def test_settled_arguments_resumed_on_a_growing_text_are_those_read_afresh():
    """Fed in random pieces, each reading resumes the last; at every point the arguments and
    the call are what a reading of the same text from scratch finds."""
    text = call_text(ARGUMENTS)
    start = text.index('{"path"')
    for seed in range(5):
        rng, grown, at = random.Random(seed), Growing(""), 0
        while at < len(text):
            step = rng.randint(1, 7)
            grown, at = grown.grown(text[at : at + step]), at + step
            plain = str(grown)
            if len(plain) > start:
                resumed = settled_arguments(grown, start, MARKERS)
                assert resumed == settled_arguments(plain, start, MARKERS)
                assert plain.startswith(plain[:start] + resumed)
            brace = plain.index("{") if "{" in plain else None
            if brace is not None:
                assert json_partial(grown, brace, MARKERS) == json_partial(plain, brace, MARKERS)
    whole = json.dumps(ARGUMENTS, ensure_ascii=False)
    assert settled_arguments(Growing(text), start, MARKERS) == whole


def test_a_marker_inside_the_arguments_stops_them_there_growing_or_not():
    text = call_text({"html": "<b>x</b> </tool_call> more"})
    start = text.index('{"html"')
    grown = Growing("")
    for char in text:
        grown = grown.grown(char)
        if len(grown) > start:
            assert settled_arguments(grown, start, MARKERS) == settled_arguments(
                str(grown), start, MARKERS
            )
    assert settled_arguments(grown, start, MARKERS) == '{"html": "<b>x</b> '
