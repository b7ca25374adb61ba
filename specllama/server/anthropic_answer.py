"""Anthropic's Messages API, the answers: a `message` whole, or its event stream, and errors in
Anthropic's envelope, {"type": "error", "error": {"type", "message"}}. The requests are
`specllama.server.anthropic`."""

from __future__ import annotations

import json
import uuid
from typing import Any

from specllama.family.pieces import Piece, Reading
from specllama.family.reader import read_whole
from specllama.server.driver import Done, Text
from specllama.server.fields import ApiError
from specllama.server.request import GenerationRequest
from specllama.server.wire import Event, Served, specllama_stats, sse

ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def error_body(error: ApiError) -> dict[str, Any]:
    default = "api_error" if error.status >= 500 else "invalid_request_error"
    kind = ERROR_TYPES.get(error.status, default)
    return {"type": "error", "error": {"type": kind, "message": error.message}}


def usage(done: Done) -> dict[str, Any]:
    reused = done.n_prompt_reused
    return {
        "input_tokens": done.stats.n_prompt - reused,  # as Anthropic counts: not read from cache
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": reused,
        "output_tokens": done.stats.n_generated,
    }


def stop_reason(done: Done, reading: Reading | None) -> str:
    if reading is not None and reading.calls and not reading.broken:
        return "tool_use"
    if done.stop_sequence is not None:
        return "stop_sequence"
    return "max_tokens" if done.finish_reason == "length" else "end_turn"


class MessageAnswer:
    """A `message`, whole or as its events: message_start, ping, each content block's start,
    deltas (thinking_delta, text_delta, input_json_delta as each call's arguments are written)
    and stop, message_delta, message_stop. A model that thinks gives its thinking as a
    `thinking` block (with an empty signature, as llama-server gives it) before the answer."""

    def __init__(self, asked: GenerationRequest, served: Served) -> None:
        self.id = f"msg_{uuid.uuid4().hex[:24]}"
        self.model = served.model
        self.n_prompt = served.n_prompt
        self._reader = served.reader()
        self._index = -1  # the last block's index
        self._open: str | None = None  # the type of that block while it is open

    def _message(self, content: list[dict[str, Any]], **ending: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": None,
            "stop_sequence": None,
            **ending,
        }

    def opening(self) -> list[Event]:
        start = self._message([], usage={"input_tokens": self.n_prompt, "output_tokens": 0})
        return [
            ("message_start", {"type": "message_start", "message": start}),
            ("ping", {"type": "ping"}),
        ]

    def text(self, output: Text) -> list[Event]:
        return self._events(self._reader.feed(output.text))

    def _events(self, pieces: list[Piece]) -> list[Event]:
        events: list[Event] = []
        for piece in pieces:
            if piece.kind == "call_start" and piece.call is not None:
                call = piece.call
                events += self._start({"type": "tool_use", "id": call.id, "name": call.name})
            elif piece.kind == "call_args" and self._open == "tool_use":
                events.append(self._delta({"type": "input_json_delta", "partial_json": piece.text}))
            elif piece.kind == "call":
                events += self._stop()
            elif piece.kind == "thinking":
                if self._open != "thinking":
                    events += self._start({"type": "thinking", "thinking": ""})
                events.append(self._delta({"type": "thinking_delta", "thinking": piece.text}))
            elif piece.text:
                if self._open != "text":
                    events += self._start({"type": "text", "text": ""})
                events.append(self._delta({"type": "text_delta", "text": piece.text}))
        return events

    def _start(self, block: dict[str, Any]) -> list[Event]:
        if block["type"] == "tool_use":
            block["input"] = {}
        events = self._stop()
        self._index += 1
        self._open = block["type"]
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        return [*events, ("content_block_start", start)]

    def _delta(self, delta: dict[str, Any]) -> Event:
        data = {"type": "content_block_delta", "index": self._index, "delta": delta}
        return "content_block_delta", data

    def _stop(self) -> list[Event]:
        if self._open is None:
            return []
        events = []
        if self._open == "thinking":  # its signature: none here, as llama-server sends it
            events.append(self._delta({"type": "signature_delta", "signature": ""}))
        self._open = None
        stop = {"type": "content_block_stop", "index": self._index}
        return [*events, ("content_block_stop", stop)]

    def final(self, done: Done) -> list[Event]:
        events = self._events(self._reader.finish())
        reading = self._reader.result()
        ending = {"stop_reason": stop_reason(done, reading), "stop_sequence": done.stop_sequence}
        delta = {"type": "message_delta", "delta": ending, "usage": usage(done)}
        delta["specllama"] = specllama_stats(done)
        return [
            *events,
            *self._stop(),
            ("message_delta", delta),
            ("message_stop", {"type": "message_stop"}),
        ]

    def failure(self, error: ApiError) -> list[Event]:
        return [("error", error_body(error))]

    def keepalive(self) -> str:
        return sse(("ping", {"type": "ping"}))  # as Anthropic's API keeps a stream alive

    def closing(self) -> str:
        return ""

    def whole(self, text: str, done: Done) -> dict[str, Any]:
        reading = read_whole(self._reader, text)
        content: list[dict[str, Any]] = []
        if reading.thinking is not None:
            content.append({"type": "thinking", "thinking": reading.thinking, "signature": ""})
        content += [{"type": "text", "text": reading.content}] if reading.content else []
        for call in reading.calls:
            use = {"type": "tool_use", "id": call.id, "name": call.name}
            content.append({**use, "input": json.loads(call.arguments)})
        message = self._message(
            content,
            stop_reason=stop_reason(done, reading),
            stop_sequence=done.stop_sequence,
            usage=usage(done),
        )
        return {**message, "specllama": specllama_stats(done)}
