"""What speculation costs on this machine: one target token, a verify batch of k, a draft step,
and the Python overhead of the loop, on (synthetic) models at real shapes.

    python research/gpu/costs.py --target T.gguf --draft D.gguf [--gpu-layers -1] --json out.json

Prints a markdown table of the costs and of the speedup they predict for a given acceptance
rate a: a round drafting k tokens emits E(a, k) = (1 - a^(k+1)) / (1 - a) tokens on average
and costs k·c_draft + V(k+1) + overhead, against c_target per token for the target alone.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

import numpy as np

from specllama.engine.control import FixedLength
from specllama.engine.drafters import DraftModelDrafter, NoDrafter
from specllama.engine.events import FinishEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.llama.backend import LlamaBackend
from specllama.llama.library import build_facts
from specllama.policy.costs import expected_tokens

BATCHES = range(1, 11)
ACCEPTANCE = (0.5, 0.6, 0.7, 0.8, 0.9)


def timed_decode_ms(backend: LlamaBackend, n: int, reps: int) -> float:
    """Median time to evaluate n tokens after the prompt, logits read at every position."""
    base = backend.n_past
    tokens = list(range(1000, 1000 + n))
    samples = []
    for _ in range(reps + 3):  # the first few warm caches and CUDA graphs
        started = time.perf_counter()
        backend.decode(tokens, range(n))
        samples.append(time.perf_counter() - started)
        backend.rollback(base)
    return 1000 * statistics.median(samples[3:])


def loop_run(target, drafter, prompt, params, k, n_tokens=128) -> dict[str, float]:
    for event in generate(
        target, drafter, prompt, params, max_tokens=n_tokens, controller=FixedLength(k)
    ):
        if isinstance(event, FinishEvent):
            stats = event.stats
    return {
        "tokens_per_s": stats.tokens_per_s,
        "overhead_ms_per_round": stats.overhead_ms_per_round,
        "acceptance_rate": stats.acceptance_rate,
        "rounds": stats.n_rounds,
    }


def expected_speedup(a: float, k: int, costs: dict) -> float:
    """The controller's model (controller.expected_tokens) applied to the measured costs."""
    tokens = expected_tokens(a, k)
    round_ms = k * costs["draft_ms"] + costs["verify_ms"][k + 1] + costs["overhead_ms"]
    return tokens * costs["verify_ms"][1] / round_ms


def measure(target_path: Path, draft_path: Path, gpu_layers: int, reps: int) -> dict:
    target = LlamaBackend(target_path, n_ctx=4096, n_gpu_layers=gpu_layers)
    draft = LlamaBackend(draft_path, n_ctx=4096, n_gpu_layers=gpu_layers)
    prompt = list(np.random.default_rng(0).integers(100, 150_000, size=256))
    prompt = [int(t) for t in prompt]
    for backend in (target, draft):
        backend.decode(prompt)
    verify = {n: timed_decode_ms(target, n, reps) for n in BATCHES}
    draft_ms = timed_decode_ms(draft, 1, reps)
    greedy, sampled = SamplingParams(), SamplingParams(temperature=0.8, seed=1)
    runs = {
        "target_alone": loop_run(target, NoDrafter(), prompt, greedy, 0),
        "draft_k4_greedy": loop_run(target, DraftModelDrafter(draft), prompt, greedy, 4),
        "draft_k4_sampled": loop_run(target, DraftModelDrafter(draft), prompt, sampled, 4),
    }
    costs = {
        "verify_ms": verify,
        "draft_ms": draft_ms,
        "overhead_ms": runs["draft_k4_greedy"]["overhead_ms_per_round"],
    }
    predicted = {
        str(a): max(
            ((k, expected_speedup(a, k, costs)) for k in range(1, max(BATCHES))),
            key=lambda kv: kv[1],
        )
        for a in ACCEPTANCE
    }
    target.close()
    draft.close()
    return {
        "target": target_path.name,
        "draft": draft_path.name,
        **costs,
        "runs": runs,
        "best_k_and_predicted_speedup": predicted,
    }


def markdown(result: dict) -> str:
    v = result["verify_ms"]
    lines = [
        f"### {result['target']} with draft {result['draft']}",
        "",
        "| batch n | target V(n) ms | V(n)/V(1) |",
        "|---:|---:|---:|",
        *(f"| {n} | {v[n]:.2f} | {v[n] / v[1]:.2f} |" for n in v),
        "",
        f"draft step {result['draft_ms']:.2f} ms = {result['draft_ms'] / v[1]:.2f} x target "
        f"token; Python overhead per round {result['overhead_ms']:.2f} ms (greedy), "
        f"{result['runs']['draft_k4_sampled']['overhead_ms_per_round']:.2f} ms (sampled)",
        "",
        "| acceptance a | best k | predicted speedup |",
        "|---:|---:|---:|",
        *(
            f"| {a} | {k} | {s:.2f}x |"
            for a, (k, s) in result["best_k_and_predicted_speedup"].items()
        ),
        "",
        "| loop run (128 tokens, random weights) | tok/s | overhead ms/round |",
        "|---|---:|---:|",
        *(
            f"| {name} | {r['tokens_per_s']:.1f} | {r['overhead_ms_per_round']:.2f} |"
            for name, r in result["runs"].items()
        ),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", type=Path, action="append", required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--gpu-layers", type=int, default=-1)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--log", type=Path, help="llama.cpp's own log lines, to this file")
    args = parser.parse_args()
    if args.log:
        logging.basicConfig(filename=args.log, level=logging.DEBUG)
    facts = build_facts()
    print(f"llama-cpp-python {facts.version}, GPU offload: {facts.gpu_offload}", flush=True)
    results = []
    for target in args.target:
        result = measure(target, args.draft, args.gpu_layers, args.reps)
        results.append(result)
        print(markdown(result), flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
