"""Conversation state and chat templates.

The template comes from the GGUF metadata (`tokenizer.chat_template`), which is untrusted input:
it is rendered in jinja2's sandbox (`specllama.chat_template`), which refuses attribute tricks and
huge ranges but lets a template change the fresh lists and dicts it is given, as llama.cpp's own
template engine does (Kimi K2's templates `append` to a list).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specllama.chat_template import (
    REASONING_FIELD,
    compiled_template,
    shape_messages,
    template_needs,
    template_variables,
)
from specllama.errors import SpecllamaError


@dataclass(frozen=True)
class ToolCall:
    """A call to one of the client's functions, as OpenAI writes it: `arguments` is JSON text."""

    id: str
    name: str
    arguments: str

    def as_template_dict(self, *, text_arguments: bool = False) -> dict[str, Any]:
        """The call as Hugging Face chat templates read it: the arguments as an object (a
        template writes them with `tojson`), or as the text when they are not JSON or when the
        template wants text (`text_arguments`: Functionary v3.2 adds them to its prompt)."""
        arguments: Any = self.arguments
        if not text_arguments:
            with contextlib.suppress(ValueError):  # not JSON: the text as it is
                arguments = json.loads(self.arguments)
        function = {"name": self.name, "arguments": arguments}
        return {"id": self.id, "type": "function", "function": function}


@dataclass(frozen=True)
class Message:
    role: str  # "system", "user", "assistant" or "tool" (a function's result)
    content: str
    interrupted: bool = False  # an answer stopped by the user; content ends with the mark
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant's calls
    tool_call_id: str | None = None  # a tool message: the call it answers
    reasoning: str | None = None  # an assistant's thinking before its answer, passed back

    def as_dict(self, *, text_arguments: bool = False) -> dict[str, Any]:
        """The message as OpenAI and llama.cpp write it (the reasoning as `reasoning_content`),
        a call's arguments as an object unless `text_arguments`."""
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning is not None:
            message[REASONING_FIELD] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                call.as_template_dict(text_arguments=text_arguments) for call in self.tool_calls
            ]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


def render_chat(
    template: str,
    messages: list[Message],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    tools: list[dict[str, Any]] | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> str:
    """The prompt text the model was trained to see for these messages (and `tools`, OpenAI's
    function tools, given to the template only when there are some). `template_kwargs`: more
    variables for the template (a request's `chat_template_kwargs`: `enable_thinking`...)."""
    # Fresh copies: the template may change what it is given (see chat_template).
    extra = copy.deepcopy({**(template_kwargs or {}), **({"tools": tools} if tools else {})})
    if tools and "tools" not in template_variables(template):
        messages = with_tools_described(messages, tools)
    try:
        return compiled_template(template).render(
            messages=_template_messages(template, messages),
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
            **extra,
        )
    except Exception as exc:  # the template's own fault, whatever it raised: one clear line
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise SpecllamaError(
            f"the model's chat template failed: {reason}",
            hint="run with --no-chat-template to send the prompt as it is",
        ) from exc


def _template_messages(template: str, messages: list[Message]) -> list[dict[str, Any]]:
    """The messages in the shapes this template reads (learnt once per template, and only when
    there are calls or reasoning to shape)."""
    if not any(m.tool_calls or m.tool_call_id or m.reasoning is not None for m in messages):
        return [m.as_dict() for m in messages]
    needs = template_needs(template)
    dicts = [m.as_dict(text_arguments=needs.text_arguments) for m in messages]
    return shape_messages(dicts, needs)


TOOLS_PREAMBLE = "You can call any of the following tools to satisfy the user's requests: "


def with_tools_described(messages: list[Message], tools: list[dict[str, Any]]) -> list[Message]:
    """For a template that writes calls but never shows the tools (DeepSeek V3.1's): the tools
    described in the system message, as llama.cpp's fallback does."""
    described = TOOLS_PREAMBLE + json.dumps(tools, ensure_ascii=False)
    if messages and messages[0].role == "system":
        system = f"{messages[0].content}\n\n{described}"
        return [dataclasses.replace(messages[0], content=system), *messages[1:]]
    return [Message("system", described), *messages]


def plain_prompt(messages: list[Message]) -> str:
    """For models without a template: the messages as plain text."""
    lines = [f"{m.role.capitalize()}: {m.content}" for m in messages]
    return "\n\n".join([*lines, "Assistant:"])


# -- a conversation: what `specllama chat` keeps between turns -------------------------------

INTERRUPTED_MARK = " [interrupted]"


@dataclass(frozen=True)
class Trimmed:
    """What `Conversation.fit` dropped to make the prompt fit."""

    messages: list[Message]
    n_tokens_before: int
    n_tokens_after: int

    @property
    def n_turns(self) -> int:
        return sum(1 for m in self.messages if m.role == "user")


@dataclass
class Conversation:
    """The system prompt and the turns so far (user, assistant, user, ...).

    The system prompt is kept apart so that trimming never drops it. An answer the user
    interrupted is stored with INTERRUPTED_MARK appended, so that the next turn's prompt (and a
    saved transcript) says so.
    """

    system: str | None = None
    turns: list[Message] = field(default_factory=list)

    def messages(self) -> list[Message]:
        head = [Message("system", self.system)] if self.system else []
        return head + self.turns

    def add_user(self, text: str) -> None:
        self.turns.append(Message("user", text))

    def add_assistant(self, text: str, *, interrupted: bool = False) -> None:
        if interrupted:
            text = text.rstrip() + INTERRUPTED_MARK
        self.turns.append(Message("assistant", text, interrupted=interrupted))

    def pop_user(self) -> None:
        """Forget an unanswered user message (its answer failed before any token)."""
        if self.turns and self.turns[-1].role == "user":
            self.turns.pop()

    def reset(self) -> None:
        self.turns.clear()

    def fit(self, count_tokens: Callable[[list[Message]], int], budget: int) -> Trimmed | None:
        """Drop the oldest turns (never the system prompt, never the last user message) until
        count_tokens(messages) <= budget. Returns what was dropped, or None if nothing was.

        When the system prompt and the last message alone are over the budget, they stay: the
        caller decides whether that still fits the context at all.
        """
        before = count_tokens(self.messages())
        n = before
        dropped: list[Message] = []
        while n > budget and len(self.turns) > 1:
            # A turn is a user message and the answer after it.
            cut = 2 if len(self.turns) > 2 and self.turns[1].role == "assistant" else 1
            dropped += self.turns[:cut]
            del self.turns[:cut]
            n = count_tokens(self.messages())
        return Trimmed(dropped, before, n) if dropped else None

    # -- saving -----------------------------------------------------------------------------

    def as_json(self) -> str:
        messages = [
            {**m.as_dict(), **({"interrupted": True} if m.interrupted else {})}
            for m in self.messages()
        ]
        return json.dumps({"messages": messages}, ensure_ascii=False, indent=2) + "\n"

    def as_markdown(self) -> str:
        titles = {"system": "System", "user": "User", "assistant": "Assistant"}
        blocks = [f"## {titles.get(m.role, m.role)}\n\n{m.content}\n" for m in self.messages()]
        return "\n".join(["# specllama chat\n", *blocks])

    def save(self, path: Path) -> str:
        """Write the conversation: Markdown for .md/.markdown, else JSON. Returns the format."""
        markdown = path.suffix.lower() in (".md", ".markdown")
        text = self.as_markdown() if markdown else self.as_json()
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SpecllamaError(f"cannot write {path}: {exc.strerror or exc}") from None
        return "markdown" if markdown else "json"
