#!/usr/bin/env python3
"""Issue 54: a draft model of another tokenizer against the target alone, n-gram lookup and the
default, per category of the held-out prompts.

    python research/cross_tokenizer.py                      # every held-out prompt, 2 repeats
    python research/cross_tokenizer.py --limit 2 --repeats 1 -n 32   # a smoke run
    python research/cross_tokenizer.py --per-category 1              # one prompt a category
    python research/cross_tokenizer.py --configs ngram,cross         # the target alone and those

Target: Qwen2.5-Coder-1.5B-Instruct Q4_K_M. Configurations, each as `specllama run` would run it
(greedy, a fresh controller and an empty memory each run, so nothing is drafted from an earlier
run's answer):

- `target`: the target alone (`--drafter none`), the speed ratios divide by;
- `ngram`: n-gram lookup alone (`--drafter ngram`, the adaptive controller);
- `default`: the default with its same-vocabulary draft, Qwen2.5-Coder-0.5B (`--draft 0.5B`,
  adaptive: n-gram lookup and the draft model, chosen each round from the measured costs);
  `--draft auto` picks that same file here (said on stderr, recorded with the results);
- `model:K`: the 0.5B draft alone at a fixed length (`--fixed --draft-max K`): its acceptance;
- `cross:K`: SmolLM2-135M-Instruct Q4_1 (49,152 tokens; Qwen2.5 has 151,936) drafting across
  tokenizers at a fixed length: its acceptance and what it costs;
- `cross`: the same draft under the adaptive default (`--draft SmolLM2`): what a user gets.
- `cross@0.8`: the same, with the prior acceptance of a same-vocabulary draft model (as it
  was before `CROSS_MODEL_PRIOR`).

Every prompt and repeat runs every configuration, in an order rotated by one each time (so that
drift on the machine hits every configuration alike). A speedup is each run's tokens/s over the
target alone's on the same prompt and repeat; per category the table gives its median and
range (min-max) over prompts and repeats, and the acceptance (accepted / drafted, all runs).
Each answer is compared with the target alone's tokens (a Q4_K_M target: a batch of tokens and
one token at a time may part at a near-tie, so this is an agreement rate, reported as such).

Writes every run to research/results/issue54-cross-tokenizer.json and prints a table. Run it on
a quiet machine: a busy core turns a 30 ms decode into 100 ms at random. The costs the adaptive
controller works from are each pair's calibration (measured once, cached as `run` caches it);
pass --recalibrate when they may have been measured on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from specllama.bench.prompts import BenchPrompt, load_prompts
from specllama.bench.runner import machine_facts
from specllama.engine.control import MODEL, FixedLength
from specllama.engine.drafters import CombinedDrafter, NoDrafter
from specllama.engine.events import FinishEvent, TokenEvent
from specllama.engine.memory import TokenMemory
from specllama.engine.sampling import SamplingParams
from specllama.llama.backend import default_threads
from specllama.policy.calibration import _cpu_name
from specllama.session import Engine, EngineConfig

HERE = Path(__file__).resolve().parent
MODELS = Path.home() / ".cache" / "specllama" / "models"
TARGET = (
    MODELS
    / "qwen2.5-coder-1.5b-instruct-q4_k_m-cc324af070c2"
    / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
)
SAME_VOCAB_DRAFT = (
    MODELS
    / "qwen2.5-coder-0.5b-instruct-q4_k_m-1d9614638d18"
    / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
)
CROSS_DRAFT = Path.home() / ".cache" / "specllama-tests" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPTS = HERE / "held_out_prompts.jsonl"
GREEDY = SamplingParams()


class Pair:
    """One loaded pair and the configurations it runs: (drafter name, fixed length or None for
    the adaptive controller)."""

    def __init__(self, draft: Path, threads: int, ctx: int) -> None:
        self.engine = Engine(
            EngineConfig(target=TARGET, draft=draft, drafter="model", n_ctx=ctx, n_threads=threads)
        )

    def run(
        self, drafter: str, k: int | None, tokens: list[int], n: int, prior: float | None = None
    ) -> tuple[list[int], dict]:
        engine = self.engine
        engine.memory = TokenMemory()  # as one `run`: nothing remembered from the others
        if drafter == "none":
            chosen, controller = NoDrafter(), FixedLength(0)
        else:  # adaptive: n-gram lookup beside the draft model, as `run` drafts by default
            chosen = engine.make_drafter(drafter)
            controller = FixedLength(k) if k else engine.new_controller(adaptive=True)
            if prior is not None:  # the draft model's prior acceptance, as another pair's
                controller.priors[MODEL] = prior
        if k and isinstance(chosen, CombinedDrafter):  # --fixed: the draft model alone
            chosen = chosen.model
        out: list[int] = []
        stats: dict = {}
        events = engine.generate(
            tokens, GREEDY, max_tokens=n, controller=controller, drafter=chosen
        )
        for event in events:
            if isinstance(event, TokenEvent):
                out.append(event.token)
            elif isinstance(event, FinishEvent):
                stats = event.stats.as_dict()
        return out, stats

    def close(self) -> None:
        self.engine.close()


def configurations(k: int) -> dict[str, tuple[str, str, int | None]]:
    """name -> (pair, drafter, fixed length or None: adaptive)."""
    return {
        "target": ("same", "none", None),
        "ngram": ("same", "ngram", None),
        "default": ("same", "model", None),
        f"model:{k}": ("same", "model", k),
        f"cross:{k}": ("cross", "model", k),
        "cross": ("cross", "model", None),
        # the same, as it was drafted before its prior was lowered (CROSS_MODEL_PRIOR)
        "cross@0.8": ("cross", "model", None),
    }


def auto_choice() -> str:
    """What `--draft auto` picks for the target on this machine (its line), or why none."""
    from specllama.cli.local_cmd import auto_draft
    from specllama.errors import SpecllamaError

    try:
        path, drafter = auto_draft(TARGET)
    except SpecllamaError as exc:
        return f"none: {exc}"
    return f"{path} ({drafter})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="the first N prompts only")
    parser.add_argument("--per-category", type=int, help="the first N prompts of each category")
    parser.add_argument("-k", type=int, default=4, help="the fixed draft length")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument(
        "--out", type=Path, default=HERE / "results" / "issue54-cross-tokenizer.json"
    )
    parser.add_argument("--recalibrate", action="store_true")
    parser.add_argument(
        "--configs", help="comma-separated configurations to run (default: all); 'target' is added"
    )
    args = parser.parse_args()
    for path in (TARGET, SAME_VOCAB_DRAFT, CROSS_DRAFT):
        if not path.exists():
            parser.error(f"missing model: {path}")
    threads = args.threads or default_threads()
    cpu = _cpu_name()
    print(f"CPU: {cpu}; threads: {threads}; N={args.max_tokens}", file=sys.stderr)
    if (load := os.getloadavg()[0]) > 0.5:
        print(f"warning: load average {load:.1f}: other programs are running", file=sys.stderr)
    prompts = load_prompts(PROMPTS)[: args.limit]
    if args.per_category:
        seen: dict[str, int] = defaultdict(int)
        kept = []
        for prompt in prompts:
            seen[prompt.category] += 1
            if seen[prompt.category] <= args.per_category:
                kept.append(prompt)
        prompts = kept
    configs = configurations(args.k)
    if args.configs:
        wanted = {"target", *args.configs.split(",")}
        if unknown := wanted - set(configs):
            parser.error(f"unknown configurations: {', '.join(sorted(unknown))}")
        configs = {name: c for name, c in configs.items() if name in wanted}
    auto = auto_choice()
    started = time.perf_counter()
    pairs = {"same": Pair(SAME_VOCAB_DRAFT, threads, args.ctx)}
    try:
        if any(pair == "cross" for pair, _, _ in configs.values()):
            pairs["cross"] = Pair(CROSS_DRAFT, threads, args.ctx)
        calibrations = {}
        for name, pair in pairs.items():
            costs = pair.engine.calibrate(
                refresh=args.recalibrate,
                on_measure=lambda why: print(f"calibrating ({why})", file=sys.stderr),
            )
            calibrations[name] = {**pair.engine.calibration.as_dict(), "costs": costs.as_dict()}
        runs = run_all(pairs, configs, prompts, args.max_tokens, args.repeats)
        notices = {name: pair.engine.notices for name, pair in pairs.items()}
    finally:
        for pair in pairs.values():
            pair.close()
    data = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**machine_facts(), "cpu_name": cpu, "threads": threads},
        "settings": {
            "target": str(TARGET), "same_vocab_draft": str(SAME_VOCAB_DRAFT),
            "cross_draft": str(CROSS_DRAFT), "max_tokens": args.max_tokens,
            "repeats": args.repeats, "k": args.k, "n_ctx": args.ctx, "prompts": str(PROMPTS),
            "n_prompts": len(prompts), "draft_auto": auto, "notices": notices,
            "seconds": round(time.perf_counter() - started, 1),
        },
        "calibrations": calibrations,
        "runs": runs,
        "summary": summarise(runs, list(configs)),
    }  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print_table(data, list(configs))
    print(f"\nwritten: {args.out}")


def run_all(
    pairs: dict[str, Pair],
    configs: dict[str, tuple[str, str, int | None]],
    prompts: Sequence[BenchPrompt],
    n: int,
    repeats: int,
) -> list[dict]:
    names = list(configs)
    same = pairs["same"].engine
    tokens_of = {p.id: same.prompt_tokens(list(p.messages)) for p in prompts}
    for pair, drafter, k in configs.values():  # warm up: page the weights in
        pairs[pair].run(drafter, k, tokens_of[prompts[0].id], 4)
    runs = []
    for repeat in range(repeats):
        for i, prompt in enumerate(prompts):
            shift = (i + repeat) % len(names)
            order = names[shift:] + names[:shift]
            results = {}
            for name in order:
                pair, drafter, k = configs[name]
                prior = float(name.split("@")[1]) if "@" in name else None
                results[name] = pairs[pair].run(drafter, k, tokens_of[prompt.id], n, prior)
            alone = results["target"][0]
            for name in names:
                out, stats = results[name]
                row = {"config": name, "prompt_id": prompt.id, "category": prompt.category}
                row |= {"repeat": repeat, "loadavg_1m": round(os.getloadavg()[0], 2)}
                row |= {key: stats[key] for key in KEPT}
                row["equals_target"] = out == alone
                runs.append(row)
                print(
                    f"r{repeat} {prompt.id} {name}: {row['tokens_per_s']:.2f} tok/s, "
                    f"{row['n_accepted']}/{row['n_drafted']} kept"
                    + ("" if row["equals_target"] else "  (parts from the target alone)"),
                    file=sys.stderr,
                    flush=True,
                )
    return runs


KEPT = ("n_generated", "time_s", "tokens_per_s", "drafter", "n_drafted", "n_accepted", "n_rounds")


# -- the report -----------------------------------------------------------------------------


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def summarise(runs: list[dict], names: list[str]) -> dict:
    """Per category (and "all") and configuration: tokens/s, the speedup over the target alone
    (each run over the target alone's run of the same prompt and repeat), acceptance, and the
    share of answers equal to the target alone's."""
    alone = {
        (r["prompt_id"], r["repeat"]): r["tokens_per_s"] for r in runs if r["config"] == "target"
    }
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for run in runs:
        for category in (run["category"], "all"):
            cells[category, run["config"]].append(run)
    summary: dict[str, dict] = defaultdict(dict)
    for (category, name), group in sorted(cells.items()):
        drafted = sum(r["n_drafted"] for r in group)
        summary[category][name] = {
            "runs": len(group),
            "tokens_per_s": _spread([r["tokens_per_s"] for r in group]),
            "speedup": _spread(
                [r["tokens_per_s"] / alone[r["prompt_id"], r["repeat"]] for r in group]
            ),
            "acceptance": round(sum(r["n_accepted"] for r in group) / drafted, 4)
            if drafted
            else None,
            "equals_target": round(sum(r["equals_target"] for r in group) / len(group), 4),
        }
    return dict(summary)


def print_table(data: dict, names: list[str]) -> None:
    machine, settings = data["machine"], data["settings"]
    print(
        f"\n{machine['cpu_name']}, {machine['threads']} threads; {settings['n_prompts']} prompts, "
        f"{settings['repeats']} repeat(s), {settings['max_tokens']} tokens; "
        f"--draft auto: {settings['draft_auto']}"
    )
    print(f"{'category':<16} {'config':<10} {'tok/s':>7} {'speedup (min-max)':>22} "
          f"{'accept':>7} {'=target':>8}")  # fmt: skip
    for category, configs in data["summary"].items():
        for name in names:
            if (cell := configs.get(name)) is None:
                continue
            s = cell["speedup"]
            accept = "-" if cell["acceptance"] is None else f"{cell['acceptance']:.0%}"
            print(
                f"{category:<16} {name:<10} {cell['tokens_per_s']['median']:>7.1f} "
                f"{s['median']:>8.2f}x ({s['min']:.2f}-{s['max']:.2f}) {accept:>7} "
                f"{cell['equals_target']:>8.0%}"
            )


if __name__ == "__main__":
    main()
