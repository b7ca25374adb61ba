"""OpenAI's Responses API, the answers: a `response` object whole, or its event stream
(response.created, response.output_item.added, response.output_text.delta,
response.function_call_arguments.delta as the model writes each call, ..., response.completed),
each event with its sequence number. The requests are `specllama.server.openai_responses`."""

from __future__ import annotations

import time
import uuid
from typing import Any

from specllama.family.pieces import Piece, Reading
from specllama.family.reader import read_whole
from specllama.server.driver import Done, Text
from specllama.server.fields import ApiError
from specllama.server.request import GenerationRequest
from specllama.server.responses_calls import StreamedCall, call_item
from specllama.server.wire import KEEPALIVE_COMMENT, Event, Served, specllama_stats, sse


def usage(done: Done) -> dict[str, Any]:
    n_prompt, n_output = done.stats.n_prompt, done.stats.n_generated
    return {
        "input_tokens": n_prompt,
        "input_tokens_details": {"cached_tokens": done.n_prompt_reused},
        "output_tokens": n_output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": n_prompt + n_output,
    }


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


class ResponseAnswer:
    """A `response`, whole or as its events, each with its sequence number."""

    def __init__(self, asked: GenerationRequest, served: Served) -> None:
        self.id = _id("resp")
        self.created = int(time.time())
        self.asked = asked
        self.model = served.model
        self._reader = served.reader()
        self._sequence = 0
        self._output: list[dict[str, Any]] = []  # the items finished so far
        self._open: dict[str, Any] | None = None  # the message or reasoning item being written
        self._said = ""  # its text so far
        self._call: StreamedCall | None = None  # the function_call item being written

    def _response(self, status: str, output: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
        asked = self.asked
        choice = asked.tool_choice
        if asked.forced_function is not None:
            choice = {"type": "function", "name": asked.forced_function}
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": output,
            "error": None,
            "incomplete_details": None,
            "max_output_tokens": asked.max_tokens,
            "parallel_tool_calls": asked.parallel_tool_calls,
            "tool_choice": choice,
            "tools": [{**t.as_openai()["function"], "type": "function"} for t in asked.tools],
            "store": False,
            "usage": None,
            **more,
        }

    def _event(self, kind: str, **data: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return kind, event

    def opening(self) -> list[Event]:
        response = self._response("in_progress", [])
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
        ]

    def text(self, output: Text) -> list[Event]:
        return self._events(self._reader.feed(output.text))

    def _events(self, pieces: list[Piece]) -> list[Event]:
        """Thinking goes into a `reasoning` item, text into a `message`, each call an item."""
        events: list[Event] = []
        for piece in pieces:
            if piece.kind.startswith("call"):
                events += self._call_events(piece)
            elif piece.text:
                kind = "reasoning" if piece.kind == "thinking" else "message"
                events += self._open_item(kind)
                self._said += piece.text
                events.append(
                    self._event(
                        _TEXT_EVENTS[kind] + ".delta",
                        item_id=self._open["id"] if self._open else "",
                        output_index=len(self._output),
                        content_index=0,
                        delta=piece.text,
                        **({"logprobs": []} if kind == "message" else {}),
                    )
                )
        return events

    def _open_item(self, kind: str) -> list[Event]:
        if self._open is not None and self._open["type"] == kind:
            return []
        events = self._close_item()
        if kind == "message":
            self._open = {"id": _id("msg"), "type": "message", "status": "in_progress"}
            self._open |= {"role": "assistant", "content": []}
        else:
            self._open = {"id": _id("rs"), "type": "reasoning", "summary": [], "content": []}
        self._said = ""
        at = {"item_id": self._open["id"], "output_index": len(self._output)}
        return [
            *events,
            self._event(
                "response.output_item.added", output_index=len(self._output), item=self._open
            ),
            self._event("response.content_part.added", **at, content_index=0, part=_part(kind, "")),
        ]

    def _close_item(self) -> list[Event]:
        if self._open is None:
            return []
        kind, said = self._open["type"], self._said
        item = {**self._open, "content": [_part(kind, said)]}
        if kind == "message":
            item["status"] = "completed"
        at = {"item_id": item["id"], "output_index": len(self._output), "content_index": 0}
        done = {"text": said, **({"logprobs": []} if kind == "message" else {})}
        events = [
            self._event(_TEXT_EVENTS[kind] + ".done", **at, **done),
            self._event("response.content_part.done", **at, part=_part(kind, said)),
            self._event("response.output_item.done", output_index=len(self._output), item=item),
        ]
        self._output.append(item)
        self._open = None
        return events

    def _call_events(self, piece: Piece) -> list[Event]:
        """A call's item added at its start, its arguments' deltas, done at its end."""
        if piece.kind == "call_start" and piece.call is not None:
            self._call = StreamedCall(piece.call, len(self._output))
            return self._close_item() + self._numbered(self._call.added())
        if self._call is None:
            return []
        if piece.kind == "call_args":
            return self._numbered(self._call.delta(piece.text))
        events, item = self._call.done(broken=piece.broken)
        self._output.append(item)
        self._call = None
        return self._numbered(events)

    def _numbered(self, events: list[tuple[str, dict[str, Any]]]) -> list[Event]:
        return [self._event(kind, **fields) for kind, fields in events]

    def final(self, done: Done) -> list[Event]:
        events = self._events(self._reader.finish())
        events += self._close_item()
        response = self._finished(done, self._output, self._reader.result())
        kind = f"response.{response['status']}"
        return [*events, self._event(kind, response=response)]

    def _finished(self, done: Done, output: list[dict[str, Any]], read: Reading) -> dict[str, Any]:
        cut = done.finish_reason == "length" and not (read.calls and not read.broken)
        return self._response(
            "incomplete" if cut else "completed",
            output,
            incomplete_details={"reason": "max_output_tokens"} if cut else None,
            usage=usage(done),
            specllama=specllama_stats(done),
        )

    def failure(self, error: ApiError) -> list[Event]:
        """The error, then the response failed with it: clients wait for the response's end
        (Codex retries a stream that closes without one), and read its error's code
        (context_length_exceeded: Codex compacts the conversation)."""
        code = error.code if error.status < 500 else "server_error"  # OpenAI's codes
        failed = self._response(
            "failed", self._output, error={"code": code, "message": error.message}
        )
        return [
            self._event("error", code=code, message=error.message, param=error.param),
            self._event("response.failed", response=failed),
        ]

    def keepalive(self) -> str:
        """A comment, and while nothing is written yet `response.in_progress` again: the
        event that says the response is under way."""
        if self._output or self._open is not None or self._call is not None:
            return KEEPALIVE_COMMENT
        response = self._response("in_progress", [])
        return KEEPALIVE_COMMENT + sse(self._event("response.in_progress", response=response))

    def closing(self) -> str:
        return ""

    def whole(self, text: str, done: Done) -> dict[str, Any]:
        reading = read_whole(self._reader, text)
        output = []
        if reading.thinking is not None:
            thought = {"id": _id("rs"), "type": "reasoning", "summary": []}
            output.append({**thought, "content": [_part("reasoning", reading.thinking)]})
        if reading.content:
            message = {"id": _id("msg"), "type": "message", "status": "completed"}
            output.append(
                {**message, "role": "assistant", "content": [_part("message", reading.content)]}
            )
        for call in reading.calls:
            output.append(call_item(call, "completed", call.arguments))
        return self._finished(done, output, reading)


# The events that stream an item's text, by the item's type.
_TEXT_EVENTS = {"message": "response.output_text", "reasoning": "response.reasoning_text"}


def _part(kind: str, text: str) -> dict[str, Any]:
    """A message's output_text part, or a reasoning item's reasoning_text."""
    if kind == "reasoning":
        return {"type": "reasoning_text", "text": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
