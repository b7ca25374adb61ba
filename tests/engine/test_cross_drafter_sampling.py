"""Unseeded sampling with a draft of another vocabulary follows the target's distribution: a
chi-square test on fake Markov models that spell text, the target in pieces of one to three
letters, the draft in single letters (its text re-tokenised into the target's pieces), each
generation with a seed of its own drawn as `run` draws one. The same statistic on a verifier
that keeps any draft token the target could draw fails: the test can see a wrong rule."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest
from fakes import MarkovBackend, random_table

from specllama.engine import speculative
from specllama.engine.control import FixedLength
from specllama.engine.cross_drafter import CrossTokenizerDrafter
from specllama.engine.drafters import Draft
from specllama.engine.events import FinishEvent, TokenEvent
from specllama.engine.sampling import SamplingParams, draw, probabilities
from specllama.llama.vocab import VocabInfo

TARGET_PIECES = ["a", "b", "c", "ab", "ba", "ca", "abc"]  # 7 tokens: 6 degrees of freedom
DRAFT_PIECES = ["a", "b", "c"]
UNSEEDED = SamplingParams(temperature=1.0, top_k=0)  # seed None: each generation draws one
K = 3
N_RUNS = 6000
P_VALUE = 1e-5  # a false alarm once in 100,000 runs of the test


class SpelledMarkov(MarkovBackend):
    """A Markov chain whose tokens spell pieces of text, read greedily, longest piece first."""

    def __init__(self, table: np.ndarray, pieces: Sequence[str]) -> None:
        super().__init__(table)
        self.pieces = [p.encode() for p in pieces]

    @property
    def vocab(self) -> VocabInfo:
        return VocabInfo(2, len(self.pieces), -1, -1, False)

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        data, tokens, i = text.encode(), [], 0
        while i < len(data):
            length, token = max(
                (len(p), t) for t, p in enumerate(self.pieces) if data.startswith(p, i)
            )
            tokens.append(token)
            i += length
        return tokens

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return self.pieces[token]


def chi_square_tail(statistic: float, dof: int) -> float:
    """P(X > statistic) for a chi-square of even `dof` (a closed form)."""
    half = statistic / 2
    return math.exp(-half) * sum(half**i / math.factorial(i) for i in range(dof // 2))


def last_token_counts(target, drafter, prompt: list[int]) -> tuple[np.ndarray, int, int]:
    """Counts of the (K+1)-th token over N_RUNS unseeded generations, and the draft tokens
    proposed and kept in all."""
    counts = np.zeros(target.n_vocab)
    drafted = accepted = 0
    for _ in range(N_RUNS):
        events = speculative.generate(
            target, drafter, prompt, UNSEEDED, max_tokens=K + 1, controller=FixedLength(K)
        )
        tokens = []
        for event in events:
            if isinstance(event, TokenEvent):
                tokens.append(event.token)
            elif isinstance(event, FinishEvent):
                drafted += event.stats.n_drafted
                accepted += event.stats.n_accepted
        counts[tokens[-1]] += 1
    return counts, drafted, accepted


@pytest.fixture
def models() -> tuple[SpelledMarkov, SpelledMarkov]:
    rng = np.random.default_rng(54)
    target = SpelledMarkov(random_table(len(TARGET_PIECES), rng, 0.7), TARGET_PIECES)
    draft = SpelledMarkov(random_table(len(DRAFT_PIECES), rng, 0.7), DRAFT_PIECES)
    return target, draft


def p_value(counts: np.ndarray, expected_probs: np.ndarray) -> float:
    expected = expected_probs * counts.sum()
    statistic = float(((counts - expected) ** 2 / expected).sum())
    return chi_square_tail(statistic, len(counts) - 1)


def test_unseeded_sampling_follows_the_target_chain(models):
    target, draft = models
    prompt = [0]  # "a"
    drafter = CrossTokenizerDrafter(draft, target)
    counts, drafted, accepted = last_token_counts(target, drafter, prompt)
    # The draft's words reached the target as its tokens, and some were its draws.
    assert drafted > N_RUNS and accepted > 0
    marginal = target.table[prompt[-1]] @ np.linalg.matrix_power(target.table, K)
    assert p_value(counts, marginal) > P_VALUE


def keep_what_the_target_could_draw(rows, draft: Draft, params, position, constraint=None):
    """Wrong: keeps any draft token the target could draw (p(x) > 0), not only its draw."""
    for i, x in enumerate(draft.tokens):
        if probabilities(rows[i], params)[x] == 0:
            return i, draw(rows[i], params, position + i)
    return len(draft), draw(rows[len(draft)], params, position + len(draft))


def test_the_statistic_sees_a_wrong_rule(models, monkeypatch):
    target, draft = models
    monkeypatch.setattr(speculative, "verify", keep_what_the_target_could_draw)
    counts, _, _ = last_token_counts(target, CrossTokenizerDrafter(draft, target), [0])
    marginal = target.table[0] @ np.linalg.matrix_power(target.table, K)
    assert p_value(counts, marginal) < P_VALUE
