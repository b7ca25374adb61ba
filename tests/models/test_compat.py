"""The vocabulary check: fake vocabularies for each rule, real models for the whole check."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from model_factory import CHANGED_TOKEN_ID

from specllama.errors import IncompatibleVocabError
from specllama.llama.backend import LlamaBackend, VocabInfo
from specllama.models.compat import check_compatible, pairing

BASE = VocabInfo(vocab_type=2, n_vocab=300, bos=1, eos=2, add_bos=False)


@dataclass
class FakeVocab:
    vocab: VocabInfo
    texts: dict[int, bytes]

    def token_text(self, token: int) -> bytes:
        return self.texts.get(token, f"tok{token}".encode())


def test_identical_vocabularies_pass():
    check_compatible(FakeVocab(BASE, {}), FakeVocab(BASE, {}))


def test_padding_rows_within_128_pass():
    check_compatible(FakeVocab(BASE, {}), FakeVocab(replace(BASE, n_vocab=300 + 128), {}))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"vocab_type": 1}, "tokenizer types differ"),
        ({"eos": 7}, "EOS ids differ"),
        ({"add_bos": True}, "BOS handling differs"),
        ({"n_vocab": 300 + 129}, "vocabulary sizes differ"),
    ],
)
def test_each_rule_refuses(change, message):
    with pytest.raises(IncompatibleVocabError, match=message):
        check_compatible(FakeVocab(BASE, {}), FakeVocab(replace(BASE, **change), {}))


def test_first_differing_token_is_named_and_low_ids_are_not_checked():
    draft = FakeVocab(BASE, {3: b"<s-draft>", 120: b"apple", 200: b"pear"})
    with pytest.raises(IncompatibleVocabError, match="token 120 differs"):
        check_compatible(draft, FakeVocab(BASE, {}))


@pytest.mark.slow
def test_real_quantised_and_f32_copies_are_compatible(smol_q4, smol_f32):
    with LlamaBackend(smol_q4, n_ctx=256) as draft, LlamaBackend(smol_f32, n_ctx=256) as target:
        check_compatible(draft, target)


@pytest.mark.slow
def test_real_changed_vocabulary_is_refused_naming_the_token(smol_bad_vocab, smol_q4):
    with (
        LlamaBackend(smol_bad_vocab, n_ctx=256) as draft,
        LlamaBackend(smol_q4, n_ctx=256) as target,
        pytest.raises(IncompatibleVocabError, match=f"token {CHANGED_TOKEN_ID} differs"),
    ):
        check_compatible(draft, target)


@pytest.mark.slow
def test_headers_decide_as_the_loaded_models_do(smol_q4, smol_draft, smol_bad_vocab):
    """The rule on GGUF headers (what the local listing pairs by) against the rule on loaded
    models (what `run` applies), for every ordered pair of real models."""
    from specllama.llama.gguf_info import read_header
    from specllama.models.compat import header_difference

    paths = [smol_q4, smol_draft, smol_bad_vocab]
    headers = {p: read_header(p) for p in paths}
    loaded = {p: LlamaBackend(p, n_ctx=64) for p in paths}
    try:
        verdicts = []
        for draft in paths:
            for target in paths:
                d, t = headers[draft], headers[target]
                by_header = header_difference(d.vocab, d.vocab_print, t.vocab, t.vocab_print)
                try:
                    check_compatible(loaded[draft], loaded[target])
                    by_loading = None
                except IncompatibleVocabError as exc:
                    by_loading = str(exc)
                assert (by_header is None) == (by_loading is None), (draft, target)
                verdicts.append(by_header is None)
        assert verdicts.count(False) == 4  # the changed vocabulary against the two others
    finally:
        for backend in loaded.values():
            backend.close()


# -- drafting across tokenizers ------------------------------------------------------------


@dataclass
class FakeText(FakeVocab):
    """A vocabulary that reads text one byte a token; `spaces_first` reads a space before
    every text, as a SentencePiece tokenizer with a dummy prefix does."""

    spaces_first: bool = False

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        return list((" " * self.spaces_first + text).encode())

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return bytes([token])


def test_a_shared_vocabulary_hands_tokens_over():
    assert pairing(FakeText(BASE, {}), FakeText(BASE, {})) is None


def test_another_vocabulary_drafts_across_tokenizers_in_one_line():
    notice = pairing(FakeText(BASE, {120: b"apple"}), FakeText(BASE, {}))
    assert notice.startswith("drafting across tokenizers") and "token 120 differs" in notice
    assert "\n" not in notice
    other_type = FakeText(replace(BASE, vocab_type=1, n_vocab=32000), {})
    assert "tokenizer types differ" in pairing(other_type, FakeText(BASE, {}))


@pytest.mark.parametrize("role", ["draft", "target"])
def test_a_tokenizer_that_does_not_give_its_text_back_is_refused(role):
    spm = FakeText(replace(BASE, vocab_type=1), {}, spaces_first=True)
    bpe = FakeText(BASE, {})
    draft, target = (spm, bpe) if role == "draft" else (bpe, spm)
    with pytest.raises(IncompatibleVocabError) as refused:
        pairing(draft, target)
    message = str(refused.value)
    assert f"the {role}'s SentencePiece tokenizer reads 'Hello world' back as ' Hello world'" in (
        message
    )
    assert "tokenizer types differ" in message


@pytest.mark.slow
def test_real_changed_vocabulary_drafts_across_tokenizers(smol_bad_vocab, smol_f32):
    with (
        LlamaBackend(smol_bad_vocab, n_ctx=64) as draft,
        LlamaBackend(smol_f32, n_ctx=64) as target,
    ):
        assert pairing(draft, target).startswith("drafting across tokenizers (token 1000 differs")
        assert pairing(target, target) is None
