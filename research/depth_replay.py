#!/usr/bin/env python3
"""Would a calibration at the prompt's depth pay? (issue 44, item 1)

    python research/depth_replay.py

Replays the recorded answers to prompts of 300 tokens or more (research/regimes.py's traces) on
a machine whose verify cost grows with the context as measured on the 2-core AMD EPYC
(`research/depth_costs.py`, research/results/issue44-depth-*.json): V(n) after D tokens is the
regime's V(n) plus (D - 64) (a + b n), a and b fitted to the measured curves (a line per batch
size through the three depths, then a line through their slopes), scaled to the regime's V(1).
The default controller runs twice: calibrated as now (64 tokens of context, the answer's own
rounds correcting it), and calibrated at the prompt's depth, exactly (what the best calibration
at depth could tell it). Simulated costs, not measurements; no regime but the EPYC's has a
measured depth curve.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from policies import RESULTS
from regimes import RECORDED_BUDGET, REGIMES, load

from specllama.policy.controller import AdaptiveController
from specllama.policy.costs import Costs
from specllama.policy.simulator import MachineCosts, simulate

CALIBRATED_AT = 64  # the calibration's context (`specllama.policy.calibration.CONTEXT_TOKENS`)
LONG_PROMPT = 300
DEPTH_CURVES = {
    "F16, AMD EPYC": "issue44-depth-f16-epyc.json",
    "Q4_K_M, AMD EPYC": "issue44-depth-q4km-epyc.json",
}


def depth_slope(curves: dict[str, dict[str, float]]) -> tuple[float, float]:
    """(a, b): seconds a verify of n tokens gains per token of context, a + b n."""
    depths = sorted(int(d) for d in curves)
    sizes = sorted(int(n) for n in curves[str(depths[0])])
    slopes = [np.polyfit(depths, [curves[str(d)][str(n)] for d in depths], 1)[0] for n in sizes]
    b, a = np.polyfit(sizes, slopes, 1)
    return float(a), float(b)


class DeepMachine:
    """`machine`'s costs at the depth `at` (set as the answer goes on): each verify dearer by
    (depth - CALIBRATED_AT) (a + b n)."""

    def __init__(self, machine: MachineCosts, a: float, b: float) -> None:
        self.machine, self.a, self.b, self.at = machine, a, b, CALIBRATED_AT

    def __getattr__(self, name: str) -> object:
        return getattr(self.machine, name)

    def verify(self, n: int, depth: int | None = None) -> float:
        extra = max((self.at if depth is None else depth) - CALIBRATED_AT, 0)
        return self.machine.verify(n) + extra * (self.a + self.b * n)

    def target_alone_at(self, n_prompt: int, n_tokens: int) -> float:
        plain = self.machine.overhead_plain_s
        return sum(self.verify(1, n_prompt + i) + plain for i in range(n_tokens))

    def costs_at(self, depth: int) -> Costs:
        """The calibration a measurement at `depth` would have given."""
        costs = self.machine.costs
        return replace(costs, verify_s=tuple((n, self.verify(n, depth)) for n, _ in costs.verify_s))


class DepthTracking:
    """The controller, telling the machine how deep the answer is before each round."""

    def __init__(self, controller: AdaptiveController, machine: DeepMachine, n_prompt: int):
        self.controller, self.machine, self.n_prompt = controller, machine, n_prompt

    def __getattr__(self, name: str) -> object:
        return getattr(self.controller, name)

    def choose(self, options, *, remaining: int, generated: int = 0):
        self.machine.at = self.n_prompt + generated
        return self.controller.choose(options, remaining=remaining, generated=generated)

    def observe(self, round_) -> None:
        self.controller.observe(round_)

    def in_batch(self, price: tuple[float, float] | None) -> None:
        self.controller.in_batch(price)


def main() -> None:
    for label, curves_file in DEPTH_CURVES.items():
        files, machine = REGIMES[label]
        traces, costs = load(files)
        machine = machine or MachineCosts(costs)
        curves = json.loads((RESULTS / curves_file).read_text(encoding="utf-8"))["curves"]
        scale = machine.verify(1) / curves[str(CALIBRATED_AT)]["1"]
        a, b = (x * scale for x in depth_slope(curves))
        print(f"\n{label}: a verify gains {a * 1e6:.1f} + {b * 1e6:.1f} n us per token of context")
        print("| answer | prompt | tokens | calibrated at 64 | calibrated at the prompt's depth |")
        print("|---|---:|---:|---:|---:|")
        speedups: dict[str, list[float]] = {"shallow": [], "deep": []}
        for _, trace in traces:
            if trace.n_prompt < LONG_PROMPT:
                continue
            deep = DeepMachine(machine, a, b)
            n = min(len(trace), RECORDED_BUDGET)
            alone = deep.target_alone_at(trace.n_prompt, n)
            row = []
            for name, start in (
                ("shallow", machine.costs),
                ("deep", deep.costs_at(trace.n_prompt)),
            ):
                controller = DepthTracking(AdaptiveController(start), deep, trace.n_prompt)
                result = simulate(trace, controller, deep, max_tokens=RECORDED_BUDGET)
                speedups[name].append(alone / result.time_s)
                row.append(speedups[name][-1])
            print(f"| {trace.name} | {trace.n_prompt} | {n} | {row[0]:.3f}x | {row[1]:.3f}x |")
        means = {k: statistics.mean(v) for k, v in speedups.items()}
        worst = {k: min(v) for k, v in speedups.items()}
        print(
            f"mean {means['shallow']:.3f}x -> {means['deep']:.3f}x, "
            f"worst {worst['shallow']:.3f}x -> {worst['deep']:.3f}x"
        )


if __name__ == "__main__":
    main()
