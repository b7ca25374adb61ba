"""Token ids -> text, one token at a time.

A token can end in the middle of a UTF-8 character (byte-level vocabularies split emoji and
CJK characters); an incremental decoder holds those bytes back until the character completes.
"""

from __future__ import annotations

import codecs
from typing import Protocol


class HasTokenBytes(Protocol):
    def token_bytes(self, token: int, *, special: bool = False) -> bytes: ...


class TextStream:
    def __init__(self, vocab: HasTokenBytes) -> None:
        self._vocab = vocab
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token: int) -> str:
        return self._decoder.decode(self._vocab.token_bytes(token))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
