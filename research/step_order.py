#!/usr/bin/env python3
"""What the order of a step's sequences costs, with one KV cache for all sequences or a cache
per sequence (issue 53): four sequences' prompts (239, 233, 44 and 45 tokens, as
research/concurrent_clients.py's four clients send) go in together in 128-token chunks, as a
server's slots put them, then `--steps` steps of one token each are timed. Each step's four
parts go to llama.cpp in sequence order (as `LlamaBackend.decode_parts` hands them) or, with
`--shuffled`, in a new random order each step (as the slots' requests arrive: what
decode_parts did before it sorted them).

    python research/step_order.py --model T.gguf --threads 2 --repeats 3

Every configuration (cache layout x order) runs in a fresh process, round after round, so
that a machine whose speed drifts drifts for all alike; printed: each one's median step time
per round and the median over the rounds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT_LENGTHS = (239, 233, 44, 45)
CHUNK = 128  # specllama.server.slots.PREFILL_CHUNK


def measure(model: str, threads: int, unified: bool, shuffled: bool, steps: int) -> float:
    """The median seconds of a four-token step (one token per sequence), in this process."""
    from specllama.llama.backend import LlamaBackend
    from specllama.llama.evaluated import Part

    backend = LlamaBackend(model, n_ctx=4096, n_threads=threads, n_seq=4, unified_kv=unified)
    text = backend.tokenize((ROOT / "README.md").read_text())
    prompts = [text[i * 250 : i * 250 + n] for i, n in enumerate(PROMPT_LENGTHS)]
    held = [0] * 4
    while any(held[s] < len(prompts[s]) for s in range(4)):
        parts = []
        for s, prompt in enumerate(prompts):
            chunk = prompt[held[s] : held[s] + CHUNK]
            if chunk:
                parts.append(Part(s, held[s], chunk, [len(chunk) - 1]))
                held[s] += len(chunk)
        backend.decode_parts(parts)

    def step_as_given(parts: list[Part]) -> None:
        """decode_parts before it sorted: the batch in the order the parts came."""
        backend._fill_parts(parts)
        assert backend._lib.llama_decode(backend._ctx, backend._batch) == 0

    seconds = []
    for i in range(steps):
        order = random.sample(range(4), 4)
        parts = [Part(s, held[s], [text[1000 + i]], [0]) for s in order]
        started = time.perf_counter()
        if shuffled:
            step_as_given(parts)
        else:
            backend.decode_parts(parts)
        seconds.append(time.perf_counter() - started)
        held = [n + 1 for n in held]
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--one", nargs=2, metavar=("UNIFIED", "SHUFFLED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        unified, shuffled = (flag == "1" for flag in args.one)
        print(measure(args.model, args.threads, unified, shuffled, args.steps))
        return
    configs = [(u, s) for u in (True, False) for s in (False, True)]
    found: dict[tuple[bool, bool], list[float]] = {c: [] for c in configs}
    for _ in range(args.repeats):
        for unified, shuffled in configs:
            command = [
                sys.executable,
                __file__,
                "--model",
                args.model,
                "--threads",
                str(args.threads),
            ]
            command += ["--steps", str(args.steps), "--one", str(int(unified)), str(int(shuffled))]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            found[(unified, shuffled)].append(float(out.split()[-1]))
    print("cache              order        step ms, each round             median")
    for (unified, shuffled), values in found.items():
        cache = "one for all" if unified else "one per sequence"
        rounds = " ".join(f"{v * 1000:6.1f}" for v in values)
        order = "shuffled" if shuffled else "in order"
        print(f"{cache:18} {order:12} {rounds:32} {statistics.median(values) * 1000:6.1f}")


if __name__ == "__main__":
    main()
