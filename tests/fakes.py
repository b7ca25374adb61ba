"""A fake backend for unit tests of the loop logic: a Markov chain over a small vocabulary.

logits(next | previous token) = log(table[previous]); the bookkeeping (tokens, rollback, sync)
is the real backend's own (EvaluatedTokens). Real-model tests live beside these; this never
replaces them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specllama.llama.evaluated import EvaluatedTokens


class MarkovBackend(EvaluatedTokens):
    def __init__(
        self,
        table: np.ndarray,
        n_ctx: int = 512,
        eog: int | None = None,
        costs: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        self.table = np.asarray(table, dtype=np.float64)
        self.n_vocab = self.table.shape[1]
        self.n_ctx = n_ctx
        self.eog = eog
        self.tokens: list[int] = []
        self.decode_seconds = 0.0
        self.n_decoded = 0
        self.batch_sizes: list[int] = []
        # Seconds booked per decode call and per token beyond the first (no time really passes).
        self.costs = costs

    def is_eog(self, token: int) -> bool:
        return token == self.eog

    def decode(
        self, tokens: Sequence[int], logits_at: Sequence[int] = (), *, copy: bool = True
    ) -> np.ndarray:
        assert self.n_past + len(tokens) <= self.n_ctx, "context overflow"
        self.tokens.extend(tokens)
        self.n_decoded += len(tokens)
        self.batch_sizes.append(len(tokens))
        self.decode_seconds += self.costs[0] + self.costs[1] * max(len(tokens) - 1, 0)
        with np.errstate(divide="ignore"):
            logits = np.log(self.table[list(tokens)])
        return logits[list(logits_at)].astype(np.float32) if len(logits_at) else logits[:0]

    def _forget(self, n_past: int) -> None:
        pass  # no cache beyond the token record, which EvaluatedTokens trims


def random_table(n_vocab: int, rng: np.random.Generator, concentration: float = 1.0) -> np.ndarray:
    """Rows of transition probabilities, each a draw from a Dirichlet."""
    return rng.dirichlet(np.full(n_vocab, concentration), size=n_vocab)
