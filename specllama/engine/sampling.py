"""Logits -> probabilities -> tokens, with numpy alone.

One transform (temperature, top-k, top-p, min-p) serves both models: the lossless rejection rule
needs the draft's q and the target's p computed the *same* way. Vocabularies are large
(151,936 tokens for Qwen), so top-k avoids a full partition, the nucleus is sorted only within
it, and distributions are kept sparse.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specllama.errors import UsageError


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are chosen. temperature == 0 means greedy (argmax), and the rest is ignored."""

    temperature: float = 0.0
    top_k: int = 40  # 0 = whole vocabulary
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise UsageError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise UsageError(f"top-k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise UsageError(f"top-p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise UsageError(f"min-p must be in [0, 1), got {self.min_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def make_rng(params: SamplingParams) -> np.random.Generator:
    return np.random.default_rng(params.seed)


@dataclass(frozen=True)
class Distribution:
    """Probabilities over a vocabulary, stored only where they are non-zero.

    After top-k the support is a few dozen tokens out of ~150,000: sampling from it, looking up
    p(x) and forming the residual cost microseconds instead of passes over the vocabulary.
    `ids` is sorted and unique; `probs` sums to 1.
    """

    ids: np.ndarray
    probs: np.ndarray

    @classmethod
    def one_hot(cls, token: int) -> Distribution:
        """A deterministic guess (greedy draft, n-gram): q(token) = 1."""
        return cls(np.array([token]), np.array([1.0]))

    def __getitem__(self, token: int) -> float:
        at = int(np.searchsorted(self.ids, token))
        return float(self.probs[at]) if at < len(self.ids) and self.ids[at] == token else 0.0

    def max(self) -> float:
        return float(self.probs.max())

    def on(self, ids: np.ndarray) -> np.ndarray:
        """The probabilities of `ids` (sorted), zero where outside the support."""
        values = np.zeros(len(ids))
        values[np.searchsorted(ids, self.ids)] = self.probs
        return values

    def dense(self, n_vocab: int) -> np.ndarray:
        values = np.zeros(n_vocab)
        values[self.ids] = self.probs
        return values


def probabilities(logits: np.ndarray, params: SamplingParams) -> Distribution:
    """The distribution the sampler draws from.

    Order (as llama.cpp's default chain): top-k on logits, temperature, softmax, top-p, min-p.
    Tokens cut by a filter get probability exactly 0, so p and q share the same support rules.
    """
    logits = np.asarray(logits)
    n_vocab = logits.shape[-1]
    if params.top_k and params.top_k < n_vocab:
        kept = np.sort(top_k_indices(logits, params.top_k))
    else:
        kept = np.arange(n_vocab)
    scaled = logits[kept].astype(np.float64) / params.temperature
    scaled -= scaled.max()
    weights = np.exp(scaled)
    probs = weights / weights.sum()

    if params.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        # Keep the smallest prefix whose mass reaches top_p (always at least one token).
        n_keep = int(np.searchsorted(cumulative, params.top_p)) + 1
        probs[order[n_keep:]] = 0.0
    if params.min_p > 0.0:
        probs[probs < params.min_p * probs.max()] = 0.0
    support = probs > 0
    return Distribution(kept[support], probs[support] / probs[support].sum())


def top_k_indices(logits: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest logits, in no particular order.

    A full argpartition of 151,936 logits costs about a millisecond, and the loop needs one per
    checked position. So first take a threshold from a strided sample (its m-th largest
    approximates the 16m-th largest overall) and partition only the logits above it. If fewer
    than k pass, the threshold was too high: fall back to the full argpartition. Exact either way.
    """
    n = len(logits)
    stride = 16
    if k * stride * 4 < n:
        sample_ = logits[::stride]
        m = 2 * (k // stride) + 4
        threshold = np.partition(sample_, len(sample_) - m)[len(sample_) - m]
        candidates = np.flatnonzero(logits >= threshold)
        if len(candidates) >= k:
            order = np.argpartition(logits[candidates], len(candidates) - k)
            return candidates[order[len(candidates) - k :]]
    return np.argpartition(logits, n - k)[n - k :]


def sample(dist: Distribution, rng: np.random.Generator) -> int:
    """Draw one token id (inverse CDF: one uniform, one search)."""
    cumulative = np.cumsum(dist.probs)
    u = rng.random() * cumulative[-1]
    return int(dist.ids[min(np.searchsorted(cumulative, u, side="right"), len(dist.ids) - 1)])


def residual(p: Distribution, q: Distribution) -> Distribution:
    """norm(max(p - q, 0)): where to sample after the target rejects a draft token.

    If p <= q everywhere the residual is empty; that can only happen when the rejection had
    probability 0, so fall back to p itself.
    """
    ids = np.union1d(p.ids, q.ids)
    diff = np.maximum(p.on(ids) - q.on(ids), 0.0)
    total = diff.sum()
    if total <= 0:
        return p
    support = diff > 0
    return Distribution(ids[support], diff[support] / total)


def argmax(logits: np.ndarray) -> int:
    return int(np.argmax(logits))


def top_probability(logits: np.ndarray) -> float:
    """softmax(logits).max(), from the logits within 16 of the top: the others add at most
    n_vocab * e^-16 to the denominator (under 2% of it for 152k tokens), and skipping them
    makes this ~4x cheaper than a full softmax on a real model's logits (~90 us on 152k)."""
    top = logits.max()
    near = logits > top - 16.0
    if np.count_nonzero(near) > len(logits) // 8:  # a flat distribution: all of it, then
        return float(1.0 / np.exp(logits - top).sum(dtype=np.float64))
    return float(1.0 / np.exp(logits[near] - top, dtype=np.float64).sum())
