"""A DFlash head beside its target: what this llama-cpp-python can do, a head that does not match
its target refused in one line before llama.cpp could abort on it, and the head drafting from
the command line."""

from __future__ import annotations

import json

import head_models
import pytest
from typer.testing import CliRunner

from specllama.cli.app import app
from specllama.errors import UsageError
from specllama.llama.backend import LlamaBackend
from specllama.llama.dflash import DFlashHead, dflash_support, pairing_problem

FITTING = dict(
    architecture="dflash", layer_ids=[1, 9, 17, 25, 33], head_embd=2560, head_vocab=151936,
    mask_token=151669, variant=None, target_layers=36, target_embd=2560, target_vocab=151936,
)  # fmt: skip


def test_this_llama_cpp_python_runs_dflash_heads():
    assert dflash_support() is None


def test_a_head_made_for_this_target_fits():
    assert pairing_problem("head.gguf", "target.gguf", **FITTING) is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"architecture": "eagle3"}, "not a DFlash head (architecture eagle3)"),
        ({"variant": "DFlash2"}, "is a DFlash2 head"),
        ({"layer_ids": []}, "names no target layers"),
        ({"head_embd": 4096}, "a model 4096 wide; target.gguf is 2560"),
        ({"layer_ids": [1, 9, 40]}, "reads layer 40 of its target; target.gguf has 36 layers"),
        ({"head_vocab": 128256}, "128256 tokens; target.gguf has 151936"),
        ({"mask_token": -1}, "has no mask token"),
    ],
)
def test_each_mismatch_is_named(change, says):
    problem = pairing_problem("head.gguf", "target.gguf", **{**FITTING, **change})
    assert problem is not None and says in problem and "\n" not in problem


@pytest.mark.slow
@pytest.mark.parametrize(
    ("head", "says"),
    [
        (lambda: head_models.tiny_dflash(0.8, target_layers=(0, 2, 9)), "reads layer 9"),
        (lambda: head_models.tiny_eagle3(0.8), "not a DFlash head (architecture eagle3)"),
        (lambda: head_models.tiny_target(), "not a DFlash head (architecture llama)"),
    ],
)
def test_a_real_mismatched_head_is_one_line(head, says):
    with LlamaBackend(head_models.tiny_target(), n_ctx=256) as target:
        with pytest.raises(UsageError) as caught:
            DFlashHead(target, head())
        assert says in str(caught.value) and "\n" not in str(caught.value)
        # The target is untouched: it still evaluates, with nothing attached.
        assert target.on_decoded is None
        target.decode([1000, 2000], [1])


def _run(*args: str):
    return CliRunner().invoke(app, ["run", *map(str, args)])


@pytest.mark.slow
def test_run_with_a_dflash_file_as_draft_is_the_target_alone():
    """`specllama run --draft HEAD.gguf`: the head drafts (found by its architecture), the
    default policy weighs it beside n-gram lookup, and the text is the target alone's."""
    target, head = head_models.tiny_target(), head_models.tiny_dflash(0.8)
    common = ["Write", "--target", target, "--no-chat-template", "-n", "48", "--json"]
    alone = _run(*common, "--drafter", "none")
    assert alone.exit_code == 0, alone.output
    for mode in ("--fixed", "--adaptive"):
        spec = _run(*common, "--draft", head, mode, "--draft-max", "4")
        assert spec.exit_code == 0, spec.output
        got = json.loads(spec.stdout)
        assert got["text"] == json.loads(alone.stdout)["text"]
        assert "dflash" in got["drafter"], got
        # A fixed policy must draft with the head; the adaptive one may rightly not: on this
        # tiny target a verify of 2 costs ~3 one-token decodes, and its choice follows timings.
        assert mode == "--adaptive" or got["n_accepted"] > 0, got


@pytest.mark.slow
def test_run_with_a_head_for_another_target_is_one_line(tmp_path):
    target = head_models.tiny_target()
    head = head_models.tiny_dflash(0.8, target_layers=(0, 2, 9))
    result = _run("Write", "--target", target, "--draft", head, "-n", "4")
    assert result.exit_code != 0
    lines = [line for line in result.stderr.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "reads layer 9 of its target" in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_a_head_written_for_a_llama_cpp_fork_is_one_line(tmp_path):
    """Public DFlash GGUFs made for forks (architecture dflash-draft) do not load in llama.cpp:
    said before the target loads, with how to make one that does."""
    from gguf_fakes import vocab, write_gguf

    from specllama.session import Engine, EngineConfig

    fork = write_gguf(tmp_path / "dflash-draft-q4_k_m.gguf", vocab(300), arch="dflash-draft")
    config = EngineConfig(target=tmp_path / "missing-target.gguf", draft=fork, drafter="model")
    with pytest.raises(UsageError) as caught:
        Engine(config)
    assert "written for a llama.cpp fork (architecture dflash-draft)" in str(caught.value)
    assert "convert_hf_to_gguf.py" in caught.value.hint
