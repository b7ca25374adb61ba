"""A Responses `function_call` item as its call is written: added (in progress, no arguments
yet), its arguments' deltas as the model writes them, then done (the arguments whole, and the
item completed; incomplete where the answer ended inside the call).

Events are (type, fields) pairs: the answer numbers and wraps them (`openai_responses`).
"""

from __future__ import annotations

from typing import Any

from specllama.chat import ToolCall

Fields = tuple[str, dict[str, Any]]


def call_item(call: ToolCall, status: str, arguments: str) -> dict[str, Any]:
    """A function_call output item."""
    item = {"id": f"fc_{call.id.removeprefix('call_')}", "type": "function_call"}
    return {**item, "status": status, "call_id": call.id, "name": call.name, "arguments": arguments}


class StreamedCall:
    """One function_call item being written, at `output_index` of the response."""

    def __init__(self, call: ToolCall, output_index: int) -> None:
        self.call = call
        self.output_index = output_index
        self.arguments = ""  # the deltas so far
        self._at = {"item_id": call_item(call, "", "")["id"], "output_index": output_index}

    def added(self) -> list[Fields]:
        item = call_item(self.call, "in_progress", "")
        return [("response.output_item.added", {"output_index": self.output_index, "item": item})]

    def delta(self, text: str) -> list[Fields]:
        self.arguments += text
        return [("response.function_call_arguments.delta", {**self._at, "delta": text})]

    def done(self, *, broken: bool) -> tuple[list[Fields], dict[str, Any]]:
        """The closing events, and the item as the response's output holds it."""
        item = call_item(self.call, "incomplete" if broken else "completed", self.arguments)
        done = {**self._at, "name": self.call.name, "arguments": self.arguments}
        events = [
            ("response.function_call_arguments.done", done),
            ("response.output_item.done", {"output_index": self.output_index, "item": item}),
        ]
        return events, item
