"""Text between two vocabularies: what a draft model with another tokenizer reads and writes.

A cross-tokenizer draft (`specllama.engine.cross_drafter`) works on text, not ids. Three pieces:

- `SpelledTokens`: the target's tokens and the bytes they spell, kept in step with the growing
  context (control tokens spelled as their text, "<|im_start|>", as a chat template writes them).
- `ReadTokens`: that text in the draft's vocabulary, the draft model's context. Only what changed
  is tokenised again, from a few tokens back, so a merge across the old end can form; its tokens
  always spell the text exactly, or a full tokenisation is tried, or it fails (`TextMismatch`).
- `retokenise` and `whole_tokens`: the draft model's words as the target's tokens, only whole
  ones. A token at the end of a text that stops mid-word may be the start of a longer one (the
  draft wrote " hel", the target writes " hello"), so the last is dropped unless the draft's text
  ended there for good (an end-of-generation token); a token that another token follows in the
  same tokenisation is whole.

Text passes through `str` (llama.cpp tokenises UTF-8): a text cut inside a character is used up
to the character, never guessed past it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from specllama.llama.evaluated import common_prefix_length
from specllama.llama.vocab import VocabInfo

# Tokens taken back before the first byte that changed, before tokenising again: the merges of a
# byte-level BPE reach across a token's end only within a word, a number or a run of spaces.
RETOKENISE_BACK = 2


class TextMismatch(Exception):
    """A vocabulary's tokens do not spell the text they were made from."""


class TextVocab(Protocol):
    """What the bridge needs of a model's vocabulary (`LlamaBackend` has it)."""

    @property
    def vocab(self) -> VocabInfo: ...

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]: ...

    def token_bytes(self, token: int, *, special: bool = False) -> bytes: ...

    def is_eog(self, token: int) -> bool: ...


def complete_utf8(data: bytes | bytearray) -> int:
    """The length of `data` up to its last whole UTF-8 character (a cut character left out)."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: its lead is further back
        width = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
        return n if back >= width else n - back
    return n  # no lead byte: not UTF-8 there, which decoding finds


def valid_utf8(data: bytes | bytearray) -> int:
    """The length of `data`'s longest prefix that is whole UTF-8 characters."""
    usable = complete_utf8(data)
    try:
        bytes(data[:usable]).decode("utf-8")
    except UnicodeDecodeError as bad:
        return bad.start
    return usable


def is_char_start(data: bytes | bytearray, offset: int) -> bool:
    """Whether a character starts at `offset` (or the text ends there)."""
    return offset >= len(data) or data[offset] & 0xC0 != 0x80


def spell(vocab: TextVocab, tokens: Sequence[int]) -> bytes:
    """The bytes `tokens` spell, control tokens as their text."""
    return b"".join(vocab.token_bytes(t, special=True) for t in tokens)


class SpelledTokens:
    """A token sequence of one vocabulary and the text it spells (a leading BOS spells
    nothing: it is no part of the text)."""

    def __init__(self, vocab: TextVocab) -> None:
        self.vocab = vocab
        self.tokens: list[int] = []
        self.ends: list[int] = []  # ends[i]: the text's length through token i
        self.text = bytearray()

    def sync(self, tokens: Sequence[int]) -> int:
        """Follow `tokens` (extending or cutting back); returns how many leading bytes of the
        text are as they were."""
        n = len(self.tokens)
        keep = n if list(tokens[:n]) == self.tokens else common_prefix_length(self.tokens, tokens)
        del self.tokens[keep:], self.ends[keep:]
        del self.text[self.ends[-1] if self.ends else 0 :]
        unchanged = len(self.text)
        info = self.vocab.vocab
        for i in range(keep, len(tokens)):
            token = int(tokens[i])
            if not (i == 0 and info.add_bos and token == info.bos):
                self.text += self.vocab.token_bytes(token, special=True)
            self.tokens.append(token)
            self.ends.append(len(self.text))
        return unchanged


class ReadTokens:
    """A text as one vocabulary reads it: its tokens (a BOS first where the vocabulary adds
    one) and where each ends in the text; kept in step with a changing text."""

    def __init__(self, vocab: TextVocab) -> None:
        self.vocab = vocab
        info = vocab.vocab
        self.prefix = [info.bos] if info.add_bos else []
        self.tokens: list[int] = []
        self.ends: list[int] = []
        self.read = b""  # the text the tokens spell

    @property
    def context(self) -> list[int]:
        return [*self.prefix, *self.tokens]

    def follow(self, text: bytes | bytearray) -> list[int]:
        """The tokens of `text` up to its last whole character (or up to bytes that are no
        UTF-8); TextMismatch when this vocabulary cannot spell it."""
        usable = valid_utf8(text)
        if usable == len(self.read) and text[:usable] == self.read:
            return self.context
        keep = self._kept(text, usable)
        start = self.ends[keep - 1] if keep else 0
        try:
            fresh = self._read(bytes(text[start:usable]))
        except TextMismatch:
            if start == 0:
                raise
            keep, start = 0, 0
            fresh = self._read(bytes(text[:usable]))
        del self.tokens[keep:], self.ends[keep:]
        for token, piece in fresh:
            self.tokens.append(token)
            self.ends.append((self.ends[-1] if self.ends else 0) + len(piece))
        self.read = bytes(text[:usable])
        return self.context

    def _kept(self, text: bytes | bytearray, usable: int) -> int:
        """How many tokens stay: those within the unchanged text, but the last few (a merge
        may reach back into them), and never one whose end splits a character."""
        same = _common_bytes(self.read, bytes(text[:usable]))
        keep = 0
        while keep < len(self.ends) and self.ends[keep] <= same:
            keep += 1
        keep = max(keep - RETOKENISE_BACK, 0)
        while keep and not is_char_start(text, self.ends[keep - 1]):
            keep -= 1
        return keep

    def _read(self, fragment: bytes) -> list[tuple[int, bytes]]:
        """`fragment`'s tokens with the bytes each spells; TextMismatch unless they spell it."""
        if not fragment:
            return []
        tokens = self.vocab.tokenize(fragment.decode("utf-8"), add_bos=False, special=True)
        pieces = [self.vocab.token_bytes(t, special=True) for t in tokens]
        if b"".join(pieces) != fragment:
            raise TextMismatch(f"{fragment[:40]!r} is read back as {b''.join(pieces)[:40]!r}")
        return list(zip(tokens, pieces))


def _common_bytes(a: bytes, b: bytes) -> int:
    """How many leading bytes `a` and `b` share (compared at C speed when one extends the
    other, the usual case: a text that grew)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return common_prefix_length(a[:n], b[:n])


def retokenise(target: TextVocab, words: bytes, *, ended: bool, n_max: int) -> list[int]:
    """The draft's `words` (what the draft model wrote after the text both share) as at most
    `n_max` whole target tokens (`whole_tokens`); `ended`: the draft's text stops there for
    good. Nothing when the target cannot spell them."""
    usable = valid_utf8(words)
    text = words[:usable].decode("utf-8")
    if not text:
        return []
    tokens = target.tokenize(text, add_bos=False, special=True)
    if spell(target, tokens) != words[:usable]:
        return []
    tokens = whole_tokens(tokens, ended=ended and usable == len(words), n_max=n_max)
    return up_to_end(target, tokens)


def whole_tokens(tokens: Sequence[int], *, ended: bool, n_max: int) -> list[int]:
    """The first `n_max` of `tokens` that are whole: every token another one follows, and the
    last only when the text `ended` there (it could still be the start of a longer token)."""
    if len(tokens) > n_max:
        return list(tokens[:n_max])
    return list(tokens) if ended else list(tokens[:-1])


def up_to_end(vocab: TextVocab, tokens: Sequence[int]) -> list[int]:
    """`tokens` up to their first end-of-generation token, that one included."""
    for i, token in enumerate(tokens):
        if vocab.is_eog(token):
            return list(tokens[: i + 1])
    return list(tokens)
