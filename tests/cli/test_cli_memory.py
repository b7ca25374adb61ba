"""`specllama run --prediction FILE` and `--remember DIR` as a user runs them, on the strict
F32 target: the answer is the target alone's, a prediction is counted, a remembered answer
drafts the next run, and bad files are one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specllama.cli.app import app

pytestmark = pytest.mark.slow

ASK = "Write one line about the sea."


def run(target: Path, *extra: str) -> tuple[int, dict | None, str]:
    """`specllama run --json` drafting with n-gram lookup, 8 tokens a round (what is drafted
    is the point here, not how the adaptive policy weighs it)."""
    args = ["run", ASK, "--target", str(target), "--drafter", "ngram", "-n", "30"]
    args += ["--fixed", "--draft-max", "8"]
    args += ["--ctx", "512", "--threads", "2", "--json", *extra]
    result = CliRunner().invoke(app, args)
    data = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, data, result.stderr


@pytest.fixture(scope="module")
def alone(smol_f32: Path) -> dict:
    code, data, _ = run(smol_f32, "--drafter", "none")
    assert code == 0
    return data


def test_a_prediction_is_drafted_and_counted(smol_f32, alone, tmp_path):
    predicted = tmp_path / "expected.txt"
    predicted.write_text(alone["text"])
    code, data, _ = run(smol_f32, "--prediction", str(predicted))
    assert code == 0 and data["text"] == alone["text"]
    assert data["prediction_accepted"] >= alone["n_generated"] - 6
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("Mountains are tall and made of stone. " * 5)
    code, data, _ = run(smol_f32, "--prediction", str(wrong))
    assert code == 0 and data["text"] == alone["text"]
    assert data["prediction_rejected"] > 0


def test_a_remembered_answer_drafts_the_next_run(smol_f32, alone, tmp_path):
    folder = tmp_path / "memory"
    code, first, _ = run(smol_f32, "--remember", str(folder))
    assert code == 0 and first["text"] == alone["text"]
    code, second, stderr = run(smol_f32, "--remember", str(folder))
    assert code == 0 and second["text"] == alone["text"]
    assert second["n_accepted"] >= second["n_generated"] - 6 > first["n_accepted"]
    # A damaged store: one line, a fresh start, the file kept aside.
    [store] = folder.glob("memory-*.npy")
    store.write_bytes(b"damaged")
    code, third, stderr = run(smol_f32, "--remember", str(folder))
    assert code == 0 and third["text"] == alone["text"]
    assert "could not be read" in stderr and "Traceback" not in stderr
    assert store.with_suffix(".npy.damaged").read_bytes() == b"damaged"


@pytest.mark.parametrize(
    ("option", "value", "code", "says"),
    [
        ("--prediction", "missing.txt", 2, "no such file"),
        ("--prediction", "binary.bin", 2, "not UTF-8"),
        ("--remember", "a-file/inside", 1, "cannot save the memory"),
    ],
)
def test_bad_files_are_one_line(smol_f32, tmp_path, monkeypatch, option, value, code, says):
    monkeypatch.chdir(tmp_path)
    Path("binary.bin").write_bytes(b"\xff\xfe\x00")
    Path("a-file").write_text("not a folder")
    exit_code, _, stderr = run(smol_f32, option, value)
    assert exit_code == code
    assert says in stderr and "Traceback" not in stderr
