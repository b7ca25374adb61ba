"""Logits -> probabilities -> tokens, with numpy alone.

One transform (temperature, top-k, top-p, min-p) serves both models: the lossless rejection rule
needs the draft's q and the target's p computed the *same* way. Vocabularies are large
(151,936 tokens for Qwen), so top-k uses argpartition and the nucleus is sorted only within it.
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


def probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution the sampler draws from: a dense float64 vector over the vocabulary.

    Order (as llama.cpp's default chain): top-k on logits, temperature, softmax, top-p, min-p.
    Tokens cut by a filter get probability exactly 0, so p and q share the same support rules.
    """
    logits = np.asarray(logits)
    n_vocab = logits.shape[-1]
    if params.top_k and params.top_k < n_vocab:
        kept = top_k_indices(logits, params.top_k)
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
        drop = order[n_keep:]
        probs[drop] = 0.0
    if params.min_p > 0.0:
        probs[probs < params.min_p * probs.max()] = 0.0
    probs /= probs.sum()

    dense = np.zeros(n_vocab, dtype=np.float64)
    dense[kept] = probs
    return dense


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


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from a probability vector (inverse CDF over its non-zero entries:
    after top-k that is a few dozen, not the whole vocabulary)."""
    support = np.flatnonzero(probs)
    cumulative = np.cumsum(probs[support])
    u = rng.random() * cumulative[-1]
    return int(support[min(np.searchsorted(cumulative, u, side="right"), len(support) - 1)])


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """norm(max(p - q, 0)): where to sample after the target rejects a draft token.

    If p == q everywhere the residual is empty; that can only happen when the rejection had
    probability 0, so fall back to p itself.
    """
    diff = np.maximum(p - q, 0.0)
    total = diff.sum()
    return diff / total if total > 0 else p


def argmax(logits: np.ndarray) -> int:
    return int(np.argmax(logits))
