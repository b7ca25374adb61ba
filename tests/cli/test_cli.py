"""`specllama run` as a user runs it: text on stdout, stats on stderr, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from specllama.cli.app import app
from specllama.session import drafter_choice

pytestmark = pytest.mark.slow

CONTRACT_KEYS = {
    "text",
    "n_generated",
    "time_s",
    "tokens_per_s",
    "drafter",
    "n_drafted",
    "n_accepted",
    "acceptance_rate",
    "n_rounds",
    "mean_accepted_per_round",
    "finish_reason",
}


def invoke(*args: str, input: str | bytes | None = None):
    return CliRunner().invoke(app, ["run", *map(str, args)], input=input)


def assert_one_line_error(result, exit_code: int, fragment: str) -> None:
    assert result.exit_code == exit_code, result.output
    # A machine-level warning (e.g. the AMX fallback) may come first; the error is one line.
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("warning:")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:") and fragment in lines[0], lines[0]
    assert "Traceback" not in result.output
    assert result.stdout == ""


@pytest.fixture(scope="module")
def pair(smol_f32, smol_q4):
    return ["--target", smol_f32, "--draft", smol_q4]


@pytest.mark.parametrize("mode", ["--fixed", "--adaptive"])
def test_speculative_text_equals_target_alone_and_stdout_is_only_text(pair, mode):
    spec = invoke("Name three fruits.", *pair, "-n", "24", mode)
    alone = invoke("Name three fruits.", *pair, "--drafter", "none", "-n", "24")
    assert spec.exit_code == 0 and alone.exit_code == 0, spec.output + alone.output
    assert spec.stdout == alone.stdout and spec.stdout.strip()
    assert "tokens in" in spec.stderr and "tokens in" not in spec.stdout
    # --fixed drafts with the model every round; adaptive combines n-gram and model.
    assert ("drafter model" if mode == "--fixed" else "drafter ngram+model") in spec.stderr


def test_json_has_the_contract_fields(pair):
    result = invoke("Say hello.", *pair, "-n", "12", "--json", "--draft-max", "3", "--fixed")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data.keys() >= CONTRACT_KEYS
    assert 0 < data["n_generated"] <= 12
    assert data["drafter"] == "model" and data["n_drafted"] >= data["n_accepted"]


SAMPLING = ["--temperature", "0.9", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05"]


def test_a_sampled_answer_reports_its_seed_which_reproduces_it_with_any_drafter(pair):
    """No --seed: one is drawn and reported (--json, and the summary line); with it, the
    target alone and --fixed write the same text as the adaptive default did."""
    first = invoke("Tell me a story.", *pair, "-n", "24", "--json", *SAMPLING)
    assert first.exit_code == 0, first.output
    data = json.loads(first.stdout)
    seed = data["seed"]
    assert isinstance(seed, int)
    for drafter in (["--drafter", "none"], ["--fixed"]):
        again = invoke("Tell me a story.", *pair, "-n", "24", "--seed", seed, *SAMPLING, *drafter)
        assert again.exit_code == 0, again.output
        assert again.stdout == data["text"] + "\n"
        assert f"seed {seed}" in " ".join(again.stderr.split())  # wrapped at the width
    greedy = json.loads(invoke("Say hello.", *pair, "-n", "4", "--json", "--seed", "5").stdout)
    assert greedy["seed"] is None  # greedy draws nothing


@pytest.mark.parametrize("value", ["-1", str(2**64)])
def test_a_seed_outside_64_bits_is_a_usage_error(smol_q4, value):
    result = invoke("hi", "--target", smol_q4, "--seed", value, "--temperature", "0.5")
    assert_one_line_error(result, 2, "seed must be in [0, 2**64)")


def test_ngram_drafter_without_a_draft_model(smol_f32):
    code = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
    result = invoke(
        "Repeat this code exactly:", "--target", smol_f32, "-n", "30", "--json", input=code
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["drafter"] == "ngram"


def test_stdin_is_appended_to_the_instruction(smol_q4):
    args = ["--target", smol_q4, "--drafter", "none", "--no-chat-template", "-n", "1", "--json"]
    both = json.loads(invoke("Summarise:", *args, input="a b c d e f g").stdout)
    alone = json.loads(invoke("Summarise:", *args).stdout)
    assert both["n_prompt"] > alone["n_prompt"]


def test_missing_model_file(tmp_path):
    result = invoke("hi", "--target", tmp_path / "missing.gguf")
    assert_one_line_error(result, 1, "does not exist")


def test_file_that_is_not_gguf(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_text("hello")
    assert_one_line_error(invoke("hi", "--target", fake), 1, "not a GGUF file")


@pytest.mark.parametrize("mode", ["--fixed", "--adaptive"])
def test_a_draft_of_another_vocabulary_drafts_across_tokenizers(smol_f32, smol_bad_vocab, mode):
    """Its token 1000 spells other text: it drafts text, re-tokenised, and says so in one line;
    the answer is the target alone's."""
    args = ["Write a Python function that calls print() twice.", "-n", "16", "--json"]
    crossed = invoke(*args, "--target", smol_f32, "--draft", smol_bad_vocab, mode)
    alone = invoke(*args, "--target", smol_f32, "--drafter", "none")
    assert crossed.exit_code == 0 and alone.exit_code == 0, crossed.output + alone.output
    said = [line for line in crossed.stderr.splitlines() if "drafting across tokenizers" in line]
    assert len(said) == 1 and "token 1000 differs" in said[0], crossed.stderr
    assert "error" not in crossed.stderr.lower()
    data = json.loads(crossed.stdout)
    assert data["text"] == json.loads(alone.stdout)["text"]
    assert data["drafter"] == ("model" if mode == "--fixed" else "ngram+model")


def test_a_pair_that_cannot_draft_even_across_tokenizers_is_one_line(smol_f32, spm_vocab_tiny):
    """A SentencePiece draft reads a space before every text (its dummy prefix): it cannot
    give its text back, so it is refused in one line, before anything is generated."""
    result = invoke("hi", "--target", smol_f32, "--draft", spm_vocab_tiny)
    assert_one_line_error(result, 1, "not even across tokenizers: the draft's SentencePiece")


def test_empty_prompt(smol_q4):
    assert_one_line_error(invoke("--target", smol_q4, input="  \n"), 2, "prompt is empty")


def test_prompt_longer_than_the_context(smol_q4):
    result = invoke("word " * 400, "--target", smol_q4, "--ctx", "128")
    assert_one_line_error(result, 1, "context")


@pytest.mark.parametrize("value", ["0", "-2"])
def test_draft_max_must_be_positive(smol_q4, value):
    result = invoke("hi", "--target", smol_q4, "--draft-max", value)
    assert_one_line_error(result, 2, "--draft-max must be at least 1")


def test_binary_and_non_utf8_stdin(smol_q4):
    assert_one_line_error(invoke("x", "--target", smol_q4, input=b"\x00\x01\x02"), 2, "binary")
    assert_one_line_error(invoke("x", "--target", smol_q4, input=b"caf\xe9"), 2, "not UTF-8")


def test_unknown_pair_suggests_names():
    result = invoke("hi", "--pair", "qwen2.5-coder-1.5")
    assert_one_line_error(result, 1, "qwen2.5-coder-1.5")
    assert "qwen2.5-coder-1.5b" in result.stderr


@pytest.mark.own_calibrations  # none cached before the run
def test_doctor_shows_the_calibration_that_an_adaptive_run_measured(smol_q4, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path))
    doctor = CliRunner().invoke(app, ["doctor", "--json"])
    assert doctor.exit_code == 0, doctor.output
    assert json.loads(doctor.stdout)["calibrations"] == []

    run = invoke("Say hi.", "--target", smol_q4, "-n", "4", "--adaptive", "--json")
    assert run.exit_code == 0, run.output
    measured = json.loads(run.stdout)["calibration"]
    assert measured["source"] == "measured" and measured["reason"] == "none cached"
    data = json.loads(CliRunner().invoke(app, ["doctor", "--json"]).stdout)
    if not measured["trusted"]:  # measured on a busy machine: used, and not kept
        assert data["calibrations"] == [] and "not cached" in measured["describe"]
        return
    assert [c["target"] for c in data["calibrations"]] == [str(smol_q4)]
    # The row wraps where its numbers put it: read the table's words, not its lines.
    table = " ".join(CliRunner().invoke(app, ["doctor"]).stdout.split())
    assert "calibration" in table and "target 1 token" in table and "checks passed" in table


def test_bad_input_is_refused_before_any_download(tmp_path, monkeypatch):
    """With an empty model cache and no network, an empty prompt is still a usage error,
    not a download attempt."""
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert_one_line_error(invoke(input=""), 2, "prompt is empty")
    assert_one_line_error(invoke("hi", "-n", "0"), 2, "--max-tokens must be at least 1")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["option", "environment"])
def test_extra_buffers_setting_is_checked(smol_q4, monkeypatch, where):
    args = ["hi", "--target", smol_q4]
    if where == "option":
        args += ["--extra-buffers", "sometimes"]
    else:
        monkeypatch.setenv("SPECLLAMA_EXTRA_BUFFERS", "sometimes")
    assert_one_line_error(invoke(*args), 2, "must be one of auto, on, off")


@pytest.mark.parametrize("setting", ["on", "off"])
def test_extra_buffers_forced_either_way_gives_the_same_answer(smol_q4, setting):
    """In a child process: where the AMX probe found that llama.cpp's AMX kernels crash on
    quantised models (a native build on some Xeon VMs), forcing them on must crash as the
    probe said, and must not take the test run down with it."""
    doctor = json.loads(CliRunner().invoke(app, ["doctor", "--json"]).stdout)["amx"]
    args = ["run", "Say hi.", "--target", str(smol_q4), "--drafter", "none", "-n", "6"]
    forced = subprocess.run(
        [sys.executable, "-m", "specllama", *args, "--json", "--extra-buffers", setting],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if setting == "on" and doctor["probe"] == "crashes":
        assert forced.returncode < 0, "the probe said the AMX kernels crash here"
        return
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["n_generated"] > 0


def test_doctor_reports_the_amx_decision_and_the_cmake_args():
    data = json.loads(CliRunner().invoke(app, ["doctor", "--json"]).stdout)["amx"]
    assert data["cmake_args"].startswith("-DGGML_NATIVE=OFF")
    assert "AMX" not in data["cmake_args"]
    if not data["build_amx"]:
        assert data["extra_buffers"] and data["probe"] == "not needed"
    table = CliRunner().invoke(app, ["doctor"]).stdout
    assert "AMX kernels" in table and "extra buffers" in table


# -- a model that carries its own draft head (MTP): synthetic qwen35 (tests/qwen35_models.py) --


def run_json(*args: str) -> dict:
    result = invoke("Count on.", *args, "-n", "32", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("mode", ["--fixed", "--adaptive"])
def test_mtp_answers_as_the_target_alone(qwen35_mtp, mode):
    alone = run_json("--target", qwen35_mtp, "--drafter", "none")
    mtp = run_json("--target", qwen35_mtp, "--drafter", "mtp", mode, "--draft-max", "3")
    assert mtp["text"] == alone["text"] and mtp["n_generated"] == 32
    assert mtp["drafter"] == ("mtp" if mode == "--fixed" else "ngram+mtp")
    if mode == "--fixed":
        assert mtp["n_drafted"] > 0 and 0 < mtp["n_accepted"] < mtp["n_drafted"]


def test_the_default_drafts_with_the_models_own_head(qwen35_mtp):
    assert run_json("--target", qwen35_mtp)["drafter"] == "ngram+mtp"


def test_a_named_draft_model_wins_over_the_head(qwen35_mtp, qwen35_bad_draft):
    ran = run_json("--target", qwen35_mtp, "--draft", qwen35_bad_draft, "--fixed")
    assert ran["drafter"] == "model"


def test_mtp_on_a_model_without_mtp_layers_is_a_usage_error(smol_q4):
    result = invoke("Hi", "--target", smol_q4, "--drafter", "mtp")
    assert_one_line_error(result, 2, "has no MTP layers")


def test_a_build_without_the_mtp_symbols_degrades_in_one_line(qwen35_mtp, monkeypatch):
    """Asked for, it is one usage error naming what is missing; by default, n-gram lookup."""
    missing = "this llama-cpp-python (0.3.x) cannot run MTP heads (missing load_mtp)"
    monkeypatch.setattr(drafter_choice, "mtp_support", lambda: missing)
    result = invoke("Hi", "--target", qwen35_mtp, "--drafter", "mtp")
    assert_one_line_error(result, 2, "missing load_mtp")
    assert run_json("--target", qwen35_mtp)["drafter"] == "ngram"
