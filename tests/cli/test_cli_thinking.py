"""Thinking in `run` and `chat`, on a real small model given a thinking family's template
(Qwen3.5's, whose generation prompt opens the thinking: the greedy SmolLM2 never writes
`<think>` itself, so its answer begins inside the thinking, and ends there unless the thinking
is bounded or off)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from chat_templates import all_templates
from model_factory import cache_dir, copy_gguf
from rich.console import Console
from typer.testing import CliRunner

from specllama.cli.app import app
from specllama.cli.repl import ChatSession
from specllama.cli.ui import ChatView
from specllama.engine.sampling import SamplingParams
from specllama.session import Engine, EngineConfig

pytestmark = pytest.mark.slow

PROMPT = "Name three fruits."


@pytest.fixture(scope="module")
def thinker(smol_q4: Path) -> Path:
    """SmolLM2 with Qwen3.5's template (F32, so that every run gives the same tokens)."""
    path = cache_dir() / "SmolLM2-135M-Instruct.F32.qwen35-template.gguf"
    if not path.exists():
        template = all_templates()["Qwen3.5-4B"]
        partial = path.with_suffix(".partial")
        copy_gguf(smol_q4, partial, chat_template=template)
        partial.rename(path)
    return path


def run(thinker: Path, *args: str):
    argv = ["run", PROMPT, "--target", str(thinker), "--drafter", "none", "--ctx", "512"]
    result = CliRunner().invoke(app, [*argv, *args])
    assert result.exit_code == 0, result.output
    return result


def as_json(thinker: Path, *args: str) -> dict:
    return json.loads(run(thinker, "--json", *args).stdout)


def test_run_writes_only_the_answer_on_stdout_and_the_thinking_apart(thinker):
    said = as_json(thinker, "-n", "16")
    assert said["thinking"]  # the prompt opened it; the model never closed it
    assert said["text"] == "" and said["n_generated"] == 16
    plain = run(thinker, "-n", "16")
    assert plain.stdout == said["text"] + "\n"
    assert said["thinking"] not in plain.stderr  # stderr is no terminal here: nothing of it
    lines = [json.loads(line) for line in run(thinker, "--jsonl", "-n", "16").stdout.splitlines()]
    streamed = "".join(line.get("thinking", "") for line in lines if line["type"] == "token")
    assert streamed == said["thinking"] and lines[-1]["thinking"] == said["thinking"]


def test_reasoning_off_renders_the_templates_switch_and_the_answer_is_all_text(thinker):
    off = as_json(thinker, "-n", "16", "--reasoning", "off")
    assert off["thinking"] is None and off["text"].strip()
    zero = as_json(thinker, "-n", "16", "--reasoning-budget", "0")  # a budget of 0 is off
    assert (zero["text"], zero["thinking"]) == (off["text"], None)
    on = as_json(thinker, "-n", "16", "--reasoning", "on")
    assert on["thinking"] == as_json(thinker, "-n", "16")["thinking"]  # on is the default here


def test_a_budget_closes_the_thinking_and_the_answer_follows(thinker):
    unbounded = [
        json.loads(line)
        for line in run(thinker, "--jsonl", "-n", "24").stdout.splitlines()
        if '"token"' in line
    ]
    first_five = "".join(line.get("thinking", "") for line in unbounded[:5])
    bounded = as_json(thinker, "-n", "24", "--reasoning-budget", "5")
    assert bounded["thinking"] == first_five.strip()  # the same tokens, up to the budget
    assert bounded["text"].strip() and "</think>" not in bounded["text"]
    if bounded["finish_reason"] == "length":  # the forced marker counts as generated
        assert bounded["n_generated"] == 24
    else:
        assert bounded["finish_reason"] == "stop" and bounded["n_generated"] < 24


def test_bad_reasoning_options_are_one_line_usage_errors(thinker):
    for args in (["--reasoning", "maybe"], ["--reasoning-budget", "-5"]):
        argv = ["run", PROMPT, "--target", str(thinker), "--drafter", "none", *args]
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().startswith("error:") and "reasoning" in result.stderr


# -- chat -------------------------------------------------------------------------------------


def text_view() -> ChatView:
    console = Console(file=io.StringIO(), force_terminal=True, width=120, highlight=False)
    return ChatView(color=True, console=console, live=False)


def shown(view: ChatView) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", view.console.file.getvalue())


@pytest.fixture(scope="module")
def engine(thinker: Path):
    config = EngineConfig(target=thinker, drafter="none", n_ctx=1024, n_threads=2)
    with Engine(config) as loaded:
        yield loaded


def session_on(engine: Engine, view: ChatView, **options) -> ChatSession:
    engine.target.rollback(0)
    params = SamplingParams(temperature=0.0)
    return ChatSession(engine, view, params=params, max_tokens=12, **options)


def test_chat_folds_the_thinking_into_one_line_and_unfolds_it_on_asking(engine):
    view = text_view()
    session = session_on(engine, view)
    turn = session.answer(PROMPT)
    assert turn.thinking and turn.text == "" and turn.n_thinking_tokens == 12
    screen = shown(view)
    assert "thought for 12 tokens" in screen and turn.thinking not in screen
    session.handle("/thinking")
    assert turn.thinking in shown(view)
    assert session.conversation.turns[-1].content == ""  # the thinking is not the answer


def test_chat_with_a_budget_shows_the_answer_after_the_folded_thinking(engine):
    view = text_view()
    session = session_on(engine, view, reasoning_budget=4)
    turn = session.answer(PROMPT)
    assert turn.thinking and turn.text.strip() and turn.n_thinking_tokens >= 4
    screen = shown(view)
    assert screen.index("thought for") < screen.index(turn.text.strip()[:10])
    assert session.conversation.turns[-1].content == turn.text


def test_chat_with_thinking_off_answers_without_thinking(engine):
    view = text_view()
    turn = session_on(engine, view, reasoning="off").answer(PROMPT)
    assert turn.thinking is None and turn.text.strip()
    assert "thought for" not in shown(view)
