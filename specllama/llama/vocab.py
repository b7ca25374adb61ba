"""Vocabulary facts llama.cpp compares before a draft may draft for a target, and a compact print
of the token texts that decides the text rule without keeping every text in memory.

llama.cpp's rule (common/speculative.cpp, `common_speculative_are_compatible`): the same
vocabulary type and BOS/EOS handling, sizes within SPEC_VOCAB_MAX_SIZE_DIFFERENCE (128) tokens
of each other, and identical token texts for every id from SPEC_VOCAB_CHECK_START_TOKEN_ID (5)
up to the smaller size. `specllama.models.compat` applies it; the constants live here, with the
other facts about llama.cpp.

A `VocabPrint` decides the text rule from digests of the texts as a GGUF file serializes them
(length, bytes; so equal bytes mean equal texts). Vocabularies of the same size compare one
digest of ids [5, n). Sizes that differ (by at most 128: padding rows) need the `detail`: the
digest of ids [5, e) at each block boundary e = 5 + k * BLOCK near the end, and one digest per
token for the last TAIL ids. Sizes n < m compare the prefix digest at the last boundary e <= n,
then ids [e, n) one by one; both prints hold those because m - n <= 128. The detail costs a walk
of every text (see `specllama.llama.gguf_info`), so it is made only when needed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

FIRST_CHECKED_TOKEN = 5
MAX_VOCAB_SIZE_DIFFERENCE = 128
BLOCK = 128
TAIL = MAX_VOCAB_SIZE_DIFFERENCE + BLOCK  # ids kept one by one at the end of a detail
_TOKEN_DIGEST = 8  # bytes per token in a detail's tail

# llama.cpp's LLAMA_VOCAB_TYPE_* for each `tokenizer.ggml.model` (llama-vocab.cpp, `load`).
VOCAB_TYPES = {
    "no_vocab": 0, "none": 0, "llama": 1, "gpt2": 2, "hybriddna": 2, "whitespace": 2,
    "gemma4": 2, "bert": 3, "t5": 4, "rwkv": 5, "plamo2": 6,
}  # fmt: skip
VOCAB_TYPE_NAMES = {0: "none", 1: "SPM", 2: "BPE", 3: "WPM", 4: "UGM", 5: "RWKV", 6: "PLaMo2"}
# What llama.cpp assumes when the header names no BOS/EOS id or add-BOS flag: vocab type ->
# (bos, eos, add_bos), -1 being LLAMA_TOKEN_NULL. (Some BPE pre-tokenizers turn add-BOS on in
# llama.cpp; converters write the flag, and `run` checks the loaded models again anyway.)
VOCAB_DEFAULTS = {
    1: (1, 2, True),
    2: (11, 11, False),
    3: (101, -1, True),
    4: (-1, 1, False),
    5: (-1, -1, False),
    6: (1, 2, False),
}


@dataclass(frozen=True)
class VocabInfo:
    """What the vocabulary compatibility check compares, besides the token texts."""

    vocab_type: int
    n_vocab: int
    bos: int
    eos: int
    add_bos: bool


def tail_start(n_vocab: int) -> int:
    """The first id whose text a detail of this size keeps one by one."""
    return max(min(n_vocab, FIRST_CHECKED_TOKEN), n_vocab - TAIL)


def block_ends(n_vocab: int) -> list[int]:
    """The block boundaries (5 + k * BLOCK) from tail_start to n_vocab: where a detail keeps the
    digest of the texts from id 5."""
    low = tail_start(n_vocab)
    if low < FIRST_CHECKED_TOKEN:
        return []
    first = FIRST_CHECKED_TOKEN + -(-(low - FIRST_CHECKED_TOKEN) // BLOCK) * BLOCK
    return list(range(first, n_vocab + 1, BLOCK))


@dataclass(frozen=True)
class Detail:
    prefix: dict[int, str]  # block end e -> digest of the texts of ids [5, e)
    tail: bytes  # _TOKEN_DIGEST bytes per id, for ids [tail_start(n_vocab), n_vocab)


@dataclass(frozen=True)
class VocabPrint:
    n_vocab: int
    whole: str  # digest of the texts of ids [5, n_vocab)
    detail: Detail | None = None

    @classmethod
    def of_serialized(
        cls,
        data: Any,
        n_vocab: int,
        start: int,
        end: int,
        offsets: list[int] | None = None,
    ) -> VocabPrint:
        """The print of token texts serialized in `data` (any buffer; GGUF strings one after
        the other), from `start` (where id 5 begins, or the end when there are fewer ids) to
        `end`. With `offsets` (where id tail_start(n_vocab) + j begins, up to and including
        `end`), the print has its detail."""
        with memoryview(data) as view:  # no copy of the megabytes hashed
            whole = hashlib.sha256(view[start:end]).hexdigest()[:32]
            detail = _detail(view, n_vocab, start, offsets) if offsets is not None else None
        return cls(n_vocab, whole, detail)

    def first_difference(self, other: VocabPrint) -> str | None:
        """None when the texts of ids [5, smaller size) are the same; else where they differ.
        Sizes must be within MAX_VOCAB_SIZE_DIFFERENCE; different sizes need both details."""
        if self.n_vocab == other.n_vocab:
            return None if self.whole == other.whole else "token texts differ"
        if abs(self.n_vocab - other.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE:
            raise ValueError("vocabulary sizes too far apart to compare their prints")
        if self.detail is None or other.detail is None:
            raise ValueError("vocabularies of different sizes: their prints need the detail")
        n = min(self.n_vocab, other.n_vocab)
        if n <= FIRST_CHECKED_TOKEN:
            return None
        end = FIRST_CHECKED_TOKEN + (n - FIRST_CHECKED_TOKEN) // BLOCK * BLOCK
        if self.detail.prefix[end] != other.detail.prefix[end]:
            return f"token texts differ below id {end}"
        for token in range(end, n):
            if self._token(token) != other._token(token):
                return f"token {token} differs"
        return None

    def _token(self, token: int) -> bytes:
        assert self.detail is not None
        i = (token - tail_start(self.n_vocab)) * _TOKEN_DIGEST
        return self.detail.tail[i : i + _TOKEN_DIGEST]

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"n_vocab": self.n_vocab, "whole": self.whole}
        if self.detail is not None:
            data["prefix"] = {str(e): d for e, d in self.detail.prefix.items()}
            data["tail"] = self.detail.tail.hex()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VocabPrint:
        n_vocab = int(data["n_vocab"])
        detail = None
        if "prefix" in data:
            prefix = {int(e): str(d) for e, d in data["prefix"].items()}
            tail = bytes.fromhex(data["tail"])
            if sorted(prefix) != block_ends(n_vocab):
                raise ValueError("a vocabulary print with the wrong block ends")
            if len(tail) != (n_vocab - tail_start(n_vocab)) * _TOKEN_DIGEST:
                raise ValueError("a vocabulary print with the wrong tail")
            detail = Detail(prefix, tail)
        return cls(n_vocab, str(data["whole"]), detail)


def _detail(view: memoryview, n_vocab: int, start: int, offsets: list[int]) -> Detail:
    first = tail_start(n_vocab)

    def at(token: int) -> int:
        return offsets[token - first]

    prefix: dict[int, str] = {}
    digest, done = hashlib.sha256(), start
    for end in block_ends(n_vocab):
        digest.update(view[done : at(end)])
        done = at(end)
        prefix[end] = digest.hexdigest()[:32]
    tail = b"".join(
        hashlib.blake2b(view[at(t) : at(t + 1)], digest_size=_TOKEN_DIGEST).digest()
        for t in range(first, n_vocab)
    )
    return Detail(prefix, tail)
