"""`specllama run` and `chat` in pipes, as scripts use them: byte-clean stdout, parseable
--json / --jsonl, exit codes, and one clear line for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specllama.cli import ui

pytestmark = pytest.mark.slow

ESC = b"\x1b"


def specllama(
    *args: str, stdin: bytes | None = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "specllama", *args],
        input=stdin,
        capture_output=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def models(smol_f32: Path, smol_q4: Path) -> list[str]:
    return ["-t", str(smol_f32), "-d", str(smol_q4), "--threads", "2", "-n", "12"]


def error_lines(stderr: bytes) -> list[str]:
    """Non-empty stderr lines, less machine-level warnings (e.g. the AMX fallback)."""
    lines = stderr.decode().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("warning:")]


def test_piped_run_stdout_is_only_the_answer(models: list[str]):
    notes = b"Cats sleep a lot. Dogs like walks.\n"
    plain = specllama("run", "Summarise these notes.", *models, stdin=notes)
    as_json = specllama("run", "Summarise these notes.", *models, "--json", stdin=notes)
    assert plain.returncode == 0 and as_json.returncode == 0, plain.stderr + as_json.stderr
    result = json.loads(as_json.stdout)
    # The same greedy answer, and nothing but the answer (plus a newline) on stdout.
    assert plain.stdout.decode() == result["text"] + "\n"
    assert ESC not in plain.stdout and ESC not in plain.stderr  # no colour off a terminal
    assert "tokens in" in plain.stderr.decode()
    assert as_json.stdout.count(b"\n") == 1
    assert result["n_prompt"] > 20  # the piped notes were part of the prompt
    for key in ("n_generated", "tokens_per_s", "acceptance_rate", "finish_reason"):
        assert key in result


def test_run_reads_the_prompt_from_stdin_alone(models: list[str]):
    done = specllama("run", *models, "--json", stdin=b"Name a colour.\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_generated"] >= 1


def test_jsonl_streams_one_token_per_line_then_the_stats(models: list[str]):
    done = specllama("run", "Name three fruits.", *models, "--jsonl")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.decode().splitlines()]
    tokens, last = events[:-1], events[-1]
    assert tokens and all(e["type"] == "token" for e in tokens)
    assert {type(e["token"]) for e in tokens} == {int}
    assert {type(e["from_draft"]) for e in tokens} == {bool}
    assert last["type"] == "stats"
    assert last["n_generated"] == len(tokens)
    assert "".join(e["text"] for e in tokens) == last["text"]
    assert last["n_accepted"] == sum(e["from_draft"] for e in tokens)


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        (
            b"\x7fELF\x02\x01\x01\x00\x00\x00binary",
            "stdin looks like a binary file, not text (hint",
        ),
        ("café".encode("latin-1"), "stdin is not UTF-8 text (byte 3) (hint: convert it"),
        (b"   \n\n", "the prompt is empty"),
    ],
)
def test_bad_stdin_is_one_clear_line_and_exit_2(stdin: bytes, message: str, smol_f32: Path):
    done = specllama("run", "-t", str(smol_f32), stdin=stdin)
    assert done.returncode == 2
    assert done.stdout == b""
    [line] = error_lines(done.stderr)
    assert line.startswith(f"error: {message}")


def test_usage_and_missing_model_exit_codes(smol_f32: Path, tmp_path: Path):
    both = specllama("run", "hi", "-t", str(smol_f32), "--json", "--jsonl")
    assert both.returncode == 2
    assert error_lines(both.stderr) == ["error: --json and --jsonl exclude each other: pick one"]
    missing = specllama("run", "hi", "-t", str(tmp_path / "nope.gguf"))
    assert missing.returncode in (1, 2)
    assert len(error_lines(missing.stderr)) == 1
    assert error_lines(missing.stderr)[0].startswith("error: ")
    assert b"Traceback" not in missing.stderr
    assert specllama("run", "--no-such-option").returncode == 2  # typer's own usage error


def test_chat_with_piped_lines_keeps_going_after_bad_input(models: list[str], tmp_path: Path):
    saved = tmp_path / "c.json"
    lines = f"/frobnicate\n/draft-max abc\n\nName a colour.\n/save {saved}\n/exit\n"
    done = specllama("chat", *models, stdin=lines.encode(), env={"XDG_STATE_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert ESC.decode() not in out  # not a terminal: no colour, no live line
    assert "unknown command /frobnicate" in out
    assert "expected a whole number of tokens" in out
    assert "nothing to send" in out
    assert "cached tokens" in out  # the answer's summary
    messages = json.loads(saved.read_text(encoding="utf-8"))["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]


def test_chat_exits_0_at_end_of_input(models: list[str], tmp_path: Path):
    done = specllama("chat", *models, stdin=b"", env={"XDG_STATE_HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr


def test_colour_only_on_a_terminal_and_never_under_no_color(monkeypatch: pytest.MonkeyPatch):
    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert ui.color_wanted(False, Tty())
    assert not ui.color_wanted(True, Tty())
    assert not ui.color_wanted(False, open(os.devnull, "w"))  # noqa: SIM115
    monkeypatch.setenv("NO_COLOR", "1")
    assert not ui.color_wanted(False, Tty())
