"""Copying at acceptance near 1: specllama's n-gram lookup against llama.cpp's, long drafts.

The target is make_models.py's "bigram" model (Qwen2.5-7B-shaped by default, F16, Qwen2.5's
real vocabulary): every matrix product runs at full cost and the greedy next token is a fixed
permutation of the current one. Here the permutation (`copy_map`) puts every plain word token
(" the", " river": a space and lowercase letters) on one cycle, so the model's own greedy text
from a word is a run of words that reads back as the same tokens. The prompt is that text from
a start word (`--prompt-tokens`, 600 by default), then the start word again: the model restarts
there and its answer is a copy of the prompt, which n-gram lookup drafts right, token after
token. Where a verify of 32-64 tokens costs little more than one (a GPU), long drafts pay.

    python research/gpu/copying.py write --vocab qwen-vocab.gguf --out DIR [--shape 7b]
    python research/gpu/copying.py measure --models DIR --llama-bin BUILD/bin [--cpu] \
        [-n 256] [--repeats 2] [--json R.json] [--logs LOGS]
    python research/gpu/copying.py table R.json

`measure`, greedy, on that prompt, `repeats` rounds in an order rotated by one each round
(after one warm-up run of three of specllama's configurations):

- specllama, in one process: the target alone (`target`); n-gram lookup fixed at each draft
  length K (`ngram:K`, `--drafter ngram --fixed --draft-max K`); the adaptive default
  (`adaptive`, `--drafter ngram`). Each as a fresh `specllama run` builds it: an empty memory,
  a fresh controller. And `memory`: the same request twice in one Engine with the adaptive
  default, as `serve` or `chat` would see it (one memory, one controller): the first
  (`memory 1st`) as `adaptive`, the second (`memory 2nd`) drafting from the memory of the first
  from its first round;
- llama.cpp's `llama-speculative-simple --spec-type ngram-simple` and `ngram-mod` at their
  defaults (a 12-token match drafts up to 48; 24-token hashes, 48-64 tokens), and its target
  alone (`ngram-simple` with a 1024-token n-gram, which never matches here: mtp.py), one
  process per run, on the prompt as text, which it reads as the same tokens (checked).

tokens/s counts generated tokens from the end of the prompt's prefill; llama.cpp's are counted
as specllama.bench.llamacpp counts them. `--cpu` runs it all on the CPU (the dry run, with
`--shape tiny`: research/gpu/copying.sh --cpu).

Import order: `measure` imports llama_cpp before numpy (on the GPU image the other order
segfaults in model loading); `write` must not import llama_cpp (it runs during the build).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _path in (REPO, HERE):  # specllama where it is not installed; make_models, mtp beside this
    if str(_path) not in sys.path:
        sys.path.append(str(_path))

from mtp import NOTHING_DRAFTED  # noqa: E402  (llama.cpp's target alone, as mtp.py runs it)

STATE = "state.json"
MAP = "next_token.npy"
# A plain word token as GGUF spells it (byte-level BPE: "Ġ" is the space before it). A run of
# them pre-tokenizes into the same words again: the text reads back as the same tokens.
WORD = re.compile("Ġ[a-z]{2,}")
FIXED = (4, 8, 16, 32, 64)
MEMORY = ("memory 1st", "memory 2nd")
THEIRS = ("lcpp target", "lcpp ngram-simple", "lcpp ngram-mod")


def ours_names(fixed: tuple[int, ...]) -> list[str]:
    return ["target", *(f"ngram:{k}" for k in fixed), "adaptive", *MEMORY]


# -- write --------------------------------------------------------------------------------------


def copy_map(texts: list[str], seed: int = 0):
    """The target's next token of every token (`make_models.write_model`'s `next_token`): the
    word tokens on one cycle in a random order, the other ordinary tokens permuted among
    themselves, control tokens left alone (no answer ends). Returns (map, the cycle's first)."""
    import numpy as np
    from make_models import FIRST_SPECIAL

    ordinary = min(len(texts), FIRST_SPECIAL)
    words = np.array([t for t in range(ordinary) if WORD.fullmatch(texts[t])])
    rng = np.random.default_rng(seed)
    cycle = rng.permutation(words)
    mapping = np.arange(len(texts))
    mapping[cycle] = np.roll(cycle, -1)
    others = np.setdiff1d(np.arange(ordinary), words)
    mapping[others] = rng.permutation(others)
    return mapping, int(cycle[0])


def write(args: argparse.Namespace) -> None:
    import gguf
    import numpy as np
    from make_models import TARGET_7B, TARGET_SMALL, write_model

    started = time.perf_counter()
    shape = {"7b": TARGET_7B, "tiny": TARGET_SMALL}[args.shape]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / STATE).unlink(missing_ok=True)  # written last: its presence means "ready"
    texts = gguf.GGUFReader(args.vocab).fields["tokenizer.ggml.tokens"].contents()
    mapping, start = copy_map(texts)
    np.save(args.out / MAP, mapping)
    model = args.out / f"{shape.name}-copying.f16.gguf"
    write_model(shape, args.vocab, model, next_token=mapping)
    state = {"model": model.name, "shape": args.shape, "n_vocab": len(texts), "start": start}
    tmp = args.out / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(args.out / STATE)
    seconds = time.perf_counter() - started
    print(f"{model} {model.stat().st_size / 1e9:.2f} GB, {seconds:.0f} s", flush=True)


# -- measure ------------------------------------------------------------------------------------


def chain(mapping, start: int, n: int) -> list[int]:
    """The model's greedy text from `start`: `start` and the n - 1 tokens that follow it."""
    tokens = [start]
    while len(tokens) < n:
        tokens.append(int(mapping[tokens[-1]]))
    return tokens


def run_llama_cpp(args: argparse.Namespace, model: Path, name: str, text: str, log: Path) -> dict:
    """One `llama-speculative-simple` run on the prompt's text; counted as specllama counts."""
    from specllama.bench.llamacpp import read_log

    kind = NOTHING_DRAFTED if name == "lcpp target" else ["--spec-type", name.split()[1]]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as f:
        f.write(text + "\n")  # -f drops one newline at the end of the file
        f.flush()
        command = [
            str(args.llama_bin / "llama-speculative-simple"),
            *("-m", str(model), "-f", f.name, "-n", str(args.n), "--temp", "0", "--seed", "1"),
            *("-c", str(args.ctx), "-b", "2048", "-ub", "512", "-t", str(args.threads)),
            *("-ngl", "0" if args.cpu else "999", "--no-escape", *kind),
        ]
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=args.timeout
        )
    output = done.stdout + done.stderr
    log.write_text(" ".join(command) + "\n\n" + output)
    if done.returncode != 0 or "decoded" not in output:
        raise RuntimeError(f"{name}: exit {done.returncode}, see {log}: {output[-1500:]}")
    figures = read_log(output, args.n)
    figures["acceptance"] = (
        figures["n_accepted"] / figures["n_drafted"] if figures["n_drafted"] else None
    )
    figures["printed"] = done.stdout
    return figures


def agrees(printed: str, prompt: str, answer: str) -> bool | None:
    """Whether llama.cpp's printed answer (after the prompt it echoes) starts as `answer`, the
    target alone's, up to the shorter of the two; None when the prompt is not found."""
    at = printed.find(prompt)
    if at < 0 or not answer:
        return None
    theirs = printed[at + len(prompt) :].strip("\n")
    n = min(len(theirs), len(answer)) - 1  # both stop mid-way; a last character may be cut
    return n > 0 and theirs[:n] == answer[:n]


def measure(args: argparse.Namespace) -> None:
    import llama_cpp  # noqa: F401  (first: see the module's docstring)
    import numpy as np

    from specllama.engine.control import FixedLength
    from specllama.engine.drafters import NgramDrafter, NoDrafter
    from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
    from specllama.engine.memory import TokenMemory
    from specllama.engine.sampling import SamplingParams
    from specllama.llama.backend import default_threads
    from specllama.llama.library import build_facts
    from specllama.policy import calibration
    from specllama.session import Engine, EngineConfig

    args.logs.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPECLLAMA_CACHE", str(args.logs / "specllama-cache"))
    args.threads = args.threads or default_threads()
    state = json.loads((args.models / STATE).read_text())
    model = args.models / state["model"]
    mapping = np.load(args.models / MAP)
    # The model's own text from the start word, then the start word again: it restarts there,
    # and its answer is the prompt's text again from the second word.
    text_tokens = chain(mapping, state["start"], args.prompt_tokens + args.n + 1)
    prompt = [*text_tokens[: args.prompt_tokens], state["start"]]
    expected = text_tokens[1 : args.n + 1]
    facts = build_facts()
    names = ours_names(args.fixed)
    fixed = {f"ngram:{k}": k for k in args.fixed}
    result: dict = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "llama_cpp_python": facts.version,
        "gpu_offload": facts.gpu_offload,
        "cpu": args.cpu,
        "shape": state["shape"],
        "model_bytes": model.stat().st_size,
        "settings": {
            "max_tokens": args.n,
            "repeats": args.repeats,
            "fixed": list(args.fixed),
            "prompt_tokens": len(prompt),
            "ctx": args.ctx,
            "threads": args.threads,
        },
        "checks": {},
        "runs": [],
    }
    runs: list[dict] = result["runs"]
    failures: list[str] = []
    started = time.perf_counter()

    def save() -> None:  # after every run: a crash keeps what was measured
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n")

    config = EngineConfig(
        target=model, drafter="ngram", n_ctx=args.ctx, n_gpu_layers=0 if args.cpu else -1,
        n_threads=args.threads, adaptive=True,
    )  # fmt: skip
    with Engine(config) as engine:
        loaded = time.perf_counter()
        params = SamplingParams()  # greedy

        def generate(drafter, controller, n: int) -> dict:
            tokens: list[int] = []
            drafts: list[int] = []
            stats = None
            events = engine.generate(
                prompt, params, max_tokens=n, controller=controller, drafter=drafter
            )
            for event in events:
                if isinstance(event, TokenEvent):
                    tokens.append(event.token)
                elif isinstance(event, RoundEvent):
                    drafts.append(event.n_drafted)
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
                "drafts": drafts,  # tokens drafted, round by round: the ramp, or none
                "verify_ms_per_round": 1000 * stats.target_s / max(stats.n_rounds, 1),
                "overhead_ms_per_round": stats.overhead_ms_per_round,
                "tokens": tokens,
            }

        def ours(name: str, n: int) -> list[dict]:
            """One configuration's runs: one, or two for the memory pair."""
            if name == "target":
                return [generate(NoDrafter(), FixedLength(0), n)]
            if name in fixed:  # a fresh `specllama run --drafter ngram --fixed`: empty memory
                return [generate(NgramDrafter(TokenMemory()), FixedLength(fixed[name]), n)]
            if name == "adaptive":
                return [generate(NgramDrafter(TokenMemory()), engine.new_controller(), n)]
            # The pair: one memory and one controller, as a server's requests share them.
            engine.memory = TokenMemory()
            drafter, controller = engine.make_drafter("ngram"), engine.new_controller()
            return [generate(drafter, controller, n) for _ in MEMORY]

        costs = engine.calibrate()
        result["calibration"] = calibration.summary(costs)
        status = engine.calibration
        assert status is not None
        result["calibration_source"] = status.source + ("" if status.trusted else ", untrusted")
        result["calibrate_s"] = round(time.perf_counter() - loaded, 2)
        # The prompt as text, as llama.cpp reads it: it must be the same tokens.
        text = engine.target.detokenize(prompt)
        reread = engine.target.tokenize(text, add_bos=False)
        result["checks"]["prompt_reads_back"] = reread == prompt
        if reread != prompt:
            print(f"the prompt's text reads back as {len(reread)} other tokens", flush=True)
        for name in ("target", f"ngram:{args.fixed[0]}", "adaptive"):  # warm-up, not recorded
            ours(name, min(args.n, 32))
        order_all = [*names[: -len(MEMORY)], "memory", *THEIRS]
        for repeat in range(args.repeats):
            if repeat and args.stop_after and time.perf_counter() - started > args.stop_after:
                print(f"round {repeat}: not begun, {args.stop_after:.0f} s have passed")
                result["skipped_rounds"] = args.repeats - repeat
                break
            shift = repeat % len(order_all)
            for name in order_all[shift:] + order_all[:shift]:
                if name in THEIRS:
                    slug = name.replace(" ", "-")
                    log = args.logs / f"{slug}-r{repeat}.log"
                    try:
                        measured = [(name, run_llama_cpp(args, model, name, text, log))]
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        failures.append(f"{name}, round {repeat}: {e}")
                        print(f"  {name:18s} r{repeat} FAILED: {str(e)[:300]}", flush=True)
                        continue
                else:
                    pair = MEMORY if name == "memory" else (name,)
                    measured = list(zip(pair, ours(name, args.n)))
                for label, run in measured:
                    run.update(config=label, repeat=repeat)
                    runs.append(run)
                    kept = f"{run['n_accepted']}/{run['n_drafted']}"
                    print(
                        f"  {label:18s} r{repeat} {run['tokens_per_s']:8.1f} tok/s "
                        f"{run['n_generated']:4d} tokens, {kept} drafts kept",
                        flush=True,
                    )
                save()
        reference = next((r["tokens"] for r in runs if r["config"] == "target"), None)
        answer = engine.target.detokenize(reference) if reference else ""
        result["checks"]["answer_copies_prompt"] = reference == expected
        for run in runs:
            if "tokens" in run:  # ours: the target alone's tokens, by every configuration
                run["equals_target"] = run.pop("tokens") == reference
            else:  # llama.cpp echoes the prompt, then prints what it generates
                run["agrees_with_target"] = agrees(run.pop("printed"), text, answer)
        result["engine_seconds"] = round(time.perf_counter() - loaded, 1)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["failures"] = failures
    save()
    print(table(result))
    if failures:
        raise SystemExit("failed: " + "; ".join(f[:200] for f in failures))


# -- table --------------------------------------------------------------------------------------


def table(result: dict) -> str:
    """One row per configuration: median tokens/s, acceptance, rounds, the longest draft, the
    ratio over the same tool's target alone, and specllama's over llama.cpp's best drafter."""
    where = "CPU" if result["cpu"] else "GPU"
    s = result["settings"]
    by: dict[str, list[dict]] = {}
    for run in result["runs"]:
        by.setdefault(run["config"], []).append(run)
    median = {n: statistics.median(r["tokens_per_s"] for r in rs) for n, rs in by.items()}
    theirs_best = max((n for n in THEIRS[1:] if n in median), key=median.get, default=None)
    names = [*ours_names(tuple(s["fixed"])), *THEIRS]
    lines = [
        f"### Copying at acceptance near 1: {result['shape']}-shaped synthetic bigram target "
        f"({result['model_bytes'] / 1e9:.1f} GB F16), {where}, greedy, {s['max_tokens']} tokens, "
        f"{s['repeats']} rounds, a {s['prompt_tokens']}-token prompt the answer copies",
        "",
        "| config | tok/s | tokens | accept | rounds | longest draft | vs own target "
        "| vs lcpp best | same text |",
        "|---|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for name in names:
        if name not in by:
            continue
        runs = by[name]
        drafted = sum(r["n_drafted"] for r in runs)
        accepted = sum(r["n_accepted"] for r in runs)
        mine = name not in THEIRS
        rounds = statistics.median(r["n_rounds"] for r in runs) if mine else None
        longest = max((max(r["drafts"], default=0) for r in runs), default=0) if mine else None
        base = median.get("target" if mine else "lcpp target")
        versus = median.get(theirs_best) if mine and name != "target" else None
        if name == "target":
            versus = median.get("lcpp target")
        key = "equals_target" if mine else "agrees_with_target"
        verdicts = {r.get(key) for r in runs}
        same = "-" if None in verdicts else "yes" if all(verdicts) else "NO"
        generated = statistics.median(r["n_generated"] for r in runs)
        lines.append(
            f"| {name} | {median[name]:.1f} | {generated:g} "
            f"| {f'{accepted / drafted:.0%}' if drafted else '-'} "
            f"| {f'{rounds:g}' if rounds is not None else '-'} "
            f"| {longest if longest is not None else '-'} "
            f"| {f'{median[name] / base:.2f}x' if base else '-'} "
            f"| {f'{median[name] / versus:.2f}x' if versus else '-'} | {same} |"
        )
    drafting = [n for n in median if n not in THEIRS and n != "target"]
    ours_best = max(drafting, key=median.get, default=None)
    checks = result.get("checks", {})
    ours_prompt = sorted({r["n_prompt"] for r in result["runs"] if r["config"] not in THEIRS})
    theirs_prompt = sorted(
        {r["n_prompt"] for r in result["runs"] if r["config"] in THEIRS}, key=str
    )
    lines += [
        "",
        "tok/s: median over the rounds. tokens: generated (median; llama.cpp's tool stops only "
        "after the round that passes -n, so a long draft runs over). accept: kept / drafted "
        "tokens. rounds: target verifies "
        "(median). longest draft: the most tokens one round drafted. vs own target: over the "
        "same tool's target alone. vs lcpp best: over the faster of llama.cpp's ngram-simple "
        "and ngram-mod (target: over llama.cpp's target alone). same text: the target alone's "
        "tokens (specllama) or its text as llama.cpp printed it. memory 2nd: the same request "
        "again in the same Engine, drafting from the memory of the first.",
    ]
    if ours_best and theirs_best:
        lines.append(
            f"best: specllama {ours_best} {median[ours_best]:.1f} tok/s, llama.cpp "
            f"{theirs_best.split()[1]} {median[theirs_best]:.1f}: "
            f"{median[ours_best] / median[theirs_best]:.2f}x"
        )
    lines.append(
        f"prompt tokens: specllama {ours_prompt}, llama.cpp {theirs_prompt}"
        + ("" if ours_prompt == theirs_prompt else " (DIFFERENT PROMPTS)")
        + f"; its text reads back as the same tokens: {_yes(checks.get('prompt_reads_back'))}"
        + f"; the target alone's answer copies it: {_yes(checks.get('answer_copies_prompt'))}"
    )
    if "calibration" in result:
        source = result.get("calibration_source", "?")
        lines.append(f"calibration ({source}): {result['calibration']}")
    if result.get("skipped_rounds"):
        lines.append(f"not measured (time): the last {result['skipped_rounds']} round(s)")
    for failure in result.get("failures", []):
        lines.append(f"FAILED: {failure[:300]}")
    return "\n".join(lines)


def _yes(check: bool | None) -> str:
    return "-" if check is None else "yes" if check else "NO"


# -- command line -------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="the target and its map (numpy and gguf only)")
    w.add_argument("--vocab", type=Path, required=True, help="a GGUF to take the tokenizer from")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--shape", default="7b", choices=("tiny", "7b"))
    m = sub.add_parser("measure", help="both tools, every configuration")
    m.add_argument("--models", type=Path, required=True, help="the folder `write` wrote")
    m.add_argument("--llama-bin", type=Path, required=True, help="holds llama-speculative-simple")
    m.add_argument("--cpu", action="store_true", help="no GPU offload (the dry run)")
    m.add_argument("-n", type=int, default=256, help="tokens to generate")
    m.add_argument("--prompt-tokens", type=int, default=600, help="of the text the answer copies")
    m.add_argument("--fixed", type=int, nargs="+", default=list(FIXED), help="draft lengths")
    m.add_argument("--repeats", type=int, default=2)
    m.add_argument("--ctx", type=int, default=4096)
    m.add_argument("--threads", type=int, default=None)
    m.add_argument("--timeout", type=float, default=300, help="seconds, per llama.cpp run")
    m.add_argument("--stop-after", type=float, default=None,
                   help="begin no further round after this many seconds")  # fmt: skip
    m.add_argument("--json", type=Path)
    m.add_argument("--logs", type=Path, default=Path("copying-logs"))
    t = sub.add_parser("table", help="the table of a `measure --json` file")
    t.add_argument("json", type=Path)
    args = parser.parse_args()
    if args.command == "write":
        write(args)
    elif args.command == "measure":
        args.fixed = tuple(args.fixed)
        measure(args)
    else:
        print(table(json.loads(args.json.read_text())))


if __name__ == "__main__":
    main()
