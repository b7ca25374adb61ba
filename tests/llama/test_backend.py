"""The llama.cpp backend on real GGUF models."""

from __future__ import annotations

import numpy as np
import pytest

from specllama.errors import ContextOverflowError, ModelLoadError
from specllama.llama.backend import LlamaBackend

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def f32(smol_f32):
    with LlamaBackend(smol_f32, n_ctx=512, n_batch=64) as backend:
        yield backend


def test_vocabulary_and_tokenizer(f32):
    vocab = f32.vocab
    assert vocab.n_vocab == 49152
    assert vocab.eos == 2 and f32.is_eog(2)
    tokens = f32.tokenize("Hello, speculative world!", add_bos=False)
    assert f32.detokenize(tokens) == "Hello, speculative world!"
    assert "im_start" in f32.chat_template


def test_control_tokens_in_text_are_parsed_as_one_token(f32):
    assert len(f32.tokenize("<|im_start|>", add_bos=False)) == 1
    assert len(f32.tokenize("<|im_start|>", add_bos=False, special=False)) > 1


def test_decode_returns_rows_only_where_asked(f32):
    f32.rollback(0)
    tokens = f32.tokenize("The quick brown fox jumps", add_bos=False)
    rows = f32.decode(tokens, [1, len(tokens) - 1])
    assert rows.shape == (2, f32.n_vocab)
    assert f32.tokens == tokens
    assert f32.decode([], []).shape == (0, f32.n_vocab)


def test_rows_come_back_in_the_order_asked_even_unsorted_or_repeated(f32):
    tokens = f32.tokenize("One two three four five six", add_bos=False)
    f32.rollback(0)
    ordered = f32.decode(tokens, range(len(tokens)))
    f32.rollback(0)
    shuffled = f32.decode(tokens, [4, 1, 4, 0])
    np.testing.assert_array_equal(shuffled, ordered[[4, 1, 4, 0]])


def test_batched_and_one_by_one_evaluation_agree_on_f32(f32):
    tokens = f32.tokenize("def fibonacci(n):\n    if n < 2:", add_bos=False)
    f32.rollback(0)
    batched = f32.decode(tokens, range(len(tokens)))
    f32.rollback(0)
    single = np.stack([f32.decode([t], [0])[0] for t in tokens])
    # Not bit-identical (different kernels and summation orders), but close: an all-F32
    # model keeps its KV cache in F32 too (with F16 K and V the gap is ~1e-2, enough for a
    # sampled draw near a tie to part), and the argmax is the same.
    assert f32.exact
    np.testing.assert_allclose(batched, single, atol=1e-3)
    assert (batched.argmax(axis=1) == single.argmax(axis=1)).all()


def test_a_quantised_model_keeps_the_default_kv_cache(smol_q4):
    with LlamaBackend(smol_q4, n_ctx=256) as q4:
        assert not q4.exact


def test_rollback_then_new_tokens_equals_fresh_evaluation(f32, smol_f32):
    a = f32.tokenize("Once upon a time there was a", add_bos=False)
    b = f32.tokenize(" dragon who loved tea", add_bos=False)
    f32.rollback(0)
    f32.decode(a + f32.tokenize(" cat that slept all day", add_bos=False))
    f32.rollback(len(a))
    after_rollback = f32.decode(b, [len(b) - 1])[0]
    with LlamaBackend(smol_f32, n_ctx=512) as fresh:
        expected = fresh.decode(a + b, [len(a + b) - 1])[0]
    np.testing.assert_allclose(after_rollback, expected, atol=0.05)
    assert after_rollback.argmax() == expected.argmax()


def test_batches_longer_than_n_batch_are_split(f32):
    tokens = f32.tokenize("word " * 100, add_bos=False)
    assert len(tokens) > f32.n_batch
    f32.rollback(0)
    rows = f32.decode(tokens, [0, 70, len(tokens) - 1])
    assert rows.shape[0] == 3 and f32.n_past == len(tokens)


def test_sync_keeps_the_common_prefix(f32):
    tokens = f32.tokenize("Speculative decoding keeps the target's output", add_bos=False)
    f32.sync(tokens)
    before = f32.n_decoded
    f32.sync([*tokens[:-2], 42, 43])
    assert f32.n_decoded - before == 2
    last = f32.sync([*tokens[:-2], 42, 43], logits_at_last=True)
    assert last.shape == (f32.n_vocab,)


def test_overflowing_the_context_is_refused(smol_q4):
    with LlamaBackend(smol_q4, n_ctx=32) as small:
        with pytest.raises(ContextOverflowError, match="context of 32"):
            small.decode(list(range(100, 140)))
        assert small.n_past == 0


def test_missing_and_non_gguf_files_are_refused(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        LlamaBackend(tmp_path / "nope.gguf")
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    with pytest.raises(ModelLoadError, match="not a GGUF"):
        LlamaBackend(text)


def test_truncated_gguf_is_refused_without_crashing(tmp_path, smol_q4):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(smol_q4.read_bytes()[:4096])
    with pytest.raises(ModelLoadError):
        LlamaBackend(broken)
