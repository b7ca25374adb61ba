#!/usr/bin/env python3
"""What drawing the sampling noise costs: research/RESULTS.md's section "A seed that means the
answer".

    python research/noise_cost.py                  # the default pair's target, its real logits
    python research/noise_cost.py --tokens 16 --repeat 5

The noise G(seed, position, token) is Philox4x32-10 in numpy (specllama/engine/noise.py). A
draw at one position costs the transform (`probabilities`: top-k, temperature, top-p, min-p)
and then the noise for the tokens that can win (`gumbel_max`). This times, per position, on
logits rows the default target really wrote (greedy answers to a few prompts):

- the noise for the whole 151,936-token vocabulary (what a draw without pruning would need
  with top-k 0 and top-p 1);
- for each setting: the transform, the Gumbel-max draw after it (noise only for the tokens
  that can win: `sampling.gumbel_max`), how many tokens it drew noise for, and the inverse-CDF
  draw the rule before issue 18 made instead (one uniform, a cumulative sum and a search);
- the target's own one-token decode, the unit a round is paid in.

A round of k drafts makes at most 2k + 1 draws (k by a draft model, k + 1 by the target).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from specllama.chat import Message
from specllama.cli.options import engine_config
from specllama.engine import noise
from specllama.engine.sampling import SamplingParams, gumbel_max, probabilities
from specllama.session import Engine

PROMPTS = (
    "Write a Python function that checks whether a number is prime.",
    "Tell me a short story about a lighthouse keeper.",
    "Explain what a hash map is to a beginner.",
)
SETTINGS = {
    "T 0.7, top-k 40 (the default k)": SamplingParams(0.7, 40, 1.0, 0.0, seed=1),
    "T 0.7, top-k 40, top-p 0.95, min-p 0.05": SamplingParams(0.7, 40, 0.95, 0.05, seed=1),
    "T 0.7, top-k 0, top-p 1 (whole vocabulary)": SamplingParams(0.7, 0, 1.0, 0.0, seed=1),
    "T 1.0, top-k 0, top-p 1 (whole vocabulary)": SamplingParams(1.0, 0, 1.0, 0.0, seed=1),
}


def timed(repeat: int, function, *args) -> float:
    """The median of `repeat` calls, in microseconds (the machine is shared: medians)."""
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        function(*args)
        samples.append(time.perf_counter() - started)
    return 1e6 * statistics.median(samples)


def inverse_cdf(dist, rng: np.random.Generator) -> int:
    """The draw of the rule before issue 18 (sampling.sample then)."""
    cumulative = np.cumsum(dist.probs)
    u = rng.random() * cumulative[-1]
    return int(dist.ids[min(np.searchsorted(cumulative, u, side="right"), len(dist.ids) - 1)])


def noised(dist, position: int) -> int:
    """How many tokens `gumbel_max` draws noise for."""
    real, counted = noise.gumbel, []
    noise.gumbel = lambda seed, at, tokens: counted.append(len(tokens)) or real(seed, at, tokens)
    try:
        gumbel_max(dist, 1, position)
    finally:
        noise.gumbel = real
    return sum(counted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=24, help="positions per prompt")
    parser.add_argument("--repeat", type=int, default=9, help="timings per measurement")
    args = parser.parse_args()
    config = engine_config(
        pair=None,
        target=None,
        draft=None,
        drafter="none",
        draft_max=None,
        ctx=2048,
        gpu_layers=None,
        gpu_layers_draft=None,
        threads=None,
    )
    rows, decode_s = [], []
    with Engine(config) as engine:
        target = engine.target
        for text in PROMPTS:
            context = engine.prompt_tokens([Message("user", text)])
            target.rollback(0)
            row = target.sync(context, logits_at_last=True)
            for _ in range(args.tokens):
                rows.append(np.array(row))
                token = int(np.argmax(row))
                context.append(token)
                before = target.decode_seconds
                row = target.decode([token], [0])[0]
                decode_s.append(target.decode_seconds - before)
        n_vocab = len(rows[0])

    rng = np.random.default_rng(0)
    everything = np.arange(n_vocab)
    whole = timed(args.repeat, noise.gumbel, 1, 1000, everything)
    print(f"{len(rows)} logits rows of {n_vocab} tokens from the default target")
    print(f"target one-token decode: {1e3 * statistics.median(decode_s):.1f} ms (median)")
    print(f"noise for all {n_vocab} tokens: {whole / 1e3:.2f} ms\n")
    print("| setting | support (median) | noised tokens (median, p90) | transform, us |", end="")
    print(" Gumbel-max draw, us | inverse-CDF draw (before), us |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, params in SETTINGS.items():
        support, contenders, transform, gumbel, inverse = [], [], [], [], []
        for position, row in enumerate(rows):
            dist = probabilities(row, params)
            support.append(len(dist.ids))
            contenders.append(noised(dist, position))
            transform.append(timed(args.repeat, probabilities, row, params))
            gumbel.append(timed(args.repeat, gumbel_max, dist, 1, position))
            inverse.append(timed(args.repeat, inverse_cdf, dist, rng))
        print(
            f"| {name} | {statistics.median(support):.0f} | "
            f"{statistics.median(contenders):.0f}, {np.percentile(contenders, 90):.0f} | "
            f"{statistics.median(transform):.0f} | {statistics.median(gumbel):.0f} | "
            f"{statistics.median(inverse):.0f} |"
        )


if __name__ == "__main__":
    main()
