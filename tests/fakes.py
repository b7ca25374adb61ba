"""A fake backend for unit tests of the loop logic: a Markov chain over a small vocabulary.

logits(next | previous token) = log(table[previous]); the bookkeeping (tokens, rollback, sync)
behaves as the real backend's. Real-model tests live beside these; this never replaces them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class MarkovBackend:
    def __init__(self, table: np.ndarray, n_ctx: int = 512, eog: int | None = None) -> None:
        self.table = np.asarray(table, dtype=np.float64)
        self.n_vocab = self.table.shape[1]
        self.n_ctx = n_ctx
        self.eog = eog
        self.tokens: list[int] = []
        self.decode_seconds = 0.0
        self.n_decoded = 0
        self.batch_sizes: list[int] = []

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def is_eog(self, token: int) -> bool:
        return token == self.eog

    def decode(self, tokens: Sequence[int], logits_at: Sequence[int] = ()) -> np.ndarray:
        assert self.n_past + len(tokens) <= self.n_ctx, "context overflow"
        self.tokens.extend(tokens)
        self.n_decoded += len(tokens)
        self.batch_sizes.append(len(tokens))
        with np.errstate(divide="ignore"):
            logits = np.log(self.table[list(tokens)])
        return logits[list(logits_at)].astype(np.float32) if len(logits_at) else logits[:0]

    def rollback(self, n_past: int) -> None:
        del self.tokens[n_past:]

    def common_prefix(self, tokens: Sequence[int]) -> int:
        n = 0
        for mine, theirs in zip(self.tokens, tokens):
            if mine != theirs:
                break
            n += 1
        return n

    def sync(self, tokens: Sequence[int], logits_at_last: bool = False) -> np.ndarray | None:
        keep = self.common_prefix(tokens)
        if logits_at_last and keep == len(tokens):
            keep -= 1
        self.rollback(keep)
        rest = list(tokens[keep:])
        if not logits_at_last:
            self.decode(rest)
            return None
        return self.decode(rest, [len(rest) - 1])[0]


def random_table(n_vocab: int, rng: np.random.Generator, concentration: float = 1.0) -> np.ndarray:
    """Rows of transition probabilities, each a draw from a Dirichlet."""
    return rng.dirichlet(np.full(n_vocab, concentration), size=n_vocab)
