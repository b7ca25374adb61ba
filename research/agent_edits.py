#!/usr/bin/env python3
"""An agent-like conversation through a server: one file edited over six turns, each request
resending the file and the conversation so far, as editors and agents do.

    python research/agent_edits.py --llama-bin /tmp/llama-build/bin [--turns 6] [--repeats 2]
        [-- --target T.gguf --draft D.gguf]

Servers, each on the same requests (greedy), interleaved by turn:
- `specllama serve` as a user starts it (the adaptive default: n-gram lookup with the memory of
  earlier requests, and the draft model), and with `--drafter none` (the target alone);
- llama.cpp's `llama-server` on the same target: `--spec-type ngram-mod` and without drafts.
The conversation is scripted: turn t's request holds the file as the t-1 earlier edits left it,
and the earlier turns' answers are those edits done right, so every server is asked the same
(what each one answered is kept, to compare). A turn asks for the whole file back with one
change: most of the answer is a copy of what the request holds.

Per turn: decode tokens/s as each server reports it (tokens after the prompt, over the time
after the prompt: specllama's `time_s`, llama-server's `timings.predicted_ms`), and the answer's
length. Medians over --repeats, with the spread; the CPU is named.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from specllama.policy.calibration import _cpu_name

FILE = '''"""Inventory of a small shop."""

TAX_RATE = 0.2


def price_with_tax(price):
    return price * (1 + TAX_RATE)


def total(items):
    result = 0
    for item in items:
        result += price_with_tax(item["price"]) * item["count"]
    return result


def cheapest(items):
    return min(items, key=lambda item: item["price"])


def restock(items, name, count):
    for item in items:
        if item["name"] == name:
            item["count"] += count
            return item
    raise KeyError(name)
'''
# (what to ask, how the file changes): applied in order, one a turn.
EDITS = [
    ("Rename the function `total` to `inventory_value`.", ("def total(", "def inventory_value(")),
    ("Change TAX_RATE to 0.25.", ("TAX_RATE = 0.2\n", "TAX_RATE = 0.25\n")),
    (
        "Rename the parameter `items` of `cheapest` to `stock`.",
        (
            'def cheapest(items):\n    return min(items, key=lambda item: item["price"])',
            'def cheapest(stock):\n    return min(stock, key=lambda item: item["price"])',
        ),
    ),
    (
        "Make `restock` raise ValueError instead of KeyError.",
        ("raise KeyError(name)", "raise ValueError(name)"),
    ),
    (
        "Add a docstring to `price_with_tax`.",
        (
            "def price_with_tax(price):\n",
            'def price_with_tax(price):\n    """The price with tax added."""\n',
        ),
    ),
    ("Change the module docstring to say 'a bakery'.", ("a small shop", "a bakery")),
]
SYSTEM = "You are a coding assistant. Reply with the whole updated file in one Python code block."


def conversation(turn: int) -> list[dict[str, str]]:
    """The messages of turn `turn` (0-based): earlier turns answered right, then the ask."""
    messages = [{"role": "system", "content": SYSTEM}]
    text = FILE
    for ask, (old, new) in EDITS[:turn]:
        messages.append({"role": "user", "content": f"file.py:\n```python\n{text}```\n{ask}"})
        text = text.replace(old, new)
        messages.append({"role": "assistant", "content": f"```python\n{text}```"})
    ask = EDITS[turn][0]
    messages.append({"role": "user", "content": f"file.py:\n```python\n{text}```\n{ask}"})
    return messages


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def post(url: str, body: dict) -> dict:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    headers = {"Content-Type": "application/json", "Authorization": "Bearer x"}
    connection.request("POST", "/v1/chat/completions", json.dumps(body), headers)
    answer = json.loads(connection.getresponse().read())
    connection.close()
    return answer


def wait_up(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 300
    parts = urlsplit(url)
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the server stopped:\n{log.read_text()[-2000:]}")
        try:
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"the server at {url} did not come up")


def start(name: str, command: list[str], folder: Path) -> tuple[subprocess.Popen, str]:
    log = folder / f"{name}.log"
    port = free_port()
    command = [*command, "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    url = f"http://127.0.0.1:{port}"
    wait_up(url, process, log)
    return process, url


def servers(args: argparse.Namespace, target: str) -> dict[str, list[str]]:
    ours = [sys.executable, "-m", "specllama", "serve", *args.model_options]
    ours += ["--ctx", str(args.ctx), "--threads", str(args.threads)]
    chosen = {"specllama default": ours, "specllama target alone": [*ours, "--drafter", "none"]}
    if args.llama_bin:
        theirs = [str(Path(args.llama_bin) / "llama-server"), "-m", target, "-c", str(args.ctx)]
        theirs += ["-t", str(args.threads), "--host", "127.0.0.1", "-np", "1", "--no-webui"]
        chosen["llama-server ngram-mod"] = [*theirs, "--spec-type", "ngram-mod"]
        chosen["llama-server alone"] = theirs
    return chosen


def rate(answer: dict) -> tuple[float, int]:
    """(decode tokens/s, tokens) as the server reports them."""
    if "specllama" in answer:
        stats = answer["specllama"]
        return stats["tokens_per_s"], stats["n_generated"]
    timings = answer["timings"]
    return timings["predicted_per_second"], timings["predicted_n"]


def target_of(options: list[str]) -> str:
    if "--target" in options:
        return options[options.index("--target") + 1]
    from specllama.models import hub
    from specllama.models.catalog import load_catalog

    target, draft, _ = hub.resolve_pair(load_catalog())
    options += ["--target", str(target), "--draft", str(draft)]
    return str(target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-bin", help="folder with llama.cpp's llama-server")
    parser.add_argument("--turns", type=int, default=len(EDITS))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("-n", "--max-tokens", type=int, default=400)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("model_options", nargs="*", help="after --: specllama model options")
    args = parser.parse_args()
    target = target_of(args.model_options)
    rows: dict[str, dict[int, list[tuple[float, int]]]] = {}
    texts: dict[str, dict[int, str]] = {}
    with tempfile.TemporaryDirectory(prefix="agent-edits-") as folder:
        started = {}
        try:
            for name, command in servers(args, target).items():
                started[name] = start(re.sub(r"\W+", "-", name), command, Path(folder))
            models = {name: served_name(url) for name, (_, url) in started.items()}
            for repeat in range(args.repeats):
                for turn in range(args.turns):
                    for name, (_, url) in started.items():  # interleaved, turn by turn
                        body = {"model": models[name], "messages": conversation(turn)}
                        body |= {"temperature": 0, "max_tokens": args.max_tokens}
                        answer = post(url, body)
                        rows.setdefault(name, {}).setdefault(turn, []).append(rate(answer))
                        content = answer["choices"][0]["message"]["content"]
                        texts.setdefault(name, {})[turn] = content
                        print(f"{name} r{repeat} t{turn + 1}: {rate(answer)}", file=sys.stderr)
        finally:
            for process, _ in started.values():
                process.terminate()
                process.wait(timeout=60)
    print(report(rows, texts, args))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "texts": texts}, indent=1) + "\n")


def served_name(url: str) -> str:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    connection.request("GET", "/v1/models", headers={"Authorization": "Bearer x"})
    return json.loads(connection.getresponse().read())["data"][0]["id"]


def report(rows: dict, texts: dict, args: argparse.Namespace) -> str:
    names = list(rows)
    lines = [
        f"CPU: {_cpu_name()}, {args.threads} threads; {args.repeats} repeats, greedy; "
        "decode tok/s (median, min-max) and answer tokens",
        "| turn | " + " | ".join(names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for turn in range(args.turns):
        cells = []
        for name in names:
            rates = [r for r, _ in rows[name][turn]]
            n = rows[name][turn][0][1]
            cells.append(f"{statistics.median(rates):.1f} ({min(rates):.1f}-{max(rates):.1f}), {n}")
        lines.append(f"| {turn + 1} | " + " | ".join(cells) + " |")
    alone = "specllama target alone"
    for name in names:
        if name == alone:
            continue
        ratios = [
            statistics.median(r for r, _ in rows[name][t])
            / statistics.median(r for r, _ in rows[alone][t])
            for t in range(args.turns)
        ]
        lines.append(
            f"{name} / {alone}: median {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f}) over turns"
        )
    same = sum(texts[alone][t] == texts["specllama default"][t] for t in range(args.turns))
    lines.append(f"specllama default's answers equal the target alone's on {same}/{args.turns}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
