"""Prompt lookup that knows a real copy: the longest earlier occurrence of the text's end.

A copy (an edit of the prompt's code, a summary quoting its article) shows as a long match: the
last 20 tokens of the answer occurred before, in that order, and what followed them there is what
follows here. A coincidence (", the" again) shows as a match of one or two tokens. So the index
reports the *longest* match, not one capped at a few tokens, with how many earlier occurrences
it has and how many of them agree on what comes next: the evidence the policy weighs
(`specllama.policy.controller` judges a source by its match length).

The index keeps, for every token and every pair of adjacent tokens, the positions where they end
(ascending), for every position that has a continuation. A query takes the recent occurrences of
the text's last pair (its last token when the pair is new), extends them all backwards at once
(numpy), and keeps the longest. Its cost is bounded by `RECENT` occurrences times `MAX_MATCH`
steps, a fraction of a millisecond; a round of the target costs tens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MAX_MATCH = 64  # longer matches count as this long: beyond it, a copy is a copy
RECENT = 256  # occurrences of a pair looked at, the latest first


@dataclass(frozen=True)
class Match:
    """The text's last `length` tokens also end at `end`, earlier; `occurrences` earlier places
    match that long, and `agreeing` of them are followed by the same token as `end` is (the
    continuation most of them share)."""

    length: int
    end: int
    occurrences: int
    agreeing: int

    @property
    def unanimous(self) -> bool:
        return self.agreeing == self.occurrences


class CopyIndex:
    """The occurrences of every token and token pair in a growing text (module docstring)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._text: list[int] = []
        self._array = np.zeros(256, dtype=np.int64)
        self._singles: dict[int, list[int]] = {}
        self._pairs: dict[tuple[int, int], list[int]] = {}
        self._found: Match | None = None
        self._found_for = -1  # the length of the text `_found` is the longest match of

    def __len__(self) -> int:
        return len(self._text)

    def sync(self, context: Sequence[int]) -> None:
        """Index `context`: extend what is indexed when it is a prefix, else start over."""
        n = len(self._text)
        if n > len(context) or self._text != list(context[:n]):
            self._reset()
            n = 0
        for token in context[n:]:
            self._append(int(token))

    def _append(self, token: int) -> None:
        i = len(self._text)
        if i >= len(self._array):
            self._array = np.concatenate([self._array, np.zeros_like(self._array)])
        self._array[i] = token
        self._text.append(token)
        # Position i - 1 now has a continuation (this token): index what ends there.
        if i >= 1:
            self._singles.setdefault(self._text[i - 1], []).append(i - 1)
        if i >= 2:
            self._pairs.setdefault((self._text[i - 2], self._text[i - 1]), []).append(i - 1)

    def longest_match(self) -> Match | None:
        """The longest earlier occurrence of the text's end (the latest among equals), or None
        when not even its last token occurred before. Found once per text: a round asks for it
        twice (what the drafter offers, then its draft), and on a text that repeats itself the
        search takes ~0.5 ms."""
        if self._found_for != len(self._text):
            self._found, self._found_for = self._find_longest(), len(self._text)
        return self._found

    def _find_longest(self) -> Match | None:
        n = len(self._text)
        if n < 2:
            return None
        ends = self._pairs.get((self._text[-2], self._text[-1]))
        if ends:
            return self._longest(np.asarray(ends[-RECENT:]), matched=2)
        ends = self._singles.get(self._text[-1])
        if ends:
            return self._longest(np.asarray(ends[-RECENT:]), matched=1)
        return None

    def _longest(self, ends: np.ndarray, matched: int) -> Match:
        """Extend the occurrences ending at `ends` (all matching the last `matched` tokens)
        backwards, one position for all survivors at each step; the last survivors are the
        longest (ascending, so the latest is the last)."""
        text, last = self._array, len(self._text) - 1
        longest, alive = matched, ends
        limit = min(MAX_MATCH, last + 1)
        while longest < limit:
            if len(alive) == 1:  # one left: compare the rest of the way in one go
                longest += _common_suffix(text, int(alive[0]) - longest, last - longest)
                break
            before = alive - longest
            same = (before >= 0) & (text[np.maximum(before, 0)] == text[last - longest])
            if not same.any():
                break
            alive, longest = alive[same], longest + 1
        longest = min(longest, limit)
        # Where the occurrences went on differently, the continuation seen most often (the
        # latest among equals): SuffixDecoding's weighing, not simply the latest.
        nexts = text[alive + 1]
        values, counts = np.unique(nexts, return_counts=True)
        tied = values[counts == counts.max()]
        chosen = int(alive[np.isin(nexts, tied)][-1])
        return Match(longest, chosen, len(alive), int(counts.max()))

    def continuation(self, match: Match, n: int) -> list[int]:
        """Up to n tokens that followed the match's earlier occurrence."""
        return self._text[match.end + 1 : match.end + 1 + n]


def _common_suffix(text: np.ndarray, a: int, b: int) -> int:
    """How many tokens agree going backwards from text[a] and text[b] (a < b), at most
    MAX_MATCH and never past the start."""
    n = min(a + 1, MAX_MATCH)
    if n <= 0:
        return 0
    differ = np.flatnonzero(text[a - n + 1 : a + 1][::-1] != text[b - n + 1 : b + 1][::-1])
    return int(differ[0]) if len(differ) else n
