#!/usr/bin/env python3
"""Re-take docs/chat-page.png, the README's picture of the chat page: a real conversation with
`specllama serve` on the default pair, in the system's headless Chromium, the second answer
compared with the target alone.

    python docs/record_page.py [--out docs/chat-page.png] [-- extra serve options]

Needs the default pair downloaded (`specllama pull`), Chromium (`apt-get install chromium`) and
the test extras (Playwright).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

TURNS = [
    "Write a short Python function is_prime(n). Code only, no explanation.",
    "Rename it to check_prime",
]
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def start_server(extra: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "specllama", "serve", "--port", "0", *extra]
    with open(log, "w") as stderr:
        server = subprocess.Popen(command, stderr=stderr, env={**os.environ, "NO_COLOR": "1"})
    deadline = time.monotonic() + 600
    while not (found := re.search(r"chat page (http://\S+)/", log.read_text())):
        if server.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"specllama serve did not start:\n{log.read_text()}")
        time.sleep(0.5)
    return server, found.group(1)


def converse(url: str, out: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(600_000)
        page.goto(f"{url}/")
        page.wait_for_selector("#server-facts dd")
        for n, turn in enumerate(TURNS, start=1):
            page.fill("#input", turn)
            page.press("#input", "Enter")
            page.wait_for_selector(f".msg.assistant:nth-of-type({2 * n})[data-state=done]")
        page.locator("button.compare").last.click()
        page.wait_for_selector(".comparison .verdict")
        page.screenshot(path=str(out))
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("chat-page.png"))
    parser.add_argument("serve_args", nargs="*", help="after --: passed to specllama serve")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server, url = start_server(args.serve_args, Path(tmp) / "serve.log")
        try:
            converse(url, args.out)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=60)
    print(f"saved {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
