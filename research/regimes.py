#!/usr/bin/env python3
"""The default policy against the best fixed configuration and the oracle, per category, in
three cost regimes, on prompts split before tuning (issue 44, item 4).

    python research/regimes.py [--split tuning|held-out|all] [--json out.json]

Replayed (`specllama.policy.simulator`) on recorded answers of the reference pair (Qwen2.5-Coder
0.5B drafting for 1.5B) with the costs recorded beside them:

- "Q4_K_M, AMD EPYC": verifying is dear (V(2) = 1.7 V(1)); the bundled prompts' answers, and
  Spec-Bench's (held out: never used for tuning);
- "Q4_K_M, Intel Xeon" and "F16, Intel Xeon": the same prompts answered by each target; the F16
  target is memory-bound, so verifying up to 6 tokens costs about one (the regime of GPUs);
- "GPU-like (simulated)": the EPYC answers on the costs an H200 showed for a 7B-shaped F16
  target (research/policies.py, H200_MEASURED: rounds dearer than its calibration says).
  Labelled as such: no GPU ran it.

The bundled prompts are split by their place in their category (sorted by name: even places tune,
odd places are held out), so a figure from `--split held-out` comes from answers no choice was
made on. "Best fixed" is the best of the target alone, the draft model at k = 1..8 and n-gram
lookup at k = 1..16, chosen per category knowing the results (what a person could have picked
for that category on that machine); the oracle knows every answer in advance.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from policies import H200_MEASURED, RESULTS

from specllama.engine.control import FixedLength
from specllama.policy.controller import AdaptiveController
from specllama.policy.costs import Costs
from specllama.policy.simulator import MachineCosts, Trace, oracle_speedup, simulate

# The F16 target on the EPYC (verifying 2 tokens costs 1.6 one, 8 cost 2.9; a draft step 0.27
# of a target token): the calibration of the live F16 run. Its file is the Q4_K_M requantised to
# F16 (the same weights), so the Q4_K_M's recorded answers stand for its answers, up to the
# kernels' rounding; only the costs are F16's.
F16_EPYC = MachineCosts(
    Costs.from_dict(
        json.loads((RESULTS / "issue44-live-f16-epyc.json").read_text(encoding="utf-8"))[
            "calibration"
        ]
    )
)
# label -> (traces files, the machine's costs: "recorded" = the first file's calibration)
REGIMES = {
    "Q4_K_M, AMD EPYC": (("traces-q4km-epyc.json", "traces-q4km-epyc-specbench.json"), None),
    "Q4_K_M, Intel Xeon": (("traces-qwen2.5-coder-q4km.json",), None),
    "F16, Intel Xeon": (("traces-qwen2.5-coder-f16-target.json",), None),
    "F16, AMD EPYC": (
        ("traces-q4km-epyc.json", "traces-q4km-epyc-specbench.json"),
        F16_EPYC,
    ),
    "GPU-like (simulated)": (
        ("traces-q4km-epyc.json", "traces-q4km-epyc-specbench.json"),
        H200_MEASURED,
    ),
}
TARGET_ALONE = "target alone"
# The max_tokens the answers were recorded with: the loop counts what remains from it, and never
# knows where an answer will stop before it does.
RECORDED_BUDGET = 128
FIXED: dict[str, tuple[Callable[[], object], dict]] = {
    **{f"model:{k}": (lambda k=k: FixedLength(k), {"ngram": False}) for k in (1, 2, 3, 4, 6, 8)},
    **{
        f"ngram:{k}": (lambda k=k: FixedLength(k), {"draft_model": False}) for k in (1, 2, 4, 8, 16)
    },
}


def split_of(trace: Trace, place: int) -> str:
    """Spec-Bench's answers are held out; the bundled ones by their place in their category."""
    if trace.name.startswith("sb-"):
        return "held-out"
    return "tuning" if place % 2 == 0 else "held-out"


def load(files: tuple[str, ...]) -> tuple[list[tuple[str, Trace]], Costs]:
    traces, costs = [], None
    for name in files:
        data = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        costs = costs or Costs.from_dict(data["costs"])
        by_category: dict[str, list[Trace]] = defaultdict(list)
        for raw in data["traces"]:
            trace = Trace.from_dict(raw)
            by_category[trace.category].append(trace)
        for group in by_category.values():
            for place, trace in enumerate(sorted(group, key=lambda t: t.name)):
                traces.append((split_of(trace, place), trace))
    assert costs is not None
    return traces, costs


def learnt_on(traces: list[Trace], machine: MachineCosts, **options: object) -> Costs:
    """The machine's calibration as runs of `traces`, one after another, leave it: each starts
    from what the one before learnt of its rounds' cost (`costs.Learnt`), as a user's runs do."""
    costs = machine.costs
    for trace in traces:
        controller = AdaptiveController(costs, **options)
        simulate(trace, controller, machine, max_tokens=RECORDED_BUDGET)
        costs = replace(costs, learnt=controller.live.learnt() or costs.learnt)
    return costs


def replay_regime(
    traces: list[Trace], machine: MachineCosts, costs: Costs | None = None, **options: object
) -> dict[str, dict]:
    """Per category: the default's (starting from `costs`, default the calibration alone; its
    controller built with `options`), each fixed configuration's and the oracle's speedups."""
    runs: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    start = costs or machine.costs
    for trace in traces:
        controller = AdaptiveController(start, **options)
        runs["default"][trace.category].append(
            simulate(trace, controller, machine, max_tokens=RECORDED_BUDGET).speedup
        )
        for name, (make, sources) in FIXED.items():
            result = simulate(trace, make(), machine, max_tokens=RECORDED_BUDGET, **sources)
            runs[name][trace.category].append(result.speedup)
        runs["oracle"][trace.category].append(oracle_speedup(trace, machine))
    table = {}
    for category in sorted(runs["default"]):
        medians = {name: statistics.median(v[category]) for name, v in runs.items()}
        fixed = {name: medians[name] for name in FIXED} | {TARGET_ALONE: 1.0}
        best = max(fixed, key=fixed.__getitem__)
        table[category] = {
            "prompts": len(runs["default"][category]),
            "default": round(medians["default"], 3),
            "best_fixed": best,
            "best_fixed_speedup": round(fixed[best], 3),
            "default_over_best": round(medians["default"] / fixed[best], 3),
            "default_over_oracle": round(medians["default"] / medians["oracle"], 3),
            "worst_prompt": round(min(runs["default"][category]), 3),
        }
    return table


def summary(table: dict[str, dict]) -> str:
    """One line: the mean over categories of the default / the best fixed, how many categories
    are at 0.98 of it or more, and the worst prompt."""
    ratios = [row["default_over_best"] for row in table.values()]
    worst = min(row["worst_prompt"] for row in table.values())
    return (
        f"mean default / best fixed {statistics.mean(ratios):.3f}, "
        f"{sum(r >= 0.98 for r in ratios)}/{len(ratios)} categories at 0.98 or more, "
        f"worst prompt {worst:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["tuning", "held-out", "all"], default="held-out")
    parser.add_argument("--json", default=None)
    parser.add_argument(
        "--cold",
        action="store_true",
        help="each answer starts from the calibration alone, as the first run on a machine "
        "(default: from what runs of the tuning prompts learnt of their rounds' cost)",
    )
    parser.add_argument(
        "--without-hindsight",
        action="store_true",
        help="learn of n-gram lookups only from rounds drafted from them, as before issue 44's "
        "hindsight (for comparison)",
    )
    args = parser.parse_args()
    options = {"hindsight": not args.without_hindsight}
    report = {}
    for label, (files, machine) in REGIMES.items():
        split_traces, costs = load(files)
        machine = machine or MachineCosts(costs)
        traces = [t for split, t in split_traces if args.split in ("all", split)]
        tuning = [t for split, t in split_traces if split == "tuning"]
        start = machine.costs if args.cold else learnt_on(tuning, machine, **options)
        table = replay_regime(traces, machine, start, **options)
        report[label] = table
        start_from = "cold" if args.cold else "after runs of the tuning prompts"
        print(f"\n{label}, {args.split} prompts (replayed, {start_from}; medians per category)")
        print("| category | prompts | default | best fixed | default / best | of oracle | worst |")
        print("|---|---:|---:|---|---:|---:|---:|")
        for category, row in table.items():
            print(
                f"| {category} | {row['prompts']} | {row['default']:.2f}x | "
                f"{row['best_fixed_speedup']:.2f}x {row['best_fixed']} | "
                f"{row['default_over_best']:.2f} | {row['default_over_oracle']:.2f} | "
                f"{row['worst_prompt']:.2f}x |"
            )
        print(summary(table))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
