"""The copy index: the longest earlier occurrence of the text's end, checked against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from specllama.engine.drafters import NgramDrafter
from specllama.engine.lookup import MAX_MATCH, CopyIndex, Match
from specllama.engine.sampling import SamplingParams


def brute_force(text: list[int]) -> Match | None:
    """Every earlier end position, its match length, the longest; among those the one whose
    continuation most of them share (the latest among equals)."""
    last = len(text) - 1
    lengths = {}
    for end in range(last):  # an end with a continuation: before the last position
        n = 0
        while n < MAX_MATCH and n <= end and text[end - n] == text[last - n]:
            n += 1
        if n:
            lengths[end] = n
    if not lengths:
        return None
    longest = max(lengths.values())
    ends = [e for e, n in lengths.items() if n == longest]
    votes = {e: sum(text[f + 1] == text[e + 1] for f in ends) for e in ends}
    agreeing = max(votes.values())
    chosen = [e for e in ends if votes[e] == agreeing][-1]
    return Match(longest, chosen, len(ends), agreeing)


def indexed(text: list[int]) -> CopyIndex:
    index = CopyIndex()
    index.sync(text)
    return index


def test_finds_a_long_copy_not_a_short_coincidence() -> None:
    article = list(range(100, 140))
    text = [*article, 7, 8, 100, 101, 9, *article[:25]]
    match = indexed(text).longest_match()
    assert match == Match(25, 24, 1, 1)
    assert indexed(text).continuation(match, 5) == article[25:30]


def test_the_latest_of_equally_long_matches_and_how_many_agree() -> None:
    text = [1, 2, 3, 4, 9, 1, 2, 3, 5, 9, 1, 2, 3, 5, 0, 2, 3]
    # "2 3" occurred three times before, followed by 4, 5, 5; the longest is also "2 3" long
    # once "1" breaks the match before each.
    match = indexed(text).longest_match()
    assert (match.length, match.end, match.occurrences, match.agreeing) == (2, 12, 3, 2)
    assert not match.unanimous


def test_a_single_token_match_when_no_pair_occurred_before() -> None:
    assert indexed([4, 5, 6, 5]).longest_match() == Match(1, 1, 1, 1)
    assert indexed([4, 5, 6, 7]).longest_match() is None
    assert indexed([4]).longest_match() is None


def test_matches_count_at_most_max_match() -> None:
    text = list(range(200)) * 2
    assert indexed(text).longest_match().length == MAX_MATCH


@pytest.mark.parametrize("seed", range(40))
def test_agrees_with_brute_force_on_random_texts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(2, 12))
    text = [int(x) for x in rng.integers(0, vocab, size=int(rng.integers(2, 160)))]
    if seed % 2:  # copies, as an answer copies its prompt
        start = int(rng.integers(0, len(text)))
        text += text[start : start + int(rng.integers(1, 90))]
    index = CopyIndex()
    for n in range(2, len(text) + 1):  # grown token by token, as generation grows it
        index.sync(text[:n])
        assert index.longest_match() == brute_force(text[:n]), n


def test_a_text_that_is_not_an_extension_is_indexed_afresh() -> None:
    index = indexed([1, 2, 3, 1, 2])
    index.sync([7, 8, 7])
    assert len(index) == 3 and index.longest_match() == Match(1, 0, 1, 1)


def test_a_new_text_of_the_same_length_is_searched_afresh() -> None:
    index = indexed([1, 2, 1, 2])
    assert index.longest_match() == Match(2, 1, 1, 1)
    index.sync([5, 6, 7, 8])
    assert index.longest_match() is None


def test_a_round_searches_the_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    drafter = NgramDrafter()
    searches = []
    search = CopyIndex._find_longest
    monkeypatch.setattr(CopyIndex, "_find_longest", lambda self: searches.append(1) or search(self))
    text = [*range(10, 30), 5, *range(10, 22)]
    for _ in range(3):  # what it offers, then its draft, as the loop asks each round
        drafter.sources(text)
        drafter.propose(text, 4, SamplingParams())
        text.append(text[-1] + 1)
    assert len(searches) == 3


def test_the_drafter_names_its_source_by_the_match_length() -> None:
    drafter = NgramDrafter()
    text = [*range(10, 30), 5, *range(10, 22)]
    assert drafter.sources(text) == [("ngram12", 0)]
    assert drafter.propose(text, 4, SamplingParams()).tokens == [
        22,
        23,
        24,
        25,
    ]
    assert drafter.sources([1, 2, 3]) == []


def test_where_earlier_occurrences_disagree_the_continuation_most_share_is_drafted() -> None:
    # "1 2" went on with 7, 7, then 9 (the latest); the text ends with "1 2" again.
    index = indexed([1, 2, 7, 5, 1, 2, 7, 6, 1, 2, 9, 4, 1, 2])
    match = index.longest_match()
    assert (match.occurrences, match.agreeing) == (3, 2)
    assert index.continuation(match, 1) == [7]
