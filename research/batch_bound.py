#!/usr/bin/env python3
"""How much any draft schedule could gain over plain batching at four clients (issue 53).

    python research/batch_bound.py [--steps tests/llama/recorded_steps.json]

A phase of research/concurrent_clients.py at C = 4: two clients copy a file back (the lookup
drafts them, accepted at `a` a token), two write free answers (no drafter pays for them in a
full batch: the draft model's step costs more than the tokens it would save), 128 tokens each.
The phase lasts until its last answer is done, so its wall time is the free answers' 128 steps:
plain batching (llama-server's) takes 128 four-token steps; a schedule where each copy drafts
`d` tokens a step makes the first steps wider, and once the copies are done the free answers'
steps are two tokens wide and cheaper. Each step's cost is read off the steps recorded in the
server on this CPU (medians by sequences and tokens, linear between them). Between the widest
verify recorded at four sequences (10 tokens) and the prompt chunks (216 and 300 tokens) that
line is a prompt's price, ~15 ms a token, where a verify's token costs more (a logits row
each), so a second column prices what a step adds past its widest recorded verify at
`--verify-token-ms` a token (20: the eight-slot recording's wide verifies, 8 -> 54 tokens).
The acceptance is taken per token, independently (the controller's own model). Printed per
acceptance: the best `d` and plain batching's time over that schedule's (above 1.0: a gain).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TOKENS = 128  # each answer's length in the benchmark


def step_curves(recorded: list[list[float]]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per number of sequences in a step: (tokens, median milliseconds), by tokens."""
    seconds: dict[tuple[int, int], list[float]] = defaultdict(list)
    for sequences, tokens, took in recorded:
        seconds[int(sequences), int(tokens)].append(took)
    curves: dict[int, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))
    for (sequences, tokens), took in sorted(seconds.items()):
        curves[sequences][0].append(tokens)
        curves[sequences][1].append(1000 * statistics.median(took))
    return {s: (np.array(t), np.array(ms)) for s, (t, ms) in curves.items()}


def step_ms(
    curves: dict[int, tuple[np.ndarray, np.ndarray]],
    sequences: int,
    tokens: int,
    verify_token_ms: float | None = None,
) -> float:
    """A step's milliseconds: the recorded curve, or past the widest verify recorded (at most
    three tokens a sequence: wider ones are prompt chunks) `verify_token_ms` a token more."""
    widths, ms = curves[sequences]
    verifies = widths <= 3 * sequences
    if verify_token_ms is not None and tokens > widths[verifies][-1]:
        return float(ms[verifies][-1] + verify_token_ms * (tokens - widths[verifies][-1]))
    if tokens <= widths[-1]:
        return float(np.interp(tokens, widths, ms))
    slope = (ms[-1] - ms[-2]) / (widths[-1] - widths[-2])  # past the widest step recorded
    return float(ms[-1] + slope * (tokens - widths[-1]))


def phase_ms(curves: dict, accept: float, draft: int, verify_token_ms: float | None) -> float:
    """Four clients, two of them copies drafting `draft` tokens a step at `accept` each."""
    per_step = draft + 1 if accept >= 1 else (1 - accept ** (draft + 1)) / (1 - accept)
    copy_steps = min(TOKENS, math.ceil(TOKENS / per_step))
    wide = step_ms(curves, 4, 4 + 2 * draft, verify_token_ms)
    return copy_steps * wide + (TOKENS - copy_steps) * step_ms(curves, 2, 2)


def best_schedule(curves: dict, accept: float, verify_token_ms: float | None) -> tuple[int, float]:
    """(the best draft a step, plain batching's time over its time)."""
    plain = phase_ms(curves, 0.0, 0, None)
    best = min(range(TOKENS), key=lambda d: phase_ms(curves, accept, d, verify_token_ms))
    return best, plain / phase_ms(curves, accept, best, verify_token_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=Path, default=ROOT / "tests/llama/recorded_steps.json")
    parser.add_argument("--verify-token-ms", type=float, default=20.0)
    args = parser.parse_args()
    recorded = json.loads(args.steps.read_text())
    curves = step_curves(recorded["epyc-c4"] + recorded["epyc-c8"])
    print(recorded["machine"])
    print(f"plain batching: {phase_ms(curves, 0.0, 0, None) / 1000:.2f} s of steps")
    verify = args.verify_token_ms
    columns = f"{'every step: d':>14} {'gain':>6} {f'verify {verify} ms: d':>18} {'gain':>6}"
    print(f"{'acceptance':>10} {columns}")
    for accept in (0.9, 0.95, 0.97, 0.99, 1.0):
        d, gain = best_schedule(curves, accept, None)
        d_verify, gain_verify = best_schedule(curves, accept, verify)
        print(f"{accept:>10.2f} {d:>14} {gain:>6.3f} {d_verify:>18} {gain_verify:>6.3f}")


if __name__ == "__main__":
    main()
