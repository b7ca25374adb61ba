"""specllama's MTP drafting against llama.cpp's, on a synthetic qwen35 target with an MTP head.

The target is tests/qwen35_models.py's "bigram" model at a real trunk's shape (Qwen3.5-9B's by
default, F16): every matrix product runs at full cost, the greedy text follows a fixed
permutation of the vocabulary, and the MTP head agrees with it on a fraction a of the tokens,
so a drafted token is kept with probability about a. Only the head's output matrix depends on a
(1.2 GB of a 9B model's 18 GB), so `write` writes the model once, with the first a's head, and
each a's head beside it as .npy; `measure` copies an a's head into the file in place before it
measures that a (no process has the file open then).

    python research/gpu/mtp.py write --vocab qwen-vocab.gguf --out DIR [--shape 9b] \
        [--acceptance 0.8 0.95 0.6]
    python research/gpu/mtp.py measure --models DIR --llama-bin BUILD/bin [--cpu] [-n 256] \
        [--repeats 2] [--json R.json] [--logs LOGS]
    python research/gpu/mtp.py table R.json

`measure`, for each a, greedy, on one prompt, with `repeats` rounds in an order rotated by one
each round (after one warm-up run of each of specllama's configurations):

- specllama `target` (the target alone), `mtp:3` (`--drafter mtp --fixed --draft-max 3`) and
  `adaptive` (`--drafter mtp`, the default policy: the head and n-gram lookup, lengths chosen
  each round from calibrated costs), in one process, as `specllama run` builds them;
- llama.cpp `llama-speculative-simple --spec-type draft-mtp --spec-draft-n-max 3` (`lcpp mtp:3`)
  and its target alone (`lcpp target`), one process per run. The tool refuses `--spec-type
  none` ("failed to initialize speculative decoding"), so its target alone is `--spec-type
  ngram-simple` with a 1024-token n-gram, which never repeats here: it drafts nothing (a run
  that drafted would show an acceptance in the table). Once per a unless
  `--lcpp-target-every-round` (it does not depend on a).

tokens/s counts generated tokens from the end of the prompt's prefill; llama.cpp's are counted
as specllama.bench.llamacpp counts them. specllama's head evaluates the prompt in its first
round (on the clock); llama.cpp's during its prompt phase (off it): a few ms on a GPU.

`--cpu` runs everything on the CPU (no offload): with `--shape tiny` models it is the dry run
that checks the whole path on a machine without a GPU (research/gpu/mtp.sh --cpu).

Import order: `measure` imports llama_cpp before numpy (on the GPU image the other order
segfaults in model loading); `write` must not import llama_cpp (it runs during the build).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import re
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# specllama (where it is not installed), tests/qwen35_models.py
for _path in (REPO, REPO / "tests"):
    if str(_path) not in sys.path:
        sys.path.append(str(_path))

PROMPT = (
    "Write a Python function that returns the n-th Fibonacci number, with a docstring, type "
    "hints and three doctests."
)
LOGIT = 30.0  # the head's greedy logit (qwen35_models.write_qwen35's default)
STATE = "state.json"
OURS = ("target", "mtp:3", "adaptive")
THEIRS = ("lcpp target", "lcpp mtp:3")
NAMES = (*OURS, *THEIRS)
K = 3  # the fixed draft length, both tools
# llama.cpp's target alone: its loop, sampler and clock, drafting nothing (a 1024-token n-gram
# never repeats in this text; `--spec-type none` is refused).
NOTHING_DRAFTED = ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1024"]


# -- write --------------------------------------------------------------------------------------


def write(args: argparse.Namespace) -> None:
    import numpy as np
    import qwen35_models as q

    started = time.perf_counter()
    shape = q.SHAPES[args.shape]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / STATE).unlink(missing_ok=True)  # written last: its presence means "ready"
    n_vocab = read_header(args.vocab)[0]["tokenizer.ggml.tokens"]
    mapping = q.next_token_map(n_vocab, fixed=q.control_tokens(args.vocab))
    maps = {a: q.partly_right(mapping, a) for a in args.acceptance}
    model = args.out / f"qwen35-{shape.name}-mtp.f16.gguf"
    first = args.acceptance[0]
    q.write_qwen35(
        model, shape, args.vocab, next_token=mapping, mtp_next=maps[first],
        logit=LOGIT, dtype=np.float16,
    )  # fmt: skip
    print(f"{model} {model.stat().st_size / 1e9:.2f} GB, {time.perf_counter() - started:.0f} s")
    # The head's output rows, as write_qwen35 makes them (its embeddings: seeded by n_embd).
    rng = np.random.default_rng(shape.n_embd)
    embeddings = rng.standard_normal((n_vocab, shape.n_embd), dtype=np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    name = f"blk.{shape.n_layer}.nextn.shared_head_head.weight"
    offset, dims, ggml_type = read_header(model)[1][name]
    if ggml_type != 1 or dims != [shape.n_embd, n_vocab]:  # 1: GGML_TYPE_F16
        raise SystemExit(f"{name}: type {ggml_type}, dims {dims}: not an F16 head")
    heads = {}
    for a, head_map in maps.items():
        head = q._head(embeddings, head_map, LOGIT).astype(np.float16)
        path = args.out / f"head-a{a:g}.npy"
        np.save(path, head)
        heads[f"{a:g}"] = path.name
        if a == first:  # the file holds this one: the copy in place writes what write_qwen35 does
            stored = np.memmap(model, np.float16, "r", offset=offset, shape=head.shape)
            if not np.array_equal(stored, head):
                raise SystemExit(f"{name} in {model} differs from the head computed here")
            del stored
    state = {
        "model": model.name,
        "shape": shape.name,
        "n_vocab": n_vocab,
        "tensor": name,
        "offset": offset,
        "rows": [n_vocab, shape.n_embd],
        "heads": heads,
        "current": f"{first:g}",
    }
    _save_state(args.out, state)
    print(f"heads {', '.join(heads)} in {args.out}, {time.perf_counter() - started:.0f} s")


def _save_state(folder: Path, state: dict) -> None:
    tmp = folder / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(folder / STATE)


def read_header(path: Path) -> tuple[dict[str, int], dict[str, tuple[int, list[int], int]]]:
    """(element count of every array value, {tensor: (absolute offset of its data, dims as GGUF
    lists them, ggml type)}), from the header alone: gguf.GGUFReader takes seconds over a
    150k-token vocabulary."""
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"GGUF":
            raise SystemExit(f"{path} is not a GGUF file")
        n_tensors, n_kv = struct.unpack_from("<QQ", m, 8)
        pos, alignment = 24, 32

        def string(pos: int) -> tuple[str, int]:
            (length,) = struct.unpack_from("<Q", m, pos)
            return m[pos + 8 : pos + 8 + length].decode("utf-8", "replace"), pos + 8 + length

        def skip(kind: int, pos: int) -> int:
            if kind == 8:
                return pos + 8 + struct.unpack_from("<Q", m, pos)[0]
            if kind == 9:
                sub, count = struct.unpack_from("<IQ", m, pos)
                pos += 12
                if sub in sizes:
                    return pos + count * sizes[sub]
                for _ in range(count):
                    pos = skip(sub, pos)
                return pos
            return pos + sizes[kind]

        arrays: dict[str, int] = {}
        for _ in range(n_kv):
            key, pos = string(pos)
            (kind,) = struct.unpack_from("<I", m, pos)
            if key == "general.alignment":
                (alignment,) = struct.unpack_from("<I", m, pos + 4)
            if kind == 9:
                arrays[key] = struct.unpack_from("<Q", m, pos + 8)[0]
            pos = skip(kind, pos + 4)
        infos = []
        for _ in range(n_tensors):
            name, pos = string(pos)
            (n_dims,) = struct.unpack_from("<I", m, pos)
            dims = list(struct.unpack_from(f"<{n_dims}Q", m, pos + 4))
            ggml_type, offset = struct.unpack_from("<IQ", m, pos + 4 + 8 * n_dims)
            pos += 4 + 8 * n_dims + 12
            infos.append((name, offset, dims, ggml_type))
        data_start = -(-pos // alignment) * alignment
        tensors = {name: (data_start + offset, dims, t) for name, offset, dims, t in infos}
        return arrays, tensors


def set_head(folder: Path, a: float) -> Path:
    """Make the model's MTP head the one written for `a` (a copy in place); its path."""
    import numpy as np

    state = json.loads((folder / STATE).read_text())
    model = folder / state["model"]
    if f"{a:g}" not in state["heads"]:
        raise SystemExit(
            f"{folder} holds no head for a = {a:g} (it has {', '.join(state['heads'])})"
        )
    if state["current"] != f"{a:g}":
        before = model.stat()
        head = np.load(folder / state["heads"][f"{a:g}"], mmap_mode="r")
        stored = np.memmap(model, np.float16, "r+", offset=state["offset"], shape=head.shape)
        stored[:] = head
        stored.flush()
        del stored
        # The costs do not depend on the head's values: keep the file's time, so that the
        # calibration cached at the first a serves the others (as a second `specllama run`).
        os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))
        state["current"] = f"{a:g}"
        _save_state(folder, state)
    return model


# -- measure ------------------------------------------------------------------------------------

_ENCODED = re.compile(r"encoded\s+(\d+) tokens")
# common_perf_print: the target's evaluations (prompt and verify batches, one-token decodes), and
# what the process spent outside them and sampling (the MTP head, checkpoints of a hybrid).
_PERF = re.compile(r"(prompt eval|eval|unaccounted) time =\s+([\d.]+) ms")


def run_llama_cpp(args: argparse.Namespace, model: Path, name: str, log: Path) -> dict:
    """One `llama-speculative-simple` run; its figures counted as specllama counts them."""
    from specllama.bench.llamacpp import read_log

    spec = ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(K)]
    command = [
        str(args.llama_bin / "llama-speculative-simple"),
        *("-m", str(model), "-p", PROMPT, "-n", str(args.n), "--temp", "0", "--seed", "1"),
        *("-c", str(args.ctx), "-b", "512", "-ub", "512", "-t", str(args.threads)),
        *("-ngl", "0" if args.cpu else "999"),
        *(spec if name == "lcpp mtp:3" else NOTHING_DRAFTED),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, errors="replace", timeout=args.timeout
    )
    text = done.stdout + done.stderr
    log.write_text(" ".join(command) + "\n\n" + text)
    if done.returncode != 0 or "decoded" not in text:
        raise RuntimeError(f"{name}: exit {done.returncode}, see {log}: {text[-1500:]}")
    figures = read_log(text, args.n)
    encoded = _ENCODED.search(text)
    figures["n_prompt"] = int(encoded.group(1)) if encoded else None
    figures["acceptance"] = (
        figures["n_accepted"] / figures["n_drafted"] if figures["n_drafted"] else None
    )
    perf = {kind: float(ms) for kind, ms in _PERF.findall(text)}
    figures["target_eval_ms"] = perf.get("prompt eval", 0.0) + perf.get("eval", 0.0)
    figures["unaccounted_ms"] = perf.get("unaccounted")
    figures["text"] = done.stdout
    return figures


def measure(args: argparse.Namespace) -> None:
    import llama_cpp  # noqa: F401  (first: see the module's docstring)

    from specllama.engine.control import FixedLength
    from specllama.engine.drafters import CombinedDrafter, NoDrafter
    from specllama.engine.events import FinishEvent, TokenEvent
    from specllama.engine.mtp import MtpDrafter
    from specllama.engine.sampling import SamplingParams
    from specllama.engine.speculative import generate
    from specllama.llama.backend import default_threads
    from specllama.llama.library import build_facts
    from specllama.policy import calibration
    from specllama.session import Engine, EngineConfig

    args.logs.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPECLLAMA_CACHE", str(args.logs / "specllama-cache"))
    args.threads = args.threads or default_threads()
    facts = build_facts()
    state = json.loads((args.models / STATE).read_text())
    result: dict = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "llama_cpp_python": facts.version,
        "gpu_offload": facts.gpu_offload,
        "cpu": args.cpu,
        "shape": state["shape"],
        "model_bytes": (args.models / state["model"]).stat().st_size,
        "settings": {
            "max_tokens": args.n,
            "repeats": args.repeats,
            "k": K,
            "ctx": args.ctx,
            "threads": args.threads,
            "prompt": PROMPT,
        },
        "acceptance": {},
    }
    started = time.perf_counter()
    params = SamplingParams()  # greedy
    failures: list[str] = []

    def save() -> None:  # after every run: a crash keeps what was measured
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n")

    def ours(engine: Engine, name: str, prompt: list[int], n: int) -> dict:
        head = engine.mtp_head
        assert head is not None
        head.rollback(0)  # a new prompt for the head, every run
        if name == "target":
            drafter, controller = NoDrafter(), FixedLength(0)
        elif name == "mtp:3":
            drafter, controller = MtpDrafter(head), FixedLength(K)
        else:  # what `specllama run --drafter mtp` builds (session.Engine)
            drafter, controller = CombinedDrafter(MtpDrafter(head)), engine.new_controller()
        tokens: list[int] = []
        stats = None
        events = generate(engine.target, drafter, prompt, params, max_tokens=n,
                          controller=controller)  # fmt: skip
        for event in events:
            if isinstance(event, TokenEvent):
                tokens.append(event.token)
            elif isinstance(event, FinishEvent):
                stats = event.stats
        assert stats is not None
        return {
            "n_prompt": stats.n_prompt,
            "n_generated": stats.n_generated,
            "time_s": stats.time_s,
            "tokens_per_s": stats.tokens_per_s,
            "n_drafted": stats.n_drafted,
            "n_accepted": stats.n_accepted,
            "acceptance": stats.acceptance_rate if stats.n_drafted else None,
            "n_rounds": stats.n_rounds,
            "draft_ms_per_round": 1000 * stats.draft_s / max(stats.n_rounds, 1),
            "verify_ms_per_round": 1000 * stats.target_s / max(stats.n_rounds, 1),
            "overhead_ms_per_round": stats.overhead_ms_per_round,
            "tokens": tokens,
        }

    for a in args.acceptance:
        late = args.stop_after is not None and time.perf_counter() - started > args.stop_after
        if late and result["acceptance"]:  # the first a always runs
            print(f"a = {a:g}: skipped, {args.stop_after:.0f} s have passed", flush=True)
            result.setdefault("skipped", []).append(a)
            continue
        label = f"{a:g}"
        model = set_head(args.models, a)
        print(f"a = {label}: {model.name}", flush=True)
        config = EngineConfig(
            target=model, drafter="mtp", draft_max=K, n_ctx=args.ctx,
            n_gpu_layers=0 if args.cpu else -1, n_threads=args.threads, adaptive=True,
        )  # fmt: skip
        runs: list[dict] = []
        entry: dict = {"runs": runs}
        result["acceptance"][label] = entry
        with Engine(config) as engine:
            loaded = time.perf_counter()
            entry["max_rollback"] = engine.target.max_rollback
            costs = engine.calibrate()
            entry["calibration"] = calibration.summary(costs)
            status = engine.calibration
            assert status is not None
            entry["calibration_source"] = status.source + ("" if status.trusted else ", untrusted")
            entry["calibrate_s"] = round(time.perf_counter() - loaded, 2)
            prompt = engine.target.tokenize(PROMPT)
            for name in OURS:  # warm-up, not recorded
                ours(engine, name, prompt, min(args.n, 32))
            for repeat in range(args.repeats):
                order = list(NAMES[repeat % len(NAMES) :] + NAMES[: repeat % len(NAMES)])
                if repeat and not args.lcpp_target_every_round:
                    order.remove("lcpp target")
                for name in order:
                    if name in OURS:
                        run = ours(engine, name, prompt, args.n)
                    else:
                        slug = name.replace(" ", "-").replace(":", "")
                        log = args.logs / f"a{label}-{slug}-r{repeat}.log"
                        try:
                            run = run_llama_cpp(args, model, name, log)
                        except (RuntimeError, subprocess.TimeoutExpired) as e:
                            failures.append(f"a = {label}, {name}, round {repeat}: {e}")
                            print(f"  {name:12s} r{repeat} FAILED: {str(e)[:300]}", flush=True)
                            continue
                    run.update(config=name, repeat=repeat)
                    runs.append(run)
                    save()
                    print(
                        f"  {name:12s} r{repeat} {run['tokens_per_s']:8.1f} tok/s "
                        f"{run['n_generated']:4d} tokens, {run['n_accepted']}/{run['n_drafted']}"
                        " drafts kept",
                        flush=True,
                    )
            reference = next((r["tokens"] for r in runs if r["config"] == "target"), None)
            target_text = engine.target.detokenize(reference) if reference else ""
            for run in runs:
                if run["config"] in OURS:  # the target alone's tokens, by every configuration
                    run["equals_target"] = run.pop("tokens") == reference
                else:  # llama.cpp prints the prompt, then what it generates
                    run["agrees_with_target"] = _agrees(run.pop("text"), target_text)
            entry["seconds"] = round(time.perf_counter() - loaded, 1)
        save()
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["failures"] = failures
    save()
    print(table(result))
    if failures:
        raise SystemExit("failed: " + "; ".join(f[:200] for f in failures))


def _agrees(printed: str, target_text: str) -> bool | None:
    """Whether llama.cpp's printed answer starts as specllama's target alone's (up to the
    shorter of the two); None when the prompt is not found in what it printed."""
    at = printed.find(PROMPT)
    if at < 0 or not target_text:
        return None
    answer = printed[at + len(PROMPT) :].strip("\n")
    # Both stop mid-way; the last character may be a multi-byte one cut short.
    n = min(len(answer), len(target_text)) - 1
    return n > 0 and answer[:n] == target_text[:n]


# -- table --------------------------------------------------------------------------------------


def table(result: dict) -> str:
    """One row per a and configuration: median tokens/s, acceptance, ratio over the same
    tool's target alone, and specllama's over llama.cpp's MTP drafting."""
    where = "CPU" if result["cpu"] else "GPU"
    s = result["settings"]
    lines = [
        f"### MTP drafting, {result['shape']}-shaped synthetic qwen35 target "
        f"({result['model_bytes'] / 1e9:.1f} GB F16), {where}, greedy, {s['max_tokens']} "
        f"tokens, {s['repeats']} rounds",
        "",
        "| a | config | tok/s | accept | kept/round | vs own target | vs lcpp | same text |",
        "|---:|---|---:|---:|---:|---:|---:|:---:|",
    ]
    all_runs = [r for entry in result["acceptance"].values() for r in entry["runs"]]
    # llama.cpp's target alone does not depend on a: pooled over every a measured.
    pooled = [r["tokens_per_s"] for r in all_runs if r["config"] == "lcpp target"]
    twins = {"target": "lcpp target", "mtp:3": "lcpp mtp:3", "adaptive": "lcpp mtp:3"}
    for a, entry in result["acceptance"].items():
        by: dict[str, list[dict]] = {}
        for run in entry["runs"]:
            by.setdefault(run["config"], []).append(run)
        median = {n: statistics.median(r["tokens_per_s"] for r in rs) for n, rs in by.items()}
        if pooled:
            median["lcpp target"] = statistics.median(pooled)
        for name in NAMES:
            if name not in by:
                continue
            runs = by[name]
            drafted = sum(r["n_drafted"] for r in runs)
            accepted = sum(r["n_accepted"] for r in runs)
            rounds = sum(r.get("n_rounds") or 0 for r in runs)
            base = median.get("lcpp target" if name in THEIRS else "target")
            twin = twins.get(name)
            key = "equals_target" if name in OURS else "agrees_with_target"
            verdicts = {r.get(key) for r in runs}
            same = "-" if None in verdicts else "yes" if all(verdicts) else "NO"
            lines.append(
                f"| {a} | {name} | {median[name]:.1f} "
                f"| {f'{accepted / drafted:.0%}' if drafted else '-'} "
                f"| {f'{accepted / rounds:.2f}' if rounds and drafted else '-'} "
                f"| {f'{median[name] / base:.2f}x' if base else '-'} "
                f"| {f'{median[name] / median[twin]:.2f}x' if twin in median else '-'} "
                f"| {same} |"
            )
    lines += [
        "",
        "| a | per round (specllama) | rounds | verify ms | draft ms | other ms |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for a, entry in result["acceptance"].items():
        for name in OURS:
            runs = sorted(
                (r for r in entry["runs"] if r["config"] == name), key=lambda r: r["tokens_per_s"]
            )
            if runs:
                r = runs[len(runs) // 2]  # the median run
                lines.append(
                    f"| {a} | {name} | {r['n_rounds']} | {r['verify_ms_per_round']:.2f} "
                    f"| {r['draft_ms_per_round']:.2f} | {r['overhead_ms_per_round']:.2f} |"
                )
    for a, entry in result["acceptance"].items():
        for name in THEIRS:
            runs = sorted(
                (r for r in entry["runs"] if r["config"] == name), key=lambda r: r["tokens_per_s"]
            )
            if runs and runs[len(runs) // 2].get("unaccounted_ms") is not None:
                r = runs[len(runs) // 2]
                lines.append(
                    f"| {a} | {name}, whole run | - | {r['target_eval_ms']:.0f} (with the "
                    f"prompt) | - | {r['unaccounted_ms']:.0f} (head, checkpoints) |"
                )
    ours = sorted({r["n_prompt"] for r in all_runs if r["config"] in OURS})
    theirs = sorted({r["n_prompt"] for r in all_runs if r["config"] in THEIRS}, key=str)
    lines += [
        "",
        "tok/s: median over the rounds (lcpp target: over every a). accept: kept / drafted "
        "tokens. kept/round: kept draft tokens per target verify (specllama's). vs own target: "
        "over the same tool's target alone. vs lcpp: target over llama.cpp's target, mtp:3 and "
        "adaptive over llama.cpp's mtp:3. same text: the target alone's tokens (specllama) or "
        "its text as llama.cpp printed it. Per round: specllama's decode times per target "
        "verify (other: Python, sampling, rollback); llama.cpp's rows are whole-run totals "
        "from its perf print (unaccounted: outside the target's evaluation and sampling).",
        f"prompt tokens: specllama {ours}, llama.cpp {theirs}"
        + ("" if ours == theirs else " (DIFFERENT PROMPTS)"),
    ]
    for a, entry in result["acceptance"].items():
        if "calibration" in entry:
            source = entry.get("calibration_source", "?")
            lines.append(f"calibration (a = {a}, {source}): {entry['calibration']}")
    if result.get("skipped"):
        lines.append(f"not measured (time): a = {', '.join(map(str, result['skipped']))}")
    for failure in result.get("failures", []):
        lines.append(f"FAILED: {failure[:300]}")
    return "\n".join(lines)


# -- command line -------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="the model and its heads (numpy and gguf only)")
    w.add_argument("--vocab", type=Path, required=True, help="a GGUF to take the tokenizer from")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--shape", default="9b", choices=("tiny", "2b", "9b"))
    w.add_argument("--acceptance", type=float, nargs="+", default=[0.8, 0.95, 0.6])
    m = sub.add_parser("measure", help="both tools, every a")
    m.add_argument("--models", type=Path, required=True, help="the folder `write` wrote")
    m.add_argument("--llama-bin", type=Path, required=True, help="holds llama-speculative-simple")
    m.add_argument("--acceptance", type=float, nargs="+", default=[0.8, 0.95, 0.6])
    m.add_argument("--cpu", action="store_true", help="no GPU offload (the dry run)")
    m.add_argument("-n", type=int, default=256, help="tokens to generate")
    m.add_argument("--repeats", type=int, default=2)
    m.add_argument("--ctx", type=int, default=4096)
    m.add_argument("--threads", type=int, default=None)
    m.add_argument("--timeout", type=float, default=300, help="seconds, per llama.cpp run")
    m.add_argument("--lcpp-target-every-round", action="store_true")
    m.add_argument("--stop-after", type=float, default=None,
                   help="begin no further a after this many seconds")  # fmt: skip
    m.add_argument("--json", type=Path)
    m.add_argument("--logs", type=Path, default=Path("mtp-logs"))
    t = sub.add_parser("table", help="the table of a `measure --json` file")
    t.add_argument("json", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args)
    elif args.command == "measure":
        measure(args)
    else:
        print(table(json.loads(args.json.read_text())))


if __name__ == "__main__":
    main()
