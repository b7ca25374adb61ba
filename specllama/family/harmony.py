"""gpt-oss's answers (OpenAI's "harmony" format), read by hand: its template cannot tell which
channel is thinking, so the analysis by rendering does not apply.

After the generation prompt `<|start|>assistant`, the model writes messages, each a header and
a body: `<|channel|>analysis<|message|>...<|end|>` is thinking;
`<|channel|>final<|message|>...` (ended by `<|return|>`, often the end of generation) is the
answer's text; `<|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|>`
is a call (the recipient may also come before the channel: ` to=functions.f<|channel|>...`);
commentary to no one is text the user sees. Between messages: `<|end|><|start|>assistant`.

A call streams as it is written: its start once the header names the recipient, then its JSON
body as it is settled (`tool_calls.settled_arguments`), kept as the call's arguments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from specllama.chat import ToolCall
from specllama.family.call_stream import CallPieces
from specllama.family.calls_text import lark_literal
from specllama.family.pieces import Piece, Reading, piece_of
from specllama.json_text import Growing, find, skip_blanks
from specllama.tool_calls import (
    Scan,
    Segment,
    Special,
    Tool,
    ToolFormat,
    arguments_rule,
    held_prefix,
    settled_arguments,
)

MESSAGE, CHANNEL, START = "<|message|>", "<|channel|>", "<|start|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>", START)
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_HEADER_LIMIT = 256  # a header longer than this is no header: the text is plain


class HarmonyReader:
    """Reads one gpt-oss answer as it streams (the `pieces.Reader` protocol). `streamed`
    off: each call comes whole, and one broken off is text, as a whole reading has it."""

    def __init__(self, *, streamed: bool = True) -> None:
        self._streamed = streamed
        self._pieces = CallPieces()
        self._buffer = Growing("")  # a call's body is read on from where the last feed stopped
        self._header: str | None = ""  # None: inside a body
        self._kind = "text"  # the body's: "thinking", "text" or "call"
        self._plain = False  # the answer is not in harmony messages at all
        self._thinking: list[str] | None = None
        self._text: list[str] = []
        self._calls: list[ToolCall] = []
        self._broken = False

    def feed(self, text: str) -> list[Piece]:
        self._buffer = self._buffer.grown(text)
        return self._read(final=False)

    def finish(self) -> list[Piece]:
        return self._read(final=True)

    def result(self) -> Reading:
        thinking = "".join(self._thinking) if self._thinking is not None else None
        content = "".join(self._text)
        if self._calls and not content.strip():
            content = None
        return Reading(thinking, content, list(self._calls), self._broken)

    def _read(self, final: bool) -> list[Piece]:
        pieces: list[Piece] = []
        while self._buffer:
            state = (len(self._buffer), self._header, self._plain)
            pieces += self._step(final)
            if (len(self._buffer), self._header, self._plain) == state:
                break
        return pieces

    def _step(self, final: bool) -> list[Piece]:
        if self._plain:
            return self._say("text", self._take(len(self._buffer)))
        if self._header is not None:
            return self._read_header(final)
        return self._read_body(final)

    def _read_header(self, final: bool) -> list[Piece]:
        at = self._buffer.find(MESSAGE)
        if at == -1:
            if final or len(self._buffer) > _HEADER_LIMIT:
                self._plain = True  # not harmony: what came is text
            return []
        header = self._buffer[:at].removeprefix(START).strip().removeprefix("assistant")
        self._take(at + len(MESSAGE))
        channel = header.split(CHANNEL, 1)[1].split()[0] if CHANNEL in header else ""
        recipient = _RECIPIENT.search(header)
        if recipient and recipient.group(1).startswith("functions."):
            self._kind, self._recipient = "call", recipient.group(1).removeprefix("functions.")
            self._header = None
            return self._written("")
        self._kind = "thinking" if channel.startswith("analysis") else "text"
        self._header = None
        return []

    def _read_body(self, final: bool) -> list[Piece]:
        ends = [(at, e) for e in ENDS if (at := find(self._buffer, e, 0)) != -1]
        if not ends:
            if self._kind == "call" and not final:
                start = skip_blanks(self._buffer, 0)
                if not self._buffer.startswith("{", start):
                    return []
                return self._written(settled_arguments(self._buffer, start, ENDS))
            hold = 0 if final else max(held_prefix(self._buffer, e) for e in ENDS)
            body = self._take(len(self._buffer) - hold)
            if self._kind == "call":  # the end of generation closes the call (`<|call|>`)
                return self._call(body)
            return self._say(self._kind, body)
        at, end = min(ends)
        body = self._take(at)
        self._take(len(end) if end != START else 0)
        self._header = ""
        return self._call(body) if self._kind == "call" else self._say(self._kind, body)

    def _written(self, arguments: str) -> list[Piece]:
        """The call being read, as far as it is written (nothing when not `streamed`)."""
        if not self._streamed:
            return []
        return [
            piece_of(d) for d in self._pieces.written(len(self._calls), self._recipient, arguments)
        ]

    def _call(self, body: str) -> list[Piece]:
        """The call whose body is whole: its arguments are the JSON as written."""
        written = body.strip() or "{}"
        try:
            arguments = json.loads(written)
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            self._broken = True
            if self._pieces.open:  # it began: it ends broken, its text kept for the reading
                self._text.append(body)
                return [piece_of(d) for d in self._pieces.cut()]
            return self._say("text", body)
        deltas, call = self._pieces.whole(len(self._calls), ToolCall("", self._recipient, written))
        self._calls.append(call)
        return [piece_of(d) for d in deltas]

    def _say(self, kind: str, text: str) -> list[Piece]:
        if not text:
            return []
        if kind == "thinking":
            self._thinking = [*(self._thinking or []), text]
            return [Piece("thinking", text)]
        self._text.append(text)
        return [Piece("text", text)]

    def _take(self, n: int) -> str:
        taken, self._buffer = self._buffer[:n], Growing(self._buffer[n:])  # read afresh
        return taken


class HarmonyFormat(ToolFormat):
    """gpt-oss's calls. Read an answer with `reader()` (thinking, text and calls together);
    `scan` reads whole messages only, for the `CallStream` path (thinking dropped)."""

    name = "harmony"
    markers = (CHANNEL, MESSAGE, START, "<|constrain|>", *ENDS[:3])

    def __init__(self, names: Sequence[str | Tool] = (), *, thinking: bool = True) -> None:
        super().__init__(names)
        self.thinking = thinking  # a forced call may think first (off: the client said no)

    def reader(self) -> HarmonyReader:
        return HarmonyReader()

    def scan(self, text: str, start: int, final: bool) -> Scan:
        reader = HarmonyReader(streamed=False)
        pieces = reader.feed(text[start:]) + (reader.finish() if final else [])
        if not final:  # only what whole messages gave: the rest is read again next time
            return Scan([], start)
        segments = [
            Segment(call=p.call) if p.kind == "call" else Segment(p.text)
            for p in pieces
            if p.kind in ("call", "text")
        ]
        return Scan(segments, len(text), broken=reader.result().broken)

    def rules(self, tools: Sequence[Tool], *, parallel: bool, special: Special) -> list[str]:
        """A call, after an optional thinking message (as gpt-oss thinks before it calls)
        unless thinking is off."""

        def lit(text: str) -> str:
            return lark_literal(text, special)

        think = (
            f"({lit(CHANNEL + 'analysis' + MESSAGE)} THINKING "
            f"{lit('<|end|>' + START + 'assistant')})?"
            if self.thinking
            else ""
        )
        again = lit(START + "assistant")
        many = f"call ({again} call)*" if parallel else "call"
        rules = [
            f"calls: {think} {many}",
            "THINKING: /(?s:.*)/ & ~/(?s:.*)<\\|(?s:.*)/",
            "call: " + " | ".join(f"call_{i}" for i in range(len(tools))),
        ]
        for i, tool in enumerate(tools):
            head = f"{CHANNEL}commentary to=functions.{tool.name} <|constrain|>json{MESSAGE}"
            rules.append(f"call_{i}: {lit(head)} args_{i} {lit('<|call|>')}")
            rules.append(f"args_{i}: {arguments_rule(tool)}")
        return rules
