#!/usr/bin/env python3
"""C clients at once against a server: aggregate tokens/s and the time to first token, for
C = 1, 2, 4, 8 (issue 42, item 2).

    python research/concurrent_clients.py --clients 1 2 4 8 --repeats 2 \\
        --server "specllama serve --pair qwen2.5-coder-1.5b --threads 2 --parallel {C}" \\
        --server "llama-server -m T.gguf -md D.gguf -t 2 -c 16384 -np {C} --metrics"

Each --server is a command line serving an OpenAI API; `{C}` in it becomes the phase's number
of clients, and the script adds `--port PORT`. Every phase (one C, one repeat) runs on a fresh
server process: C clients start together, each sends its requests one after another, and the
phase sends max(C, 4) requests in all (so C = 1 sends four in a row): half of them code edits
that copy a file (the bundled bench prompts' code-editing category), half questions that do not
(its qa category). Greedy, streamed, the tokens counted from the usage each server reports.
At C = 4 this is issue 53's own workload: four clients at once, two code edits that copy a
15-line file back with a change, two free answers. The repeats go round every C and server in
turn, so that a machine whose speed drifts drifts for all alike.

Printed per server and C: aggregate tokens/s (all answers' tokens / the phase's wall time),
p50 and p95 time to first token, medians over the repeats with their spread; then where the
aggregate went, read off each server's /metrics after the phase (llama-server needs
`--metrics`): the target's llama_decode calls per generated token, the slots each call
carried (llama-server: the busy slots, `n_busy_slots_per_decode`), and the drafted and
accepted tokens; for specllama also the target's tokens per call and the draft model's calls
and share of the decode time. Last, per C, the first server's aggregate over each other's in the
same repeat (median and range). `--json FILE` keeps every phase's figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_trace import free_port, start
from prometheus_client.parser import text_string_to_metric_families

from specllama.bench.prompts import load_prompts

MODELS = ("target", "draft")


@dataclass
class Answer:
    ttft: float
    tokens: int


def ask(port: int, messages: list[dict], max_tokens: int) -> Answer:
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "stream": True}
    body |= {"temperature": 0, "stream_options": {"include_usage": True}}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    sent = time.perf_counter()
    connection.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    assert response.status == 200, response.read()
    first, tokens = None, 0
    for raw in response:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if (chunk.get("choices") or [{}])[0].get("delta", {}).get("content"):
            first = first if first is not None else time.perf_counter()
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    connection.close()
    return Answer((first or time.perf_counter()) - sent, tokens)


def requests_for(n: int) -> list[list[dict]]:
    """n requests, code edits and questions in turn."""
    prompts = load_prompts()
    edits = [p for p in prompts if p.category == "code-editing"]
    questions = [p for p in prompts if p.category == "qa"]
    chosen = [(edits if i % 2 == 0 else questions)[i // 2 % 4] for i in range(n)]
    return [[{"role": m.role, "content": m.content} for m in p.messages] for p in chosen]


def metrics(port: int) -> dict[tuple[str, str], float]:
    """The server's /metrics samples, by (name, model label: "" where it has none)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    if response.status != 200:
        return {}
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, sample.labels.get("model", "")] = sample.value
    return found


def where_it_went(
    found: dict[tuple[str, str], float], generated: int, wall: float
) -> dict[str, float]:
    """A phase's batch figures, from a fresh server's metrics after it (`wall`: its time)."""

    def get(name: str, model: str = "") -> float:
        return found.get((name, model), 0.0)

    calls = get("llamacpp:n_decode_total")
    figures = {
        "target_calls_per_token": calls / max(generated, 1),
        "slots_per_call": get("llamacpp:n_busy_slots_per_decode"),
        "drafted": get("llamacpp:spec_decode_num_draft_tokens_total"),
        "accepted": get("llamacpp:spec_decode_num_accepted_tokens_total"),
    }
    if ("specllama:decode_calls_total", "target") in found:
        seconds = {m: get("specllama:decode_seconds_total", m) for m in MODELS}
        draft_calls = get("specllama:decode_calls_total", "draft")
        figures |= {
            "target_tokens_per_call": get("specllama:decode_tokens_total", "target")
            / max(calls, 1),
            "draft_calls": draft_calls,
            "draft_slots_per_call": get("specllama:decode_sequences_total", "draft")
            / max(draft_calls, 1),
            "draft_share_of_decode_s": seconds["draft"] / max(sum(seconds.values()), 1e-9),
            # what is not decoding (Python between steps, waiting for slots) is the rest
            "decoding_share_of_wall": sum(seconds.values()) / wall,
        }
    return figures


def phase(port: int, clients: int, max_tokens: int) -> tuple[float, list[float], int, float]:
    """(aggregate tokens/s, every request's time to first token, tokens generated, seconds)."""
    work = requests_for(max(clients, 4))
    answers: list[Answer] = []
    lock = threading.Lock()

    def client(mine: list[list[dict]]) -> None:
        for messages in mine:
            answer = ask(port, messages, max_tokens)
            with lock:
                answers.append(answer)

    threads = [threading.Thread(target=client, args=(work[i::clients],)) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    generated = sum(a.tokens for a in answers)
    return generated / wall, [a.ttft for a in answers], generated, wall


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def run_phase(command: str, clients: int, max_tokens: int) -> dict:
    """One phase on a fresh server: its figures, and where its aggregate went."""
    port = free_port()
    process = start(command.replace("{C}", str(clients)), port)
    try:
        rate, ttfts, generated, wall = phase(port, clients, max_tokens)
        went = where_it_went(metrics(port), generated, wall)
    finally:
        process.terminate()
        process.wait(timeout=60)
    return {"server": command, "clients": clients, "tokens_per_s": rate, "ttft_s": ttfts} | {
        "generated": generated,
        "went": went,
    }


def print_summary(phases: list[dict], servers: list[str], counts: list[int]) -> None:
    """Per server and C: the median aggregate over the repeats with its range, and the time to
    first token; per C, each server's runs against the first server's in the same repeat."""
    print(f"{'server':<60} {'C':>2} {'tok/s':>7} {'min-max':>12} {'ttft p50':>9} {'p95':>7}")
    for command in servers:
        for clients in counts:
            mine = [p for p in phases if p["server"] == command and p["clients"] == clients]
            rates = [p["tokens_per_s"] for p in mine]
            p50 = statistics.median(percentile(p["ttft_s"], 0.5) for p in mine)
            p95 = statistics.median(percentile(p["ttft_s"], 0.95) for p in mine)
            spread = f"{min(rates):.1f}-{max(rates):.1f}"
            print(
                f"{command[:60]:<60} {clients:>2} {statistics.median(rates):>7.1f} {spread:>12} "
                f"{p50:>9.2f} {p95:>7.2f}"
            )
    first = servers[0]
    for command in servers[1:]:
        print(f"{first[:30]} / {command[:30]}, per repeat (median, range):")
        for clients in counts:
            ratios = [
                mine["tokens_per_s"] / theirs["tokens_per_s"]
                for mine in phases
                for theirs in phases
                if mine["server"] == first
                and theirs["server"] == command
                and mine["clients"] == theirs["clients"] == clients
                and mine["repeat"] == theirs["repeat"]
            ]
            print(
                f"  C={clients}: {statistics.median(ratios):.2f} "
                f"({min(ratios):.2f}-{max(ratios):.2f})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", action="append", required=True)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("-n", "--max-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, help="write every phase's figures here")
    args = parser.parse_args()
    phases: list[dict] = []
    # Repeats outermost, servers innermost: each C's runs of the servers follow one another,
    # so that a machine whose speed drifts (a shared VM) drifts for both alike.
    for repeat in range(args.repeats):
        for clients in args.clients:
            for command in args.server:
                done = run_phase(command, clients, args.max_tokens)
                phases.append(done | {"repeat": repeat})
                figures = ", ".join(f"{k} {v:.2f}" for k, v in done["went"].items())
                print(f"  {command[:50]} C={clients}: {done['tokens_per_s']:.1f} tok/s; {figures}")
    print_summary(phases, args.server, args.clients)
    if args.json:
        args.json.write_text(json.dumps(phases, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
