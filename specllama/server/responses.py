"""OpenAI response bodies for chat and text completions, whole or as stream chunks.

Each answer also carries a `specllama` object: what speculation did for it (drafted, accepted,
acceptance rate, tokens/s, rounds, finish reason, prompt tokens reused from the KV cache). In a
stream, each text chunk's `specllama` object holds the tokens that make up its text, each with
its origin ("target", or the drafter whose guess was accepted), and the figures so far. OpenAI
clients ignore the field.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from specllama.server.queue import Done, Text


def usage(done: Done) -> dict[str, Any]:
    n_prompt, n_completion = done.stats.n_prompt, done.stats.n_generated
    return {
        "prompt_tokens": n_prompt,
        "completion_tokens": n_completion,
        "total_tokens": n_prompt + n_completion,
        "prompt_tokens_details": {"cached_tokens": done.n_prompt_reused},
    }


def specllama_stats(done: Done) -> dict[str, Any]:
    return {**done.stats.as_dict(), "n_prompt_reused": done.n_prompt_reused}


class Shape:
    """The bodies of one answer: `chat` (chat.completion) or `text` (text_completion)."""

    def __init__(self, kind: str, model: str, *, include_usage: bool = False) -> None:
        self.chat = kind == "chat"
        self.model = model
        self.include_usage = include_usage
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

    def text_chunk(self, output: Text) -> dict[str, Any]:
        chunk = self._chunk([self._choice(output.text, None)])
        chunk["specllama"] = {"tokens": [list(piece) for piece in output.pieces], **output.progress}
        return chunk

    def final_chunks(self, done: Done) -> list[dict[str, Any]]:
        """The chunk with the finish reason (and the stats), then usage if it was asked for."""
        finish = self._chunk([self._choice(None, done.finish_reason)])
        finish["specllama"] = specllama_stats(done)
        if not self.include_usage:
            return [finish]
        last = {**self._chunk([]), "usage": usage(done)}
        return [finish, last]

    def whole(self, text: str, done: Done) -> dict[str, Any]:
        if self.chat:
            message = {"role": "assistant", "content": text, "refusal": None}
            choice = {"index": 0, "message": message, "logprobs": None}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
            obj = "text_completion"
        choice["finish_reason"] = done.finish_reason
        body = self._body(obj, [choice])
        return {**body, "usage": usage(done), "specllama": specllama_stats(done)}
