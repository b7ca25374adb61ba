"""`run` and `chat` with a draft of another vocabulary, as a user runs them in a pipe: the
answer is the target alone's, the pair is said in one line; a pair that cannot draft even
across tokenizers is one line and exit 1, never a traceback; a draft without a chat template
drafts all the same (it reads the target's rendered text, never its own template)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import vocab_models

pytestmark = pytest.mark.slow

QUESTION = "Write a Python function that calls print() twice."
N = "16"


def specllama(*args: object, stdin: bytes = b"", env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "specllama", *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=300,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )


def one_line(stderr: bytes) -> str:
    """stderr as one line (rich wraps at the terminal's width)."""
    return " ".join(stderr.decode().split())


def error_lines(stderr: bytes) -> list[str]:
    lines = stderr.decode().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("warning:")]


@pytest.fixture(scope="module")
def alone(smol_f32: Path) -> str:
    """The target alone's greedy answer to QUESTION."""
    done = specllama("run", QUESTION, "-t", smol_f32, "--drafter", "none", "-n", N, "--json",
                     "--threads", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["text"]


def test_a_piped_chat_turn_drafts_across_tokenizers(smol_f32, smol_q4_bad_vocab, alone, tmp_path):
    saved = tmp_path / "chat.json"
    lines = f"{QUESTION}\n/save {saved}\n/exit\n".encode()
    done = specllama(
        "chat", "-t", smol_f32, "-d", smol_q4_bad_vocab, "--fixed", "-n", N, "--threads", "2",
        stdin=lines, env={"XDG_STATE_HOME": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert one_line(done.stderr).count("drafting across tokenizers (token 1000 differs") == 1
    assert b"Traceback" not in done.stderr + done.stdout
    messages = json.loads(saved.read_text(encoding="utf-8"))["messages"]
    assert messages[-1]["role"] == "assistant" and messages[-1]["content"] == alone
    # The turn's summary: the draft's text was drafted and kept.
    accepted = re.search(r"accepted \d+% \((\d+)/(\d+)\)", " ".join(done.stdout.decode().split()))
    assert accepted and int(accepted.group(1)) > 0, done.stdout


def test_a_draft_without_a_chat_template_drafts_the_targets_text(
    smol_f32, smol_q4_bad_vocab, alone
):
    draft = vocab_models.without_chat_template(smol_q4_bad_vocab)
    done = specllama("run", QUESTION, "-t", smol_f32, "-d", draft, "--fixed", "-n", N, "--json",
                     "--threads", "2")  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["text"] == alone and data["n_accepted"] > 0
    assert "drafting across tokenizers" in one_line(done.stderr)
    assert "error" not in done.stderr.decode().lower()


@pytest.mark.parametrize(
    ("roles", "fragment"),
    [
        # A SentencePiece draft adds a space before the text it reads: its text is not the
        # target's.
        ("spm draft", "not even across tokenizers: the draft's SentencePiece tokenizer reads"),
        # The other way round: the target cannot read the draft's text back as it was.
        ("spm target", "not even across tokenizers: the target's SentencePiece tokenizer reads"),
    ],
)
def test_a_byte_level_and_sentencepiece_pair_is_one_line(smol_q4, spm_vocab_tiny, roles, fragment):
    target, draft = (smol_q4, spm_vocab_tiny) if roles == "spm draft" else (spm_vocab_tiny, smol_q4)
    done = specllama("run", "hi", "-t", target, "-d", draft, "-n", "4", "--threads", "2")
    assert done.returncode == 1 and done.stdout == b""
    [line] = error_lines(done.stderr)
    assert line.startswith("error: the draft model cannot draft for this target"), line
    assert fragment in line
    assert "(hint: " in line and "Traceback" not in line
