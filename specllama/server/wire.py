"""What every wire format gives the app: a reader into the one request type, an answer writer
(whole, or as server-sent events), and its error envelope.

The app runs every API the same way: read the body, prepare and queue the request, then hand
the queue's outputs (Text pieces, then Done or Failed) to the API's Answer, which turns them
into its events. An event is (name, data): a named SSE event (`event: message_start`) for the
APIs that name them (Anthropic's, OpenAI's Responses), None for Chat Completions' bare
`data:` lines.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from specllama.family.pieces import Reader
from specllama.server.driver import Done, Text
from specllama.server.fields import ApiError
from specllama.server.request import GenerationRequest

Event = tuple[str | None, dict[str, Any]]


@dataclass(frozen=True)
class Served:
    """What an answer needs to know besides its request."""

    model: str  # the name of the model that answers (whatever name the request used)
    reader: Callable[[], Reader]  # a reader of the answer into thinking, text and calls
    n_prompt: int  # the prompt's tokens, for a stream's opening usage


class Answer(Protocol):
    """One answer's bodies, written as the queue's outputs arrive."""

    def opening(self) -> list[Event]: ...
    def text(self, output: Text) -> list[Event]: ...
    def final(self, done: Done) -> list[Event]: ...
    def failure(self, error: ApiError) -> list[Event]: ...
    # Raw text that says the answer is still coming, sent after a while without output (a
    # long prompt): an SSE comment, or the API's own event for it.
    def keepalive(self) -> str: ...
    def closing(self) -> str: ...  # raw text after the last event ("data: [DONE]\n\n")
    def whole(self, text: str, done: Done) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Wire:
    """One API: how its requests are read, its answers written, its errors enveloped."""

    name: str  # for the log line: "chat", "completion", "messages", "responses"
    parse: Callable[[dict[str, Any]], GenerationRequest]
    answer: Callable[[GenerationRequest, Served], Answer]
    error_body: Callable[[ApiError], dict[str, Any]]
    # Whether a stream refused for its full context is answered as a stream that fails (the
    # Responses API's response.failed, which Codex reads as "compact the conversation") rather
    # than with an HTTP error.
    fails_in_stream: bool = False


def specllama_stats(done: Done) -> dict[str, Any]:
    """What speculation did for the answer, in every API's answer as `specllama`."""
    return {**done.stats.as_dict(), "n_prompt_reused": done.n_prompt_reused}


# An SSE comment line: clients skip it, and it keeps their idle timers from firing.
KEEPALIVE_COMMENT = ": keepalive\n\n"


def sse(event: Event) -> str:
    """One server-sent event, compact JSON."""
    name, data = event
    line = f"data: {json.dumps(data, separators=(',', ':'))}\n\n"
    return line if name is None else f"event: {name}\n{line}"
