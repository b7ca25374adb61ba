#!/usr/bin/env python3
"""An agent-like trace through a server: time to first token of each turn of a main
conversation with side requests between its turns (another long prompt each), as coding agents
send them (a title, a summary, a sub-agent). Issue 42, item 1.

    python research/agent_trace.py --turns 3 --repeats 2 \\
        --server "specllama serve --pair qwen2.5-coder-1.5b --threads 2 --cache-ram 0" \\
        --server "specllama serve --pair qwen2.5-coder-1.5b --threads 2" \\
        --server "llama-server -m T.gguf -md D.gguf -t 2 -c 8192"

Each --server is a command line that serves an OpenAI API; the script adds `--port PORT` (and
for llama-server nothing else), waits for /health, runs the trace `--repeats` times, each on a
fresh server process, and prints per turn the median time to first token (and its spread)
and the decode rate after the first token. Greedy; streamed; the main conversation's system
prompt and the side requests' are ~3K tokens each (this project's README and DESIGN text,
so that nothing is downloaded).
"""

from __future__ import annotations

import argparse
import http.client
import json
import shlex
import socket
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "Summarise how speculative decoding works in this tool, in three sentences.",
    "Which command compares speed on my own machine?",
    "How do I serve a model to a coding agent?",
    "What does --cache-ram do?",
]
SIDE = "Write a five-word title for this request: "


def long_text(path: Path, words: int, skip: int = 0) -> str:
    return " ".join(path.read_text().split()[skip : skip + words])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def warm_files(commands: list[str]) -> None:
    """Read every file the commands name once, so that each server maps weights already in
    the page cache: llama.cpp maps a model and reads its pages on the first decode, so the
    first server measured in a session would pay the disk read inside its prefill (the first
    run of a series was 8-12% slower than the next ones, issue 52)."""
    for command in commands:
        for word in shlex.split(command):
            path = Path(word)
            if path.is_file():
                with path.open("rb") as file:
                    while file.read(1 << 24):
                        pass


def start(command: str, port: int) -> subprocess.Popen:
    args = [*shlex.split(command), "--port", str(port)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return process
        except OSError:
            pass
        assert process.poll() is None, f"{command} exited"
        time.sleep(0.5)
    raise TimeoutError(command)


def stream(port: int, messages: list[dict], max_tokens: int) -> tuple[float, float, str]:
    """(time to first token, tokens/s after it, the answer)."""
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "stream": True}
    body |= {"temperature": 0}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    sent = time.perf_counter()
    connection.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    first, pieces, n_chunks = None, [], 0
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        text = (chunk.get("choices") or [{}])[0].get("delta", {}).get("content") or ""
        if text:
            n_chunks += 1
            first = first if first is not None else time.perf_counter()
            pieces.append(text)
    end = time.perf_counter()
    answer = "".join(pieces)
    ttft = (first or end) - sent
    return ttft, max(len(answer.split()) - 1, 0) / max(end - (first or end), 1e-9), answer


def trace(port: int, turns: int, max_tokens: int) -> list[tuple[str, float, float]]:
    system = long_text(ROOT / "README.md", 2200)
    side_system = long_text(ROOT.parent / "shared" / "DESIGN.md", 2200)
    if not side_system:
        side_system = long_text(ROOT / "README.md", 2200, skip=2200)
    messages = [{"role": "system", "content": system}]
    rows = []
    for turn in range(turns):
        messages.append({"role": "user", "content": QUESTIONS[turn % len(QUESTIONS)]})
        ttft, rate, answer = stream(port, messages, max_tokens)
        rows.append((f"main {turn + 1}", ttft, rate))
        messages.append({"role": "assistant", "content": answer})
        side = [
            {"role": "system", "content": side_system},
            {"role": "user", "content": SIDE + QUESTIONS[turn % len(QUESTIONS)]},
        ]
        ttft, rate, _ = stream(port, side, 16)
        rows.append((f"side {turn + 1}", ttft, rate))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", action="append", required=True)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("-n", "--max-tokens", type=int, default=48)
    args = parser.parse_args()
    for command in args.server:
        runs = []
        for _ in range(args.repeats):
            port = free_port()
            process = start(command, port)
            try:
                runs.append(trace(port, args.turns, args.max_tokens))
            finally:
                process.terminate()
                process.wait(timeout=60)
        print(f"\n{command}")
        print(f"{'request':<8} {'ttft s (median)':>16} {'min-max':>14} {'words/s':>8}")
        for i, (name, _, _) in enumerate(runs[0]):
            ttfts = [run[i][1] for run in runs]
            rates = [run[i][2] for run in runs]
            spread = f"{min(ttfts):.2f}-{max(ttfts):.2f}"
            print(
                f"{name:<8} {statistics.median(ttfts):>16.2f} {spread:>14} "
                f"{statistics.median(rates):>8.1f}"
            )


if __name__ == "__main__":
    main()
