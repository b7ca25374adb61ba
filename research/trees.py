#!/usr/bin/env python3
"""What token trees would add over a chain, replayed on traces (specllama.policy.simulator): the
numbers behind issue 10's choice of pipelined drafting. An offline estimate from the cost
model only: specllama implements no token tree, and nothing here runs a model.

The tree replayed is the one a draft model gives for free: the chain of its first choices, plus
its second choice as a leaf beside each chain token where its confidence is below `--unsure`
(1.0: everywhere). The second choices cost no draft step (they come from the logits the chain
already read) but take verify rows, and one is worth a token (itself, and the target's token
after it) where the chain's first rejection falls on a leaf that the target agrees with
(`Trace.model_second_agrees`). Greedy, one tree shape a run, best draft length per acceptance.

    python research/trees.py                      # synthetic pairs, second choice right 0/30/50%
    python research/trees.py --traces research/results/traces-….json   # recorded (with runner-ups)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from policies import H200, H200_MEASURED

from specllama.engine.control import FixedLength
from specllama.policy.simulator import MachineCosts, Trace, simulate, synthetic_trace

LENGTHS = (1, 2, 3, 4, 6, 8, 12)


def tree_speedup(trace: Trace, k: int, machine: MachineCosts, unsure: float) -> float:
    """Target alone's time over the tree's, drafting k first choices a round."""
    pos, time_s = 0, 0.0
    while pos < len(trace):
        depth = min(k, len(trace) - pos - 1)
        run = trace.model_run(pos, depth)
        leaves = [j for j in range(depth) if trace.model_confidence[pos + j] < unsure]
        emitted = run + 1
        if run < depth and run in leaves and trace.model_second_agrees[pos + run]:
            emitted += 1  # the runner-up leaf, then the target's token after it
        draft_s = machine.catch_up(1) + max(depth - 1, 0) * machine.draft_step()
        time_s += draft_s + machine.verify(depth + len(leaves) + 1) + machine.overhead_plain_s
        time_s += machine.overhead_round_s if depth else 0.0
        pos += emitted
    return machine.target_alone(len(trace)) / time_s


def best_of(speedups: dict[int, list[float]]) -> str:
    k, runs = max(speedups.items(), key=lambda item: statistics.median(item[1]))
    return f"{statistics.median(runs):.2f}x (k={k})"


def compare(traces: list[Trace], machine: MachineCosts, unsure: float) -> tuple[str, str]:
    """The best chain and the best sibling tree, medians over the traces."""
    chain: dict[int, list[float]] = {}
    tree: dict[int, list[float]] = {}
    for k in LENGTHS:
        chain[k] = [simulate(t, FixedLength(k), machine, ngram=False).speedup for t in traces]
        tree[k] = [tree_speedup(t, k, machine, unsure) for t in traces]
    return best_of(chain), best_of(tree)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, help="recorded traces (research/policies.py record)")
    parser.add_argument("--unsure", type=float, nargs="+", default=[1.0])
    parser.add_argument("-n", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    machines = {"calibrated": MachineCosts(H200), "measured": H200_MEASURED}
    if args.traces:
        data = json.loads(args.traces.read_text(encoding="utf-8"))
        traces = [Trace.from_dict(t) for t in data["traces"]]
        if not any(t.model_second_agrees for t in traces):
            raise SystemExit("these traces have no runner-ups: record them again")
        agree = np.mean([x for t in traces for x in t.model_agrees])
        misses = [s for t in traces for a, s in zip(t.model_agrees, t.model_second_agrees) if not a]
        print(f"{len(traces)} traces: first choice right {agree:.0%}, ", end="")
        print(f"second choice right at {np.mean(misses):.0%} of the misses")
        print("| H200 costs | unsure below | best chain | best sibling tree |")
        print("|---|---:|---:|---:|")
        for label, machine in machines.items():
            for unsure in args.unsure:
                chain, tree = compare(traces, machine, unsure)
                print(f"| {label} | {unsure} | {chain} | {tree} |")
        return
    print("| H200 costs | a | second choice right | best chain | best sibling tree |")
    print("|---|---:|---:|---:|---:|")
    for label, machine in machines.items():
        for a in (0.95, 0.8, 0.6):
            for second in (0.0, 0.3, 0.5):
                traces = [
                    synthetic_trace(args.n, a, np.random.default_rng(seed), second=second)
                    for seed in range(args.repeats)
                ]
                chain, tree = compare(traces, machine, 1.0)
                print(f"| {label} | {a} | {second:.0%} | {chain} | {tree} |")


if __name__ == "__main__":
    main()
