"""The terminal around `specllama chat`: Ctrl-C deferred to a clean point while an answer
streams, and line editing with a history and command completion."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any


class _Interrupt:
    """Ctrl-C while an answer streams: noted here, acted on between events.

    Raising KeyboardInterrupt in the middle of a llama.cpp call could leave the context's
    bookkeeping half-updated; a flag checked after each event stops at a clean point instead.
    """

    def __init__(self) -> None:
        self.hit = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.hit = True


@contextlib.contextmanager
def deferred_sigint() -> Iterator[_Interrupt]:
    flag = _Interrupt()
    try:
        previous = signal.signal(signal.SIGINT, flag)
    except ValueError:  # not the main thread: leave Ctrl-C as it is
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def setup_readline(history: Path, commands: Sequence[str]) -> Callable[[], None]:
    """Line editing, history kept in `history`, Tab completes `commands`. Returns a function
    that appends the newest line to the history file."""
    try:
        import readline
    except ImportError:  # Windows without pyreadline: plain input()
        return lambda: None
    with contextlib.suppress(OSError):
        history.parent.mkdir(parents=True, exist_ok=True)
        if history.exists():
            readline.read_history_file(history)
    readline.set_history_length(1000)

    def complete(text: str, state: int) -> str | None:
        matches = [c + " " for c in commands if c.startswith(text)] if text[:1] == "/" else []
        return matches[state] if state < len(matches) else None

    readline.set_completer(complete)
    readline.set_completer_delims(" \t\n")
    if "libedit" in (readline.__doc__ or ""):
        readline.parse_and_bind("bind ^I rl_complete")
    else:
        readline.parse_and_bind("tab: complete")

    def save() -> None:
        with contextlib.suppress(OSError):
            if not history.exists():
                history.touch()
            readline.append_history_file(1, history)
            readline.set_history_length(1000)

    return save
