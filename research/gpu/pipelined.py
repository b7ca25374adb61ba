"""Chain against pipelined drafting on a controlled-acceptance pair (make_models.py --acceptance):
speedups over the target alone in the same repeat, and what a round costs, per configuration.

    python research/gpu/pipelined.py --target T.gguf --draft 0.95=D95.gguf --draft 0.8=D80.gguf \
        [-n 256] [--repeats 2] [--temperature 0 0.7] [--json out.json]

For each draft: the calibration the adaptive controller uses (its overlap lambda included), then
`repeats` rounds of every configuration in turn on one prompt of random ordinary tokens.
Prints a markdown table: median speedup, acceptance, and per round the draft time on the
clock, the verify, the wait for a draft ahead, and the Python time.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np

from specllama.engine.control import FixedLength
from specllama.engine.drafters import DraftModelDrafter, NoDrafter
from specllama.engine.events import FinishEvent, RoundEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.llama.backend import LlamaBackend
from specllama.llama.library import build_facts
from specllama.policy import calibration
from specllama.policy.controller import AdaptiveController

CONFIGS = ("target", "model:4", "model:8", "pipe:4", "pipe:8", "adaptive")


def controller(name: str, costs):
    if name == "adaptive":
        return AdaptiveController(costs)
    kind, _, k = name.partition(":")
    return FixedLength(int(k or 0), pipelined=kind == "pipe")


def one_run(target, draft, name, costs, prompt, params, n) -> dict:
    drafter = NoDrafter() if name == "target" else DraftModelDrafter(draft)
    draft.rollback(0)
    rounds: list[RoundEvent] = []
    for event in generate(
        target, drafter, prompt, params, max_tokens=n, controller=controller(name, costs)
    ):
        if isinstance(event, RoundEvent):
            rounds.append(event)
        elif isinstance(event, FinishEvent):
            stats = event.stats
    per_round = len(rounds) or 1
    return {
        "tokens_per_s": stats.tokens_per_s,
        "acceptance": stats.acceptance_rate,
        "rounds": len(rounds),
        "pipelined_rounds": sum(1 for r in rounds if r.n_ahead),
        "carried_rounds": sum(1 for r in rounds if r.carried),
        "draft_ms": 1000 * sum(r.draft_s for r in rounds) / per_round,
        "verify_ms": 1000 * sum(r.target_s for r in rounds) / per_round,
        "wait_ms": 1000 * sum(r.wait_s for r in rounds) / per_round,
        "python_ms": 1000
        * sum(r.wall_s - r.draft_s - r.target_s - r.wait_s for r in rounds)
        / per_round,
    }


def measure(target, draft, prompt, params, n, repeats) -> dict:
    costs = calibration.measure(target, draft, side_by_side=True)
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    for repeat in range(repeats + 1):  # the first is a warm-up
        for name in CONFIGS:
            run = one_run(target, draft, name, costs, prompt, params, n)
            if repeat:
                runs[name].append(run)
    summary = {}
    for name, these in runs.items():
        pairs = zip(these, runs["target"])
        speedups = [r["tokens_per_s"] / t["tokens_per_s"] for r, t in pairs]
        middle = sorted(these, key=lambda r: r["tokens_per_s"])[len(these) // 2]
        summary[name] = {"speedup": statistics.median(speedups), **middle}
    return {"calibration": costs.as_dict(), "summary": summary}


def markdown(label: str, result: dict) -> str:
    c = result["calibration"]
    lines = [
        f"### {label}: overlap {c['overlap']:.2f}, draft step {1000 * c['draft_step_s']:.2f} ms",
        "",
        "| config | speedup | accept | rounds (pipelined, carried) | draft ms | verify ms "
        "| wait ms | python ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, s in result["summary"].items():
        lines.append(
            f"| {name} | {s['speedup']:.2f}x | {s['acceptance']:.0%} | {s['rounds']} "
            f"({s['pipelined_rounds']}, {s['carried_rounds']}) | {s['draft_ms']:.2f} "
            f"| {s['verify_ms']:.2f} | {s['wait_ms']:.2f} | {s['python_ms']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", action="append", required=True, help="A=path.gguf")
    parser.add_argument("--gpu-layers", type=int, default=-1)
    parser.add_argument("-n", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--temperature", type=float, nargs="+", default=[0.0, 0.7])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print(f"llama-cpp-python {build_facts().version}, GPU offload: {build_facts().gpu_offload}")
    target = LlamaBackend(args.target, n_ctx=2048, n_gpu_layers=args.gpu_layers)
    prompt = [int(t) for t in np.random.default_rng(0).integers(1000, 100_000, size=64)]
    results = {}
    for spec in args.draft:
        a, _, path = spec.partition("=")
        with LlamaBackend(path, n_ctx=2048, n_gpu_layers=args.gpu_layers) as draft:
            for temperature in args.temperature:
                params = SamplingParams(temperature=temperature, seed=1)
                label = f"a = {a}, temperature {temperature}, {args.n} tokens"
                results[label] = measure(target, draft, prompt, params, args.n, args.repeats)
                print(markdown(label, results[label]), flush=True)
                if args.json:
                    args.json.write_text(json.dumps(results, indent=2))
    target.close()


if __name__ == "__main__":
    main()
