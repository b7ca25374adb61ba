#!/usr/bin/env python3
"""Time to first token on long prompts: specllama serve against llama-server (issue 52, item 1).

    python research/prefill.py --lengths 2048 8192 16384 32768 --repeats 2 \\
        --server "specllama serve --pair qwen2.5-coder-1.5b --threads 2 --ctx 33792" \\
        --server "llama-server -m T.gguf -md D.gguf -t 2 -c 33792"

Each --server is a command line serving an OpenAI API (the script adds `--port PORT`). Every
measurement runs on a fresh server process, so nothing is cached (but the files the commands
name are read once first, so that no server reads its weights from disk during a prefill):
one streamed chat request whose user message is about LENGTH tokens of source code (this
repository's own Python files, joined), greedy, `max_tokens` 1; the time from sending it to
the first content token. Printed per length: each server's median time to first token with
its spread over the repeats, the prompt's tokens as the server counted them, its prefill speed,
and each server's time over the first one's (the ratio: above 1.0, slower than the first
server).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_trace import free_port, start, warm_files

ROOT = Path(__file__).resolve().parent.parent
CHARS_PER_TOKEN = 3.2  # Python source through Qwen2.5's tokenizer, measured: a first guess


def source_text(n_chars: int) -> str:
    """About `n_chars` of this repository's Python source, file after file (repeated if short)."""
    files = sorted((ROOT / "specllama").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    pieces, total = [], 0
    while total < n_chars:
        for path in files:
            text = f"# {path.relative_to(ROOT)}\n{path.read_text(encoding='utf-8')}\n"
            pieces.append(text)
            total += len(text)
            if total >= n_chars:
                break
    return "".join(pieces)[:n_chars]


def messages_for(length: int) -> list[dict]:
    code = source_text(int(length * CHARS_PER_TOKEN))
    return [{"role": "user", "content": f"{code}\n\nWhat does the last function above do?"}]


def first_token(port: int, messages: list[dict]) -> tuple[float, int]:
    """(seconds to the first content token, the prompt's tokens as the server counted them)."""
    seconds, last = streamed_first_token(port, messages)
    return seconds, (last.get("usage") or {}).get("prompt_tokens", 0)


def streamed_first_token(port: int, messages: list[dict]) -> tuple[float, dict]:
    """One streamed greedy request for one token: (seconds to the first content token, the
    last chunk that carried figures: its `usage`, and llama-server's `timings`)."""
    body = {"model": "m", "messages": messages, "max_tokens": 1, "stream": True}
    body |= {"temperature": 0, "stream_options": {"include_usage": True}}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=7200)
    sent = time.perf_counter()
    connection.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    assert response.status == 200, response.read()
    first, figures = None, {}
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        delta = (chunk.get("choices") or [{}])[0].get("delta", {})
        if first is None and (delta.get("content") or delta.get("reasoning_content")):
            first = time.perf_counter()
        if chunk.get("usage") or chunk.get("timings"):
            figures = chunk
    connection.close()
    return (first or time.perf_counter()) - sent, figures


def measure(command: str, messages: list[dict]) -> tuple[float, int]:
    port = free_port()
    process = start(command, port)
    try:
        return first_token(port, messages)
    finally:
        process.terminate()
        process.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", action="append", required=True, help="a command line")
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192, 16384, 32768])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the measurements as JSON here")
    args = parser.parse_args()
    results: dict[str, dict[int, list[tuple[float, int]]]] = {s: {} for s in args.server}
    warm_files(args.server)
    for length in args.lengths:
        messages = messages_for(length)
        for _ in range(args.repeats):
            for server in args.server:  # interleaved, so that a drift hits both alike
                measured = measure(server, messages)
                results[server].setdefault(length, []).append(measured)
                print(f"{length:>6} {server[:60]:<60} {measured[0]:8.2f} s", flush=True)
    print()
    print(f"{'length':>6} {'server':<40} {'ttft s (min-max)':>22} {'tokens':>7} {'tok/s':>7} ratio")
    for length in args.lengths:
        first = statistics.median(t for t, _ in results[args.server[0]][length])
        for server in args.server:
            times = [t for t, _ in results[server][length]]
            n_prompt = results[server][length][0][1]
            median = statistics.median(times)
            spread = f"{median:7.2f} ({min(times):.2f}-{max(times):.2f})"
            rate = n_prompt / median if median else 0
            print(
                f"{length:>6} {server.split()[0]:<40} {spread:>22} {n_prompt:>7} "
                f"{rate:7.1f} {median / first:5.2f}"
            )
    if args.out:
        args.out.write_text(json.dumps({s: r for s, r in results.items()}, indent=1))


if __name__ == "__main__":
    main()
