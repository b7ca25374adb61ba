#!/usr/bin/env python3
"""Re-record docs/chat.svg, the README's opening picture: a real `specllama chat` session on the
default pair, driven in a pseudo-terminal, saved by `--record` when it exits.

    python docs/record_chat.py [--out docs/chat.svg] [-- extra chat options]

Needs the default pair downloaded (`specllama pull`) and `pip install pexpect`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import pexpect

TURNS = [
    "Write a short Python function is_prime(n). Code only, no explanation.",
    "Rename it to check_prime",
]
PROMPT = ">>> "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("chat.svg"))
    parser.add_argument("chat_args", nargs="*", help="after --: passed to specllama chat")
    args = parser.parse_args()
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    child = pexpect.spawn(
        sys.executable,
        ["-m", "specllama", "chat", "-n", "200", "--record", str(args.out), *args.chat_args],
        env=env,
        dimensions=(40, 110),
        timeout=600,
        encoding="utf-8",
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    child.logfile_read = sys.stdout
    for turn in TURNS:
        child.expect_exact(PROMPT)
        child.sendline(turn)
    child.expect_exact(PROMPT)
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    print(f"\nsaved {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
