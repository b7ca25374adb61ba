#!/usr/bin/env python3
"""Prefill speed deep in the context, two servers side by side (issue 52, item 1).

    python research/prefill_depth.py --length 32768 --extensions 8 --extend 384 \\
        --server "specllama serve --target T.gguf --draft D.gguf --threads 2 --ctx 30720" \\
        --server "llama-server -m T.gguf -md D.gguf -t 2 -c 30720"

research/prefill.py times whole prefills, a fresh server each: at 32K tokens one takes ~25
minutes on a 2-core CPU, and this VM's speed drifts 10% between such runs, more than the gap
to be measured. Here every server stays up: each first takes the whole prompt (its time to the
first token is printed, as prefill.py's), then the prompt grows by about `--extend` tokens at a
time, the servers in turn (the first to go alternates), so each extension is evaluated on top
of the prefix its server keeps, tens of thousands of tokens deep, and the two servers' times
for the same extension are taken a minute apart. Printed: each extension's evaluated tokens
and seconds per server, and per server the median tokens/s with its spread; the ratio of each
extension's times (a server's over the first server's), median and range.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_trace import free_port, start, warm_files
from prefill import CHARS_PER_TOKEN, source_text, streamed_first_token

QUESTION = "\n\nWhat does the last function above do?"


def timed_request(port: int, text: str) -> tuple[float, int]:
    """(seconds to the first content token, prompt tokens the server evaluated for it)."""
    messages = [{"role": "user", "content": text + QUESTION}]
    seconds, figures = streamed_first_token(port, messages)
    return seconds, _evaluated(figures)


def _evaluated(chunk: dict) -> int:
    """The prompt tokens evaluated, not reused: llama-server's `timings`, else the usage."""
    if "timings" in chunk:
        return int(chunk["timings"].get("prompt_n", 0))
    usage = chunk.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return int(usage.get("prompt_tokens", 0)) - int(cached or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", action="append", required=True, help="a command line")
    parser.add_argument("--length", type=int, default=32768, help="the first prompt, ~tokens")
    parser.add_argument("--extensions", type=int, default=8)
    parser.add_argument("--extend", type=int, default=384, help="~tokens each extension adds")
    parser.add_argument("--out", type=Path, help="write the measurements as JSON here")
    args = parser.parse_args()
    base_chars = int(args.length * CHARS_PER_TOKEN)
    step_chars = int(args.extend * CHARS_PER_TOKEN)
    text = source_text(base_chars + args.extensions * step_chars)
    warm_files(args.server)
    ports = {server: free_port() for server in args.server}
    processes = [start(server, port) for server, port in ports.items()]
    results: dict[str, dict] = {server: {"whole": None, "extensions": []} for server in ports}
    try:
        for server, port in ports.items():
            results[server]["whole"] = measure(port, text[:base_chars], "whole", server)
        for k in range(1, args.extensions + 1):
            order = list(ports) if k % 2 else list(reversed(ports))
            for server in order:
                prompt = text[: base_chars + k * step_chars]
                taken = measure(ports[server], prompt, f"ext {k}", server)
                results[server]["extensions"].append(taken)
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=120)
    report(results, args.server)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


def measure(port: int, prompt: str, label: str, server: str) -> tuple[float, int]:
    seconds, evaluated = timed_request(port, prompt)
    print(f"{label:<7} {server[:60]:<60} {evaluated:>6} tok {seconds:8.2f} s", flush=True)
    return seconds, evaluated


def report(results: dict[str, dict], servers: list[str]) -> None:
    print()
    print(f"{'server':<16} {'whole: tok':>10} {'s':>8} {'ext: tok/s median (min-max)':>30} ratio")
    first = results[servers[0]]["extensions"]
    for server in servers:
        whole_s, whole_n = results[server]["whole"]
        rates = [n / s for s, n in results[server]["extensions"] if s > 0]
        ratios = [s / f for (s, _), (f, _) in zip(results[server]["extensions"], first)]
        spread = f"{statistics.median(rates):.2f} ({min(rates):.2f}-{max(rates):.2f})"
        ratio = f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"
        print(f"{server.split()[0]:<16} {whole_n:>10} {whole_s:8.1f} {spread:>30} {ratio}")


if __name__ == "__main__":
    main()
