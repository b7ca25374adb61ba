"""The PNG plot of `specllama bench --plot FILE.png` (optional: matplotlib, `pip install
'specllama[plot]'`), from the report dict (`summary.to_json`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specllama.bench.configs import TARGET
from specllama.errors import UsageError


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
