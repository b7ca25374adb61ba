#!/usr/bin/env python3
"""specllama's default against llama.cpp's own n-gram drafters, on the same prompts.

    python research/llamacpp_ngram.py --llama-bin LLAMA_CPP/build/bin --target T.gguf \
        --draft D.gguf [--prompts bundled research/spec_bench_prompts.jsonl] [-n 128] \
        [--repeats 1] [--out R.json]

For every prompt and repeat, in an order rotated by one each time, one process runs:

- specllama's target alone (`target`: the speed every ratio divides by), its default
  (`adaptive`: n-gram lookup and the draft model, chosen round by round) and its n-gram lookup
  alone (`adaptive-ngram`, `--drafter ngram`);
- llama.cpp's `llama-speculative-simple --spec-type ngram-simple` and `--spec-type ngram-mod`
  (their defaults), greedy, on the prompt rendered through the same chat template, as text that
  llama.cpp tokenizes with its special tokens.

A ratio is a configuration's tokens/s over specllama's target alone in the same round, both
counted from the end of the prompt's prefill. llama.cpp's tool also reports its own decode speed,
which differs from specllama's target alone by a few per cent (`llama-bench tg` measures that).
`specllama bench --vs-llamacpp` now does this run for every user, with the draft model too; the
reading of llama.cpp's log and the rendering of the prompt live in `specllama.bench.llamacpp`.
llama.cpp's tools are built from the sources llama-cpp-python vendors (DESIGN.md):

    tar xzf llama_cpp_python-0.3.36.tar.gz && cd llama_cpp_python-0.3.36/vendor/llama.cpp
    cmake -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF && \
        cmake --build build -j2 --target llama-speculative-simple llama-bench
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from specllama.bench.configs import BenchConfig
from specllama.bench.llamacpp import prompt_text, read_log
from specllama.bench.prompts import BenchPrompt, load_prompts
from specllama.bench.runner import _Runner, machine_facts
from specllama.engine.sampling import SamplingParams
from specllama.llama.backend import default_threads
from specllama.session import Engine, EngineConfig

OURS = {
    "target": BenchConfig("target", "none", 0, False),
    "adaptive": BenchConfig("adaptive", "combined", 16, True),
    "adaptive-ngram": BenchConfig("adaptive-ngram", "ngram", 16, True),
}
THEIRS = ("ngram-simple", "ngram-mod")


def run_llama_cpp(binary: Path, target: Path, kind: str, text: str, n: int, threads: int):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as f:
        f.write(text + "\n")  # -f drops one newline at the end of the file
        f.flush()
        command = [
            str(binary / "llama-speculative-simple"),
            *("-m", str(target), "--spec-type", kind, "-f", f.name, "-n", str(n)),
            *("--temp", "0", "-t", str(threads), "-c", "4096", "-b", "4096", "-ub", "512"),
            "--no-escape",  # the prompt as written, not with its backslashes read as escapes
        ]
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    log = done.stdout + done.stderr
    if done.returncode != 0 or "decoded" not in log:
        raise RuntimeError(f"{kind}: exit {done.returncode}: {log[-2000:]}")
    return read_log(log, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-bin", type=Path, required=True)
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--prompts", nargs="+", default=["bundled"])
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--limit", type=int, default=None, help="at most N prompts per file")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    prompts: list[BenchPrompt] = []
    for source in args.prompts:
        loaded = load_prompts(None if source == "bundled" else Path(source))
        # A schema prompt asks for an answer under its constraint, which neither side applies
        # here (llama.cpp's tools take no schema): left out rather than measured unconstrained.
        loaded = [p for p in loaded if p.schema is None]
        prompts += loaded[: args.limit] if args.limit else loaded
    config = EngineConfig(target=args.target, draft=args.draft, n_ctx=4096, n_threads=args.threads)
    runs = []
    with Engine(config) as engine:
        threads = args.threads or default_threads()
        calibration = engine.calibrate()
        runner = _Runner(engine, SamplingParams())
        names = [*OURS, *THEIRS]
        for i, prompt in enumerate(prompts):
            tokens = engine.prompt_tokens(list(prompt.messages))
            text = prompt_text(engine.target, prompt)
            for repeat in range(args.repeats):
                shift = (i + repeat) % len(names)
                for name in names[shift:] + names[:shift]:
                    if name in OURS:
                        _, stats = runner.run(OURS[name], tokens, args.max_tokens)
                    else:
                        stats = run_llama_cpp(
                            args.llama_bin, args.target, name, text, args.max_tokens, threads
                        )
                    runs.append(
                        {
                            "config": name,
                            "prompt_id": prompt.id,
                            "category": prompt.category,
                            "repeat": repeat,
                            **{k: stats[k] for k in ("n_generated", "tokens_per_s")},
                            **{k: stats[k] for k in ("n_drafted", "n_accepted")},
                        }
                    )
                    print(
                        f"{prompt.id} {name}: {stats['tokens_per_s']:.1f} tok/s, "
                        f"{stats['n_accepted']}/{stats['n_drafted']} drafted kept",
                        file=sys.stderr,
                    )
    report = summarise(runs, names)
    print_table(report, names)
    if args.out:
        data = {
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "machine": machine_facts(),
            "settings": {"max_tokens": args.max_tokens, "repeats": args.repeats},
            "calibration": calibration.as_dict(),
            "runs": runs,
            **report,
        }
        args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def summarise(runs: list[dict], names: list[str]) -> dict:
    """Per prompt: each configuration's median ratio over the target alone of the same round;
    per category: the median over its prompts, with the lowest."""
    base = {
        (r["prompt_id"], r["repeat"]): r["tokens_per_s"] for r in runs if r["config"] == "target"
    }
    ratios: dict[tuple[str, str], list[float]] = defaultdict(list)
    category_of = {}
    for r in runs:
        category_of[r["prompt_id"]] = r["category"]
        ratios[(r["config"], r["prompt_id"])].append(
            r["tokens_per_s"] / base[(r["prompt_id"], r["repeat"])]
        )
    prompts = {
        pid: {name: round(statistics.median(ratios[(name, pid)]), 3) for name in names}
        for pid in category_of
    }
    categories: dict[str, dict[str, dict[str, float]]] = {}
    for category in [*sorted(set(category_of.values())), "all"]:
        ids = [p for p, c in category_of.items() if category in (c, "all")]
        categories[category] = {
            name: {
                "median": round(statistics.median(prompts[p][name] for p in ids), 3),
                "min": round(min(prompts[p][name] for p in ids), 3),
            }
            for name in names
        }
    return {"prompts": prompts, "categories": categories}


def print_table(report: dict, names: list[str]) -> None:
    print("| category | " + " | ".join(names[1:]) + " |")
    print("|---|" + "---:|" * (len(names) - 1))
    for category, cells in report["categories"].items():
        row = [f"{cells[n]['median']:.2f}x (min {cells[n]['min']:.2f})" for n in names[1:]]
        print(f"| {category} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
