#!/usr/bin/env python3
"""What serving costs: the same prompts streamed through `specllama serve` and run by
`specllama run`, and optionally through any other OpenAI server (llama.cpp's `llama-server -md`
on the same pair).

    python research/serve.py -n 96 --limit 8 -- --target T.gguf --draft D.gguf --threads 2
    python research/serve.py --also http://127.0.0.1:8081/v1=MODEL -- --pair qwen2.5-coder-1.5b

Everything after `--` goes to both `specllama run` and `specllama serve` (model options).
Greedy, single-turn prompts of the bundled bench set, --repeats rounds over them. Per prompt,
interleaved: `specllama run --json` (a fresh process), then the prompt streamed through one
server process, timed by the client with raw HTTP:

- ttft: request sent -> first text chunk;
- tok/s: tokens / (request -> last chunk, less the prefill the server reports), which is what
  `specllama run` reports as tokens/s (tokens after the prefill);
- overhead: the client's wall time less the engine's own prefill and generation time, per
  token: HTTP, JSON, SSE, tokenising the request and the worker-thread hand-over; split into
  what a request costs whatever its length (the same request for one token, measured next)
  and what streaming costs per token.
Other servers get ttft and the decode rate after the first chunk (tokens - 1) / time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from specllama.bench.prompts import load_prompts

PYTHON = [sys.executable, "-m", "specllama"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--max-tokens", type=int, default=96)
    parser.add_argument("--limit", type=int, default=8, help="at most N prompts")
    parser.add_argument("--repeats", type=int, default=2, help="rounds over the prompts")
    parser.add_argument("--also", action="append", default=[], help="URL=MODEL of another server")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("model_options", nargs="*", help="after --: options for run and serve")
    args = parser.parse_args()

    # Single-turn, and without a schema (this client sends none: its answers would not be the
    # ones the prompt asks for).
    prompts = [
        p for p in load_prompts() if [m.role for m in p.messages] == ["user"] and p.schema is None
    ]
    prompts = prompts[: args.limit]
    with tempfile.NamedTemporaryFile("w+", prefix="specllama-serve-", suffix=".log") as log:
        rows = measure(args, prompts, log)
    print(report(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


def measure(args: argparse.Namespace, prompts: list, log) -> list[dict]:
    server, url, model = start_server(args.model_options, log)
    rows = []
    try:
        stream(url, model, "Say hello.", args.max_tokens)  # warm-up
        for prompt in prompts * args.repeats:
            text = prompt.messages[0].content
            row = {"id": prompt.id, "run": run(text, args.max_tokens, args.model_options)}
            row["serve"] = stream(url, model, text, args.max_tokens)
            # The same request for one token: what a request costs whatever its length.
            serve = row["serve"]
            serve["overhead_ms_per_request"] = stream(url, model, text, 1)["overhead_ms"]
            streaming = serve["overhead_ms"] - serve["overhead_ms_per_request"]
            serve["streaming_ms_per_token"] = streaming / serve["n"]
            for also in args.also:
                other_url, other_model = also.rsplit("=", 1)
                row[other_url] = stream(other_url, other_model, text, args.max_tokens)
            rows.append(row)
            print(summary_line(row), file=sys.stderr)
    finally:
        server.terminate()
        server.wait()
    return rows


def start_server(options: list[str], log) -> tuple[subprocess.Popen, str, str]:
    """`specllama serve` on a free port, its stderr to `log`: (process, base URL, model id)."""
    command = [*PYTHON, "serve", "--port", "0", *options]
    server = subprocess.Popen(command, stderr=log, stdin=subprocess.DEVNULL)
    while not (found := re.search(r"specllama serve (http://\S+)", Path(log.name).read_text())):
        if server.poll() is not None:
            raise SystemExit(f"the server did not start:\n{Path(log.name).read_text()}")
        time.sleep(0.2)
    url = found.group(1)
    models = json.loads(request(url, "GET", "/models").read())
    return server, url, models["data"][0]["id"]


def run(prompt: str, max_tokens: int, options: list[str]) -> dict:
    command = [*PYTHON, "run", prompt, "-n", str(max_tokens), "--json", *options]
    done = subprocess.run(
        command, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL
    )
    stats = json.loads(done.stdout)
    return {k: stats[k] for k in ("n_generated", "tokens_per_s", "prefill_s", "time_s")}


def request(url: str, method: str, path: str, body: dict | None = None):
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    data = None if body is None else json.dumps(body)
    connection.request(method, parts.path + path, data, {"Content-Type": "application/json"})
    return connection.getresponse()


def stream(url: str, model: str, prompt: str, max_tokens: int) -> dict:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    response = request(url, "POST", "/chat/completions", body)
    first = last = None
    n_chunks, usage, stats = 0, None, None
    for line in response:
        if not line.startswith(b"data: {"):
            continue
        chunk = json.loads(line[6:])
        now = time.perf_counter()
        stats = chunk.get("specllama", stats)
        usage = chunk.get("usage") or usage
        choice = (chunk.get("choices") or [{}])[0]
        if (choice.get("delta") or {}).get("content"):
            first = first or now
            last = now
            n_chunks += 1
        if choice.get("finish_reason"):
            last = now
    n = usage["completion_tokens"] if usage else n_chunks
    first = first or last
    result = {"n": n, "ttft_s": first - started}
    if n > 1 and last > first:
        result["decode_tps"] = (n - 1) / (last - first)
    if stats:  # specllama serve: the engine's own timings, to take the overhead apart
        served = last - started - stats["prefill_s"]
        result["tokens_per_s"] = n / served
        result["overhead_ms"] = 1000 * (served - stats["time_s"])
        result["engine_tokens_per_s"] = stats["tokens_per_s"]
        result["prompt_reused"] = stats["n_prompt_reused"]
    return result


def summary_line(row: dict) -> str:
    run_, serve = row["run"], row["serve"]
    return (
        f"{row['id']}: run {run_['tokens_per_s']:.1f} tok/s · serve {serve['tokens_per_s']:.1f} "
        f"tok/s, ttft {1000 * serve['ttft_s']:.0f} ms, "
        f"overhead {serve['overhead_ms_per_request']:.2f} ms/request + "
        f"{serve['streaming_ms_per_token']:.3f} ms/token"
    )


def report(rows: list[dict]) -> str:
    def median(values) -> float:
        return statistics.median(values)

    ratio = median(r["serve"]["tokens_per_s"] / r["run"]["tokens_per_s"] for r in rows)
    lines = [
        f"{len(rows)} answers (medians):",
        f"  specllama run    {median(r['run']['tokens_per_s'] for r in rows):7.1f} tok/s",
        f"  specllama serve  {median(r['serve']['tokens_per_s'] for r in rows):7.1f} tok/s "
        f"({ratio:.3f}x run), ttft {1000 * median(r['serve']['ttft_s'] for r in rows):.0f} ms, "
        f"overhead {median(r['serve']['overhead_ms_per_request'] for r in rows):.2f} ms/request"
        f" + {median(r['serve']['streaming_ms_per_token'] for r in rows):.3f} ms/token",
    ]
    for name in [k for k in rows[0] if k not in ("id", "run", "serve")]:
        lines.append(
            f"  {name}  decode {median(r[name]['decode_tps'] for r in rows):7.1f} tok/s after "
            f"the first chunk (serve: {median(r['serve']['decode_tps'] for r in rows):.1f}), "
            f"ttft {1000 * median(r[name]['ttft_s'] for r in rows):.0f} ms"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
