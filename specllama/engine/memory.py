"""A memory of what was written: earlier prompts and answers, searched for the text's end.

Where an answer repeats one given before (an agent resending a file and asking again, a second
client asking what a first was answered, a chat after /reset), what followed the earlier
occurrence is the best draft there is. `TokenMemory` keeps earlier texts as one token array,
documents apart (a match never spans two), with the hash of every KEY-token window; a query
finds the windows equal to the text's last KEY tokens with one vectorised compare, extends them
backwards (numpy, all at once) to the longest match, and drafts from the occurrences that match
that long.

Candidates are weighed, not just the latest (SuffixDecoding's score): token by token, the
continuation most of the surviving occurrences agree on, with its share of them (children over
parent) multiplied along the draft as its estimated chance; the draft stops where that chance
falls below the caller's floor, where no occurrence goes on, or at n tokens.

Bounded: past `max_tokens` the oldest half is dropped (oldest first out). Cost: the compare
scans 8 bytes a token (~0.05 ms at 100k tokens of history, ~0.5 ms at 1M on a 2-core EPYC:
research/memory_cost.py), a small part of a target token.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

KEY = 4  # a match starts from the text's last KEY tokens: shorter ones are mostly coincidence
MAX_MATCH = 64  # as CopyIndex: beyond this, a copy is a copy
# 12 bytes a token (the token and its window's hash): 64 MB hold ~5.6M tokens.
DEFAULT_MAX_TOKENS = 64 * 1024 * 1024 // 12
_GAP = -1  # between documents: no window containing it matches anything
_MIX = np.uint64(0x9E3779B97F4A7C15)  # odd multiplier (2^64 / golden ratio) for the hash


@dataclass(frozen=True)
class MemoryMatch:
    """The text's last `length` tokens occurred `occurrences` times in memory; `ends` are the
    positions (in memory) where those occurrences end."""

    length: int
    ends: np.ndarray

    @property
    def occurrences(self) -> int:
        return len(self.ends)


class TokenMemory:
    """Earlier texts, searchable for the end of the current one (module docstring)."""

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        self.max_tokens = max(max_tokens, 2 * KEY + 2)
        self._tokens = np.full(0, _GAP, dtype=np.int32)
        self._hashes = np.zeros(0, dtype=np.uint64)
        self._size = 0
        # A server's slots draft from it and add to it from their own threads.
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return self._tokens.nbytes + self._hashes.nbytes

    def tokens(self) -> np.ndarray:
        """Every document in memory, with _GAP between them, oldest first (for saving)."""
        return self._tokens[: self._size].copy()

    def add(self, document: Sequence[int]) -> None:
        """Remember a text (a prompt with its answer), newest last; drop the oldest half of
        memory when it is over its bound."""
        if len(document) < KEY + 1:
            return  # nothing in it could ever be drafted from
        tokens = np.asarray(document, dtype=np.int32)[-(self.max_tokens - 1) :]
        new = np.concatenate([tokens, [_GAP]]).astype(np.int32)
        with self._lock:
            if self._size + len(new) > self.max_tokens:
                self._drop_oldest(self._size + len(new) - self.max_tokens // 2)
            self._append(new)

    def load(self, tokens: np.ndarray) -> None:
        """Replace what is remembered with `tokens` (as `tokens()` gave them)."""
        with self._lock:
            self._load(tokens)

    def _load(self, tokens: np.ndarray) -> None:
        self._tokens = np.full(0, _GAP, dtype=np.int32)
        self._hashes = np.zeros(0, dtype=np.uint64)
        self._size = 0
        tokens = np.asarray(tokens, dtype=np.int32)[-self.max_tokens :]
        if len(tokens) and tokens[-1] != _GAP:
            tokens = np.concatenate([tokens, [_GAP]]).astype(np.int32)
        self._append(tokens)

    def _append(self, new: np.ndarray) -> None:
        if self._size + len(new) > len(self._tokens):
            capacity = max(2 * len(self._tokens), self._size + len(new), 1024)
            self._tokens = np.concatenate(
                [self._tokens[: self._size], np.full(capacity - self._size, _GAP, np.int32)]
            )
            self._hashes = np.concatenate(
                [self._hashes[: self._size], np.zeros(capacity - self._size, np.uint64)]
            )
        start = self._size
        self._tokens[start : start + len(new)] = new
        self._size += len(new)
        # The windows ending in the new tokens (the first ones reach back into the old).
        first = max(start, KEY - 1)
        window = self._tokens[first - (KEY - 1) : self._size]
        self._hashes[first : self._size] = _window_hashes(window)

    def _drop_oldest(self, n: int) -> None:
        """Forget at least the first n tokens, cut at a document's end."""
        gaps = np.flatnonzero(self._tokens[n : self._size] == _GAP)
        cut = n + int(gaps[0]) + 1 if len(gaps) else self._size
        kept = self._tokens[cut : self._size].copy()
        self._tokens = np.full(0, _GAP, dtype=np.int32)
        self._hashes = np.zeros(0, dtype=np.uint64)
        self._size = 0
        self._append(kept)

    # -- queries ----------------------------------------------------------------------------

    def _longest_match(self, context: Sequence[int]) -> MemoryMatch | None:
        if len(context) < KEY or self._size <= KEY:
            return None
        tail = np.asarray(context[-MAX_MATCH:], dtype=np.int32)
        key = _window_hashes(tail[-KEY:])[0]
        # Windows ending before the last token of memory, so each has a continuation.
        ends = np.flatnonzero(self._hashes[KEY - 1 : self._size - 1] == key) + (KEY - 1)
        if not len(ends):
            return None
        return self._longest(ends, tail)

    def longest_match(self, context: Sequence[int]) -> MemoryMatch | None:
        """The longest occurrences in memory of the end of `context` (at least KEY tokens),
        each followed by at least one token; None when there is none."""
        with self._lock:
            return self._longest_match(context)

    def _longest(self, ends: np.ndarray, tail: np.ndarray) -> MemoryMatch | None:
        """Compare the tokens before each candidate end with `tail`, backwards, all at once
        (one row a candidate); keep the longest (a hash collision matches less than KEY and is
        dropped)."""
        tokens = self._tokens
        back = np.arange(len(tail))
        at = ends[:, None] - back[None, :]
        same = (at >= 0) & (tokens[np.maximum(at, 0)] == tail[::-1][None, :])
        # The length of each row's leading run of matches (all of it when no mismatch).
        length = np.where(same.all(axis=1), len(tail), np.argmin(same, axis=1))
        longest = int(length.max())
        if longest < KEY:
            return None
        ends = ends[length == longest]
        ends = ends[tokens[ends + 1] != _GAP]  # followed by something
        return MemoryMatch(longest, ends) if len(ends) else None

    def continuation(self, match: MemoryMatch, n: int, min_chance: float = 0.0) -> list[int]:
        """Up to n tokens after the match: at each step the token most of the surviving
        occurrences continue with (the latest among equals), until its estimated chance (the
        product of the shares so far) falls below `min_chance` or no occurrence goes on."""
        with self._lock:
            return self._continuation(match, n, min_chance)

    def _continuation(self, match: MemoryMatch, n: int, min_chance: float) -> list[int]:
        tokens = self._tokens
        survivors = match.ends + 1
        survivors = survivors[survivors < self._size]  # memory may have dropped its oldest since
        chance = 1.0
        draft: list[int] = []
        while len(draft) < n and len(survivors):
            if len(survivors) == 1:  # one occurrence left: the rest of it, as far as it goes
                start = int(survivors[0])
                rest = tokens[start : min(start + n - len(draft), self._size)]
                gaps = np.flatnonzero(rest == _GAP)
                return draft + rest[: gaps[0] if len(gaps) else len(rest)].tolist()
            nexts = tokens[survivors]
            votes = Counter(int(t) for t in nexts if t != _GAP)
            if not votes:
                break
            best = max(votes.values())
            token = next(int(t) for t in nexts[::-1] if votes.get(int(t)) == best)
            chance *= best / len(nexts)
            if chance < min_chance:
                break
            draft.append(token)
            survivors = survivors[nexts == token] + 1
            survivors = survivors[survivors < self._size]
        return draft


def _window_hashes(tokens: np.ndarray) -> np.ndarray:
    """The hash of every KEY-token window, by the position of its last token (len - KEY + 1
    of them): a polynomial in the tokens, mod 2^64. Equal windows, equal hashes; unequal ones
    collide rarely, and a match is checked token by token anyway."""
    tokens = np.asarray(tokens).astype(np.int64).astype(np.uint64)
    n = len(tokens) - KEY + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(KEY):
            h = h * _MIX + tokens[j : j + n] + np.uint64(1)
    return h
