"""An EAGLE-3 head beside its target: what this llama-cpp-python can do, and a head that does
not match its target refused in one line before llama.cpp could abort on it."""

from __future__ import annotations

import head_models
import pytest

from specllama.errors import UsageError
from specllama.llama.backend import LlamaBackend
from specllama.llama.eagle3 import Eagle3Head, eagle3_support, pairing_problem

FITTING = dict(
    architecture="eagle3", layer_ids=[2, 14, 25], hidden_size=1536, head_vocab=151936,
    target_layers=28, target_embd=1536, target_vocab=151936,
)  # fmt: skip


def test_this_llama_cpp_python_runs_eagle3_heads():
    """The tested llama-cpp-python exports the layer-input calls the head needs."""
    assert eagle3_support() is None


def test_a_head_made_for_this_target_fits():
    assert pairing_problem("head.gguf", "target.gguf", **FITTING) is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"architecture": "llama"}, "not an EAGLE-3 head (architecture llama)"),
        ({"layer_ids": [2, 14]}, "names 2 target layers"),
        ({"hidden_size": 4096}, "a model 4096 wide; target.gguf is 1536"),
        ({"layer_ids": [2, 14, 31]}, "reads layer 31 of its target; target.gguf has 28 layers"),
        ({"head_vocab": 128256}, "128256 tokens; target.gguf has 151936"),
    ],
)
def test_each_mismatch_is_named(change, says):
    problem = pairing_problem("head.gguf", "target.gguf", **{**FITTING, **change})
    assert problem is not None and says in problem and "\n" not in problem


@pytest.mark.slow
@pytest.mark.parametrize(
    ("head", "says"),
    [
        (lambda: head_models.tiny_eagle3(0.8, target_layers=(0, 2, 9)), "reads layer 9"),
        (lambda: head_models.tiny_eagle3(0.8, target_hidden_size=96), "96 wide"),
        (lambda: head_models.tiny_target(), "not an EAGLE-3 head"),
    ],
)
def test_a_real_mismatched_head_is_one_line(head, says):
    with LlamaBackend(head_models.tiny_target(), n_ctx=256) as target:
        with pytest.raises(UsageError) as caught:
            Eagle3Head(target, head())
        assert says in str(caught.value) and "\n" not in str(caught.value)
        # The target is untouched: it still evaluates, with nothing attached.
        assert target.on_decoded is None
        target.decode([1000, 2000], [1])


def test_a_head_file_is_known_by_its_architecture_and_never_listed_as_a_model(
    tmp_path, bare_machine
):
    """`--draft FILE` drafts as the head it is; `models --local` (and so `--draft auto`) never
    offers it as a model that runs alone, whatever its file name: it is a head, apart."""
    from gguf_fakes import vocab, write_gguf

    from specllama.llama.gguf_info import read_header
    from specllama.models.local import scan

    tokens = vocab(300)
    head = write_gguf(tmp_path / "head.gguf", tokens, arch="eagle3")
    model = write_gguf(tmp_path / "model.gguf", tokens, arch="llama")
    assert read_header(head).head_kind == "eagle3"
    assert read_header(model).head_kind is None
    found = scan([tmp_path], saved_folders=False)
    assert [m.path.name for m in found.models] == ["model.gguf"]
    assert [(m.path.name, m.head_kind) for m in found.heads] == [("head.gguf", "eagle3")]
