"""Conversation state and chat templates.

The template comes from the GGUF metadata (`tokenizer.chat_template`), which is untrusted input:
it is rendered in jinja2's immutable sandbox, which refuses attribute tricks and mutation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specllama.errors import SpecllamaError


@dataclass(frozen=True)
class Message:
    role: str  # "system", "user" or "assistant"
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


def _raise_exception(message: str) -> None:
    raise TemplateError(message)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def render_chat(
    template: str,
    messages: list[Message],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text the model was trained to see for these messages."""
    try:
        return (
            _environment()
            .from_string(template)
            .render(
                messages=[m.as_dict() for m in messages],
                bos_token=bos_token,
                eos_token=eos_token,
                add_generation_prompt=add_generation_prompt,
            )
        )
    except TemplateError as exc:
        raise SpecllamaError(
            f"the model's chat template failed: {exc}",
            hint="run with --no-chat-template to send the prompt as it is",
        ) from exc


def plain_prompt(messages: list[Message]) -> str:
    """For models without a template: the messages as plain text."""
    lines = [f"{m.role.capitalize()}: {m.content}" for m in messages]
    return "\n\n".join([*lines, "Assistant:"])
