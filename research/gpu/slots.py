"""What one batched step of a server's slots costs, by slots and width (issue 42).

`specllama serve --parallel N` runs N requests at once: each step is ONE llama_decode per
model carrying every slot's tokens (`LlamaBackend.decode_parts`), and each slot's controller is
charged a/S + b*n of the step (`StepCosts`: a line a + b*W fitted to the recent steps' widths
W), so that drafts get long where a wider step costs little more. This measures that step on a
synthetic target (make_models.py's recipe, random weights: the values change no cost):

- the step: for S sequences (1, 2, 4, 8), each at a depth of ~512 tokens of its own (prefilled
  first), each with k+1 tokens (k = 0, 3, 7, 15 drafted), the median time of `decode_parts`
  over `--repeats` steps (after warm-up steps), logits read at every token as a verify does
  (`all rows`) and, beside it, at each sequence's last token only (`last row`: what the logits'
  transfer and copy add);
- the line `StepCosts` fits to those steps (a, b), and what it charges a slot: in a full batch
  (S = 8) a plain step's a/8 + b against a slot drafting k, a/8 + b(k+1), and the draft length
  the line makes best per slot at a few acceptances, alone and in a full batch;
- aggregate tokens/s of S sequences decoding plain (greedy, one token each a step) for
  `--throughput-steps` steps, against one sequence: what batching gives.

    python research/gpu/slots.py write --vocab qwen-vocab.gguf --out DIR [--shape 7b|tiny]
    python research/gpu/slots.py measure --model DIR/target.gguf [--cpu] [--json R.json]
    python research/gpu/slots.py table R.json

Import order: `measure` imports llama_cpp before numpy (on the GPU image the other order
segfaults in model loading); `write` must not import llama_cpp (it runs during the build).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _path in (REPO, HERE):  # specllama where it is not installed; make_models beside this
    if str(_path) not in sys.path:
        sys.path.append(str(_path))

STATE = "state.json"
TARGET = "target.f16.gguf"
SLOTS = (1, 2, 4, 8)
KS = (0, 3, 7, 15)
ACCEPTANCE = (0.6, 0.8, 0.9)
ROWS = ("all", "last")


# -- write --------------------------------------------------------------------------------------


def write(args: argparse.Namespace) -> None:
    """The target, into a temporary name first: a killed writer leaves no model behind."""
    from make_models import TARGET_7B, TARGET_SMALL, write_model

    shape = {"7b": TARGET_7B, "tiny": TARGET_SMALL}[args.shape]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / STATE).unlink(missing_ok=True)
    started = time.perf_counter()
    partial = args.out / (TARGET + ".part")
    write_model(shape, args.vocab, partial)
    partial.rename(args.out / TARGET)
    size = (args.out / TARGET).stat().st_size / 1e9
    state = {"shape": args.shape, "model": shape.name, "gb": round(size, 2)}
    (args.out / STATE).write_text(json.dumps(state))
    took = time.perf_counter() - started
    print(f"{args.out / TARGET}: {shape.name}, {size:.2f} GB in {took:.0f} s")


# -- measure ------------------------------------------------------------------------------------


def _tokens(rng, n: int) -> list[int]:
    return [int(t) for t in rng.integers(100, 150_000, size=n)]


def _step_ms(backend, parts, depth: int, warmup: int, repeats: int) -> list[float]:
    """Times of `decode_parts(parts)` in ms, each sequence cut back to `depth` after each."""
    samples = []
    for _ in range(warmup + repeats):
        started = time.perf_counter()
        backend.decode_parts(parts)  # returns once the logits are read: the GPU is done
        samples.append(1000 * (time.perf_counter() - started))
        for part in parts:
            backend.forget(part.seq, depth)
    return samples[warmup:]


def _throughput(backend, n_seq: int, depth: int, steps: int, rng) -> dict:
    """S sequences decoding greedily, one token each per step, for `steps` steps."""
    import numpy as np

    from specllama.llama.evaluated import Part

    last = _tokens(rng, n_seq)
    started = time.perf_counter()
    for i in range(steps):
        parts = [Part(seq, depth + i, [last[seq]], [0]) for seq in range(n_seq)]
        rows = backend.decode_parts(parts)
        last = [int(np.argmax(row[0])) for row in rows]
    seconds = time.perf_counter() - started
    for seq in range(n_seq):
        backend.forget(seq, depth)
    return {"slots": n_seq, "steps": steps, "seconds": seconds, "tok_s": n_seq * steps / seconds}


def measure(args: argparse.Namespace) -> int:
    import llama_cpp  # noqa: F401  (before numpy: see the module's doc)
    import numpy as np

    from specllama.llama.backend import LlamaBackend
    from specllama.llama.evaluated import Part
    from specllama.llama.library import build_facts

    began = time.perf_counter()
    facts = build_facts()
    print(f"llama-cpp-python {facts.version}, GPU offload: {facts.gpu_offload}", flush=True)
    if not args.cpu and not facts.gpu_offload:
        print("this llama.cpp has no GPU offload: run with --cpu", flush=True)
        return 1
    n_seq = max(args.slots)
    # Each sequence's own cells: its depth, a verify of max(ks)+1 or the throughput's steps.
    per_seq = args.depth + max(max(args.ks) + 1, args.throughput_steps) + 64
    per_seq = -(-per_seq // 256) * 256
    n_batch = max(512, n_seq * (max(args.ks) + 1))
    loaded = time.perf_counter()
    backend = LlamaBackend(
        args.model,
        n_ctx=n_seq * per_seq,
        n_gpu_layers=0 if args.cpu else -1,
        n_batch=n_batch,
        n_seq=n_seq,
    )
    load_s = time.perf_counter() - loaded
    print(f"loaded {args.model.name} in {load_s:.1f} s: {n_seq} sequences of {backend.n_ctx}")
    result = {
        "model": args.model.name,
        "cpu": args.cpu,
        "llama_cpp_python": facts.version,
        "system_info": facts.system_info,
        "depth": args.depth,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "n_batch": backend.n_batch,
        "load_s": load_s,
        "steps": [],
        "throughput": [],
        "skipped": [],
    }

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))

    rng = np.random.default_rng(0)
    started = time.perf_counter()
    for seq in range(n_seq):  # each its own prompt, in chunks of at most n_batch
        prompt = _tokens(rng, args.depth)
        for first in range(0, args.depth, backend.n_batch):
            chunk = prompt[first : first + backend.n_batch]
            backend.decode_parts([Part(seq, first, chunk, [])])
    result["prefill_s"] = time.perf_counter() - started
    print(f"prefilled {n_seq} x {args.depth} tokens in {result['prefill_s']:.1f} s", flush=True)
    save()

    def late() -> bool:
        return time.perf_counter() - began > args.stop_after

    for k in args.ks:
        for s in args.slots:
            for rows in ROWS:
                if late():
                    result["skipped"].append({"slots": s, "k": k, "rows": rows})
                    continue
                parts = []
                for seq in range(s):
                    logits_at = range(k + 1) if rows == "all" else [k]
                    parts.append(Part(seq, args.depth, _tokens(rng, k + 1), list(logits_at)))
                samples = _step_ms(backend, parts, args.depth, args.warmup, args.repeats)
                step = {
                    "slots": s,
                    "k": k,
                    "width": s * (k + 1),
                    "rows": rows,
                    "ms": statistics.median(samples),
                    "min_ms": min(samples),
                    "max_ms": max(samples),
                    "samples_ms": samples,
                }
                result["steps"].append(step)
                print(
                    f"S={s} k={k} W={step['width']} rows={rows}: {step['ms']:.2f} ms "
                    f"({step['min_ms']:.2f}-{step['max_ms']:.2f})",
                    flush=True,
                )
                save()
    for s in args.slots if args.throughput_steps else ():
        if late():
            result["skipped"].append({"throughput": s})
            continue
        _throughput(backend, s, args.depth, 2, rng)  # warm-up
        run = _throughput(backend, s, args.depth, args.throughput_steps, rng)
        result["throughput"].append(run)
        print(f"throughput S={s}: {run['tok_s']:.1f} tok/s", flush=True)
        save()
    backend.close()
    if result["skipped"]:
        print(f"{len(result['skipped'])} not begun (past --stop-after {args.stop_after:.0f} s)")
    save()
    print(table(result))
    return 0


# -- the line and the table ---------------------------------------------------------------------


if TYPE_CHECKING:
    from specllama.llama.step_costs import StepCosts


def step_costs(points: list[dict]) -> StepCosts:
    """A `StepCosts` that has seen each of these steps' medians once, in seconds."""
    from specllama.llama.step_costs import StepCosts

    costs = StepCosts(window=max(len(points), 1))
    for step in points:
        costs.add(step["width"], step["ms"] / 1000)
    return costs


def fitted_line(steps: list[dict]) -> tuple[float, float] | None:
    """(a, b) in ms: the line `StepCosts` fits to the steps' medians (logits at every row, as
    a server's verify steps read them), each step added once; None if it fits none."""
    points = [step for step in steps if step["rows"] == "all"]
    a, b = step_costs(points).line()
    if len(points) < 8 or a == 0.0:  # StepCosts' fallback: a mean cost per token
        return None
    return 1000 * a, 1000 * b


def batch_price_lines(ordered: list[dict], full: int, top: int) -> list[str]:
    """What a slot's controller is told in a full batch (`Stepper.price`: `StepCosts.price`
    over the steps measured, read near the full batch's widths) and the draft lengths it makes
    best: the policy a server's slots follow (issue 53), beside the line's."""
    points = [step for step in ordered if step["rows"] == "all"]
    share, per_token = (1000 * x for x in step_costs(points).price(full, 4 * full))
    lines = [
        "",
        f"The stepper's price in a full batch (S={full}): a slot's share {share:.2f} ms, "
        f"a drafted token {per_token:.3f} ms (the steps' slope near their widths); the "
        "draft length it makes best, drafts free:",
        "",
        "| acceptance | best k, full batch, stepper's price |",
        "|---:|---:|",
    ]
    for acc in ACCEPTANCE:
        k = best_k(acc, lambda k: share + per_token * k, range(top + 1))
        lines.append(f"| {acc} | {k} |")
    return lines


def best_k(a: float, charge, ks: range) -> int:
    """The draft length with the most expected tokens per charged ms (drafts taken as free:
    n-gram lookup; a draft model's steps would add theirs)."""
    from specllama.policy.costs import expected_tokens

    return max(ks, key=lambda k: expected_tokens(a, k) / charge(k))


def table(result: dict) -> str:
    steps = {(st["slots"], st["k"], st["rows"]): st for st in result["steps"]}
    base = steps.get((1, 0, "all"))
    where = "CPU (dry run: speeds mean nothing)" if result["cpu"] else "GPU"
    lines = [
        f"### One batched step: {result['model']}, {where}, depth {result['depth']} per "
        f"sequence, median of {result['repeats']} steps",
        "",
        "| S | k | width | ms per step | ms per token | ratio to S=1,k=0 | min-max ms "
        "| ms, last row only |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ordered = sorted(steps.values(), key=lambda st: (st["slots"], st["k"]))
    for st in (st for st in ordered if st["rows"] == "all"):
        last = steps.get((st["slots"], st["k"], "last"))
        ratio = f"{st['ms'] / base['ms']:.2f}" if base else "-"
        lines.append(
            f"| {st['slots']} | {st['k']} | {st['width']} | {st['ms']:.2f} | "
            f"{st['ms'] / st['width']:.3f} | {ratio} | {st['min_ms']:.2f}-{st['max_ms']:.2f} | "
            + (f"{last['ms']:.2f} |" if last else "- |")
        )
    line = fitted_line(result["steps"])
    lines.append("")
    if line is None:
        lines.append("StepCosts fits no line to these steps (it charges a mean cost per token).")
    else:
        a, b = line
        worst = max(
            (st for st in ordered if st["rows"] == "all"),
            key=lambda st: abs(a + b * st["width"] - st["ms"]) / st["ms"],
        )
        off = (a + b * worst["width"]) / worst["ms"] - 1
        full = max(st["slots"] for st in ordered)
        lines += [
            f"StepCosts' line: a step of W tokens ~ a + b*W, a = {a:.2f} ms, b = {b:.3f} ms "
            f"per token (a/b = {a / b:.0f}: about the width where a step costs twice a "
            f"one-token step); furthest off at S={worst['slots']}, "
            f"k={worst['k']} (W={worst['width']}): {off:+.0%}.",
            "",
            f"What a slot is charged (a/S + b*n), alone and in a full batch of S={full} "
            "(every slot drafting k), from the line:",
            "",
            "| k | alone: ms | alone: x plain | full batch: ms per slot | full batch: x plain "
            f"| measured S={full} step / {full} |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for k in sorted({st["k"] for st in ordered}):
            alone, in_full = a + b * (k + 1), a / full + b * (k + 1)
            measured = steps.get((full, k, "all"))
            lines.append(
                f"| {k} | {alone:.2f} | {alone / (a + b):.2f} | {in_full:.2f} | "
                f"{in_full / (a / full + b):.2f} | "
                + (f"{measured['ms'] / full:.2f} |" if measured else "- |")
            )
        top = max(st["k"] for st in ordered)
        lines += [
            "",
            f"The draft length (0-{top}) with the most expected tokens per charged ms, "
            "drafts free (n-gram lookup), on the line:",
            "",
            f"| acceptance | best k alone | best k in a full batch (S={full}) |",
            "|---:|---:|---:|",
        ]
        for acc in ACCEPTANCE:
            alone_k = best_k(acc, lambda k: a + b * (k + 1), range(top + 1))
            full_k = best_k(acc, lambda k: a / full + b * (k + 1), range(top + 1))
            lines.append(f"| {acc} | {alone_k} | {full_k} |")
        lines += batch_price_lines(ordered, full, top)
    if result["throughput"]:
        one = next((run for run in result["throughput"] if run["slots"] == 1), None)
        lines += [
            "",
            f"Plain decoding (k=0, greedy), {result['throughput'][0]['steps']} steps:",
            "",
            "| S | aggregate tok/s | per sequence tok/s | gain over S=1 |",
            "|---:|---:|---:|---:|",
        ]
        for run in result["throughput"]:
            gain = f"{run['tok_s'] / one['tok_s']:.2f}x" if one else "-"
            lines.append(
                f"| {run['slots']} | {run['tok_s']:.1f} | {run['tok_s'] / run['slots']:.1f} "
                f"| {gain} |"
            )
    if result["skipped"]:
        lines += [
            "",
            f"Not begun (out of time): {len(result['skipped'])}, "
            + ", ".join(
                f"S={skip['slots']} k={skip['k']} {skip['rows']}"
                if "k" in skip
                else f"throughput S={skip['throughput']}"
                for skip in result["skipped"]
            ),
        ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="the synthetic target (numpy and gguf only)")
    w.add_argument("--vocab", type=Path, required=True)
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--shape", choices=("7b", "tiny"), default="7b")
    m = sub.add_parser("measure", help="the steps and the throughput")
    m.add_argument("--model", type=Path, required=True)
    m.add_argument("--cpu", action="store_true", help="no offload (the dry run)")
    m.add_argument("--slots", type=int, nargs="+", default=list(SLOTS))
    m.add_argument("--ks", type=int, nargs="+", default=list(KS))
    m.add_argument("--depth", type=int, default=512)
    m.add_argument("--repeats", type=int, default=10)
    m.add_argument("--warmup", type=int, default=3)
    m.add_argument("--throughput-steps", type=int, default=32, help="0: none")
    m.add_argument("--stop-after", type=float, default=1e9, help="no step begun after (s)")
    m.add_argument("--json", type=Path)
    t = sub.add_parser("table", help="the table of a measure's JSON")
    t.add_argument("json", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args)
        return 0
    if args.command == "measure":
        return measure(args)
    print(table(json.loads(args.json.read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
