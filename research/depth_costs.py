#!/usr/bin/env python3
"""What verifying a batch costs at a context's depth: the target's V(n) after D tokens, for a
few D, on this machine (issue 44, item 1). The calibration measures V(n) after 64 tokens; an
answer after a long prompt verifies deeper.

    python research/depth_costs.py --target T.gguf [--depths 64 512 1536] [--repeats 5]

Each (depth, size) is timed `repeats` times, sizes interleaved within a depth, the median kept;
printed as seconds and as V(n) / V(1) at that depth.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from specllama.llama.backend import LlamaBackend
from specllama.policy.calibration import _cpu_name, _timed, _tokens

SIZES = (1, 2, 3, 5, 9, 17)


def measure(model: LlamaBackend, depths: list[int], repeats: int) -> dict[int, dict[int, float]]:
    ids = _tokens(model, max(depths) + max(SIZES))  # as the calibration times them
    curves: dict[int, dict[int, float]] = {}
    for depth in depths:
        model.rollback(0)
        for start in range(0, depth, 512):  # the context, in batches of at most n_batch
            model.decode(ids[start : min(start + 512, depth)])
        samples: dict[int, list[float]] = {n: [] for n in SIZES}
        for repeat in range(repeats + 1):
            for n in SIZES:
                seconds = _timed(model, ids[depth : depth + n], range(n))
                model.rollback(depth)
                if repeat:  # the first pass warms up
                    samples[n].append(seconds)
        curves[depth] = {n: statistics.median(s) for n, s in samples.items()}
    return curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--depths", type=int, nargs="+", default=[64, 512, 1536])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    n_ctx = max(args.depths) + max(SIZES) + 16
    model = LlamaBackend(args.target, n_ctx=n_ctx, n_threads=args.threads)
    curves = measure(model, args.depths, args.repeats)
    model.close()
    print(f"{args.target.name} on {_cpu_name()}, median of {args.repeats}")
    print("| depth | " + " | ".join(f"V({n})" for n in SIZES) + " |")
    print("|---:|" + "---:|" * len(SIZES))
    for depth, curve in curves.items():
        one = curve[1]
        cells = [f"{curve[n] * 1000:.1f} ms ({curve[n] / one:.2f})" for n in SIZES]
        print(f"| {depth} | " + " | ".join(cells) + " |")
    if args.json:
        data = {"cpu": _cpu_name(), "target": args.target.name, "curves": curves}
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
