"""The cost of the AMX fallback: the same target loaded with llama.cpp's extra buffer types on
(full speed) and off (what specllama runs where the AMX kernels crash), timed interleaved in one
process so both see the same load: one token, and verify batches of 4 and 16 tokens.

    python research/extra_buffers.py TARGET.gguf [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics

from specllama.llama.backend import LlamaBackend
from specllama.policy.calibration import _cpu_name

CONTEXT = 64
SIZES = (1, 4, 16)


def time_batch(model: LlamaBackend, n: int) -> float:
    tokens = [200 + (i * 7919) % (model.n_vocab - 300) for i in range(CONTEXT + n)]
    model.rollback(0)
    model.decode(tokens[:CONTEXT])
    before = model.decode_seconds
    model.decode(tokens[CONTEXT:], range(n))
    return model.decode_seconds - before


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("target")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    models = {on: LlamaBackend(args.target, n_ctx=512, extra_buffers=on) for on in (True, False)}
    samples: dict[tuple[bool, int], list[float]] = {(on, n): [] for on in models for n in SIZES}
    for repeat in range(args.repeats + 1):  # the first pass warms up
        for n in SIZES:
            for on, model in models.items():
                seconds = time_batch(model, n)
                if repeat:
                    samples[on, n].append(seconds)
    print(f"CPU: {_cpu_name()}; {args.repeats} repeats, medians (min-max) in ms")
    print("| batch | extra buffers on | off (fallback) | off / on |")
    print("|---:|---:|---:|---:|")
    for n in SIZES:
        on, off = samples[True, n], samples[False, n]
        ratio = statistics.median(off) / statistics.median(on)
        print(
            f"| {n} | {statistics.median(on) * 1e3:.1f} ({min(on) * 1e3:.0f}-{max(on) * 1e3:.0f})"
            f" | {statistics.median(off) * 1e3:.1f} ({min(off) * 1e3:.0f}-{max(off) * 1e3:.0f})"
            f" | {ratio:.2f}x |"
        )


if __name__ == "__main__":
    main()
