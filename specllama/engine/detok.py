"""Token ids -> text, one token at a time.

A token can end in the middle of a UTF-8 character (byte-level vocabularies split emoji and
CJK characters); an incremental decoder holds those bytes back until the character completes.

Control tokens (`<|im_start|>`, a family's `<think>` where it is one token) are written as
nothing, unless they are among the `special` ids given: those are written as their text, so that
a family's markers reach the reader that looks for them (as llama-server renders its "preserved
tokens").
"""

from __future__ import annotations

import codecs
from collections.abc import Collection
from typing import Protocol


class HasTokenBytes(Protocol):
    def token_bytes(self, token: int, *, special: bool = False) -> bytes: ...


class TextStream:
    def __init__(self, vocab: HasTokenBytes, special: Collection[int] = ()) -> None:
        self._vocab = vocab
        self._special = frozenset(special)  # written as their text
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token: int) -> str:
        piece = self._vocab.token_bytes(token, special=token in self._special)
        return self._decoder.decode(piece)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
