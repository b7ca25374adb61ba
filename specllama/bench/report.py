"""What `specllama bench` shows: the progress bar, the table in the terminal and the PNG plot,
all from the report dict (`bench.to_json`); no measuring here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from specllama.bench.runner import TARGET, Progress
from specllama.errors import UsageError


def histogram_text(histogram: dict[str, int]) -> str:
    """Accepted lengths, in percent of the rounds that drafted: '0:40 1:20 4:40'."""
    total = sum(histogram.values())
    if not total:
        return "-"
    return " ".join(f"{k}:{100 * v / total:.0f}" for k, v in histogram.items())


# -- the terminal report (rich) --------------------------------------------------------------


@contextmanager
def progress_bar(console: Console) -> Iterator[Progress]:
    """A transient bar on stderr: `(what, done, total)`."""
    with RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("bench", total=None)

        def update(what: str, done: int, total: int) -> None:
            bar.update(task, description=f"bench {what}", completed=done, total=total)

        yield update


def print_report(report: dict[str, Any]) -> None:
    """The table on stdout: as wide as the terminal, or 160 columns when not a terminal."""
    console = Console(no_color=bool(os.environ.get("NO_COLOR")), highlight=False)
    if not console.is_terminal:
        console = Console(width=160, no_color=True, highlight=False)
    console.print(report_table(report))


def _fmt_spread(s: dict[str, float] | None, unit: str = "") -> str:
    if not s:
        return "-"
    return f"{s['median']:.2f}{unit} ({s['min']:.2f}–{s['max']:.2f})"


def report_table(report: dict[str, Any]) -> Table:
    """One row per configuration and category: speed, speedup, acceptance, overhead."""
    table = Table(title="specllama bench", title_style="bold")
    for name, justify in (
        ("config", "left"),
        ("category", "left"),
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
        rate = row["acceptance_rate"]
        mean = row["mean_accepted_per_round"]
        speedup = row["speedup"]
        style = ""
        if speedup and row["config"] != TARGET:
            style = "green" if speedup["median"] >= 1.0 else "red"
        table.add_row(
            row["config"],
            row["category"],
            f"{row['tokens_per_s']['median']:.1f}",
            Text(_fmt_spread(speedup, "x"), style=style),
            "-" if rate is None else f"{rate:.0%}",
            "-" if mean is None else f"{mean:.2f}",
            histogram_text(row["accepted_histogram"]),
            f"{row['overhead_ms_per_round']:.2f}",
            f"{row['equals_target']:.0%}",
            style="bold" if row["category"] == "all" else "",
        )
    settings = report["settings"]
    models = report["models"]
    draft = (models.get("draft") or {}).get("name", "none")
    table.caption = (
        f"target {models['target']['name']} · draft {draft} · "
        f"{settings['max_tokens']} tokens · {settings['repeats']} rounds · "
        f"temperature {settings['temperature']} · {settings['n_threads']} threads"
        + ("" if settings.get("extra_buffers", True) else " · extra buffers off")
    )
    if report.get("noise"):
        noise = report["noise"]
        table.caption += (
            f"\nnoise: the target alone's rounds of one prompt differ by {noise['median']:.0%}"
            f" (median; up to {noise['max']:.0%}): a prompt's speedup nearer 1.0 than that is noise"
        )
    if report.get("calibration"):
        measured = report["calibration"]
        table.caption += f"\ncalibration: {measured['summary']}"
        if measured.get("status"):
            table.caption += f"\n  ({measured['status']['describe']})"
    return table


# -- the plot (optional: matplotlib, `pip install 'specllama[plot]'`) ------------------------


def check_plot_support() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib, which is not installed",
            hint="pip install 'specllama[plot]'",
        ) from None


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Two panels: speedup per configuration and category; speedup against draft length."""
    check_plot_support()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["summary"] if r["speedup"] and r["config"] != TARGET]
    configs = list(dict.fromkeys(r["config"] for r in rows))
    categories = list(dict.fromkeys(r["category"] for r in rows))
    fig, (bars, lines) = plt.subplots(1, 2, figsize=(13, 4.8), width_ratios=(2, 1))
    width = 0.8 / max(len(configs), 1)
    for i, config in enumerate(configs):
        values, errors_low, errors_high = [], [], []
        for category in categories:
            found = [r for r in rows if r["config"] == config and r["category"] == category]
            s = found[0]["speedup"] if found else {"median": 0, "min": 0, "max": 0}
            values.append(s["median"])
            errors_low.append(s["median"] - s["min"])
            errors_high.append(s["max"] - s["median"])
        xs = [j + (i - (len(configs) - 1) / 2) * width for j in range(len(categories))]
        bars.bar(xs, values, width, label=config, yerr=[errors_low, errors_high], capsize=2)
    bars.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    bars.set_xticks(range(len(categories)), categories, rotation=20, ha="right")
    bars.set_ylabel("speedup vs target alone (median, prompt range)")
    bars.legend(fontsize=8, ncols=2)
    bars.set_title("Speedup per configuration and category")

    for family, marker in (("model", "o"), ("ngram", "s")):
        for category in categories:
            points = sorted(
                (int(r["config"].split(":")[1]), r["speedup"]["median"])
                for r in rows
                if r["config"].startswith(family + ":") and r["category"] == category
            )
            if points:
                lines.plot(*zip(*points), marker=marker, label=f"{family} · {category}")
    lines.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    lines.set_xlabel("draft length k (fixed)")
    lines.set_ylabel("speedup (median over prompts)")
    lines.set_title("Speedup against draft length")
    lines.legend(fontsize=7)
    model = (report.get("models") or {}).get("target") or {}
    fig.suptitle(f"specllama bench · {model.get('name', '')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
