"""An answer's calls read as it streams, in its family's syntax (`tool_calls.ToolFormat`):
text goes out as soon as no call can begin in it; a call goes out as it is written: its start
once its name is known, its arguments' JSON as it is settled, then its end, whole.

Formats whose arguments are JSON as written stream that text as it comes; tagged arguments
(`<parameter=k>v</parameter>`) as each one ends; a format with no `partial` gives each call at
once (start, all its arguments, end). However they come, a call's pieces join to its arguments.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Literal

from specllama.chat import ToolCall
from specllama.json_text import Growing, Reads
from specllama.tool_calls import Parsed, ToolFormat, new_call_id

log = logging.getLogger(__name__)

DeltaKind = Literal["text", "call_start", "call_args", "call"]


@dataclass(frozen=True)
class Delta:
    """One streamed piece: text (`content`); or the `index`-th call's start (`call`: its id
    and name, no arguments), a piece of its arguments (`arguments`), or its end (`call`
    whole, its arguments the pieces joined; `broken` when the answer ended inside it)."""

    kind: DeltaKind = "text"
    content: str = ""
    call: ToolCall | None = None
    arguments: str = ""
    index: int = 0
    broken: bool = False


def parse_answer(fmt: ToolFormat, text: str) -> Parsed:
    """A finished answer: its text and its calls."""
    stream = CallStream(fmt)
    stream.feed(text)
    stream.finish()
    return stream.result()


class CallPieces:
    """One answer's calls as they are written, one at a time: each started once (its id from
    then on), its arguments sent once each, ended once. A call ends when it is read whole, or
    when the next one begins (it is whole then: the reading has moved past it), so that its
    pieces are never interleaved with another's."""

    def __init__(self) -> None:
        self._sent: list[ToolCall] = []  # each started call, with the arguments sent so far
        self._ended = 0

    @property
    def open(self) -> bool:
        """Whether a call was started and has not ended."""
        return self._ended < len(self._sent)

    def written(self, index: int, name: str, arguments: str) -> list[Delta]:
        """The `index`-th call as far as it is written (`arguments`: settled text)."""
        if index < self._ended:
            return []
        deltas = []
        if index == len(self._sent):
            deltas += self._end_open()
            call = ToolCall(new_call_id(), name, "")
            self._sent.append(call)
            deltas.append(Delta("call_start", call=call, index=index))
        sent = self._sent[index].arguments
        if len(arguments) > len(sent) and arguments.startswith(sent):
            self._sent[index] = dataclasses.replace(self._sent[index], arguments=arguments)
            deltas.append(Delta("call_args", arguments=arguments[len(sent) :], index=index))
        return deltas

    def whole(self, index: int, call: ToolCall) -> tuple[list[Delta], ToolCall]:
        """The `index`-th call, read whole: what was not sent of it, then its end (unless it
        ended already); and the call, with the id its start had."""
        deltas = self.written(index, call.name, call.arguments)
        sent = self._sent[index]
        if sent.arguments != call.arguments:  # a reader's bug: say it, the call stands
            log.warning("call %s: streamed %r, read %r", call.name, sent.arguments, call.arguments)
        call = dataclasses.replace(call, id=sent.id)
        if index >= self._ended:
            self._ended = index + 1
            deltas.append(Delta("call", call=call, index=index))
        return deltas, call

    def cut(self) -> list[Delta]:
        """The end of the call still open, broken off: the answer ended inside it."""
        return [dataclasses.replace(d, broken=True) for d in self._end_open()]

    def _end_open(self) -> list[Delta]:
        ended = [
            Delta("call", call=self._sent[i], index=i) for i in range(self._ended, len(self._sent))
        ]
        self._ended = len(self._sent)
        return ended


class CallStream:
    """Reads an answer as it streams: content goes out as soon as no call can begin in it;
        text from where a call may begin is held until the call is whole (then the call ends) or
        cannot be one (then it goes out as text). A call is written as it comes (`CallPieces`);
        one broken off after it began ends broken, its text kept for `result` only (a call before
    it in the same section ended whole when the next began, and stays so in the stream). Blanks
        between content and calls are dropped."""

    def __init__(self, fmt: ToolFormat) -> None:
        self._fmt = fmt
        self._text = Growing("")  # each reading resumes the last: a feed costs its own text
        self._settled = 0  # where the next scan starts
        self._blanks = ""  # trailing whitespace of the content, held until text follows it
        self._after_call = False
        self._content: list[str] = []
        self._calls: list[ToolCall] = []
        self._pieces = CallPieces()
        self.broken = False

    def feed(self, text: str) -> list[Delta]:
        self._text = self._text.grown(text)
        return self._scan(final=False)

    def finish(self) -> list[Delta]:
        deltas = self._scan(final=True)
        if self._blanks and not self._calls:  # an answer of text only keeps its whitespace
            deltas.append(self._say(self._blanks))
        self._blanks = ""
        return deltas

    def result(self) -> Parsed:
        content = "".join(self._content)
        if self._calls and not content.strip():
            content = None
        return Parsed(content, list(self._calls), self.broken)

    def _scan(self, final: bool) -> list[Delta]:
        scan = self._fmt.scan(self._text, self._settled, final)
        if scan.end != self._settled:  # what was read of the text held before is done with
            self._text.reads = Reads()
        self._settled = scan.end
        self.broken = self.broken or scan.broken
        deltas: list[Delta] = []
        last = len(scan.segments) - 1
        for i, segment in enumerate(scan.segments):
            if segment.call is not None:
                self._blanks = ""  # blanks before a call are not content
                self._after_call = True
                ended, call = self._pieces.whole(len(self._calls), segment.call)
                deltas += ended
                self._calls.append(call)
            elif segment.text:
                said = self._text_delta(segment.text, final=final or scan.broken)
                if not (scan.broken and i == last and self._pieces.open):
                    deltas += said  # else the text of a call that began: it ends broken
        if scan.broken:
            return deltas + self._pieces.cut()
        if not final and scan.end < len(self._text):
            begun = self._fmt.partial(self._text, scan.end)
            for i, call in enumerate(begun, start=len(self._calls)):
                deltas += self._pieces.written(i, call.name, call.arguments)
        return deltas

    def _text_delta(self, text: str, final: bool) -> list[Delta]:
        if self._after_call:
            text = text.lstrip()
            if not text:
                return []
            self._after_call = False
        text = self._blanks + text
        body = text if final else text.rstrip()
        self._blanks = text[len(body) :]
        return [self._say(body)] if body else []

    def _say(self, text: str) -> Delta:
        self._content.append(text)
        return Delta(content=text)
