"""Gumbel noise that is a pure function of (seed, position, token): Philox4x32-10 in numpy.

Why: sampling draws the token at position t as argmax over tokens of log p_t(token) +
G(seed, t, token) (Gumbel-max), and a speculative round accepts a draft token only when it is
that very draw (drafter-invariant sampling: Daliri, Musco, Suresh, "Coupling without
Communication and Drafter-Invariant Speculative Decoding", arXiv 2408.07978). For the text to
be the target alone's whatever was drafted, the noise must not depend on how many numbers were
drawn before, nor in what order: so no stream generator, but a counter-based one, where each
number is a keyed hash of its coordinates.

Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3",
SC'11), as Random123 defines it and checked against its known-answer vectors (tests), maps a
128-bit counter and a 64-bit key to four 32-bit words. Here:

    key     = (seed low 32 bits, seed high 32 bits)
    counter = (token // 4, 0, position low 32 bits, position high 32 bits)
    word      token % 4 of the output block

so four neighbouring tokens share one block (the whole 151,936-token vocabulary is 37,984
blocks), and counter word 1 is left at 0 (reserved). Then u = (x + 0.5) / 2**32, strictly
inside (0, 1), and G = -log(-log(u)).
"""

from __future__ import annotations

import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # the round multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # the key schedule's increments (golden ratio, sqrt(3) - 1)
_LOW = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(32)
ROUNDS = 10
SEED_LIMIT = 2**64  # a seed is the 64-bit Philox key

_WORDS = 4  # 32-bit words per Philox block: tokens per counter


def philox4x32(
    counter: tuple[np.ndarray | int, ...], key: tuple[int, int], rounds: int = ROUNDS
) -> tuple[np.ndarray, ...]:
    """Philox4x32-R of the counter words (c0, c1, c2, c3), arrays or scalars that broadcast,
    under the key (k0, k1): the four output words, as uint64 arrays holding 32-bit values.

    The 32x32 -> 64-bit products are exact in uint64; their high and low halves are the
    "hi" and "lo" of Random123's mulhilo32.
    """
    c0, c1, c2, c3 = (np.asarray(word, dtype=np.uint64) for word in counter)
    k0, k1 = key
    for r in range(rounds):
        if r:  # the key is bumped before every round but the first
            k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
        product0 = c0 * _M0
        product1 = c2 * _M1
        c0, c1, c2, c3 = (
            (product1 >> _SHIFT) ^ c1 ^ np.uint64(k0),
            product1 & _LOW,
            (product0 >> _SHIFT) ^ c3 ^ np.uint64(k1),
            product0 & _LOW,
        )
    return c0, c1, c2, c3


def words(seed: int, position: int, tokens: np.ndarray) -> np.ndarray:
    """The 32-bit random word of each token id at `position` under `seed` (uint64 array).

    Tokens of one block are computed once when they sit next to each other (sorted ids, as
    a distribution's support is): the whole vocabulary costs a quarter of the Philox work.
    """
    check_seed(seed)
    if position < 0:
        raise ValueError(f"a position is >= 0, got {position}")
    tokens = np.asarray(tokens, dtype=np.int64)
    if tokens.size == 0:
        return np.zeros(0, dtype=np.uint64)
    blocks = tokens // _WORDS
    starts = np.empty(len(blocks), dtype=bool)  # where a run of one block begins
    starts[0] = True
    np.not_equal(blocks[1:], blocks[:-1], out=starts[1:])
    counter = (blocks[starts], 0, position & 0xFFFFFFFF, position >> 32)
    out = np.stack(philox4x32(counter, (seed & 0xFFFFFFFF, seed >> 32)), axis=1)
    return out[np.cumsum(starts) - 1, tokens % _WORDS]


def uniforms(seed: int, position: int, tokens: np.ndarray) -> np.ndarray:
    """u = (word + 0.5) / 2**32 for each token: never 0 or 1, so the logs below are finite."""
    return (words(seed, position, tokens) + 0.5) * 2.0**-32


def gumbel(seed: int, position: int, tokens: np.ndarray) -> np.ndarray:
    """Standard Gumbel noise G(seed, position, token) for each token id (float64)."""
    return -np.log(-np.log(uniforms(seed, position, tokens)))


# The noise is bounded, since u is: a token whose log-probability plus G_MAX is below a score
# already drawn cannot win a Gumbel-max (see sampling.gumbel_max).
G_MIN = float(-np.log(-np.log(0.5 * 2.0**-32)))  # about -3.1
G_MAX = float(-np.log(-np.log((2.0**32 - 0.5) * 2.0**-32)))  # about 22.9


def check_seed(seed: int) -> None:
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"a seed is an integer in [0, 2**64), got {seed}")
