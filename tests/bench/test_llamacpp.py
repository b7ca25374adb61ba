"""bench/llamacpp_ngram.py reads llama.cpp's speed as specllama counts tokens."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench/llamacpp_ngram.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("llamacpp_ngram", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def log(decoded: int, seconds: float) -> str:
    # As llama-speculative-simple ends its output (examples/speculative-simple).
    return (
        f"encoded  700 tokens in    2.100 seconds, speed:  333.333 t/s\n"
        f"decoded {decoded:4d} tokens in {seconds:8.3f} seconds, speed: "
        f"{decoded / seconds:8.3f} t/s\n"
        "n_draft   = 48\nn_predict = 12\nn_drafted = 5\nn_accept  = 3\n"
    )


def test_an_answer_that_stopped_leaves_out_the_end_of_generation_token(script):
    # 11 tokens and the end-of-generation token, in 0.5 s: 22 tokens/s as specllama counts.
    stats = script.read_log(log(12, 0.5), 128)
    assert stats["n_generated"] == 11
    assert stats["tokens_per_s"] == pytest.approx(22.0)
    assert (stats["n_drafted"], stats["n_accepted"]) == (5, 3)


def test_an_answer_cut_at_the_limit_counts_every_token(script):
    # It writes past -n when the last round's drafts were accepted; no end token among them.
    stats = script.read_log(log(150, 5.0), 128)
    assert stats["n_generated"] == 150
    assert stats["tokens_per_s"] == pytest.approx(30.0)
