"""Logits -> probabilities -> tokens, with numpy alone.

One transform (temperature, top-k, top-p, min-p) serves both models, and one draw: the token at
position t is the Gumbel-max argmax(log p_t + G(seed, t, .)), with noise that is a pure function
of the seed, the position and the token (`specllama.engine.noise`). The target alone draws so;
a speculative round keeps a draft token only when it is the target's own draw at its position,
and the draft model drafts with the same noise on its own q, so it guesses that draw as often
as it can. Vocabularies are large (151,936 tokens for Qwen), so top-k avoids a full partition,
the nucleus is sorted only within it, distributions are kept sparse, and noise is drawn only
for the tokens that can win.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, replace

import numpy as np

from specllama.engine import noise
from specllama.errors import UsageError

# A seed drawn for a generation that has none: 53 bits, so that JSON readers that hold numbers
# as doubles (JavaScript, jq 1.6) read the reported seed back exactly.
DRAWN_SEED_BITS = 53


@dataclass(frozen=True)
class SamplingParams:
    """How tokens are chosen. temperature == 0 means greedy (argmax), and the rest is ignored.

    `seed` keys the sampling noise: the same seed, prompt and parameters give the same text,
    whatever drafts it (None: one is drawn when a sampled generation starts, `with_seed`).
    """

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
        if self.seed is not None and not 0 <= self.seed < noise.SEED_LIMIT:
            raise UsageError(f"the seed must be in [0, 2**64), got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def effective_seed(self) -> int | None:
        """The seed the noise is keyed with, as reported: None when greedy (no noise)."""
        return None if self.greedy else self.seed

    def with_seed(self) -> SamplingParams:
        """These parameters, with a seed drawn when sampling without one: what a generation
        runs with and reports, so that any sampled answer can be reproduced."""
        if self.greedy or self.seed is not None:
            return self
        return replace(self, seed=secrets.randbits(DRAWN_SEED_BITS))


@dataclass(frozen=True)
class Distribution:
    """Probabilities over a vocabulary, stored only where they are non-zero.

    After top-k the support is a few dozen tokens out of ~150,000: drawing from it costs
    microseconds instead of passes over the vocabulary.
    `ids` is sorted and unique; `probs` sums to 1.
    """

    ids: np.ndarray
    probs: np.ndarray

    def __getitem__(self, token: int) -> float:
        at = int(np.searchsorted(self.ids, token))
        return float(self.probs[at]) if at < len(self.ids) and self.ids[at] == token else 0.0

    def max(self) -> float:
        return float(self.probs.max())

    def dense(self, n_vocab: int) -> np.ndarray:
        values = np.zeros(n_vocab)
        values[self.ids] = self.probs
        return values


def probabilities(logits: np.ndarray, params: SamplingParams) -> Distribution:
    """The distribution the sampler draws from.

    Order (as llama.cpp's default chain): top-k on logits, temperature, softmax, top-p, min-p.
    Tokens cut by a filter get probability exactly 0 (they can never be drawn), so p and q share
    the same support rules.
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


def draw(logits: np.ndarray, params: SamplingParams, position: int) -> int:
    """The token at `position` (its index in the context): the argmax when greedy, else the
    Gumbel-max draw from the transformed distribution under `params.seed` (which must be set:
    `SamplingParams.with_seed`). A pure function of its arguments: the target alone and every
    speculative round that checks this position draw the same token from the same logits."""
    if params.greedy:
        return argmax(logits)
    if params.seed is None:
        raise ValueError("sampling needs a seed: use params.with_seed()")
    return gumbel_max(probabilities(logits, params), params.seed, position)


# Supports up to this size get their noise in one call: fewer calls beat less noise there.
ONE_CALL = 1024
# The first look at a large support: the tokens within this many nats of the likeliest.
FIRST_LOOK = 8.0


def gumbel_max(dist: Distribution, seed: int, position: int) -> int:
    """argmax over the support of log p(token) + G(seed, position, token): a draw from `dist`.

    The noise lies in [G_MIN, G_MAX], so a token with log p < best - G_MAX, where best is any
    score already drawn, cannot win. On a large support (top-k 0, top-p 1: all 151,936 tokens)
    the likeliest tokens are scored first, and then only the others that could still beat
    the best of them. Exact: the excluded tokens' scores are strictly lower, and ties go to the
    lowest token id either way. At temperature 0.7 on Qwen's logits that leaves a median of
    ~200 of 151,936 tokens to draw noise for (research/noise_cost.py).
    """
    probs = dist.probs
    if len(probs) <= ONE_CALL:
        chosen = np.arange(len(probs))
        scores = np.log(probs) + noise.gumbel(seed, position, dist.ids)
    else:  # the thresholds in probabilities: no log of the whole support
        near = probs >= probs.max() * math.exp(-FIRST_LOOK)
        first = np.flatnonzero(near)
        first_scores = np.log(probs[first]) + noise.gumbel(seed, position, dist.ids[first])
        # The margin covers the rounding of exp, log and the sums (ulps of numbers < ~1000).
        floor = math.exp(first_scores.max() - noise.G_MAX - 1e-9)
        rest = np.flatnonzero(~near & (probs >= floor))
        rest_scores = np.log(probs[rest]) + noise.gumbel(seed, position, dist.ids[rest])
        chosen = np.concatenate([first, rest])
        scores = np.concatenate([first_scores, rest_scores])
    return int(dist.ids[chosen[scores == scores.max()].min()])


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
