#!/usr/bin/env python3
"""The target's verify curve past the calibration's sizes, to 65 (a pending token and 64 drafts):
what a long n-gram draft costs here, measured rather than extrapolated.

    python research/verify_reach.py --target T.gguf [--repeats 5] [--json out.json]

Sizes are interleaved across repeats (a burst of load hits every size alike) and each is timed
by the calibration's own routine (`specllama.policy.calibration.measure`), so what it prints is
what a calibration with these sizes would record; the spread over repeats says how far to trust
it on a shared machine. Written as the `costs` of a traces file, so that `research/policies.py`
can replay recorded answers on it (`--machine epyc65=FILE`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from specllama.llama.backend import LlamaBackend
from specllama.policy.calibration import _cpu_name, measure

SIZES = (1, 2, 3, 4, 6, 8, 12, 17, 25, 33, 49, 57, 65)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, type=Path)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    target = LlamaBackend(args.target, n_ctx=512, n_threads=args.threads)
    runs = []
    for i in range(args.repeats):
        measured = measure(target, sizes=SIZES, repeats=2)
        runs.append(dict(measured.costs.verify_s))
        one = runs[-1][1]
        ratios = " ".join(f"{n}:{runs[-1][n] / one:.1f}" for n in SIZES)
        print(f"pass {i + 1}: V(1) {one * 1000:.1f} ms; V(n)/V(1) {ratios}", file=sys.stderr)
    median = {n: statistics.median(run[n] for run in runs) for n in SIZES}
    print(f"{_cpu_name()}, {args.target.name}, median of {len(runs)} passes:")
    print("| n | V(n) ms | V(n)/V(1) | min-max over passes |")
    print("|---:|---:|---:|---:|")
    for n in SIZES:
        lo, hi = min(run[n] for run in runs), max(run[n] for run in runs)
        print(
            f"| {n} | {median[n] * 1000:.1f} | {median[n] / median[1]:.2f} "
            f"| {lo * 1000:.1f}-{hi * 1000:.1f} |"
        )
    if args.json:
        data = {
            "cpu": _cpu_name(),
            "target": args.target.name,
            "costs": {"verify_s": {str(n): round(s, 6) for n, s in median.items()}},
            "passes": [{str(n): round(s, 6) for n, s in run.items()} for run in runs],
        }
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
