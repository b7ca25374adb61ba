"""Everything that touches rich: stats lines, error lines. No arithmetic on logits here."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import time
from typing import Any, TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from specllama.engine.stats import GenerationStats


def stderr_console(*, color: bool = True) -> Console:
    """Colour only for a terminal (rich checks isatty), never under NO_COLOR, nor when the
    user said --no-color (`color` False)."""
    plain = not color or bool(os.environ.get("NO_COLOR"))
    return Console(stderr=True, no_color=plain, highlight=False)


def summary_line(stats: GenerationStats, *, exact: bool = False) -> str:
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
    if stats.seed is not None:
        parts.append(f"seed {stats.seed}")
    if exact:
        parts.append("exact")
    return " · ".join(parts)


def print_summary(
    stats: GenerationStats, console: Console | None = None, *, exact: bool = False
) -> None:
    (console or stderr_console()).print(f"[dim]{summary_line(stats, exact=exact)}[/dim]")


def print_error(message: str, hint: str | None = None, console: Console | None = None) -> None:
    """One line: the message in red, then the hint. Text objects: no markup parsed from paths."""
    line = Text.assemble(("error: ", "bold red"), (message, "red"))
    if hint:
        line.append(f" (hint: {hint})", style="dim")
    (console or stderr_console()).print(line, soft_wrap=True)


def print_warning(message: str, console: Console | None = None) -> None:
    line = Text.assemble(("warning: ", "bold yellow"), (message, "yellow"))
    (console or stderr_console()).print(line, soft_wrap=True)


class EngineMessages(logging.Handler):
    """What the layers below say on the `specllama` logger, one line each on stderr: warnings
    always, notices (info: "probing once…") only on a terminal, like progress bars."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            print_warning(record.getMessage())
        elif sys.stderr.isatty():
            stderr_console().print(Text(record.getMessage(), style="dim"), soft_wrap=True)


def show_engine_messages() -> None:
    """Route the `specllama` logger to stderr (once per process)."""
    logger = logging.getLogger("specllama")
    if not any(isinstance(h, EngineMessages) for h in logger.handlers):
        logger.addHandler(EngineMessages(logging.INFO))
        if logger.level == logging.NOTSET or logger.level > logging.INFO:
            logger.setLevel(logging.INFO)


def write_text(text: str) -> None:
    """Generated text goes to stdout as it arrives, unstyled, so pipes stay clean."""
    sys.stdout.write(text)
    sys.stdout.flush()


def write_thinking(text: str, *, end: bool = False) -> None:
    """A model's thinking, for `run`: on stderr (dimmed where colours are wanted) when it is a
    terminal, else nowhere: stdout carries only the answer. `end`: the thinking is over."""
    if not sys.stderr.isatty():
        return
    dim = color_wanted(stream=sys.stderr)
    if text:
        sys.stderr.write(f"\033[2m{text}\033[0m" if dim else text)
    if end:
        sys.stderr.write("\n")
    sys.stderr.flush()


# -- chat: streamed answers coloured by origin, a live stats line, tables ---------------------

DRAFT_STYLE = "green"  # a draft token the target accepted
TARGET_STYLE = "blue"  # a token the target chose itself
PROMPT = ">>> "


def color_wanted(no_color: bool = False, stream: TextIO | None = None) -> bool:
    """Colour the chat only in a terminal, unless --no-color or NO_COLOR says otherwise."""
    stream = stream or sys.stdout
    return not no_color and not os.environ.get("NO_COLOR") and stream.isatty()


def live_line(
    stats: GenerationStats, draft_length: int, speedup: float | None, stopping: bool = False
) -> Text:
    """The line under a streaming answer: speed, acceptance, draft length, speedup est."""
    parts = [f"{stats.tokens_per_s:5.1f} tok/s"]
    if stats.n_drafted:
        parts.append(f"accepted {stats.acceptance_rate:.0%}")
        parts.append(f"{stats.mean_accepted_per_round:.1f}/round")
    parts.append(f"draft {draft_length}")
    if speedup is not None:
        parts.append(f"est. {speedup:.2f}x vs target alone")
    line = Text("⏵ " + " · ".join(parts), style="dim")
    if stopping:
        line.append("  stopping…", style="yellow")
    return line


def answer_summary(
    stats: GenerationStats,
    *,
    speedup: float | None,
    target_alone: float,
    n_prompt_new: int,
    n_prompt_reused: int,
) -> str:
    parts = [f"{stats.n_generated} tokens, {stats.tokens_per_s:.1f} tok/s"]
    if stats.n_drafted:
        parts.append(
            f"accepted {stats.acceptance_rate:.0%} ({stats.n_accepted}/{stats.n_drafted}), "
            f"{stats.mean_accepted_per_round:.1f}/round"
        )
    else:
        parts.append(f"drafter {stats.drafter}: nothing drafted")
    if speedup is not None:
        parts.append(f"est. {speedup:.2f}x vs target alone ({target_alone:.1f} tok/s)")
    parts.append(f"prompt {n_prompt_new} new + {n_prompt_reused} cached tokens")
    parts.append(stats.finish_reason)
    if stats.seed is not None:
        parts.append(f"seed {stats.seed}")
    return " · ".join(parts)


class ChatView:
    """What `specllama chat` shows. In a terminal, the answer streams above a live stats line;
    elsewhere it is written plainly. With `record`, a copy of the session is kept for SVG export.
    """

    def __init__(
        self,
        *,
        color: bool,
        console: Console | None = None,
        live: bool | None = None,
        record: bool = False,
    ) -> None:
        self.console = console or Console(highlight=False, no_color=not color)
        self.color = color
        self.live_enabled = self.console.is_terminal if live is None else live
        self.recorder = (
            Console(
                record=True,
                file=io.StringIO(),
                force_terminal=True,
                color_system="truecolor",
                width=min(self.console.width, 100),
                highlight=False,
            )
            if record
            else None
        )
        self._live: Live | None = None
        self._line = Text()  # the answer's unfinished line (live mode)
        self._answer = Text()  # the whole answer, for the recorder
        self._status = Text()
        self._last_refresh = 0.0
        self._thought = Text()  # the thinking's last line, dimmed in the live area
        self.thinking_folded = False  # the answer's thinking ended, folded into one line

    # -- plumbing ---------------------------------------------------------------------------

    def set_color(self, on: bool) -> None:
        self.color = on
        self.console.no_color = not on

    def _print(self, *renderables: object, **kwargs: Any) -> None:
        self.console.print(*renderables, **kwargs)
        if self.recorder is not None:
            self.recorder.print(*renderables, **kwargs)

    def _style(self, from_draft: bool) -> str:
        if not self.color:
            return ""
        return DRAFT_STYLE if from_draft else TARGET_STYLE

    def prompt(self) -> str:
        """The input prompt; readline needs the escape codes wrapped in \\001..\\002."""
        if self.color and self.console.is_terminal:
            return f"\001\033[1;36m\002{PROMPT}\001\033[0m\002"
        return PROMPT

    def echo_input(self, line: str) -> None:
        """The user's line, for the recording only (the terminal already shows it)."""
        if self.recorder is not None:
            self.recorder.print(Text.assemble((PROMPT, "bold cyan"), line))

    # -- messages ---------------------------------------------------------------------------

    def banner(self, title: str, facts: list[str]) -> None:
        self._print(Text(title, style="bold"))
        for fact in facts:
            self._print(Text(fact, style="dim"))
        legend = Text.assemble(
            ("tokens: ", "dim"),
            ("drafted and accepted", DRAFT_STYLE if self.color else "underline"),
            (" · ", "dim"),
            ("chosen by the target", TARGET_STYLE if self.color else ""),
            ("  ·  /help for commands, Ctrl-C stops an answer, Ctrl-D leaves", "dim"),
        )
        self._print(legend)

    def info(self, message: str) -> None:
        self._print(Text(message))

    def notice(self, message: str) -> None:
        self._print(Text(message, style="yellow"))

    def error(self, message: str, hint: str | None = None) -> None:
        print_error(message, hint, self.console)
        if self.recorder is not None:
            print_error(message, hint, self.recorder)

    def help(self, commands: list[tuple[str, str]]) -> None:
        table = Table(box=None, show_header=False, pad_edge=False)
        table.add_column(style="bold")
        table.add_column(style="dim")
        for usage, what in commands:
            table.add_row(usage, what)
        self._print(table)

    def stats_table(self, rows: list[tuple[str, str]], histogram: dict[int, int]) -> None:
        table = Table(title="session", box=box.SIMPLE_HEAD, show_header=False, title_justify="left")
        table.add_column(style="bold")
        table.add_column(justify="right")
        for name, value in rows:
            table.add_row(name, value)
        self._print(table)
        if not histogram:
            self._print(Text("no rounds drafted anything yet", style="dim"))
            return
        hist = Table(
            title="accepted draft tokens per round",
            box=box.SIMPLE_HEAD,
            title_justify="left",
        )
        hist.add_column("accepted", justify="right")
        hist.add_column("rounds", justify="right")
        hist.add_column("", min_width=10)
        most = max(histogram.values())
        for n in range(max(histogram) + 1):
            count = histogram.get(n, 0)
            bar = "█" * round(30 * count / most) if most else ""
            hist.add_row(str(n), str(count), Text(bar, style=DRAFT_STYLE if n else TARGET_STYLE))
        self._print(hist)

    # -- a streamed answer ------------------------------------------------------------------

    def answer_begin(self) -> None:
        self._line = Text()
        self._answer = Text()
        self._thought = Text()
        self.thinking_folded = False
        self._status = Text("⏵ thinking…", style="dim")
        if self.live_enabled:
            self._live = Live(
                self._live_group(),
                console=self.console,
                auto_refresh=False,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()

    def _live_group(self) -> Group:
        if self._thought.plain:
            return Group(self._thought, self._status)
        return Group(self._line, self._status)

    def answer_thinking(self, piece: str) -> None:
        """The model's thinking as it streams: its last line, dimmed, in the live area only
        (folded into one line once it ends; `show_thinking` unfolds it)."""
        if self._live is None:
            return
        last = (self._thought.plain + piece).rsplit("\n", 1)[-1]
        width = max(self.console.width - 1, 20)
        self._thought = Text(last[-width:] or " ", style="dim italic")
        self._refresh(force=False)

    def thinking_end(self, n_tokens: int) -> None:
        """The thinking is over: one dimmed line says how long it was."""
        self._thought = Text()
        self.thinking_folded = True
        line = Text(f"▸ thought for {n_tokens} tokens (/thinking shows it)", style="dim")
        self._print(line)
        if self._live is not None:
            self._refresh()

    def show_thinking(self, text: str) -> None:
        """The last answer's thinking, unfolded."""
        self._print(Text(text, style="dim italic"), soft_wrap=True)

    def answer_token(self, piece: str, from_draft: bool) -> None:
        if not piece:
            return
        style = self._style(from_draft)
        self._answer.append(piece, style)
        if self._live is None:
            self.console.print(Text(piece, style), end="", soft_wrap=True)
            self.console.file.flush()
            return
        self._line.append(piece, style)
        self._flush_lines()
        self._refresh()

    def _flush_lines(self) -> None:
        """Print finished lines above the live area; keep the live area one line high."""
        assert self._live is not None
        width = max(self.console.width - 1, 20)
        while True:
            plain = self._line.plain
            cut = plain.find("\n")
            if cut >= 0:
                done, rest = self._line[:cut], self._line[cut + 1 :]
            elif cell_len(plain) > width:
                space = plain.rfind(" ", 0, width)
                cut = space + 1 if space > 0 else width
                done, rest = self._line[:cut], self._line[cut:]
            else:
                return
            self.console.print(done, soft_wrap=True)
            self._line = rest
            self._live.update(self._live_group())

    def answer_progress(self, status: Text) -> None:
        self._status = status
        if self._live is not None:
            self._refresh(force=False)

    def _refresh(self, force: bool = True) -> None:
        assert self._live is not None
        now = time.monotonic()
        if force or now - self._last_refresh > 0.05:
            self._live.update(self._live_group(), refresh=True)
            self._last_refresh = now

    def answer_end(self, summary: str, mark: str = "") -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
            tail = self._line.copy()
            if mark:
                tail.append(mark, style="bold yellow")
            self.console.print(tail, soft_wrap=True)
        else:
            self.console.print(Text(mark, style="bold yellow") if mark else "", soft_wrap=True)
        if self.recorder is not None:
            answer = self._answer.copy()
            if mark:
                answer.append(mark, style="bold yellow")
            self.recorder.print(answer)
        self._print(Text(summary, style="dim"))

    def answer_abort(self) -> None:
        """An answer that failed: stop the live area, keep what was shown."""
        if self._live is not None:
            self._live.stop()
            self._live = None
            if self._line.plain:
                self.console.print(self._line, soft_wrap=True)
        elif self._answer.plain:
            self.console.print()

    def save_svg(self, path: str, title: str = "specllama chat") -> None:
        if self.recorder is not None:
            self.recorder.save_svg(path, title=title)


def write_json_line(obj: dict[str, object]) -> None:
    """One JSON object per line on stdout, flushed at once (for --jsonl consumers)."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


# -- serve: the ready banner and the server's log lines ---------------------------------------


def print_serving(
    url: str, facts: list[str], console: Console | None = None, title: str = "specllama serve "
) -> None:
    console = console or stderr_console()
    console.print(Text.assemble((title, "bold"), (url, "bold cyan")), soft_wrap=True)
    for fact in facts:
        console.print(Text(f"  {fact}", style="dim"), soft_wrap=True)


def show_log(logger: logging.Logger, console: Console | None = None) -> None:
    """Print the logger's records from INFO up as lines on stderr, terminal or not (a server's
    log is read from files too), and only here: not also as the `specllama` logger's notices."""
    logger.addHandler(LogLines(console))
    logger.setLevel(logging.INFO)
    logger.propagate = False


class LogLines(logging.Handler):
    """Log records as lines on stderr: dim for information, yellow for warnings, red errors."""

    def __init__(self, console: Console | None = None) -> None:
        super().__init__()
        self.console = console or stderr_console()

    def emit(self, record: logging.LogRecord) -> None:
        style = "dim"
        if record.levelno >= logging.WARNING:
            style = "red" if record.levelno >= logging.ERROR else "yellow"
        self.console.print(Text(self.format(record), style=style), soft_wrap=True)
