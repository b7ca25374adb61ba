#!/usr/bin/env python3
"""Cache a calibration measured beside busy loops, as a first run beside a build would, so that
`specllama bench` then starts every adaptive run from it (issue 17's lying calibration).

    python research/busy_calibration.py --target T.gguf --draft D.gguf [--busy 2] [--threads 2]
    specllama bench --target T.gguf --draft D.gguf ...      # starts from the busy calibration
    python research/busy_calibration.py --target T.gguf --draft D.gguf --forget   # remove it

specllama itself would not cache such a measurement (it fails the checks of
specllama.policy.trust); this script stores it anyway, under the same key a run uses, with what
the checks found, which `specllama bench` then reports ("cached, ..., checks failed: ...").
`specllama bench` makes a fresh controller for every run and never marks the calibration
stale, so every adaptive run of the benchmark starts from it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from pathlib import Path

from specllama.policy import calibration
from specllama.session import Engine, EngineConfig


def spin(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--draft", type=Path, required=True)
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the measurement")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--forget", action="store_true", help="remove the cached calibration")
    args = parser.parse_args()

    config = EngineConfig(target=args.target, draft=args.draft, n_threads=args.threads)
    with Engine(config) as engine:
        key = engine._calibration_key()
        if args.forget:
            calibration._key_path(key).unlink(missing_ok=True)
            print("removed")
            return
        loops = [
            multiprocessing.Process(target=spin, args=(time.monotonic() + 600,), daemon=True)
            for _ in range(args.busy)
        ]
        for loop in loops:
            loop.start()
        try:
            measured = calibration.measure(engine.target, engine.draft_model)
        finally:
            for loop in loops:
                loop.terminate()
        path = calibration.save(
            key, measured.costs, seconds=measured.seconds, problems=measured.problems
        )
    print(f"cached {path}")
    print(calibration.summary(measured.costs))
    print("checks:", "; ".join(measured.problems) or "passed")


if __name__ == "__main__":
    main()
