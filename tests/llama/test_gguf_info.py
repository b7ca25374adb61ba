"""Reading GGUF headers without llama.cpp: real models, cross-checked against the `gguf`
package and llama.cpp itself, and small written files for the search paths and the damage."""

from __future__ import annotations

import struct
from dataclasses import replace

import gguf
import pytest
from gguf_fakes import merges_for, vocab, write_gguf

from specllama.errors import ModelLoadError
from specllama.llama import gguf_info
from specllama.llama.gguf_info import FILE_TYPES, read_header, tensor_types

F32, Q4_1, Q8_0 = 0, 3, 8


def walked(path, *, detail=False):
    """The header as the plain walk reads it, with no search for where arrays end."""
    with open(path, "rb") as f, gguf_info._Reader(f) as reader:
        return gguf_info._HeaderParser(reader, skim=False, detail=detail).parse()


def without_detail(header):
    print_ = header.vocab_print
    return replace(header, vocab_print=replace(print_, detail=None) if print_ else None)


@pytest.mark.slow
def test_tensor_types_of_the_published_and_the_dequantised_model(smol_q4, smol_f32):
    assert tensor_types(smol_q4) == {F32, Q4_1, Q8_0}
    assert tensor_types(smol_f32) == {F32}


@pytest.mark.slow
def test_the_facts_of_the_published_model_agree_with_the_gguf_package(smol_q4):
    header = read_header(smol_q4)
    reader = gguf.GGUFReader(smol_q4)
    assert header.architecture == "llama" and header.size_label == "135M"
    assert header.quant == "Q4_1" and header.context_length == 8192
    assert header.n_params == sum(int(t.n_elements) for t in reader.tensors)
    assert header.vocab.n_vocab == len(reader.fields["tokenizer.ggml.tokens"].data) == 49152
    assert header.tokenizer == "gpt2" and header.split_count == 1


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smol_q4", "smol_draft", "smol_bad_vocab"])
def test_vocabulary_facts_equal_what_llama_cpp_reports(model, request):
    from specllama.llama.backend import LlamaBackend

    path = request.getfixturevalue(model)
    with LlamaBackend(path, n_ctx=64) as loaded:
        assert read_header(path).vocab == loaded.vocab


@pytest.mark.slow
def test_the_searches_read_the_same_header_as_the_walk(smol_q4, smol_bad_vocab):
    for path in (smol_q4, smol_bad_vocab):
        fast, slow = read_header(path), walked(path, detail=True)
        assert fast.vocab_print.detail is None and slow.vocab_print.detail is not None
        assert fast.vocab_print.whole == slow.vocab_print.whole
        assert (fast.vocab, fast.n_params, fast.tensor_types) == (
            slow.vocab,
            slow.n_params,
            slow.tensor_types,
        )
    assert read_header(smol_q4).vocab_print.whole != read_header(smol_bad_vocab).vocab_print.whole


def test_file_type_names_follow_the_gguf_package():
    for value, name in FILE_TYPES.items():
        member = gguf.LlamaFileType(value).name
        assert member.removeprefix("MOSTLY_").removeprefix("ALL_") == name


def test_a_written_model_reads_back(tmp_path):
    tokens = vocab(300)
    path = write_gguf(
        tmp_path / "m.gguf",
        tokens,
        merges=merges_for(tokens),
        bos=7,
        eos=9,
        add_bos=True,
        tensors={"token_embd.weight": (3, 5), "output.weight": (2, 4)},
    )
    header = read_header(path)
    assert header.name == "test model" and header.context_length == 256
    assert header.vocab.n_vocab == 300 and (header.vocab.bos, header.vocab.eos) == (7, 9)
    assert header.vocab.add_bos is True and header.vocab.vocab_type == 2
    assert header.n_params == 15 + 8 and header.tensor_types == {F32}


def test_without_special_ids_llama_cpp_defaults_apply(tmp_path):
    path = write_gguf(tmp_path / "spm.gguf", vocab(40), tokenizer="llama", bos=None, eos=None,
                      add_bos=None)  # fmt: skip
    assert read_header(path).vocab.bos == 1 and read_header(path).vocab.eos == 2
    assert read_header(path).vocab.add_bos is True


@pytest.mark.parametrize(
    ("case", "parses"),
    [
        ("a token reads like the next key", 1),  # the search must not stop inside the tokens
        ("a merge without a space", 2),  # one that reads as a key: caught by parsing on
        ("another key between tokens and merges", 2),  # skipped by the search: parsed again
        ("the tokens are the last key", 1),
    ],
)
def test_searching_for_the_end_of_an_array_never_changes_what_is_read(
    tmp_path, monkeypatch, case, parses
):
    tokens = vocab(200)
    kwargs: dict = {"merges": merges_for(tokens)}
    if case == "a token reads like the next key":
        tokens[50] = "tokenizer.ggml.bos_token_id"
        tokens[51] = "x" * 9
    elif case == "a merge without a space":
        kwargs["merges"] = ["tokenizer.ggml.eos_token_id", *merges_for(tokens)]
    elif case == "another key between tokens and merges":
        kwargs["after_tokens"] = {"general.quantization_version": 2}
        kwargs["token_types"] = False  # so that the merges are the next tokenizer key
    else:
        kwargs = {"merges": None, "bos": None, "eos": None, "add_bos": None}
    path = write_gguf(tmp_path / "m.gguf", tokens, **kwargs)
    slow = walked(path)
    calls: list[bool] = []
    real = gguf_info._HeaderParser.parse
    monkeypatch.setattr(
        gguf_info._HeaderParser, "parse", lambda self: (calls.append(self.skim), real(self))[1]
    )
    fast = read_header(path)
    assert without_detail(fast) == without_detail(slow)
    assert fast.vocab.n_vocab == 200
    assert len(calls) == parses


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        tensor_types(path)


def test_an_empty_file_is_not_a_gguf_file(tmp_path):
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        read_header(tmp_path / "empty.gguf")


@pytest.mark.parametrize("keep", [10, 100, 2000, 5000])
def test_a_truncated_header_is_an_error_not_a_guess(tmp_path, keep):
    tokens = vocab(300)
    whole = write_gguf(tmp_path / "m.gguf", tokens, merges=merges_for(tokens)).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:keep])
    with pytest.raises(ModelLoadError, match="header"):
        read_header(cut)


def test_an_absurd_length_is_an_error_not_a_huge_read(tmp_path):
    path = tmp_path / "m.gguf"
    key = b"general.name"
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    path.write_bytes(header + struct.pack("<Q", len(key)) + key + struct.pack("<IQ", 8, 2**62))
    with pytest.raises(ModelLoadError, match="ends inside its header"):
        read_header(path)


@pytest.mark.slow
def test_a_truncated_real_header_is_an_error(smol_q4, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smol_q4.read_bytes()[:4096])
    with pytest.raises(ModelLoadError, match="header"):
        tensor_types(cut)


def test_a_usual_header_is_read_by_searching_not_walking(tmp_path, monkeypatch):
    tokens = vocab(300)
    path = write_gguf(tmp_path / "m.gguf", tokens, merges=merges_for(tokens))
    walks: list[int] = []
    real = gguf_info._Reader.skip_strings
    monkeypatch.setattr(
        gguf_info._Reader, "skip_strings", lambda self, n: (walks.append(n), real(self, n))[1]
    )
    assert read_header(path).vocab.n_vocab == 300
    assert sum(walks) == 5  # ids 0..4 only: the tokens and the merges were found by a search
    walks.clear()
    assert read_header(path, detail=True).vocab_print.detail is not None
    assert sum(walks) == 300  # the detail walks every token (the merges are still skipped)


@pytest.mark.parametrize("where", ["extra", "before_tokens", "after_tokens"])
def test_the_mtp_layers_are_read_wherever_the_key_stands(tmp_path, where):
    tokens = vocab(200)
    key = {"qwen35.nextn_predict_layers": 1}
    kwargs: dict = {"merges": merges_for(tokens), where: key}
    if where == "after_tokens":
        kwargs["token_types"] = False  # so that the key is read after a search past the tokens
    path = write_gguf(tmp_path / "m.gguf", tokens, arch="qwen35", **kwargs)
    header = read_header(path)
    assert header.n_nextn == 1 and header.has_mtp and header.head_kind is None
    assert without_detail(header) == without_detail(walked(path))


def test_without_the_key_a_model_has_no_mtp_layers(tmp_path):
    tokens = vocab(200)
    plain = read_header(write_gguf(tmp_path / "plain.gguf", tokens, arch="qwen35"))
    assert plain.n_nextn == 0 and not plain.has_mtp
    # Another architecture's key says nothing about this model; 0 layers is none either.
    other = write_gguf(tmp_path / "other.gguf", tokens, extra={"qwen35.nextn_predict_layers": 1})
    zero = write_gguf(tmp_path / "zero.gguf", tokens, arch="qwen35",
                      extra={"qwen35.nextn_predict_layers": 0})  # fmt: skip
    assert not read_header(other).has_mtp and not read_header(zero).has_mtp


def test_a_gemma_4_assistant_is_a_drafter_not_a_model(tmp_path):
    path = write_gguf(tmp_path / "mtp-gemma.gguf", vocab(50), arch="gemma4-assistant",
                      extra={"gemma4-assistant.nextn_predict_layers": 4})  # fmt: skip
    header = read_header(path)
    assert header.n_nextn == 4 and header.has_mtp and header.head_kind == "assistant"
    assert header.drafts_for == "gemma4"
