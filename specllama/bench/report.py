"""What `specllama bench` shows in the terminal: the progress bar (with the time left), the
table and the speedup bars, all from the report dict (`summary.to_json`); no measuring here."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, ProgressColumn, Task, TextColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from specllama.bench.configs import TARGET
from specllama.bench.runner import Progress
from specllama.bench.summary import bar_scale, describe_constraint_cost, rests_on, speedup_rows
from specllama.bench.timing import Clock, ProgressUpdate, describe_left

BAR_WIDTH = 40


def histogram_text(histogram: dict[str, int]) -> str:
    """Accepted lengths, in percent of the rounds that drafted: '0:40 1:20 4:40'."""
    total = sum(histogram.values())
    if not total:
        return "-"
    return " ".join(f"{k}:{100 * v / total:.0f}" for k, v in histogram.items())


# -- progress ---------------------------------------------------------------------------------


class TimeLeftColumn(ProgressColumn):
    """'about 2 min 10 s left', from the estimate the bench passes along at each run's start
    (`timing.TimeLeft`), counting down while the run goes on."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        super().__init__()
        self.clock = clock

    def render(self, task: Task) -> Text:
        left, at = task.fields.get("left_s"), task.fields.get("left_at")
        if left is not None and at is not None:
            left = max(left - (self.clock() - at), 0.0)
        return Text(describe_left(left), style="progress.remaining")


@contextmanager
def progress_bar(console: Console) -> Iterator[Progress]:
    """A transient bar on stderr: runs done, what runs now (category · configuration), and the
    time left."""
    column = TimeLeftColumn()
    with RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        column,
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("bench", total=None, left_s=None)

        def update(state: ProgressUpdate) -> None:
            bar.update(
                task,
                description=f"bench {state.now}",
                completed=state.done,
                total=state.total,
                left_s=state.left_s,
                left_at=column.clock(),
            )

        yield update


# -- the table --------------------------------------------------------------------------------


def print_report(report: dict[str, Any]) -> None:
    """The table and the bars on stdout: as wide as the terminal, or 160 columns when not a
    terminal."""
    console = Console(no_color=bool(os.environ.get("NO_COLOR")), highlight=False)
    if not console.is_terminal:
        console = Console(width=160, no_color=True, highlight=False)
    console.print(report_table(report))
    console.print()
    console.print(speedup_bars(report))


def _fmt_spread(s: dict[str, float] | None, unit: str = "") -> str:
    if not s:
        return "-"
    return f"{s['median']:.2f}{unit} ({s['min']:.2f}–{s['max']:.2f})"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report_table(report: dict[str, Any]) -> Table:
    """One row per configuration and category: speed, speedup, acceptance, overhead."""
    table = Table(title="specllama bench", title_style="bold")
    for name, justify in (
        ("config", "left"),
        ("category", "left"),
        ("prompts/runs", "right"),
        ("tok/s", "right"),
        ("speedup (prompt range)", "right"),
        ("accept", "right"),
        ("acc/rnd", "right"),
        ("accepted length % of rounds", "left"),
        ("ovh ms", "right"),
        ("=target", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=name != "accepted length % of rounds")  # type: ignore[arg-type]
    previous = None
    for row in report["summary"]:
        if previous is not None and row["config"] != previous:
            table.add_section()
        previous = row["config"]
        speedup = row["speedup"]
        style = ""
        if speedup and row["config"] != TARGET:
            style = "green" if speedup["median"] >= 1.0 else "red"
        table.add_row(
            row["config"],
            row["category"],
            f"{row['n_prompts']}/{row['n_runs']}",
            f"{row['tokens_per_s']['median']:.1f}",
            Text(_fmt_spread(speedup, "x"), style=style),
            _fmt(row["acceptance_rate"], ".0%"),
            _fmt(row["mean_accepted_per_round"], ".2f"),
            histogram_text(row["accepted_histogram"]),
            _fmt(row["overhead_ms_per_round"], ".2f"),
            _fmt(row["equals_target"], ".0%"),
            style="bold" if row["category"] == "all" else "",
        )
    table.caption = caption(report)
    return table


def caption(report: dict[str, Any]) -> str:
    """Under the table: the pair and settings, what the figures rest on, the calibration, the
    other tools, and what was left out."""
    settings = report["settings"]
    models = report["models"]
    draft = (models.get("draft") or {}).get("name", "none")
    if (models.get("draft") or {}).get("across_tokenizers"):
        draft += " (across tokenizers: its text re-tokenised)"
    lines = [
        f"target {models['target']['name']} · draft {draft} · "
        f"temperature {settings['temperature']} · {settings['n_threads']} threads"
        + ("" if settings.get("extra_buffers", True) else " · extra buffers off")
        + (" · exact (--exact)" if settings.get("exact") else ""),
        f"rests on: {rests_on(report)}",
    ]
    if cost := describe_constraint_cost(report):
        lines.append(cost)
    if report.get("calibration"):
        measured = report["calibration"]
        lines.append(f"calibration: {measured['summary']}")
        if measured.get("status"):
            lines.append(f"  ({measured['status']['describe']})")
    for name, tool in (report.get("tools") or {}).items():
        lines.append(f"{name}: {tool['binary']} (version {tool['version']})")
    lines += list(report.get("notices") or [])
    return "\n".join(lines)


# -- the bars ---------------------------------------------------------------------------------


def bar_text(speedup: float, scale: float, width: int = BAR_WIDTH) -> Text:
    """A bar of `speedup` on [0, scale], in eighths of a cell, with a mark at 1.0 where the bar
    does not reach it: green at or past 1.0, red below."""
    eighths = round(max(speedup, 0.0) / scale * width * 8)
    full, part = divmod(min(eighths, width * 8), 8)
    bar = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")
    text = Text(bar, style="green" if speedup >= 1.0 else "red")
    one = round(width / scale)
    if len(bar) <= one:
        text.append(" " * (one - len(bar)) + "│", style="dim")
    return text


def speedup_bars(report: dict[str, Any]) -> Group:
    """The speedup over the target alone per category and configuration (median over the
    category's prompts, the range beside it), as bars with a mark at 1.0."""
    rows = speedup_rows(report)
    scale = bar_scale(rows)
    grid = Table.grid(padding=(0, 1))
    for _ in range(4):
        grid.add_column()
    categories = list(dict.fromkeys(r["category"] for r in rows))
    for category in categories:
        for i, row in enumerate(r for r in rows if r["category"] == category):
            s = row["speedup"]
            grid.add_row(
                Text(category if i == 0 else "", style="bold"),
                row["config"],
                bar_text(s["median"], scale),
                f"{s['median']:.2f}x"
                + (f" ({s['min']:.2f}–{s['max']:.2f})" if s["min"] != s["max"] else ""),
            )
    title = Text(
        f"speedup over the target alone (│ = 1.0x, bar end = {scale:.1f}x); "
        f"rests on: {rests_on(report)}",
        style="bold",
    )
    return Group(title, grid)
