"""OpenAI response bodies for chat and text completions, whole or as stream chunks.

Each answer also carries a `specllama` object: what speculation did for it (drafted, accepted,
acceptance rate, tokens/s, rounds, finish reason, prompt tokens reused from the KV cache). In a
stream, each text chunk's `specllama` object holds the tokens that make up its text, each with
its origin ("target", the drafter whose guess was accepted, or "grammar" for a token the output
rule forced), and the figures so far. OpenAI clients ignore the field.

When the request offers tools, the answer is read for calls in the model's own syntax
(`specllama.tool_calls`): whole, into `message.tool_calls`; streamed, as OpenAI streams them
(a call's first delta names it with empty arguments, the next carries the arguments). Text from
where a call may begin is held back, so markup never reaches `content`; a chunk whose text is
held carries its tokens with an empty delta.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from specllama.chat import ToolCall
from specllama.server.queue import Done, Text
from specllama.tool_calls import CallStream, Delta, Parsed, ToolFormat, parse_answer


def usage(done: Done) -> dict[str, Any]:
    stats = done.stats
    n_prompt, n_completion = stats.n_prompt, stats.n_generated
    counts = {
        "prompt_tokens": n_prompt,
        "completion_tokens": n_completion,
        "total_tokens": n_prompt + n_completion,
        "prompt_tokens_details": {"cached_tokens": done.n_prompt_reused},
    }
    if stats.prediction_accepted is not None:  # Predicted Outputs: what the prediction drafted
        counts["completion_tokens_details"] = {
            "accepted_prediction_tokens": stats.prediction_accepted,
            "rejected_prediction_tokens": stats.prediction_rejected,
        }
    return counts


def specllama_stats(done: Done) -> dict[str, Any]:
    return {**done.stats.as_dict(), "n_prompt_reused": done.n_prompt_reused}


class Shape:
    """The bodies of one answer: `chat` (chat.completion) or `text` (text_completion)."""

    def __init__(
        self,
        kind: str,
        model: str,
        *,
        include_usage: bool = False,
        tool_format: ToolFormat | None = None,
    ) -> None:
        self.chat = kind == "chat"
        self.model = model
        self.include_usage = include_usage
        self.tool_format = tool_format  # the answer is read for calls in this syntax
        self._calls = CallStream(tool_format) if tool_format is not None else None
        self.id = f"{'chatcmpl' if self.chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _body(self, obj: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        body = self._body("chat.completion.chunk" if self.chat else "text_completion", choices)
        if self.include_usage:  # as OpenAI: null in every chunk but the last
            body["usage"] = None
        return body

    def _choice(self, text: str | None, finish_reason: str | None) -> dict[str, Any]:
        if self.chat:
            delta = {} if text is None else {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}

    def opening_chunks(self) -> list[dict[str, Any]]:
        """Chat streams begin by naming the role, before any text."""
        if not self.chat:
            return []
        choice = self._choice("", None)
        choice["delta"] = {"role": "assistant", **choice["delta"]}
        return [self._chunk([choice])]

    def text_chunks(self, output: Text) -> list[dict[str, Any]]:
        """The chunks for a piece of the answer; its tokens and figures ride on the first."""
        if self._calls is None:
            chunks = [self._chunk([self._choice(output.text, None)])]
        else:
            chunks = [c for d in self._calls.feed(output.text) for c in self._delta_chunks(d)]
            chunks = chunks or [self._chunk([self._choice(None, None)])]
        chunks[0]["specllama"] = {
            "tokens": [list(piece) for piece in output.pieces],
            **output.progress,
        }
        return chunks

    def _delta_chunks(self, delta: Delta) -> list[dict[str, Any]]:
        """A content delta; or a call's two, as OpenAI streams a call: its index, id, type and
        name with empty arguments, then the arguments."""
        if delta.call is None:
            return [self._chunk([self._choice(delta.content, None)])]
        call, index = delta.call, delta.index
        named = {"index": index, **_call_body(call)}
        named["function"] = {"name": call.name, "arguments": ""}
        arguments = {"index": index, "function": {"arguments": call.arguments}}
        return [self._tool_chunk(named), self._tool_chunk(arguments)]

    def _tool_chunk(self, call_delta: dict[str, Any]) -> dict[str, Any]:
        choice = self._choice(None, None)
        choice["delta"] = {"tool_calls": [call_delta]}
        return self._chunk([choice])

    def final_chunks(self, done: Done) -> list[dict[str, Any]]:
        """Calls and text still held, the chunk with the finish reason (and the stats), then
        usage if it was asked for."""
        held: list[dict[str, Any]] = []
        if self._calls is not None:
            for delta in self._calls.finish():
                held += self._delta_chunks(delta)
        parsed = self._calls.result() if self._calls is not None else None
        finish = self._chunk([self._choice(None, finish_reason(done, parsed))])
        finish["specllama"] = specllama_stats(done)
        if not self.include_usage:
            return [*held, finish]
        last = {**self._chunk([]), "usage": usage(done)}
        return [*held, finish, last]

    def whole(self, text: str, done: Done) -> dict[str, Any]:
        parsed = None
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
            if self.tool_format is not None:
                parsed = parse_answer(self.tool_format, text)
                message["content"] = parsed.content
                if parsed.calls:
                    message["tool_calls"] = [_call_body(call) for call in parsed.calls]
            choice = {"index": 0, "message": message, "logprobs": None}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
            obj = "text_completion"
        choice["finish_reason"] = finish_reason(done, parsed)
        body = self._body(obj, [choice])
        return {**body, "usage": usage(done), "specllama": specllama_stats(done)}


def finish_reason(done: Done, parsed: Parsed | None) -> str:
    """ "tool_calls" when the answer holds whole calls and no broken one; else the
    generation's own reason (a call cut by max_tokens ends with "length", its text as content)."""
    if parsed is not None and parsed.calls and not parsed.broken:
        return "tool_calls"
    return done.finish_reason


def _call_body(call: ToolCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": call.arguments}
    return {"id": call.id, "type": "function", "function": function}
