"""What the terminal shows: speedup bars with a mark at 1.0, the table with another tool's rows
(figures it does not report as '-'), what it all rests on, and the command's help."""

from __future__ import annotations

from rich.console import Console
from typer.testing import CliRunner

from specllama.bench.report import bar_text, report_table, speedup_bars
from specllama.bench.summary import bar_scale
from specllama.cli.app import app


def spread(median, low=None, high=None):
    return {"median": median, "min": low or median, "max": high or median}


def row(config, category, speedup, **extra):
    return {
        "config": config, "category": category, "n_prompts": 1, "n_runs": 1,
        "tokens_per_s": spread(10.0 * speedup), "speedup": spread(speedup),
        "acceptance_rate": 0.5, "mean_accepted_per_round": 1.5,
        "accepted_histogram": {"1": 1}, "overhead_ms_per_round": 0.5, "equals_target": 1.0,
        "agreement": 1.0, **extra,
    }  # fmt: skip


REPORT = {
    "settings": {"max_tokens": 48, "repeats": 1, "noise_check": True, "temperature": 0.0,
                 "n_threads": 2},
    "models": {"target": {"name": "t.gguf"}, "draft": {"name": "d.gguf"}},
    "prompts": [{"id": "a", "category": "chat"}, {"id": "b", "category": "code"}],
    "runs": [{}] * 10,
    "noise": spread(0.04, 0.02, 0.06),
    "summary": [
        row("target", "chat", 1.0),
        row("adaptive", "chat", 0.5),
        row("adaptive", "code", 1.5),
        row("llama.cpp ngram-mod", "code", 1.25, acceptance_rate=None, equals_target=None,
            mean_accepted_per_round=None, overhead_ms_per_round=None, accepted_histogram={}),
    ],
}  # fmt: skip


def render(renderable) -> str:
    console = Console(width=200, no_color=True, record=True)
    console.print(renderable)
    return console.export_text()


def test_bars_are_as_long_as_the_speedup_with_a_mark_at_one():
    assert bar_text(1.5, 2.0, 40).plain == "█" * 30  # past 1.0: no mark to show
    assert bar_text(0.5, 2.0, 40).plain == "█" * 10 + " " * 10 + "│"
    assert bar_text(0.55, 2.0, 40).plain == "█" * 11 + " " * 9 + "│"
    assert bar_text(0.53125, 2.0, 40).plain == "█" * 10 + "▋" + " " * 9 + "│"  # 5 eighths
    assert bar_text(1.0, 2.0, 40).style == "green" and bar_text(0.9, 2.0, 40).style == "red"
    assert bar_scale(REPORT["summary"]) == 2.0  # past the largest speedup, in halves


def test_the_bars_name_each_category_and_configuration_and_what_they_rest_on():
    text = render(speedup_bars(REPORT))
    assert "rests on: 2 prompts in 2 categories; 10 runs (1 round each, the target alone " in text
    assert "were 4.0% apart (median; up to 6.0%)" in text
    lines = text.splitlines()
    chat = next(line for line in lines if line.startswith("chat"))
    assert "adaptive" in chat and chat.rstrip().endswith("0.50x") and "│" in chat
    assert any("llama.cpp ngram-mod" in line and "1.25x" in line for line in lines)
    assert not any(line.split()[:2] == ["chat", "target"] for line in lines if line.split())


def test_the_table_shows_another_tools_rows_with_what_it_does_not_report_as_dashes():
    text = render(report_table(REPORT))
    theirs = next(line for line in text.splitlines() if "llama.cpp ngram-mod" in line)
    cells = [c.strip() for c in theirs.split("│")[1:-1]]
    assert cells[:5] == ["llama.cpp ngram-mod", "code", "1/1", "12.5", "1.25x (1.25–1.25)"]
    assert cells[5:] == ["-", "-", "-", "-", "-"]
    assert "rests on: 2 prompts" in text


def test_the_help_shows_the_quick_default_and_the_users_prompts():
    result = CliRunner().invoke(app, ["bench", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "Quick by default" in result.output and "--prompts FILE.jsonl" in result.output
    for option in ("--full", "--vs-llamacpp", "[DIR]", "--report", "FILE.html"):
        assert option in result.output
