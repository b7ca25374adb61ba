"""An answer as `run` and `chat` show it: its thinking told from the answer proper as tokens
stream (`family.thinking`), with the thinking's length in tokens."""

from __future__ import annotations

from specllama.engine.detok import TextStream
from specllama.family.thinking import ThinkingSplit
from specllama.session import Engine


class StreamedAnswer:
    """Token text in, ("thinking" | "text", str) pieces out; the whole kept for the end."""

    def __init__(self, engine: Engine, prompt: list[int], *, chat_template: bool = True) -> None:
        self._split: ThinkingSplit | None = engine.answer_split(prompt) if chat_template else None
        markers = engine.thinking.syntax.markers if self._split and engine.thinking else ()
        self.stream: TextStream = engine.target_text_stream(markers)
        self._thinking: list[str] | None = None  # None: the answer has not thought
        self._text: list[str] = []
        self.n_thinking_tokens = 0

    @property
    def thinking(self) -> str | None:
        return "".join(self._thinking) if self._thinking is not None else None

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def in_thinking(self) -> bool:
        return self._split is not None and self._split.state == "thinking"

    def feed(self, token: int) -> list[tuple[str, str]]:
        """One generated token's pieces."""
        was_thinking = self.in_thinking
        pieces = self._told(self.stream.feed(token))
        self.n_thinking_tokens += was_thinking or self.in_thinking
        return pieces

    def finish(self) -> list[tuple[str, str]]:
        """What the text stream and the split held, at the end."""
        pieces = self._told(self.stream.flush())
        if self._split is not None:
            pieces += self._kept(self._split.finish())
        return pieces

    def _told(self, text: str) -> list[tuple[str, str]]:
        if self._split is None:
            return self._kept([("text", text)] if text else [])
        return self._kept(self._split.feed(text))

    def _kept(self, pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
        for kind, text in pieces:
            if kind == "thinking":
                self._thinking = [*(self._thinking or []), text]
            else:
                self._text.append(text)
        return pieces
