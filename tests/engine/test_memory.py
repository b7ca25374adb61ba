"""The memory of earlier texts and the client's prediction, without models: what is found,
what is drafted, what is forgotten, and what a prediction's draft counts as kept."""

from __future__ import annotations

import numpy as np

from specllama.engine.drafters import NgramDrafter
from specllama.engine.memory import KEY, TokenMemory
from specllama.engine.prediction import ALIGNED_EVIDENCE, Prediction
from specllama.engine.sampling import SamplingParams

GREEDY = SamplingParams()


def words(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(10, 150_000, n).tolist()


def test_the_longest_earlier_occurrence_of_the_text_end_is_found_and_continued():
    first, second = words(300, 1), words(300, 2)
    memory = TokenMemory()
    memory.add(first)
    memory.add(second)
    context = [*words(20, 3), *second[100:137]]
    match = memory.longest_match(context)
    assert match.length == 37 and match.occurrences == 1
    assert memory.continuation(match, 10) == second[137:147]


def test_a_match_never_runs_into_the_next_document():
    first, second = words(50, 1), words(50, 2)
    memory = TokenMemory()
    memory.add(first)
    memory.add(second)
    match = memory.longest_match(first[-10:])  # the end of a document: nothing followed it
    assert match is None
    match = memory.longest_match(first[-12:-2])
    assert memory.continuation(match, 10) == first[-2:]


def test_short_matches_are_not_offered():
    text = words(100, 1)
    memory = TokenMemory()
    memory.add(text)
    assert memory.longest_match([*words(10, 5), *text[40 : 40 + KEY - 1]]) is None
    assert memory.longest_match([*words(10, 5), *text[40 : 40 + KEY]]).length == KEY


def test_the_continuation_most_occurrences_agree_on_is_drafted_and_stops_at_its_chance():
    stem = words(8, 1)
    a, b = words(6, 2), words(6, 3)
    memory = TokenMemory()
    for tail in (a, b, a, a):  # three times a, once b, after the same stem
        memory.add([*words(5, 9), *stem, *tail])
    match = memory.longest_match([*words(3, 7), *stem])
    assert match.occurrences == 4
    assert memory.continuation(match, 6) == a  # 3 of 4 went on this way
    assert memory.continuation(match, 6, min_chance=0.8) == []  # 0.75 is below the floor


def test_memory_stays_within_its_bound_oldest_out():
    memory = TokenMemory(max_tokens=1000)
    documents = [words(150, seed) for seed in range(20)]
    for document in documents:
        memory.add(document)
        assert len(memory) <= 1000
    last = documents[-1]
    assert memory.continuation(memory.longest_match(last[:30]), 5) == last[30:35]
    assert memory.longest_match(documents[0][:30]) is None  # the oldest went first


def test_saved_tokens_load_into_the_same_memory():
    memory = TokenMemory()
    documents = [words(80, seed) for seed in range(3)]
    for document in documents:
        memory.add(document)
    again = TokenMemory()
    again.load(memory.tokens())
    for document in documents:
        assert again.continuation(again.longest_match(document[:20]), 8) == document[20:28]


def test_a_prediction_drafts_its_rest_while_the_answer_follows_it():
    prompt, expected = words(30, 1), words(60, 2)
    prediction = Prediction(expected, answer_start=len(prompt))
    evidence, rest = prediction.match(prompt)
    assert evidence == ALIGNED_EVIDENCE and rest == expected
    evidence, rest = prediction.match([*prompt, *expected[:10]])
    assert rest == expected[10:]


def test_after_a_change_the_prediction_is_searched_for_the_answer_end():
    prompt, expected = words(30, 1), words(60, 2)
    prediction = Prediction(expected, answer_start=len(prompt))
    answer = [*expected[:20], 7, 8, 9, *expected[23:30]]  # three tokens changed, then on
    evidence, rest = prediction.match([*prompt, *answer])
    assert evidence == 7 and rest[:5] == expected[30:35]


def test_what_a_prediction_drafted_is_settled_against_what_was_kept():
    prompt, expected = words(30, 1), words(40, 2)
    drafter = NgramDrafter()
    prediction = Prediction(expected, answer_start=len(prompt))
    drafter.use_prediction(prediction)
    draft = drafter.propose(prompt, 8, GREEDY)
    assert draft.tokens == expected[:8]
    # The target kept five of them, then wrote its own token.
    drafter.sources([*prompt, *expected[:5], 3])
    assert (prediction.accepted, prediction.rejected) == (5, 3)


def test_the_drafter_takes_the_longest_of_text_prediction_and_memory():
    prompt, old_answer = words(40, 1), words(50, 2)
    memory = TokenMemory()
    memory.add([*prompt, *old_answer])
    drafter = NgramDrafter(memory)
    assert drafter.sources(prompt) == [("ngram40", 0)]
    assert drafter.propose(prompt, 6, GREEDY).tokens == old_answer[:6]
    assert NgramDrafter().sources(prompt) == []  # without the memory, nothing to draft
