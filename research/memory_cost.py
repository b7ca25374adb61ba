#!/usr/bin/env python3
"""What the memory of earlier texts costs: bytes held and the time of one round's lookup
(the longest match of the text's end, then a 32-token continuation), at 10k, 100k and 1M
tokens of history, and the time to add a 2,000-token answer.

    python research/memory_cost.py [--repeats 200] [--json OUT]

History: documents of 2,000 tokens, half of them random (what never repeats), half copies of
earlier ones with a few tokens changed (what an agent resending files gives), ids drawn from a
151,936-token vocabulary. Each query is the end of a copied document, so every lookup finds a
long match and drafts: the dear case. Times are medians with the 10th-90th percentile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from specllama.engine.memory import TokenMemory
from specllama.policy.calibration import _cpu_name

N_VOCAB = 151_936
DOCUMENT = 2000


def history(n_tokens: int, rng: np.random.Generator) -> list[list[int]]:
    documents: list[list[int]] = []
    while sum(map(len, documents)) < n_tokens:
        if documents and rng.random() < 0.5:
            copy = list(documents[int(rng.integers(len(documents)))])
            for at in rng.integers(0, len(copy), 3):
                copy[at] = int(rng.integers(N_VOCAB))
            documents.append(copy)
        else:
            documents.append(rng.integers(0, N_VOCAB, DOCUMENT).tolist())
    return documents


def percentiles(samples: list[float]) -> dict[str, float]:
    q = np.percentile(samples, [10, 50, 90]) * 1000
    return {"p10_ms": round(q[0], 4), "median_ms": round(q[1], 4), "p90_ms": round(q[2], 4)}


def measure(n_tokens: int, repeats: int, rng: np.random.Generator) -> dict[str, object]:
    memory = TokenMemory()
    documents = history(n_tokens, rng)
    add_s = []
    for document in documents:
        started = time.perf_counter()
        memory.add(document)
        add_s.append(time.perf_counter() - started)
    lookup_s, drafted = [], []
    for _ in range(repeats):
        document = documents[int(rng.integers(len(documents)))]
        cut = int(rng.integers(100, len(document) - 40))
        context = document[:cut]
        started = time.perf_counter()
        match = memory.longest_match(context)
        draft = memory.continuation(match, 32) if match else []
        lookup_s.append(time.perf_counter() - started)
        drafted.append(len(draft))
    return {
        "history_tokens": len(memory),
        "megabytes": round(memory.nbytes / 1e6, 2),
        "lookup": percentiles(lookup_s),
        "add_answer": percentiles(add_s[-20:]),
        "mean_drafted": round(statistics.mean(drafted), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = [measure(n, args.repeats, rng) for n in (10_000, 100_000, 1_000_000)]
    print(f"CPU: {_cpu_name()}, {args.repeats} lookups each")
    print("| history | memory | lookup median (p10-p90) | add 2k answer | drafted |")
    print("|---:|---:|---:|---:|---:|")
    for row in rows:
        lookup, add = row["lookup"], row["add_answer"]
        print(
            f"| {row['history_tokens']:,} | {row['megabytes']} MB | {lookup['median_ms']} ms "
            f"({lookup['p10_ms']}-{lookup['p90_ms']}) | {add['median_ms']} ms | "
            f"{row['mean_drafted']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
