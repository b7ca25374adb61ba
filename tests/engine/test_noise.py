"""The sampling noise: Philox4x32-10 against Random123's known answers, and a pure function of
(seed, position, token), in any order of calls and in another process."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from specllama.engine import noise

# Random123's tests/kat_vectors (github.com/DEShawResearch/random123), the "philox4x32 10"
# lines: counter (4 words), key (2 words), expected output (4 words).
KAT_PHILOX4X32_10 = [
    ((0x00000000,) * 4, (0x00000000,) * 2, (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]
N_VOCAB = 151_936


@pytest.mark.parametrize(("counter", "key", "expected"), KAT_PHILOX4X32_10)
def test_philox_matches_random123_known_answers(counter, key, expected):
    assert tuple(int(w) for w in noise.philox4x32(counter, key)) == expected


def test_philox_is_vectorised_word_for_word():
    """An array of counters gives, row by row, what each counter gives alone."""
    counters = [c for c, _, _ in KAT_PHILOX4X32_10]
    columns = [np.array(col, dtype=np.uint64) for col in zip(*counters)]
    key = KAT_PHILOX4X32_10[2][1]
    together = np.stack(noise.philox4x32(columns, key), axis=1)
    for row, counter in zip(together, counters):
        assert [int(w) for w in row] == [int(w) for w in noise.philox4x32(counter, key)]


def test_a_token_word_is_its_block_word_at_token_mod_4():
    """The documented layout: counter (token // 4, 0, position low, position high), key =
    (seed low, seed high), word token % 4."""
    seed, position = 0x0123456789ABCDEF, (7 << 32) | 42
    block = noise.philox4x32((1234 // 4, 0, 42, 7), (0x89ABCDEF, 0x01234567))
    expected = [int(block[t % 4]) for t in range(1232, 1236)]
    assert [int(w) for w in noise.words(seed, position, np.arange(1232, 1236))] == expected


def test_the_noise_is_a_pure_function_of_seed_position_and_token():
    """The same (seed, position, token) gives the same number alone, in a batch of any order,
    with duplicates, in the whole vocabulary, and before or after other calls."""
    rng = np.random.default_rng(0)
    seed, position = 987654321, 1000
    everything = noise.gumbel(seed, position, np.arange(N_VOCAB))
    for _ in range(5):
        tokens = rng.choice(N_VOCAB, size=300)  # unsorted, with repeats
        noise.gumbel(seed + 1, position + 1, tokens)  # other calls in between change nothing
        np.testing.assert_array_equal(noise.gumbel(seed, position, tokens), everything[tokens])
    for token in (0, 3, 4, 151_935):
        assert noise.gumbel(seed, position, np.array([token]))[0] == everything[token]


def test_seed_position_and_token_each_change_the_noise():
    tokens = np.arange(64)
    base = noise.words(5, 10, tokens)
    for other in (
        noise.words(6, 10, tokens),  # seed
        noise.words(5 + (1 << 32), 10, tokens),  # the seed's high word
        noise.words(5, 11, tokens),  # position
        noise.words(5, 10 + (1 << 32), tokens),  # the position's high word
        noise.words(5, 10, tokens + 64),  # token
    ):
        assert np.count_nonzero(base == other) <= 1
    assert len(set(base.tolist())) == len(tokens)  # four tokens of a block differ too


def test_the_noise_is_the_same_in_another_process():
    cases = [(0, 0, 0), (1234, 17, 151_935), (2**64 - 1, 2**40 + 3, 77)]
    code = (
        "import json, sys, numpy as np\n"
        "from specllama.engine import noise\n"
        "cases = json.loads(sys.argv[1])\n"
        "print(json.dumps([noise.gumbel(s, p, np.array([t]))[0] for s, p, t in cases]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(cases)],
        capture_output=True,
        text=True,
        check=True,
    )
    here = [float(noise.gumbel(s, p, np.array([t]))[0]) for s, p, t in cases]
    assert json.loads(out.stdout) == here


def test_uniforms_are_uniform_and_gumbel_has_its_moments():
    u = noise.uniforms(42, 7, np.arange(N_VOCAB))
    assert u.min() > 0 and u.max() < 1
    counts = np.bincount((u * 64).astype(int), minlength=64)
    expected = N_VOCAB / 64
    assert ((counts - expected) ** 2 / expected).sum() < 103.44  # chi-square, 63 dof, 0.999
    g = noise.gumbel(42, 7, np.arange(N_VOCAB))
    assert g.mean() == pytest.approx(np.euler_gamma, abs=0.02)  # sd of the mean: 0.0033
    assert g.var() == pytest.approx(np.pi**2 / 6, rel=0.03)
    assert g.min() >= noise.G_MIN and g.max() <= noise.G_MAX


def test_the_bounds_are_the_extreme_words():
    extremes = (np.array([0, 2**32 - 1], dtype=np.uint64) + 0.5) * 2.0**-32
    np.testing.assert_array_equal(-np.log(-np.log(extremes)), [noise.G_MIN, noise.G_MAX])


@pytest.mark.parametrize("seed", [-1, 2**64])
def test_a_seed_outside_64_bits_is_refused(seed):
    with pytest.raises(ValueError, match="seed"):
        noise.gumbel(seed, 0, np.arange(4))
