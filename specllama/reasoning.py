"""A reasoning model's thinking, told from its answer: the text between `<think>` and
`</think>` (Qwen3, DeepSeek-R1, and the templates that teach their syntax).

A template that knows the tags either lets the model open them itself (the answer begins with
`<think>`), or opens them in the prompt (its generation prompt ends with `<think>`, and the
answer begins inside the thinking). Either way the thinking ends at `</think>`, and what follows
is the answer proper. As the answer streams, text that may be the start of a tag is held until
the next piece tells.
"""

from __future__ import annotations

OPEN, CLOSE = "<think>", "</think>"


def template_thinks(template: str | None) -> bool:
    """Whether a chat template knows the thinking tags."""
    return template is not None and OPEN in template and CLOSE in template


def opens_thinking(prompt: str) -> bool:
    """Whether a rendered prompt leaves the answer inside the thinking."""
    return prompt.rstrip().endswith(OPEN)


class ThinkingSplit:
    """Splits a streamed answer into ("thinking", text) and ("text", text) pieces."""

    def __init__(self, *, inside: bool) -> None:
        self._state = "thinking" if inside else "start"
        self._held = ""

    def feed(self, text: str) -> list[tuple[str, str]]:
        self._held += text
        pieces: list[tuple[str, str]] = []
        if self._state == "start":
            begun = self._held.lstrip()
            if begun.startswith(OPEN):
                self._state, self._held = "thinking", begun[len(OPEN) :]
            elif OPEN.startswith(begun):
                return []  # too short to tell yet
            else:
                self._state = "text"
        if self._state == "thinking":
            said, closed, rest = self._held.partition(CLOSE)
            if closed:
                self._state, self._held = "closed", rest
                pieces.append(("thinking", said))
            else:
                keep = _partial(said, CLOSE)
                self._held = said[len(said) - keep :]
                pieces.append(("thinking", said[: len(said) - keep]))
        if self._state == "closed":  # the blank lines after the tag are no text
            self._held = self._held.lstrip()
            self._state = "text" if self._held else "closed"
        if self._state == "text":
            pieces.append(("text", self._held))
            self._held = ""
        return [(kind, piece) for kind, piece in pieces if piece]

    def finish(self) -> list[tuple[str, str]]:
        """What was held, as what it was part of."""
        held, self._held = self._held, ""
        kind = "thinking" if self._state == "thinking" else "text"  # ("closed" holds nothing)
        return [(kind, held)] if held else []


def split_thinking(text: str, *, inside: bool) -> tuple[str | None, str]:
    """A whole answer: (its thinking, None without one; the rest)."""
    split = ThinkingSplit(inside=inside)
    pieces = split.feed(text) + split.finish()
    thinking = [t for kind, t in pieces if kind == "thinking"]
    said = "".join(t for kind, t in pieces if kind == "text")
    return ("".join(thinking) if thinking else None), said


def _partial(text: str, marker: str) -> int:
    """The length of the longest end of `text` that `marker` begins with."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
