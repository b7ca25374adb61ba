#!/usr/bin/env python3
"""How often a draft token is accepted under sampling, rule by rule, on the bundled prompts:
research/RESULTS.md's section "A seed that means the answer".

    python research/coupling.py                       # the default pair, T 0.7, top-k 40
    python research/coupling.py --temperature 1.0 --top-k 0 -n 32 --limit 12

The target alone answers each prompt (sampled, one seed); at every position of its answer both
models' distributions p (target) and q (draft) are taken after the same transform, and three
per-token acceptance probabilities are computed exactly or nearly:

- rejection rule (the rule before issue 18: x ~ q kept with min(1, p(x)/q(x))): sum min(p, q);
- Gumbel coupling (the rule now: the draft drafts argmax(log q + G), kept iff it is the
  target's argmax(log p + G)): the share of `--noise` independent noise draws (seeds) at that
  position where the two argmaxes agree;
- greedy draft under the rule now (the draft proposes argmax q): p(argmax q).

These are what one drafted token is worth, free of the timing noise and the sampling luck of a
benchmark run; `specllama bench` measures the same acceptance in the loop (see RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import asdict

import numpy as np

from specllama.bench.prompts import load_prompts
from specllama.cli.options import engine_config
from specllama.engine.sampling import SamplingParams, draw, gumbel_max, probabilities
from specllama.session import Engine


def acceptances(p, q, position: int, n_noise: int) -> tuple[float, float, float]:
    """(rejection rule, Gumbel coupling, greedy draft) acceptance at one position."""
    ids = np.union1d(p.ids, q.ids)
    p_all = np.zeros(len(ids))
    q_all = np.zeros(len(ids))
    p_all[np.searchsorted(ids, p.ids)] = p.probs
    q_all[np.searchsorted(ids, q.ids)] = q.probs
    rejection = float(np.minimum(p_all, q_all).sum())
    same = sum(
        gumbel_max(p, seed, position) == gumbel_max(q, seed, position) for seed in range(n_noise)
    )
    greedy = p[int(q.ids[np.argmax(q.probs)])]
    return rejection, same / n_noise, greedy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--min-p", type=float, default=0.0)
    parser.add_argument("-n", type=int, default=64, help="tokens of each answer")
    parser.add_argument("--limit", type=int, default=None, help="at most N prompts")
    parser.add_argument("--noise", type=int, default=256, help="noise draws per position")
    parser.add_argument("--seed", type=int, default=1, help="the seed of the answers")
    parser.add_argument("--json", default=None, help="write the per-category table here")
    args = parser.parse_args()

    params = SamplingParams(args.temperature, args.top_k, args.top_p, args.min_p, args.seed)
    config = engine_config(
        pair=None,
        target=None,
        draft=None,
        drafter="model",
        draft_max=None,
        ctx=4096,
        gpu_layers=None,
        gpu_layers_draft=None,
        threads=None,
    )
    # The structured prompts' answers follow their schema only under its constraint, which
    # this probe does not apply: skipped, so every answer here is the model's free text.
    prompts = [p for p in load_prompts() if p.schema is None][: args.limit]
    rows: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    with Engine(config) as engine:
        target, draft = engine.target, engine.draft_model
        assert draft is not None
        for number, prompt in enumerate(prompts, 1):
            context = engine.prompt_tokens(list(prompt.messages))
            target.rollback(0)
            draft.rollback(0)
            p_row = target.sync(context, logits_at_last=True)
            q_row = draft.sync(context, logits_at_last=True)
            for _ in range(args.n):
                position = len(context)
                p, q = probabilities(p_row, params), probabilities(q_row, params)
                rows[prompt.category].append(acceptances(p, q, position, args.noise))
                token = draw(p_row, params, position)
                if target.is_eog(token):
                    break
                context.append(token)
                p_row = target.decode([token], [0])[0]
                q_row = draft.decode([token], [0])[0]
            print(f"{number}/{len(prompts)} {prompt.id}", file=sys.stderr)

    table = {}
    everything = [row for values in rows.values() for row in values]
    for category, values in [*sorted(rows.items()), ("all", everything)]:
        rejection, coupling, greedy = (statistics.mean(column) for column in zip(*values))
        table[category] = {
            "positions": len(values),
            "rejection_rule": round(rejection, 4),
            "gumbel_coupling": round(coupling, 4),
            "greedy_draft": round(greedy, 4),
        }
    settings = {**vars(args), "params": asdict(params)}
    print("| category | positions | rejection rule | Gumbel coupling | greedy draft |")
    print("|---|---:|---:|---:|---:|")
    for category, row in table.items():
        print(
            f"| {category} | {row['positions']} | {row['rejection_rule']:.3f} | "
            f"{row['gumbel_coupling']:.3f} | {row['greedy_draft']:.3f} |"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"settings": settings, "acceptance": table}, out, indent=1)


if __name__ == "__main__":
    main()
