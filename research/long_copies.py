#!/usr/bin/env python3
"""Long drafts from a long match, live: the adaptive policy as shipped (no ramp from a match of
`LONG_COPY` tokens) against the same policy with the ramp alone, n-gram lookup only, on the
bundled copying prompts, with no prediction and with the client's exact prediction of the
answer (as an editor sends the file it expects back), interleaved, against the target alone.

    python research/long_copies.py --target T.gguf [-n 48 128] [--categories code-editing ...]

Every answer is checked token for token against the target alone's (greedy). Speedups are the
target alone's decode time (first token to last, as servers report it) over each
configuration's, per prompt in the same pass; the table gives the median and range per
category.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from specllama.bench.prompts import load_prompts
from specllama.engine.control import FixedLength
from specllama.engine.drafters import NgramDrafter, NoDrafter
from specllama.engine.events import TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.policy.calibration import _cpu_name
from specllama.policy.controller import AdaptiveController
from specllama.session import Engine, EngineConfig

POLICIES = {
    "shipped": {},
    "ramp only": {"long_copy": None},
}


def timed(engine: Engine, prompt: list[int], n: int, **options: object) -> tuple[float, list[int]]:
    """The answer, and the seconds from its first token to its last: the decode, without the
    prompt's prefill (which the context may hold already from the run before)."""
    tokens, first = [], 0.0
    params = SamplingParams(temperature=0.0)
    for event in engine.generate(prompt, params, max_tokens=n, **options):
        if isinstance(event, TokenEvent):
            first = first or time.perf_counter()
            tokens.append(event.token)
    return time.perf_counter() - first, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, type=Path)
    parser.add_argument("-n", type=int, nargs="+", default=[48, 128])
    parser.add_argument("--categories", nargs="+", default=["code-editing", "summarising"])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    prompts = [p for p in load_prompts() if p.category in args.categories and p.schema is None]
    config = EngineConfig(target=args.target, drafter="ngram", n_ctx=4096)
    rows = []
    with Engine(config) as engine:
        costs = engine.calibrate()
        for n in args.n:
            for i, prompt in enumerate(prompts):
                tokens = engine.prompt_tokens(list(prompt.messages))
                alone_s, answer = timed(
                    engine, tokens, n, drafter=NoDrafter(), controller=FixedLength(0)
                )
                runs = [(p, pred) for p in POLICIES for pred in (False, True)]
                runs = runs[i % len(runs) :] + runs[: i % len(runs)]  # interleaved
                for policy, predicted in runs:
                    controller = AdaptiveController(costs, **POLICIES[policy])
                    seconds, got = timed(
                        engine,
                        tokens,
                        n,
                        drafter=NgramDrafter(),  # no memory: every run starts cold
                        controller=controller,
                        prediction=answer if predicted else None,
                    )
                    rows.append(
                        {
                            "n": n,
                            "prompt": prompt.id,
                            "category": prompt.category,
                            "policy": policy,
                            "predicted": predicted,
                            "speedup": alone_s / seconds,
                            "same_answer": got == answer,
                        }
                    )
                    print(
                        f"{n} {prompt.id} {policy}{' +prediction' if predicted else ''}: "
                        f"{alone_s / seconds:.2f}x{'' if got == answer else ' DIFFERENT'}",
                        file=sys.stderr,
                    )
    table: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        key = (row["n"], row["category"], row["predicted"], row["policy"])
        table[key].append(row["speedup"])
    print(f"{_cpu_name()}; {args.target.name}; n-gram lookup only; over the target alone")
    print("| tokens | category | prediction | shipped | ramp only |")
    print("|---:|---|---|---:|---:|")
    for n in args.n:
        for category in args.categories:
            for predicted in (False, True):
                cells = []
                for policy in POLICIES:
                    s = table[(n, category, predicted, policy)]
                    cells.append(f"{statistics.median(s):.2f} ({min(s):.2f}-{max(s):.2f})")
                label = "exact" if predicted else "none"
                print(f"| {n} | {category} | {label} | " + " | ".join(cells) + " |")
    same = sum(r["same_answer"] for r in rows)
    print(f"answers equal to the target alone's: {same}/{len(rows)}")
    if args.json:
        data = {"cpu": _cpu_name(), "target": args.target.name, "rows": rows}
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
