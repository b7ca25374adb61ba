#!/usr/bin/env python3
"""How fast `specllama models --local` reads the models on a machine: research/RESULTS.md's
section "Scanning local models".

    python research/scan_headers.py                  # 200 headers, 3 repeats
    python research/scan_headers.py --files 400 --repeats 5

Builds a folder of header-only copies of real GGUF files (the first 8 MiB, which hold the whole
header, then extended as a sparse file to the real size: the header's tensor offsets must lie
inside the file): half of them from the Qwen2.5-Coder 0.5B/1.5B files (151,936 tokens and
151,387 merges: ~6 MB of header each), half from SmolLM2-135M and its test copies (49,152
tokens). Then, in a HOME with no other store, times `local.scan` of that folder:
- cold: the header cache empty (every header read; the files' pages are in the page cache,
  since they were just written: dropping it would disturb the other users of this machine);
- warm: the header cache filled by the run before (no header read).
Also one header at a time, fast and with the vocabulary print's detail (the walk of every token).
Writes research/results/scan-headers.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

HEADER_BYTES = 8 << 20


def sources() -> tuple[list[Path], list[Path]]:
    """(large-vocabulary files, small-vocabulary files) on this machine."""
    import model_factory

    own = Path.home() / ".cache" / "specllama" / "models"
    large = sorted(own.glob("qwen2.5-coder-*/*.gguf"))
    small = [
        model_factory.smollm2_q4(),
        model_factory.smollm2_f32(),
        model_factory.smollm2_f32_layers(4),
        model_factory.smollm2_f32_layers(2),
        model_factory.smollm2_changed_vocab(),
    ]
    return large, small


def header_copy(src: Path, dst: Path) -> None:
    with open(src, "rb") as f:
        head = f.read(HEADER_BYTES)
    with open(dst, "wb") as f:
        f.write(head)
        f.truncate(src.stat().st_size)  # sparse: no disk used beyond the header


def build(folder: Path, n_files: int, large: list[Path], small: list[Path]) -> dict[str, int]:
    counts = {"large_vocab": 0, "small_vocab": 0}
    for i in range(n_files):
        group, kind = (large, "large_vocab") if i % 2 == 0 else (small, "small_vocab")
        src = group[(i // 2) % len(group)]
        header_copy(src, folder / f"{i:03d}-{src.name}")
        counts[kind] += 1
    return counts


def timed_scan(folder: Path) -> tuple[float, int, int]:
    from specllama.models import local

    started = time.perf_counter()
    found = local.scan([folder], saved_folders=False)
    return time.perf_counter() - started, len(found.models), found.cache.reads


def one_header(path: Path, detail: bool, repeats: int) -> float:
    from specllama.llama.gguf_info import read_header

    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        read_header(path, detail=detail)
        times.append(time.perf_counter() - started)
    return min(times)


def walk_only() -> None:
    """Turn off the searches for where the token and merge arrays end (`gguf_info._skim`)."""
    from specllama.llama import gguf_info

    gguf_info._HeaderParser._skim = lambda self, *args, **kwargs: False


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--walk", action="store_true", help="for comparison: walk every string, no search"
    )
    args = parser.parse_args()
    if args.walk:
        walk_only()
    large, small = sources()  # before HOME moves
    if not large:
        sys.exit("no Qwen2.5-Coder GGUF in ~/.cache/specllama/models: `specllama pull` it")
    with tempfile.TemporaryDirectory(prefix="scan-headers-") as tmp:
        root = Path(tmp)
        os.environ["HOME"] = str(root / "home")  # no Ollama, LM Studio, HF or llama.cpp store
        for var in ("OLLAMA_MODELS", "LMSTUDIO_HOME", "HF_HUB_CACHE", "HF_HOME", "LLAMA_CACHE",
                    "XDG_CACHE_HOME", "XDG_CONFIG_HOME"):  # fmt: skip
            os.environ.pop(var, None)
        folder = root / "models"
        folder.mkdir(parents=True)
        counts = build(folder, args.files, large, small)
        cold, warm = [], []
        for repeat in range(args.repeats):
            os.environ["SPECLLAMA_CACHE"] = str(root / f"cache-{repeat}")  # an empty cache
            seconds, n_models, reads = timed_scan(folder)
            assert n_models == args.files and reads == args.files, (n_models, reads)
            cold.append(seconds)
            seconds, _, reads = timed_scan(folder)
            assert reads == 0
            warm.append(seconds)
        per_file = {
            "large_vocab_ms": one_header(large[0], False, 5) * 1000,
            "large_vocab_detail_ms": one_header(large[0], True, 5) * 1000,
            "small_vocab_ms": one_header(small[0], False, 5) * 1000,
            "small_vocab_detail_ms": one_header(small[0], True, 5) * 1000,
        }
    result = {
        "cpu": cpu_name(),
        "load_average": os.getloadavg(),
        "files": counts,
        "walk_only": args.walk,
        "repeats": args.repeats,
        "cold_s": {"median": statistics.median(cold), "min": min(cold), "all": cold},
        "warm_s": {"median": statistics.median(warm), "min": min(warm), "all": warm},
        "one_header_min": per_file,
    }
    out = HERE / "results" / ("scan-headers-walk.json" if args.walk else "scan-headers.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"{result['cpu']}; {args.files} headers ({counts['large_vocab']} with 151,936 tokens)")
    print(f"cold (header cache empty): median {result['cold_s']['median']:.2f} s, "
          f"min {result['cold_s']['min']:.2f} s")  # fmt: skip
    print(f"warm (header cache full):  median {result['warm_s']['median']:.3f} s, "
          f"min {result['warm_s']['min']:.3f} s")  # fmt: skip
    print("one header: " + ", ".join(f"{k} {v:.1f}" for k, v in per_file.items()))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
