"""A forced answer (a required call, a JSON reply) from a model that thinks first.

A thinking model is trained to think before it answers, and a template that opens the thinking
in its prompt (Qwen3.5's `<think>\\n`) leaves the answer inside it: a grammar that forced the
call at once would put the call in the thinking, where it is no call. So the grammar lets the
thinking come first, as llama.cpp's does: free text up to the family's end marker (the whole
block, optional, where the prompt did not open it), blanks, then the forced answer.
"""

from __future__ import annotations

import json

from specllama.family.calls_text import lark_literal
from specllama.family.thinking import ThinkingSyntax
from specllama.tool_calls import JSON_STYLE, Special


def thinking_first(lark: str, syntax: ThinkingSyntax, *, inside: bool, special: Special) -> str:
    """`lark` (a grammar whose rule is `start`) with the thinking allowed before it: begun
    already when `inside`, else an optional block."""
    answer = lark.replace("start:", "forced_answer:", 1)
    end = syntax.end
    if end in special:  # a token text cannot hold: the thought ends where it comes
        thought = [f"thought: THOUGHT {lark_literal(end, special)}", "THOUGHT: /(?s:.*)/"]
    else:  # llguidance's lazy lexeme: the thought ends at the first end marker
        thought = [f"thought[stop={json.dumps(end)}]: /(?s:.*)/"]
    if inside or not syntax.start:
        head = "start: thought BLANKS forced_answer"
    else:
        opened = lark_literal(syntax.start, special)
        head = f"start: ({opened} thought BLANKS)? forced_answer"
    return "\n".join([head, *thought, "BLANKS: /[ \\t\\r\\n]*/", answer])


def json_lark(schema: object) -> str:
    """A JSON reply of `schema` (a JSON Schema; True: any JSON object) as a Lark grammar,
    written compact as the templates write JSON."""
    if schema is True:
        schema = {"type": "object"}
    if isinstance(schema, dict):
        schema = {**schema, "x-guidance": JSON_STYLE}
    return f"start: %json {json.dumps(schema)}\n"
