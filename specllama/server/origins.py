"""Who wrote each piece of an answer: the target, or a drafter whose guess the target accepted.

The stream carries, beside each text delta, the tokens that make it up and their origins, so a
page can colour the answer token by token. Stop strings hold text back until they can tell it
from the start of a stop, and may release part of a token; `TokenTape` lines the released text
up with the tokens again, handing out whole tokens only, so each one is coloured once.
"""

from __future__ import annotations

from collections import deque

from specllama.engine.control import kind_of

TARGET = "target"  # the target's own choice (the token after the accepted drafts, or no draft)

Piece = tuple[str, str]  # (text, origin)


def origin(source: str, from_draft: bool) -> str:
    """ "target", or the kind of drafter whose accepted guess this token was: "model" (a draft
    model), "ngram" (lookup in the text so far), "mtp" (the model's own head)."""
    return kind_of(source) if from_draft else TARGET


class TokenTape:
    """Tokens' text in, in order; the text let through (a prefix of it all) out, as tokens."""

    def __init__(self) -> None:
        self._held: deque[list[str]] = deque()  # [text, origin] of tokens not handed out yet
        self._let_through = ""  # text let through that does not yet make a whole token
        self._last_origin = TARGET

    def add(self, text: str, origin: str) -> None:
        self._held.append([text, origin])
        self._last_origin = origin

    def extend_last(self, text: str) -> None:
        """Text that arrives after the last token (the detokeniser's held bytes) is its."""
        if not text:
            return
        if self._held:
            self._held[-1][0] += text
        else:
            self._held.append([text, self._last_origin])  # its token has gone already

    def release(self, text: str) -> list[Piece]:
        """`text` was let through: the tokens it completes. A token without text (the first
        byte of a character) is a piece of its own, "", so that every token is counted."""
        self._let_through += text
        pieces: list[Piece] = []
        while self._held and len(self._held[0][0]) <= len(self._let_through):
            token_text, token_origin = self._held.popleft()
            pieces.append((token_text, token_origin))
            self._let_through = self._let_through[len(token_text) :]
        return pieces

    def finish(self) -> list[Piece]:
        """The answer ended: what was let through of a token a stop string cut, as its own
        piece. Tokens wholly inside the stop string are dropped with it."""
        rest, self._let_through = self._let_through, ""
        if not rest:
            return []
        return [(rest, self._held[0][1] if self._held else self._last_origin)]
