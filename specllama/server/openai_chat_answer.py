"""OpenAI's Chat Completions and text Completions answers, whole or as stream chunks: a chat's
text, its thinking (`reasoning_content`) and its calls (`tool_calls`, streamed as OpenAI
streams them), with the usage and the `specllama` object (openai_chat.py reads the requests)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from specllama.chat import ToolCall
from specllama.family.pieces import Piece, Reading
from specllama.family.reader import read_whole
from specllama.server.driver import Done, Text
from specllama.server.fields import ApiError
from specllama.server.request import GenerationRequest
from specllama.server.wire import KEEPALIVE_COMMENT, Event, Served, specllama_stats


def usage(done: Done) -> dict[str, Any]:
    stats = done.stats
    n_prompt, n_completion = stats.n_prompt, stats.n_generated
    counts = {
        "prompt_tokens": n_prompt,
        "completion_tokens": n_completion,
        "total_tokens": n_prompt + n_completion,
        "prompt_tokens_details": {"cached_tokens": done.n_prompt_reused},
    }
    if done.predicted is not None:  # Predicted Outputs, as OpenAI counts them
        accepted, rejected = done.predicted
        counts["completion_tokens_details"] = {
            "accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": rejected,
        }
    return counts


class ChatAnswer:
    """The bodies of one answer: a chat.completion or a text_completion. A chat's thinking
    goes to `reasoning_content` and its calls to `tool_calls`, as llama-server writes them."""

    def __init__(self, asked: GenerationRequest, served: Served, *, chat: bool) -> None:
        self.chat = chat
        self.model = served.model
        self.include_usage = asked.include_usage
        self._reader = served.reader() if chat else None  # a text completion is text as it is
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _body(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def _chunk(self, choices: list[dict[str, Any]]) -> Event:
        body = self._body("chat.completion.chunk" if self.chat else "text_completion", choices)
        if self.include_usage:  # as OpenAI: null in every chunk but the last
            body["usage"] = None
        return None, body

    def _choice(self, delta: dict[str, Any], finish_reason: str | None) -> dict[str, Any]:
        if self.chat:
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        text = delta.get("content") or ""
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}

    def opening(self) -> list[Event]:
        """Chat streams begin by naming the role, before any text."""
        if not self.chat:
            return []
        return [self._chunk([self._choice({"role": "assistant", "content": ""}, None)])]

    def text(self, output: Text) -> list[Event]:
        """The chunks for a piece of the answer; its tokens and figures ride on the first."""
        if self._reader is None:
            chunks = [self._chunk([self._choice({"content": output.text}, None)])]
        else:
            chunks = [c for p in self._reader.feed(output.text) for c in self._piece_chunks(p)]
            chunks = chunks or [self._chunk([self._choice({}, None)])]
        chunks[0][1]["specllama"] = {
            "tokens": [list(piece) for piece in output.pieces],
            **output.progress,
        }
        return chunks

    def _piece_chunks(self, piece: Piece) -> list[Event]:
        """Thinking or text; or a call as OpenAI streams one: its index, id, type and name
        with empty arguments, then a chunk per piece of its arguments (its end: nothing)."""
        if piece.kind == "call_start" and piece.call is not None:
            return [self._tool_chunk({"index": piece.index, **_call_body(piece.call)})]
        if piece.kind == "call_args":
            return [self._tool_chunk({"index": piece.index, "function": {"arguments": piece.text}})]
        if piece.kind == "call":
            return []
        field = "reasoning_content" if piece.kind == "thinking" else "content"
        return [self._chunk([self._choice({field: piece.text}, None)])]

    def _tool_chunk(self, call_delta: dict[str, Any]) -> Event:
        return self._chunk([self._choice({"tool_calls": [call_delta]}, None)])

    def final(self, done: Done) -> list[Event]:
        """Calls and text still held, the chunk with the finish reason (and the stats), then
        usage if it was asked for."""
        held: list[Event] = []
        reading = None
        if self._reader is not None:
            for piece in self._reader.finish():
                held += self._piece_chunks(piece)
            reading = self._reader.result()
        finish = self._chunk([self._choice({}, finish_reason(done, reading))])
        finish[1]["specllama"] = specllama_stats(done)
        if not self.include_usage:
            return [*held, finish]
        last = self._chunk([])
        last[1]["usage"] = usage(done)
        return [*held, finish, last]

    def failure(self, error: ApiError) -> list[Event]:
        """Headers are sent: the error goes in the stream, as OpenAI does."""
        return [(None, error.body())]

    def keepalive(self) -> str:
        return KEEPALIVE_COMMENT  # no event of its own: OpenAI's streams carry none

    def closing(self) -> str:
        return "data: [DONE]\n\n"

    def whole(self, text: str, done: Done) -> dict[str, Any]:
        if self._reader is None:
            choice = {"index": 0, "text": text, "logprobs": None}
            choice["finish_reason"] = finish_reason(done, None)
            body = self._body("text_completion", [choice])
            return {**body, "usage": usage(done), "specllama": specllama_stats(done)}
        reading = read_whole(self._reader, text)
        message: dict[str, Any] = {"role": "assistant", "content": reading.content}
        if reading.thinking is not None:
            message["reasoning_content"] = reading.thinking
        message["refusal"] = None
        if reading.calls:
            message["tool_calls"] = [_call_body(call) for call in reading.calls]
        choice = {"index": 0, "message": message, "logprobs": None}
        choice["finish_reason"] = finish_reason(done, reading)
        body = self._body("chat.completion", [choice])
        return {**body, "usage": usage(done), "specllama": specllama_stats(done)}


def finish_reason(done: Done, reading: Reading | None) -> str:
    """ "tool_calls" when the answer holds whole calls and no broken one; else the
    generation's own reason (a call cut by max_tokens ends with "length", its text as content)."""
    if reading is not None and reading.calls and not reading.broken:
        return "tool_calls"
    return done.finish_reason


def _call_body(call: ToolCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": call.arguments}
    return {"id": call.id, "type": "function", "function": function}
