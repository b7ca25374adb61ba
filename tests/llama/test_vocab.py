"""Vocabulary prints decide "identical texts from id 5 up to the smaller size" exactly: checked
against comparing the texts themselves, on many random vocabularies and changes."""

from __future__ import annotations

import random

import pytest
from gguf_fakes import serialize

from specllama.llama.vocab import (
    FIRST_CHECKED_TOKEN,
    MAX_VOCAB_SIZE_DIFFERENCE,
    VocabPrint,
    block_ends,
    tail_start,
)


def print_of(texts, *, detail=True):
    data, offsets = serialize(texts)
    n = len(texts)
    start = offsets[min(n, FIRST_CHECKED_TOKEN)]
    tail = offsets[tail_start(n) :] if detail else None
    return VocabPrint.of_serialized(data, n, start, offsets[n], tail)


def same_texts(a, b):
    n = min(len(a), len(b))
    return a[FIRST_CHECKED_TOKEN:n] == b[FIRST_CHECKED_TOKEN:n]


def test_random_vocabularies_and_changes_agree_with_the_texts():
    rng = random.Random(19)
    for trial in range(400):
        n = rng.choice([0, 3, 5, 6, 40, 133, 134, 261, 300, 1000, 1029])
        a = [f"t{rng.randrange(10**6)}" for _ in range(n)]
        b = list(a)
        extra = rng.randint(-MAX_VOCAB_SIZE_DIFFERENCE, MAX_VOCAB_SIZE_DIFFERENCE)
        if extra > 0:
            b += [f"pad{i}" for i in range(extra)]
        elif extra < 0:
            b = b[: max(len(b) + extra, 0)]
        if b and rng.random() < 0.6:  # change one text somewhere
            b[rng.randrange(len(b))] += "!"
        got = print_of(a).first_difference(print_of(b))
        assert (got is None) == same_texts(a, b), (trial, n, extra, got)
        assert (print_of(b).first_difference(print_of(a)) is None) == same_texts(a, b)


def test_the_first_differing_id_is_named_when_it_is_near_the_end():
    a = [f"t{i}" for i in range(1000)]
    b = [*a[:990], "other", *a[991:], "pad"]
    assert print_of(a).first_difference(print_of(b)) == "token 990 differs"


def test_ids_below_5_are_not_compared():
    a = [f"t{i}" for i in range(500)]
    b = ["<s-other>", *a[1:]]
    assert print_of(a).first_difference(print_of(b)) is None


def test_equal_sizes_need_no_detail_and_other_sizes_do():
    a = [f"t{i}" for i in range(500)]
    assert print_of(a, detail=False).first_difference(print_of(a, detail=False)) is None
    changed = [*a[:-1], "x"]
    assert print_of(a, detail=False).first_difference(print_of(changed, detail=False))
    with pytest.raises(ValueError, match="detail"):
        print_of(a, detail=False).first_difference(print_of([*a, "pad"], detail=False))


def test_a_print_survives_json_and_a_damaged_one_is_refused():
    texts = [f"t{i}" for i in range(700)]
    p = print_of(texts)
    assert VocabPrint.from_json(p.as_json()) == p
    damaged = {**p.as_json(), "tail": "00"}
    with pytest.raises(ValueError):
        VocabPrint.from_json(damaged)


def test_block_ends_cover_every_partner_size():
    for n in (5, 6, 200, 261, 262, 151936):
        ends = block_ends(n)
        for m in range(max(n - MAX_VOCAB_SIZE_DIFFERENCE, 0), n + 1):
            if m > FIRST_CHECKED_TOKEN:
                end = FIRST_CHECKED_TOKEN + (m - FIRST_CHECKED_TOKEN) // 128 * 128
                assert end in ends and end in block_ends(m), (n, m)
                assert end >= tail_start(n), (n, m)
