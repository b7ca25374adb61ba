"""Text between two vocabularies, on a fake vocabulary: the whole-token rule, re-tokenising a
draft's words, and a text read in step as it grows and changes."""

from __future__ import annotations

import pytest

from specllama.engine.text_bridge import (
    ReadTokens,
    SpelledTokens,
    TextMismatch,
    complete_utf8,
    retokenise,
    valid_utf8,
    whole_tokens,
)
from specllama.llama.vocab import VocabInfo

END = "<end>"


class FakeVocab:
    """Greedy longest match over a list of pieces; every single byte is a token too (so any
    UTF-8 text can be spelled), "<end>" a control token that ends generation."""

    def __init__(self, pieces: list[str], *, bos: int | None = None, spaces_first=False) -> None:
        self.pieces = [END, *pieces]
        self.by_bytes = {p.encode(): i for i, p in enumerate(self.pieces)}
        self.first_byte = len(self.pieces)
        self.bos = bos
        self.spaces_first = spaces_first  # read every text with a space first (SentencePiece)
        self.calls = 0

    @property
    def vocab(self) -> VocabInfo:
        bos = -1 if self.bos is None else self.bos
        return VocabInfo(2, self.first_byte + 256, bos, 0, self.bos is not None)

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        self.calls += 1
        self.last_text = text
        data = (" " if self.spaces_first else "").encode() + text.encode()
        tokens, i = [], 0
        while i < len(data):
            for j in range(len(data), i, -1):
                token = self.by_bytes.get(data[i:j])
                if token is not None and (special or token != 0):
                    tokens.append(token)
                    i = j
                    break
            else:
                tokens.append(self.first_byte + data[i])
                i += 1
        return tokens

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        if token == self.bos:
            return b""
        if token >= self.first_byte:
            return bytes([token - self.first_byte])
        return self.pieces[token].encode() if special or token else b""

    def is_eog(self, token: int) -> bool:
        return token == 0

    def spelled(self, tokens: list[int]) -> bytes:
        return b"".join(self.token_bytes(t, special=True) for t in tokens)


WORDS = FakeVocab(["hel", "hello", " wor", " world", " ", "lo", "!"])


def test_a_token_followed_by_another_is_whole_the_last_only_at_an_end():
    assert whole_tokens([1, 2, 3], ended=False, n_max=5) == [1, 2]
    assert whole_tokens([1, 2, 3], ended=True, n_max=5) == [1, 2, 3]
    assert whole_tokens([1, 2, 3], ended=False, n_max=2) == [1, 2]
    assert whole_tokens([1, 2, 3], ended=True, n_max=2) == [1, 2]
    assert whole_tokens([1], ended=False, n_max=5) == []


def test_words_cut_mid_word_leave_the_cut_word_out():
    """The draft wrote "hello wor": " wor" may be the start of " world", so it is not
    proposed; "hello" is followed by another token, so it is whole."""
    tokens = retokenise(WORDS, b"hello wor", ended=False, n_max=8)
    assert WORDS.spelled(tokens) == b"hello"
    # "hel" alone could become "hello": nothing whole yet.
    assert retokenise(WORDS, b"hel", ended=False, n_max=8) == []


def test_words_that_end_for_good_keep_their_last_token_and_stop_at_the_end_token():
    tokens = retokenise(WORDS, b"hello world<end>", ended=True, n_max=8)
    assert WORDS.spelled(tokens) == b"hello world<end>"
    tokens = retokenise(WORDS, b"hello<end> world!", ended=False, n_max=8)
    assert WORDS.spelled(tokens) == b"hello<end>"  # nothing after an end of generation


def test_at_most_n_max_tokens():
    tokens = retokenise(WORDS, b"hello world! hello", ended=True, n_max=2)
    assert WORDS.spelled(tokens) == b"hello world"


def test_a_character_cut_in_two_is_left_for_the_next_round():
    caf = "café".encode()
    assert complete_utf8(caf[:-1]) == len(caf) - 2
    assert complete_utf8(caf) == len(caf)
    assert complete_utf8("日".encode()[:2]) == 0
    assert valid_utf8(b"ok\xff\xfe") == 2  # bytes that are no UTF-8: up to them
    # The cut character is not proposed, nor the token before it ("f" may become "fé").
    tokens = retokenise(WORDS, b"hello " + caf[:-1], ended=True, n_max=8)
    assert WORDS.spelled(tokens) == b"hello ca"


def test_words_the_target_cannot_spell_propose_nothing():
    spaced = FakeVocab(["hello"], spaces_first=True)
    assert retokenise(spaced, b"hello hello", ended=True, n_max=8) == []


def test_the_text_is_read_in_step_with_what_a_full_reading_gives():
    draft = FakeVocab(["hel", "hello", " wor", " world", " ", "lo", "!", "wo"])
    read = ReadTokens(draft)
    text = b""
    for piece in [b"hel", b"lo", b" wo", b"rld", b"!", b" hello"]:
        text += piece
        assert read.follow(text) == draft.tokenize(text.decode(), add_bos=False)
        assert draft.spelled(read.tokens) == text
    # The text cut back and going on otherwise (a rejected draft): read again from there.
    text = b"hello wor"
    assert read.follow(text) == draft.tokenize(text.decode(), add_bos=False)
    text = b"hello wo!"
    assert read.follow(text) == draft.tokenize(text.decode(), add_bos=False)


def test_only_the_changed_end_is_read_again():
    draft = FakeVocab(["ab", "cd"])
    read = ReadTokens(draft)
    read.follow(b"ab" * 200)
    read.follow(b"ab" * 200 + b"cd")
    long_text = b"ab" * 200 + b"cdcd"
    expected = draft.tokenize(long_text.decode(), add_bos=False)
    before = draft.calls
    assert read.follow(long_text) == expected
    assert draft.calls == before + 1
    assert len(draft.last_text) <= 8  # the last few tokens' text, not all of it
    assert read.ends[-1] == len(long_text)


def test_a_bos_comes_first_and_spells_nothing():
    target = FakeVocab(["hi", " there"], bos=3)
    spelled = SpelledTokens(target)
    assert spelled.sync([3, 1, 2]) == 0
    assert bytes(spelled.text) == b"hi there"
    assert spelled.sync([3, 1]) == 2  # cut back: the first two bytes unchanged
    assert bytes(spelled.text) == b"hi"
    draft = FakeVocab(["hi", " there"], bos=3)
    assert ReadTokens(draft).follow(b"hi there") == [3, 1, 2]


def test_a_text_ending_inside_a_character_is_read_up_to_it():
    read = ReadTokens(FakeVocab([]))
    caf = "café".encode()
    read.follow(caf[:-1])
    assert read.read == b"caf"
    read.follow(caf)
    assert read.read == caf


def test_a_vocabulary_that_cannot_spell_the_text_says_so():
    with pytest.raises(TextMismatch):
        ReadTokens(FakeVocab(["hello"], spaces_first=True)).follow(b"hello")
