#!/usr/bin/env python3
"""Would a small tree of n-gram candidates beat the one chain we draft (issue 33, item 3)?
Replayed on recorded answers with the cost model (specllama.policy.simulator): an offline
estimate, not a measurement, and specllama implements no token tree.

Where the text's end occurred before more than once and those occurrences went on differently,
the lookup drafts one continuation (the one most of them share, the latest among equals:
`specllama.engine.lookup`). A tree drafts the B most common distinct continuations at once
(SuffixDecoding's weighing, whole paths ranked by how many occurrences share them, the
latest among equals), shares their common prefixes, and keeps the longest branch the target
agrees with; it costs a verify of every row. Greedy; each policy at its best fixed length,
rounds without a match are plain target steps for both.

    python research/ngram_trees.py record --target T.gguf --out answers.json [-n 128]
    python research/ngram_trees.py replay answers.json [-n 48 128] [--machines epyc xeon h200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from policies import machine_named

from specllama.engine.lookup import CopyIndex
from specllama.llama.evaluated import common_prefix_length
from specllama.policy.simulator import MachineCosts

LENGTHS = (2, 4, 8, 12, 16, 24, 32, 48)
# (branches, the most tokens of a side branch past where it leaves the chain): (1, None) is the
# chain the lookup drafts today; side branches as long as the chain, or short ones (fewer rows)
TREES = ((1, None), (2, None), (4, None), (2, 4), (4, 4))
PROMPT_FILES = (None, Path(__file__).parent / "spec_bench_prompts.jsonl")


# -- the candidates at one position -------------------------------------------------------------


def candidates(text: list[int], depth: int) -> list[list[int]]:
    """The distinct continuations (up to `depth` tokens) of every earlier occurrence of the
    text's longest match, most shared first: the chain the lookup drafts, then the rest."""
    index = CopyIndex()
    index.sync(text)
    match = index.longest_match()
    if match is None:
        return []
    array = np.asarray(text)
    last, m = len(text) - 1, match.length
    ends = np.flatnonzero(array[:last] == array[last])
    for back in range(1, m):  # keep the ends whose last m tokens agree (m <= MAX_MATCH)
        ends = ends[(ends - back >= 0) & (array[np.maximum(ends - back, 0)] == array[last - back])]
    counts: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for end in ends.tolist():
        counts[tuple(text[end + 1 : end + 1 + depth])].append(end)
    chain = index.continuation(match, depth)
    ranked = sorted(counts, key=lambda path: (-len(counts[path]), -max(counts[path])))
    return [chain] + [list(path) for path in ranked if list(path) != chain]


def tree_rows(branches: list[list[int]]) -> int:
    """Tokens a tree of these branches verifies: each distinct prefix once."""
    return len({tuple(branch[: i + 1]) for branch in branches for i in range(len(branch))})


# -- replay -------------------------------------------------------------------------------------


def speedup(
    prompt: list[int],
    answer: list[int],
    shape: tuple[int, int | None],
    k: int,
    machine: MachineCosts,
    found: dict[int, list[list[int]]],
) -> float:
    """Target alone's time over a round loop drafting a tree of `shape` (TREES), its chain `k`
    tokens long."""
    branches, side = shape
    pos, time_s = 0, 0.0
    while pos < len(answer):
        depth = min(k, len(answer) - pos - 1)
        if pos not in found:
            found[pos] = candidates(prompt + answer[:pos], max(LENGTHS))
        chain, *others = found[pos][:branches] or [[]]
        tree = [chain[:depth]] + [o[: _side_length(chain, o, side, depth)] for o in others]
        tree = [b for b in tree if b]
        if not tree:
            time_s += machine.verify(1) + machine.overhead_plain_s
            pos += 1
            continue
        kept = max(common_prefix_length(c, answer[pos:]) for c in tree)
        time_s += machine.verify(tree_rows(tree) + 1) + machine.overhead_plain_s
        time_s += machine.overhead_round_s
        pos += kept + 1
    return machine.target_alone(len(answer)) / time_s


def _side_length(chain: list[int], other: list[int], side: int | None, depth: int) -> int:
    """How much of another candidate a tree drafts: `side` tokens past where it leaves the chain."""
    return depth if side is None else min(depth, common_prefix_length(chain, other) + side)


def tree_name(shape: tuple[int, int | None]) -> str:
    branches, side = shape
    if branches == 1:
        return "chain"
    return f"{branches} branches" + (f", sides of {side}" if side else "")


def replay(args: argparse.Namespace) -> None:
    data = json.loads(Path(args.answers).read_text(encoding="utf-8"))
    answers = data["answers"]
    print(f"{len(answers)} answers of {data['target']} recorded on {data['cpu']}")
    # Each answer's candidates by position, looked up once: they depend on neither the costs
    # nor where the answer is cut.
    found: list[dict[int, list[list[int]]]] = [{} for _ in answers]
    for n in args.n:
        for name in args.machines:
            machine = machine_named(name)
            table: dict[str, dict[tuple, list[float]]] = defaultdict(lambda: defaultdict(list))
            for item, seen in zip(answers, found, strict=True):
                prompt, answer = item["prompt"], item["answer"][:n]
                for shape in TREES:
                    best = max(speedup(prompt, answer, shape, k, machine, seen) for k in LENGTHS)
                    table[item["category"]][shape].append(best)
            print(f"\n{n} tokens, {name} costs: median over the category (best k per answer)")
            print("| category | " + " | ".join(map(tree_name, TREES)) + " |")
            print("|---|" + "---:|" * len(TREES))
            for category, by_shape in sorted(table.items()):
                cells = [f"{statistics.median(by_shape[shape]):.3f}" for shape in TREES]
                print(f"| {category} | " + " | ".join(cells) + " |")


# -- recording ----------------------------------------------------------------------------------


def record(args: argparse.Namespace) -> None:
    from specllama.bench.prompts import load_prompts
    from specllama.policy.calibration import _cpu_name
    from specllama.policy.simulator import record_trace
    from specllama.session import Engine, EngineConfig

    prompts = [p for f in PROMPT_FILES for p in load_prompts(f) if p.schema is None]
    answers = []
    with Engine(EngineConfig(target=args.target, drafter="none", n_ctx=4096)) as engine:
        for i, prompt in enumerate(prompts, 1):
            tokens = engine.prompt_tokens(list(prompt.messages))
            _, answer = record_trace(engine.target, None, tokens, max_tokens=args.n)
            answers.append(
                {"name": prompt.id, "category": prompt.category, "prompt": tokens, "answer": answer}
            )
            print(f"{i}/{len(prompts)} {prompt.id}: {len(answer)} tokens", file=sys.stderr)
    data = {"cpu": _cpu_name(), "target": Path(args.target).name, "answers": answers}
    Path(args.out).write_text(json.dumps(data) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(required=True)
    rec = commands.add_parser("record", help="the target's greedy answers, token by token")
    rec.add_argument("--target", required=True)
    rec.add_argument("--out", required=True)
    rec.add_argument("-n", type=int, default=128)
    rec.set_defaults(run=record)
    rep = commands.add_parser("replay", help="chain against trees on the recorded answers")
    rep.add_argument("answers")
    rep.add_argument("-n", type=int, nargs="+", default=[48, 128])
    rep.add_argument("--machines", nargs="+", default=["epyc", "xeon", "h200"])
    rep.set_defaults(run=replay)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
