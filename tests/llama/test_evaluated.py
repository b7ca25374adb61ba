"""The token record of what a context has evaluated, on the fake backend (the real one's tests
are in test_backend.py)."""

from __future__ import annotations

import numpy as np
from fakes import MarkovBackend

from specllama.llama.evaluated import common_prefix_length


def test_common_prefix_length_counts_the_leading_tokens_both_share():
    assert common_prefix_length([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert common_prefix_length([1, 2], [1, 2, 3]) == 2
    assert common_prefix_length([], [1]) == 0
    assert common_prefix_length([5], [6]) == 0


def test_sync_keeps_the_common_prefix_and_evaluates_the_rest():
    backend = MarkovBackend(np.full((8, 8), 1 / 8))
    backend.sync([1, 2, 3, 4])
    decoded = backend.n_decoded
    backend.sync([1, 2, 5])
    assert backend.tokens == [1, 2, 5]
    assert backend.n_decoded == decoded + 1  # only the 5
    logits = backend.sync([1, 2, 5], logits_at_last=True)
    assert logits.shape == (8,) and backend.tokens == [1, 2, 5]
    assert backend.n_decoded == decoded + 2  # the last token again, for its logits
