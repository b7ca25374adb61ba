"""Strict tools (`strict: true`, OpenAI's and Anthropic's) when the model may answer in text
(tool_choice "auto"): the answer stays free, but a call, once begun, follows its tool's schema.

llama-server does this with a lazy grammar, woken by the call's trigger word. llguidance has
no trigger, so the same rule is one Lark grammar: free text, or free text up to the family's
call marker and then the call(s) as a forced call writes them (`ToolFormat.rules`):

    start: TEXT? | lead calls                  a marker written as text: `lead` ends at the
    lead[stop="<tool_call>"]: /(?s:.*)/        first marker (llguidance's lazy lexeme), and
                                               `calls` writes it again
    start: TEXT? calls?                        a marker that is a special token: text cannot
                                               hold one, so the token begins the calls

What it cannot do: a family whose call opens with no marker of its own (Llama 3's bare JSON,
Mistral's `[{` without `[TOOL_CALLS]`) gets no such grammar (None): its calls are read as
before, unconstrained. A call written without its marker (Hermes's bare `{"name": ...}` JSON,
which the reader also takes for a call) escapes the schema too. Nothing may follow the calls
but the end of the answer; calls to tools that are not strict take any JSON object.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from specllama.tool_calls import Special, Tool, ToolFormat

ANY_TEXT = "TEXT: /(?s:.+)/"


def lazy_call_grammar(
    fmt: ToolFormat, tools: Sequence[Tool], *, parallel: bool, special: Special
) -> str | None:
    """The Lark grammar of an answer that is text, or text then calls whose arguments follow
    their strict tools' schemas; None when no tool is strict, or when the format's calls open
    with no marker (see the module's docstring)."""
    if not any(tool.strict for tool in tools) or not fmt.markers:
        return None
    loose = {"type": "object"}  # a tool that is not strict takes any object, as it would
    offered = [t if t.strict else dataclasses.replace(t, parameters=loose) for t in tools]
    rules = fmt.rules(offered, parallel=parallel, special=special)
    opener = fmt.markers[0]
    written = special[opener] if opener in special else json.dumps(opener)
    if not all(f"call_{i}: {written} " in "\n".join(rules) for i in range(len(offered))):
        return None  # the calls do not open with the marker: no place where they begin
    if opener in special:
        head = ["start: TEXT? calls?", ANY_TEXT]
    else:
        head = ["start: TEXT? | lead calls", ANY_TEXT, f"lead[stop={written}]: /(?s:.*)/"]
    return "\n".join([*head, *rules]) + "\n"
