"""What --exact costs: the target alone and the default, with and without --exact, per
quantisation type (issue 43, items 2-3).

Each run is `specllama run --json` in a process of its own (exact mode is chosen once per
process), greedy, on one code-writing prompt, with the reference pair's 0.5B Q4_K_M draft. The
rounds interleave every (file, configuration, mode), so that a machine busy for a while slows
all of them alike; per cell: tokens/s (generation only) and the prompt's prefill time, median
and range over the rounds. It also says whether each answer equals the target alone's text in
the same mode (what --exact promises).

Files: the reference pair's Q4_K_M 1.5B target (or --target FILE), and Q8_0 and F16 copies of
it made with llama.cpp's own quantiser (`llama_model_quantize`, as `llama-quantize
--allow-requantize` does) from that Q4_K_M: requantising is lossy (the weights keep their Q4
values), which does not matter for a cost figure: the kernels, and so the time, are a real
Q8_0's and F16's.

Run (on the shared 2-core machine: under `flock /tmp/cpu.lock`):

    python research/exact_cost.py [--rounds 3] [-n 96] [--types Q4_K_M Q8_0 F16]
        [--models-dir /tmp/exact_cost] [--json research/exact_cost.json]
        [--target FILE --draft FILE] [--gpu-layers N] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODELS = Path.home() / ".cache" / "specllama" / "models"
TARGET = (
    MODELS
    / "qwen2.5-coder-1.5b-instruct-q4_k_m-cc324af070c2/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
)
DRAFT = (
    MODELS
    / "qwen2.5-coder-0.5b-instruct-q4_k_m-1d9614638d18/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
)
# `specllama` run by this Python, llama_cpp imported first: on the GPU machine's image the other
# order segfaults in model loading (research/gpu/lib.sh).
SPECLLAMA = [
    sys.executable,
    "-c",
    "import llama_cpp, runpy, sys; sys.argv[0] = 'specllama'; "
    "runpy.run_module('specllama', run_name='__main__')",
]
PROMPT = (
    "Write a Python function that reads a CSV file of (name, age, city) rows and returns a "
    "dict from each city to the names living there, sorted by age. Type hints and a docstring."
)
MODES = {"default kernels": [], "--exact": ["--exact"]}


def target_file(source: Path, file_type: str, folder: Path) -> Path:
    """The target as `file_type`: `source` itself for its own type (Q4_K_M), else a copy
    requantised from it."""
    if file_type == "Q4_K_M":
        return source
    path = folder / f"{source.stem}.{file_type}-from-Q4_K_M.gguf"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        quantize(source, partial, file_type)
        partial.replace(path)
    return path


def quantize(source: Path, dest: Path, file_type: str) -> None:
    """llama.cpp's quantiser, through llama-cpp-python (no llama-quantize binary needed)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{file_type}")
    params.nthread = os.cpu_count() or 1
    params.allow_requantize = True
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(dest).encode(), params)
    if status != 0:
        raise SystemExit(f"llama_model_quantize {source} -> {file_type} failed: {status}")


def run_once(target: Path, extra: list[str], max_tokens: int, threads: int) -> dict:
    """One `specllama run --json`: its stats."""
    command = [*SPECLLAMA, "run", PROMPT, "--target", str(target), "-n", str(max_tokens)]
    command += ["--threads", str(threads), "--json", *extra]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ})
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(command)}\n{done.stderr}")
    return json.loads(done.stdout)


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-n", "--max-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--types", nargs="+", default=["Q4_K_M", "Q8_0", "F16"])
    parser.add_argument("--models-dir", type=Path, default=Path("/tmp/exact_cost"))
    parser.add_argument("--json", type=Path, help="write every run's stats here")
    parser.add_argument("--target", type=Path, default=TARGET, help="a Q4_K_M target")
    parser.add_argument("--draft", type=Path, default=DRAFT)
    parser.add_argument("--gpu-layers", type=int, help="passed on (default: specllama's)")
    args = parser.parse_args()

    files = {t: target_file(args.target, t, args.models_dir) for t in args.types}
    configs = {"target alone": ["--drafter", "none"], "default": ["--draft", str(args.draft)]}
    if args.gpu_layers is not None:
        configs = {
            name: [*extra, "--gpu-layers", str(args.gpu_layers)] for name, extra in configs.items()
        }
    for path in files.values():  # into the page cache, so that no first run pays the disk
        run_once(path, configs["target alone"], 4, args.threads)
    cells: dict[tuple[str, str, str], list[dict]] = {}
    started = time.monotonic()
    for round_no in range(args.rounds):
        for file_type, path in files.items():
            for config, config_args in configs.items():
                for mode, mode_args in MODES.items():
                    stats = run_once(path, config_args + mode_args, args.max_tokens, args.threads)
                    cells.setdefault((file_type, config, mode), []).append(stats)
        print(f"round {round_no + 1} done ({time.monotonic() - started:.0f} s)", file=sys.stderr)
    print_table(cells)
    if args.json:
        rows = [
            {"type": t, "config": c, "mode": m, "runs": runs} for (t, c, m), runs in cells.items()
        ]
        args.json.write_text(json.dumps(rows, indent=1))


def print_table(cells: dict[tuple[str, str, str], list[dict]]) -> None:
    print("| file | configuration | kernels | tok/s median [range] | prefill s median [range] "
          "| exact vs default kernels (tok/s) | answer = target alone's |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for (file_type, config, mode), runs in cells.items():
        speeds = [r["tokens_per_s"] for r in runs]
        prefill = [r["prefill_s"] for r in runs]
        base = cells[(file_type, config, "default kernels")]
        cost = statistics.median(speeds) / statistics.median(r["tokens_per_s"] for r in base) - 1
        alone = cells[(file_type, "target alone", mode)]
        same = sum(r["text"] == a["text"] for r, a in zip(runs, alone))
        print(f"| {file_type} | {config} | {mode} | {spread(speeds)} | {spread(prefill)} "
              f"| {cost:+.1%} | {same}/{len(runs)} |")  # fmt: skip


if __name__ == "__main__":
    main()
