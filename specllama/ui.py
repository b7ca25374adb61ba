"""Everything that touches rich: stats lines, error lines. No arithmetic on logits here."""

from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.text import Text

from specllama.stats import GenerationStats


def stderr_console() -> Console:
    """Colour only for a terminal (rich checks isatty) and never under NO_COLOR."""
    return Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")), highlight=False)


def summary_line(stats: GenerationStats) -> str:
    parts = [
        f"{stats.n_generated} tokens in {stats.time_s:.2f} s ({stats.tokens_per_s:.1f} tok/s)",
        f"drafter {stats.drafter}",
    ]
    if stats.n_drafted:
        parts.append(
            f"accepted {stats.acceptance_rate:.0%} ({stats.n_accepted}/{stats.n_drafted}), "
            f"{stats.mean_accepted_per_round:.2f} per round"
        )
    parts.append(f"finish {stats.finish_reason}")
    return " · ".join(parts)


def print_summary(stats: GenerationStats, console: Console | None = None) -> None:
    (console or stderr_console()).print(f"[dim]{summary_line(stats)}[/dim]")


def print_error(message: str, hint: str | None = None, console: Console | None = None) -> None:
    """One line: the message in red, then the hint. Text objects: no markup parsed from paths."""
    line = Text.assemble(("error: ", "bold red"), (message, "red"))
    if hint:
        line.append(f" (hint: {hint})", style="dim")
    (console or stderr_console()).print(line, soft_wrap=True)


def write_text(text: str) -> None:
    """Generated text goes to stdout as it arrives, unstyled, so pipes stay clean."""
    sys.stdout.write(text)
    sys.stdout.flush()
