#!/usr/bin/env python3
"""Compare drafting policies offline: record what a draft/target pair does on the bench prompts
once, then replay it against the adaptive controller and fixed draft lengths on any machine's
costs (specllama.policy.simulator). Seconds instead of an hour a comparison, and the same answers
for every policy, so differences are the policy's alone.

    python research/policies.py record --target T.gguf --draft D.gguf --out traces.json [-n 128]
    python research/policies.py replay traces.json [--costs traces|h200|h200-measured]
    python research/policies.py gpu [--overlap 0 0.5 1]   # controlled-acceptance pairs, H200 costs
    python research/policies.py compare [-n 48 128] [--machines epyc xeon h200 ...]

`record` runs the target alone on each prompt (greedy), evaluates the draft model on the answer
(teacher forcing) and looks up n-grams, and stores the machine's measured costs with it.
Replayed times are the cost model's, not measurements: `specllama bench` measures. `replay` also
gives an upper bound: the best rounds for each answer, chosen knowing it in advance.
`compare` plays how long n-gram drafts may be (the ramp, and no ramp after a long match: issue 33)
on the recorded answers, cut at each length asked, on every machine's costs, per category, and
on the same answers given again with the memory of the first (`repeated`; a client's exact
prediction is the same evidence, `specllama.engine.prediction.ALIGNED_EVIDENCE`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from specllama.engine.control import NGRAM as NGRAM_KIND
from specllama.engine.control import FixedLength, kind_of
from specllama.engine.memory import MAX_MATCH
from specllama.policy.controller import AdaptiveController, lane_of, match_length
from specllama.policy.costs import Costs
from specllama.policy.simulator import (
    MachineCosts,
    Trace,
    oracle_speedup,
    simulate,
    synthetic_trace,
)

# NVIDIA H200, 7B-shaped F16 target, 0.5B-shaped draft (DESIGN.md, issue 9): one target token
# 7.2 ms, verifying 2/4/8/16 tokens 1.25/1.28/1.36/1.74x, a draft step 0.23x.
T1 = 0.0072
H200 = Costs(
    verify_s=((1, T1), (2, 1.25 * T1), (4, 1.28 * T1), (8, 1.36 * T1), (16, 1.74 * T1)),
    draft_step_s=0.23 * T1,
    draft_catchup_s=0.003 * T1,
)
# What the fixed chains measured there (model:4 1.27x, model:8 1.45x at a = 0.95) imply the
# rounds really cost: draft steps 1.55x the calibrated step, and 6 ms a round besides.
H200_MEASURED = MachineCosts(H200, draft_step_factor=1.55, overhead_round_s=0.84 * T1)
# Python time a pipelined round adds (handing the draft ahead to the worker thread and back):
# 0.45 ms, measured with the fake backend (free decodes) on the 2-core Xeon, k = 4, 400 rounds:
# 0.52 ms a pipelined round against 0.08 ms a chained one; not measured on a GPU machine.
AHEAD_OVERHEAD_S = 0.00045
FIXED = {"model:2": 2, "model:4": 4, "model:8": 8}
PIPED = {"pipe:4": 4, "pipe:8": 8}
NGRAM = "ngram:8"


class MatchGate:
    """n-gram drafting as llama.cpp's ngram-simple (a match of 12 tokens, then up to 48) and
    ngram-mod (24, then up to 48) decide it: `k` tokens once the match is `min_match` long,
    nothing before. Their rule replayed on our answers and costs, not their code."""

    min_confidence = None
    pipelined = False

    def __init__(self, min_match: int, k: int) -> None:
        self.min_match, self.k = min_match, k

    def choose(self, options, *, remaining: int = 0, generated: int = 0) -> tuple[str, int]:
        for name, _ in options:
            if kind_of(name) == NGRAM_KIND and match_length(name) >= self.min_match:
                return name, self.k
        return "", 0

    def observe(self, round_: object) -> None:
        pass

    def in_batch(self, price: tuple[float, float] | None) -> None:
        pass


ORACLE = "oracle (upper bound)"
LLAMA_GATES = {"ngram-simple-like": (12, 48), "ngram-mod-like": (24, 48)}
INFORMED = "told each lane's survival"


class KnownSurvival:
    """n-gram drafting told, for each lane (`lane_of`), the survival S(j) of its copies: the
    share of positions where the first j tokens of the offer were right, over the traces
    replayed (in sample: what no run can know in advance). It drafts the k with the best
    (1 + S(1) + ... + S(k)) / V(k + 1). What the model of acceptance by lane allows at best."""

    min_confidence = None
    pipelined = False

    def __init__(self, survival: dict[str, np.ndarray], costs: Costs, k_max: int = 48) -> None:
        cost = np.array([costs.verify(k + 1) for k in range(k_max + 1)])
        self.best = {}  # lane -> its best draft length (0: the target alone)
        for lane, shares in survival.items():
            tokens = 1.0 + np.concatenate([[0.0], np.cumsum(shares)])[: len(cost)]
            self.best[lane] = int((tokens / cost[: len(tokens)]).argmax())

    @classmethod
    def of(cls, traces: list[Trace], costs: Costs) -> KnownSurvival:
        runs: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for trace in traces:
            for i, match in enumerate(trace.ngram_match):
                if match:
                    runs[lane_of(trace.ngram_source(i))].append(
                        (trace.ngram_run[i], trace.ngram_offer[i])
                    )
        survival = {}
        for lane, seen in runs.items():
            shares = []
            for j in range(1, 49):
                known = [run for run, offer in seen if offer >= j or run < offer]
                shares.append(sum(run >= j for run in known) / len(known) if known else 0.0)
            survival[lane] = np.array(shares)
        return cls(survival, costs)

    def choose(self, options, *, remaining: int = 0, generated: int = 0) -> tuple[str, int]:
        for name, _ in options:
            k = self.best.get(lane_of(name))
            if kind_of(name) == NGRAM_KIND and k is not None:
                return (name, k) if k else ("", 0)
        return "", 0

    def observe(self, round_: object) -> None:
        pass

    def in_batch(self, price: tuple[float, float] | None) -> None:
        pass


def policies(costs: Costs, *, pipelined: bool = False) -> dict[str, tuple[object, dict]]:
    """name -> (controller factory, which sources it may use)."""
    chosen: dict[str, tuple[object, dict]] = {
        name: (lambda k=k: FixedLength(k), {"ngram": False}) for name, k in FIXED.items()
    }
    if pipelined:
        for name, k in PIPED.items():
            chosen[name] = (lambda k=k: FixedLength(k, pipelined=True), {"ngram": False})
    chosen[NGRAM] = (lambda: FixedLength(8), {"draft_model": False})
    for name, (min_match, k) in LLAMA_GATES.items():
        chosen[name] = (lambda m=min_match, k=k: MatchGate(m, k), {"draft_model": False})
    chosen["adaptive"] = (lambda: AdaptiveController(costs), {})
    chosen[RAMP_ONLY] = (lambda: AdaptiveController(costs, long_copy=None), {})
    return chosen


RAMP_ONLY = "adaptive, ramp only (before)"


class ChainedCopies(AdaptiveController):
    """Tried for issue 33, not shipped: each token of an n-gram draft judged by the lane of the
    match it would make once the tokens before it are kept (a copy that goes on is a longer
    match), S(j) = a(m) a(m + 1) ... a(m + j - 1), instead of a(m)^j; from `chain_from` tokens
    of match on."""

    def __init__(self, costs: Costs, *, chain_from: int = 3, **options: object) -> None:
        super().__init__(costs, **options)  # type: ignore[arg-type]
        self.chain_from = chain_from

    def ngram_length(self, name: str, mean: float) -> tuple[int, float]:
        match = match_length(name)
        if match < self.chain_from:
            return super().ngram_length(name, mean)
        k_max = self._copy_limit(match)
        chances = [mean] + [self.acceptance(f"{NGRAM_KIND}{match + j}") for j in range(1, k_max)]
        survive = np.cumprod(np.minimum(chances, 0.99))
        tokens = 1.0 + np.cumsum(survive)  # E(k) for k = 1..k_max
        cost = np.array([self.live.round(NGRAM_KIND, k) for k in range(1, k_max + 1)])
        k = int((tokens / cost).argmax())
        return k + 1, float(tokens[k] / cost[k])


def length_policies(costs: Costs) -> dict[str, tuple[object, dict]]:
    """How long n-gram drafts may be: the ramp, no ramp from a match of N tokens, copies judged
    as they go on, llama.cpp's gate. name -> (controller factory, which sources it may use)."""
    gate, k = LLAMA_GATES["ngram-simple-like"]
    return {
        RAMP_ONLY: (lambda: AdaptiveController(costs, long_copy=None), {}),
        "no ramp from 12": (lambda: AdaptiveController(costs, long_copy=12), {}),
        "no ramp from 24": (lambda: AdaptiveController(costs, long_copy=24), {}),
        "no ramp from 32 (shipped)": (lambda: AdaptiveController(costs), {}),
        "copies judged as they go on": (
            lambda: ChainedCopies(costs, long_copy=None),
            {},
        ),
        "... and no ramp from 12": (lambda: ChainedCopies(costs, long_copy=12), {}),
        "ngram-simple-like": (lambda: MatchGate(gate, k), {"draft_model": False}),
    }


def with_overlap(machine: MachineCosts, overlap: float) -> MachineCosts:
    """The machine with this overlap (lambda), calibrated as such: what its controller is told."""
    costs = dataclasses.replace(machine.costs, overlap=overlap)
    return dataclasses.replace(
        machine, costs=costs, overlap=overlap, overhead_ahead_s=AHEAD_OVERHEAD_S
    )


# -- record -----------------------------------------------------------------------------------


def record(args: argparse.Namespace) -> None:
    from specllama.bench.prompts import load_prompts
    from specllama.policy.calibration import _cpu_name
    from specllama.policy.simulator import record_trace
    from specllama.session import Engine, EngineConfig

    # Traces are the target's free answers (`record_trace` applies no constraint): a schema
    # prompt's would not be the answer it asks for, so it is left out.
    prompts = [p for p in load_prompts(args.prompts) if p.schema is None]
    config = EngineConfig(target=args.target, draft=args.draft, n_ctx=4096)
    traces = []
    with Engine(config) as engine:
        costs = engine.calibrate()
        for i, prompt in enumerate(prompts, 1):
            tokens = engine.prompt_tokens(list(prompt.messages))
            trace, _ = record_trace(
                engine.target,
                engine.draft_model,
                tokens,
                max_tokens=prompt.max_tokens or args.max_tokens,
                name=prompt.id,
                category=prompt.category,
            )
            traces.append(trace.as_dict())
            print(f"{i}/{len(prompts)} {prompt.id}: {len(trace)} tokens", file=sys.stderr)
    data = {
        "cpu": _cpu_name(),
        "target": Path(args.target).name,
        "draft": Path(args.draft).name,
        "costs": costs.as_dict(),
        "traces": traces,
    }
    Path(args.out).write_text(json.dumps(data) + "\n", encoding="utf-8")


# -- replay -----------------------------------------------------------------------------------


def replay(args: argparse.Namespace) -> None:
    data = json.loads(Path(args.traces).read_text(encoding="utf-8"))
    traces = [Trace.from_dict(t) for t in data["traces"]]
    costs = Costs.from_dict(data["costs"]) if args.costs == "traces" else H200
    machine = H200_MEASURED if args.costs == "h200-measured" else MachineCosts(costs)
    print(f"traces: {data['target']} + {data['draft']} on {data['cpu']}; costs: {args.costs}")
    speedups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    informed = KnownSurvival.of(traces, costs)
    for trace in traces:
        for name, (make, sources) in policies(costs).items():
            result = simulate(trace, make(), machine, **sources)
            speedups[name][trace.category].append(result.speedup)
            speedups[name]["all"].append(result.speedup)
        told = simulate(trace, informed, machine, draft_model=False).speedup
        speedups[INFORMED][trace.category].append(told)
        speedups[INFORMED]["all"].append(told)
        best = oracle_speedup(trace, machine)
        speedups[ORACLE][trace.category].append(best)
        speedups[ORACLE]["all"].append(best)
    categories = [*sorted({t.category for t in traces}), "all"]
    print("| policy | " + " | ".join(categories) + " | worst prompt |")
    print("|---|" + "---:|" * (len(categories) + 1))
    for name, by_category in speedups.items():
        cells = [f"{statistics.median(by_category[c]):.2f}x" for c in categories]
        print(f"| {name} | " + " | ".join(cells) + f" | {min(by_category['all']):.2f}x |")
    print(f"\n{INFORMED}: n-gram lookup told how long each lane's copies last here (in sample).")
    print(f"{ORACLE}: the best rounds for each answer, known in advance; no policy can beat it.")


# -- compare ----------------------------------------------------------------------------------

RESULTS = Path(__file__).parent / "results"
DEFAULT_TRACES = ("traces-q4km-epyc.json", "traces-q4km-epyc-specbench.json")
# Where each machine's costs were measured: a traces file's calibration, or a verify curve
# measured past it (research/verify_reach.py) with that file's draft costs.
MACHINE_COSTS = {
    "epyc": ("traces-q4km-epyc.json", None),
    "epyc-65": ("traces-q4km-epyc.json", "issue33-verify-reach.json"),
    "xeon": ("traces-qwen2.5-coder-q4km.json", None),
    "xeon-f16": ("traces-qwen2.5-coder-f16-target.json", None),
}


def machine_named(name: str) -> MachineCosts:
    if name == "h200":
        return MachineCosts(H200)
    if name == "h200-measured":
        return H200_MEASURED
    traces, verify = MACHINE_COSTS[name]
    data = json.loads((RESULTS / traces).read_text(encoding="utf-8"))["costs"]
    if verify is not None:
        measured = json.loads((RESULTS / verify).read_text(encoding="utf-8"))["costs"]
        data = {**data, "verify_s": measured["verify_s"]}
    return MachineCosts(Costs.from_dict(data))


def given_again(trace: Trace, evidence: int, category: str) -> Trace:
    """The same answer where every position drafts the rest of it on a match of `evidence`
    tokens: the memory of the same request answered before (greedy: the same answer; a match
    as long as a match is counted) or the client's exact prediction of it."""
    n = len(trace)
    rest = tuple(min(n - i, MAX_MATCH) for i in range(n))
    return dataclasses.replace(
        trace,
        ngram_match=(evidence,) * n,
        ngram_offer=rest,
        ngram_run=rest,
        ngram_unanimous=(True,) * n,
        category=category,
    )


def compare(args: argparse.Namespace) -> None:
    traces = []
    for name in args.traces:
        path = Path(name) if Path(name).exists() else RESULTS / name
        traces += [Trace.from_dict(t) for t in json.loads(path.read_text())["traces"]]
    bundled = [t for t in traces if not t.name.startswith("sb-")]
    traces += [given_again(t, MAX_MATCH, "repeated") for t in bundled]
    categories = sorted({t.category for t in traces})
    report = []
    for n in args.n:
        for machine_name in args.machines:
            machine = machine_named(machine_name)
            speedups: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
            for trace in traces:
                for name, (make, sources) in length_policies(machine.costs).items():
                    result = simulate(trace, make(), machine, max_tokens=n, **sources)
                    speedups[name][trace.category].append(result.speedup)
                best = oracle_speedup(trace, machine, max_tokens=n)
                speedups[ORACLE][trace.category].append(best)
            medians = {
                name: {c: round(statistics.median(v[c]), 3) for c in categories}
                for name, v in speedups.items()
            }
            report.append({"n": n, "machine": machine_name, "medians": medians})
            print(f"\n{n} tokens, {machine_name} costs (median per category)")
            print("| policy | " + " | ".join(categories) + " | worst change |")
            print("|---|" + "---:|" * (len(categories) + 1))
            before = medians[RAMP_ONLY]
            for name, by_category in medians.items():
                cells = [f"{by_category[c]:.2f}" for c in categories]
                worst = min(categories, key=lambda c: by_category[c] - before[c])
                change = f"{by_category[worst] - before[worst]:+.3f} {worst}"
                print(f"| {name} | " + " | ".join(cells) + f" | {change} |")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


# -- gpu --------------------------------------------------------------------------------------


def gpu(args: argparse.Namespace) -> None:
    """Predicted speedups on the H200's costs, for each overlap lambda asked: 0 = the verify and
    the draft ahead run fully in parallel, 1 = in turn (then the pipeline never pays)."""
    machines = (("as calibrated", MachineCosts(H200)), ("as measured", H200_MEASURED))
    for label, base in machines:
        for overlap in args.overlap:
            machine = with_overlap(base, overlap)
            names = policies(machine.costs, pipelined=True)
            print(
                f"H200 costs {label}, overlap {overlap}; {args.n} tokens, median of {args.traces}"
            )
            print("| a | " + " | ".join(names) + " |")
            print("|---|" + "---:|" * len(names))
            for a in (0.95, 0.8, 0.6):
                traces = [
                    synthetic_trace(args.n, a, np.random.default_rng(seed), n_prompt=40)
                    for seed in range(args.traces)
                ]
                cells = []
                for make, sources in names.values():
                    runs = [
                        simulate(t, make(), machine, seed=i, **sources)
                        for i, t in enumerate(traces)
                    ]
                    cells.append(f"{statistics.median(r.speedup for r in runs):.2f}x")
                print(f"| {a} | " + " | ".join(cells) + " |")
            print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--target", required=True)
    rec.add_argument("--draft", required=True)
    rec.add_argument("--out", required=True)
    rec.add_argument("--prompts", type=Path, default=None)
    rec.add_argument("-n", "--max-tokens", type=int, default=128)
    rep = sub.add_parser("replay")
    rep.add_argument("traces")
    rep.add_argument("--costs", choices=["traces", "h200", "h200-measured"], default="traces")
    g = sub.add_parser("gpu")
    g.add_argument("-n", type=int, default=256)
    g.add_argument("--traces", type=int, default=25)
    g.add_argument("--overlap", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    cmp = sub.add_parser("compare")
    cmp.add_argument("--traces", nargs="+", default=list(DEFAULT_TRACES))
    machines = [*MACHINE_COSTS, "h200", "h200-measured"]
    cmp.add_argument("--machines", nargs="+", choices=machines, default=machines)
    cmp.add_argument("-n", type=int, nargs="+", default=[48, 128])
    cmp.add_argument("--json", default=None)
    args = parser.parse_args()
    {"record": record, "replay": replay, "gpu": gpu, "compare": compare}[args.command](args)


if __name__ == "__main__":
    main()
