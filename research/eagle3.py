#!/usr/bin/env python3
"""Issue 34: drafting with a head in its own file (EAGLE-3, DFlash or a Gemma 4 assistant),
specllama against llama.cpp's draft-eagle3 / draft-dflash / draft-mtp, on the same files:
acceptance and tokens/s at the same draft length.

    python research/eagle3.py --llama-bin /tmp/llama-build/bin --size 1.5b --ks 1 3
    python research/eagle3.py --llama-bin /tmp/llama-build/bin --size tiny -n 48 --repeats 1
    python research/eagle3.py --kind dflash --size 1.5b --layers 4 --ks 3 8
    python research/eagle3.py --kind gemma4-assistant --size tiny --accept 0.5 -n 200

The pair is synthetic (research/make_heads.py, tests/head_models.py): a llama target (the tiny
one, or Qwen2.5-1.5B's trunk in F16) whose greedy text follows a fixed permutation of SmolLM2's
vocabulary, and a head right on a fraction `--accept` of the tokens (a DFlash head: each token of
its block in turn; a Gemma 4 assistant comes with a gemma4 target, tests/gemma4_models.py). Written
once into ~/.cache/specllama-bench (SPECLLAMA_BENCH_MODELS).

Configurations, greedy, N tokens, each repeat in an order rotated by one (drift on the machine
hits all alike): `sl-target` (specllama, the target alone), `sl-KIND-kK` (FixedLength(K)),
`lc-target` (llama-speculative-simple with ngram-simple at a 1024-token n-gram: never matches,
so the same loop drafts nothing), `lc-KIND-kK` (`--spec-type draft-KIND --spec-draft-n-max K`).
Both clocks start after the prompt's prefill; speeds are compared as rates (llama.cpp's last
round can overshoot N). Every specllama answer is checked against the permutation's.

Prints one JSON object per run and a table last; writes research/results/issue34-KIND-SIZE.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # make_heads
sys.path.insert(0, str(HERE.parent / "tests"))  # head_models

import make_heads  # noqa: E402

from specllama.engine.assistant import AssistantDrafter  # noqa: E402
from specllama.engine.control import FixedLength  # noqa: E402
from specllama.engine.dflash import DFlashDrafter  # noqa: E402
from specllama.engine.drafters import NoDrafter  # noqa: E402
from specllama.engine.eagle3 import Eagle3Drafter  # noqa: E402
from specllama.engine.events import FinishEvent, TokenEvent  # noqa: E402
from specllama.engine.sampling import SamplingParams  # noqa: E402
from specllama.engine.speculative import generate  # noqa: E402
from specllama.llama.assistant import AssistantHead  # noqa: E402
from specllama.llama.backend import LlamaBackend, default_threads  # noqa: E402
from specllama.llama.dflash import DFlashHead  # noqa: E402
from specllama.llama.eagle3 import Eagle3Head  # noqa: E402

HEADS = {
    "eagle3": (Eagle3Head, Eagle3Drafter),
    "dflash": (DFlashHead, DFlashDrafter),
    "gemma4-assistant": (AssistantHead, AssistantDrafter),
}
# llama.cpp's --spec-type for a kind whose name it does not share (a Gemma 4 assistant is MTP's).
SPEC_TYPES = {"gemma4-assistant": "draft-mtp"}

PROMPT = "Write a short poem about the sea"
_DECODED = re.compile(rb"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_ENCODED = re.compile(rb"encoded\s+(\d+) tokens")
_COUNT = re.compile(rb"(n_drafted|n_accept)\s*=\s*(\d+)")


def bench_cache() -> Path:
    default = Path.home() / ".cache" / "specllama-bench"
    return Path(os.environ.get("SPECLLAMA_BENCH_MODELS", default))


def cpu_name() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if "Model name" in line]
    return names[0] if names else "unknown"


def expected_answer(mapping, prompt: list[int], n: int) -> list[int]:
    out, token = [], prompt[-1]
    for _ in range(n):
        token = int(mapping[token])
        out.append(token)
    return out


def run_llama_cpp(binary: Path, model: Path, spec: list[str], n: int, threads: int, ctx: int):
    """llama-speculative-simple on PROMPT, greedy: its counts and clock (as research/mtp.py)."""
    command = [
        str(binary / "llama-speculative-simple"),
        *("-m", str(model), *spec, "-p", PROMPT, "-n", str(n), "--temp", "0"),
        *("-t", str(threads), "-c", str(ctx)),
    ]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(binary), env.get("LD_LIBRARY_PATH", "")) if p
    )
    done = subprocess.run(command, capture_output=True, timeout=3600, env=env)
    log = done.stdout + done.stderr
    decoded, encoded = _DECODED.search(log), _ENCODED.search(log)
    if done.returncode != 0 or decoded is None or encoded is None:
        tail = log[-2000:].decode("utf-8", "replace")
        raise RuntimeError(f"{' '.join(spec)}: exit {done.returncode}: {tail}")
    # Its count includes the end-of-generation token it samples, where it stopped short of n.
    reported, time_s = int(decoded.group(1)), float(decoded.group(2))
    tokens = reported - 1 if reported <= n else reported
    counts = {k.decode(): int(v) for k, v in _COUNT.findall(log)}
    return {
        "n_prompt": int(encoded.group(1)), "n_generated": tokens, "time_s": time_s,
        "tokens_per_s": round(tokens / time_s, 3) if time_s > 0 else 0.0,
        "n_drafted": counts.get("n_drafted", 0), "n_accepted": counts.get("n_accept", 0),
    }  # fmt: skip


def ours(target: LlamaBackend, head, config: str, prompt: list[int], n: int):
    if config == "sl-target":
        drafter, k = NoDrafter(), 0
    else:
        drafter_class = next(d for h, d in HEADS.values() if isinstance(head, h))
        drafter, k = drafter_class(head), int(config.rsplit("-k", 1)[1])
    target.rollback(0)
    head.rollback(0)
    tokens, finish = [], None
    for event in generate(target, drafter, prompt, SamplingParams(), max_tokens=n,
                          controller=FixedLength(k)):  # fmt: skip
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
        elif isinstance(event, FinishEvent):
            finish = event
    assert finish is not None
    s = finish.stats
    return tokens, {
        "n_generated": s.n_generated, "time_s": round(s.time_s, 4),
        "tokens_per_s": round(s.tokens_per_s, 3), "n_drafted": s.n_drafted,
        "n_accepted": s.n_accepted,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-bin", type=Path, default=Path("/tmp/llama-build/bin"))
    parser.add_argument("--kind", choices=sorted(HEADS), default="eagle3")
    parser.add_argument("--layers", type=int, default=1, help="a DFlash head's decoder layers")
    parser.add_argument("--size", choices=("tiny", "1.5b", "8b"), default="1.5b")
    parser.add_argument("--accept", type=float, default=0.8)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 3])
    parser.add_argument("-n", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--ctx", type=int, default=1024)
    parser.add_argument("--gpu", action="store_true", help="both models on the GPU, both tools")
    parser.add_argument("--vocab", type=Path, help="a GGUF to take the tokenizer from")
    parser.add_argument("--models", type=Path, help="where the pair is (written if not there)")
    parser.add_argument("--json", type=Path, help="where the runs go (default research/results)")
    args = parser.parse_args()

    models = args.models or bench_cache() / "eagle3"
    target_path, head_path = make_heads.write_pair(
        models, accept=args.accept, kind=args.kind, size=args.size, layers=args.layers,
        vocab=args.vocab,
    )  # fmt: skip
    import head_models

    mapping = head_models.next_token_map(args.vocab or _vocab())
    layers = -1 if args.gpu else 0
    target = LlamaBackend(target_path, n_ctx=args.ctx, n_threads=args.threads,
                          n_gpu_layers=layers)  # fmt: skip
    head = HEADS[args.kind][0](target, head_path, n_gpu_layers=layers)
    offload = ["-ngl", "99", "-ngld", "99"] if args.gpu else []
    prompt = target.tokenize(PROMPT, add_bos=True, special=True)
    expected = expected_answer(mapping, prompt, args.n)
    spec = {
        "lc-target": [*offload, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n",
                      "1024"],
        **{f"lc-{args.kind}-k{k}": [*offload, "-md", str(head_path), "--spec-type",
                                    SPEC_TYPES.get(args.kind, f"draft-{args.kind}"),
                                    "--spec-draft-n-max", str(k)]
           for k in args.ks},
    }  # fmt: skip
    names = ["sl-target", *(f"sl-{args.kind}-k{k}" for k in args.ks), *spec]
    for name in names:  # untimed: the first decodes after loading (page cache, graphs)
        if name.startswith("sl-"):
            ours(target, head, name, prompt, 4)
    runs: list[dict] = []
    for repeat in range(args.repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for name in order:
            if name.startswith("sl-"):
                tokens, stats = ours(target, head, name, prompt, args.n)
                stats["answer_ok"] = tokens == expected[: len(tokens)] and len(tokens) == args.n
            else:
                stats = run_llama_cpp(
                    args.llama_bin, target_path, spec[name], args.n, args.threads, args.ctx
                )
                assert stats["n_prompt"] == len(prompt), (stats["n_prompt"], len(prompt))
            run = {"config": name, "repeat": repeat, **stats}
            print(json.dumps(run), flush=True)
            runs.append(run)
    head.close()
    target.close()
    table = summarise(runs, names)
    out = args.json or HERE / "results" / f"issue34-{args.kind}-{args.size}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    facts = {"cpu": cpu_name(), "threads": args.threads, "n": args.n, "accept": args.accept,
             "kind": args.kind, "layers": args.layers, "size": args.size, "gpu": args.gpu,
             "when": time.strftime("%Y-%m-%d %H:%M")}  # fmt: skip
    out.write_text(json.dumps({"facts": facts, "summary": table, "runs": runs}, indent=1) + "\n")
    print(f"\n{facts}")
    for name, row in table.items():
        print(f"{name:16} {row['tokens_per_s']:8.2f} tok/s  accepted {row['accepted']}")


def summarise(runs: list[dict], names: list[str]) -> dict:
    table = {}
    for name in names:
        mine = [r for r in runs if r["config"] == name]
        drafted = sum(r["n_drafted"] for r in mine)
        accepted = sum(r["n_accepted"] for r in mine)
        rate = f" = {accepted / drafted:.3f}" if drafted else ""
        table[name] = {
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in mine),
            "accepted": f"{accepted}/{drafted}{rate}",
        }
    return table


def _vocab() -> Path:
    import model_factory

    return model_factory.smollm2_q4()


if __name__ == "__main__":
    main()
