"""`specllama serve` with a draft of another vocabulary (SmolLM2's Q4_1 weights, one token's text
changed): Chat Completions through the `openai` package answer as the target alone does, two
slots at once; a pair that cannot draft even across tokenizers stops the server's start in one
line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import Server, chat, reference, serve

pytestmark = pytest.mark.slow

QUESTIONS = ["Write a Python function that calls print() twice.", "Name three fruits."]
N = 16


@pytest.fixture(scope="module")
def server(smol_f32: Path, smol_q4_bad_vocab: Path, tmp_path_factory) -> Iterator[Server]:
    extra = ["--draft", str(smol_q4_bad_vocab), "--fixed", "--draft-max", "4", "--parallel", "2"]
    yield from serve(smol_f32, extra, tmp_path_factory.mktemp("serve") / "stderr.txt")


def test_the_start_says_the_draft_drafts_across_tokenizers(server: Server):
    log = " ".join(server.log.read_text().split())
    assert log.count("drafting across tokenizers (token 1000 differs") == 1


def test_greedy_chat_completions_equal_the_target_alone_in_two_slots_at_once(server: Server):
    answers: dict[str, object] = {}

    def ask(question: str) -> None:
        answers[question] = chat(server, question, N, temperature=0)

    threads = [threading.Thread(target=ask, args=(q,)) for q in QUESTIONS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for question in QUESTIONS:
        answer = answers[question]
        text, n_generated = reference(question, N)
        assert answer.choices[0].message.content == text
        assert answer.usage.completion_tokens == n_generated
        stats = answer.model_extra["specllama"]
        assert stats["drafter"] == "model" and stats["n_drafted"] > 0
    # The question with "()" in its answer: the draft's text is kept across the changed token.
    assert answers[QUESTIONS[0]].model_extra["specllama"]["n_accepted"] > 0


def test_a_sentencepiece_draft_stops_the_start_in_one_line(smol_f32: Path, spm_vocab_tiny: Path):
    command = [sys.executable, "-m", "specllama", "serve", "--target", str(smol_f32), "--draft",
               str(spm_vocab_tiny), "--ctx", "512", "--threads", "2", "--port", "0"]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, timeout=120, env={**os.environ, "NO_COLOR": "1"}
    )
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.decode().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "not even across tokenizers: the draft's SentencePiece tokenizer" in lines[0]
    assert b"Traceback" not in done.stderr
