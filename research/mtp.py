#!/usr/bin/env python3
"""Issue 26: drafting with the target's own MTP head, specllama against llama.cpp's draft-mtp.

    python research/mtp.py --llama-bin /tmp/llama-build/bin            # 2B-shaped F16 targets
    python research/mtp.py --llama-bin /tmp/llama-build/bin --shape tiny -n 32 --repeats 1

No real MTP model reaches this machine, so the targets are synthetic qwen35 GGUFs
(tests/qwen35_models.py) with Qwen3.5-2B's trunk shape in F16 and the real 151,936-token
Qwen2.5 vocabulary (the LM head of every target token and of every MTP head step is n_vocab x
n_embd): their greedy text follows a fixed permutation of the vocabulary, and their MTP head
is right on a fraction `a` of the tokens, so the acceptance is known by construction. They are
written once per acceptance into ~/.cache/specllama-bench (about 4.7 GB each for 2b).

For each acceptance, prompt and repeat, in an order rotated by one each time (so that drift on
the machine hits every configuration alike), N tokens greedy:

- `sl-target`: specllama's target alone (`--drafter none`), the speed ratios divide by;
- `sl-mtp-kK`: specllama's MTP head, fixed draft length K (FixedLength(K)), K in --ks;
- `sl-adaptive`: specllama's default, EngineConfig(drafter="mtp", adaptive=True), a fresh
  controller each run (as `specllama run` starts), calibrated once before any timing;
- `lc-target`: llama.cpp's `llama-speculative-simple` with nothing drafted (`--spec-type none`
  is refused; `ngram-simple` with a 1024-token lookup n-gram never matches here): the same loop,
  sampler and clock as its MTP run, the target alone;
- `lc-mtp-kK`: `llama-speculative-simple --spec-type draft-mtp --spec-draft-n-max K`;
- and once per repeat, `llama-bench -p 0 -n N` (when the binary is there): llama.cpp's plain
  decode speed, a cross-check of lc-target.

Both engines see the same prompt tokens: llama.cpp tokenizes `-p TEXT` with
`common_tokenize(ctx, text, add_special=true, parse_special=true)`, which is
`LlamaBackend.tokenize(text, add_bos=True, special=True)` (the BOS only where the vocabulary
adds one); the count it reports ("encoded N tokens") is checked against ours. Both clocks start
after the prompt's prefill (llama.cpp's MTP head evaluates the prompt there, before its clock
starts; specllama's head catches up on it in the first round, on the clock). Tokens are counted
alike: llama.cpp's decoded count includes the end-of-generation token it samples (none occurs
here: the permutation never reaches a special or end-of-generation token); specllama's
excludes it. With `-n N` llama.cpp generates N+1 to N+K tokens (its last round asks for a
draft of at most 0 tokens, which `common_speculative_draft` reads as no limit), so speeds are
compared as rates.

Checks: every specllama answer is the permutation's answer (which is the target alone's), and
llama.cpp's printed text starts with that answer's bytes.

Also measured, per repeat: the MTP head's step against one target token (and a verify of K+1
tokens), through `specllama.policy.calibration.measure`; and per run, specllama's Python time
per round (`GenerationStats.overhead_ms_per_round`: wall time less both models' decodes).

Writes every run to research/results/issue26-mtp-<shape>.json and prints a table last. Run it on
a quiet machine: both engines' OpenMP threads spin, and a busy core turns a 1 ms decode into
100 ms, in either engine, at random. Pass --recalibrate when the cached calibration of these
files may have been measured while the machine was busy. llama.cpp's tools are built from the
sources llama-cpp-python 0.3.36 vendors (see specllama/bench/llamacpp.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specllama.bench.runner import machine_facts
from specllama.engine.control import FixedLength
from specllama.engine.drafters import NoDrafter
from specllama.engine.events import FinishEvent, TokenEvent
from specllama.engine.mtp import MtpDrafter
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.llama.backend import LlamaBackend, default_threads
from specllama.policy import calibration
from specllama.session import Engine, EngineConfig

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))  # qwen35_models: the synthetic qwen35 writer
sys.path.insert(0, str(HERE))  # reproduce: fetches the Qwen2.5-Coder-0.5B GGUF (its vocabulary)

import qwen35_models  # noqa: E402
import reproduce  # noqa: E402

# The answer follows the permutation from the prompt's last token: three different last tokens
# (no final full stop) make three different answers.
PROMPTS = (
    ("poem", "Write a short poem about the sea"),
    ("hash", "Explain in one paragraph how a hash table works"),
    ("decorators", "List three uses of Python decorators"),
)
# An n-gram this long never matches in prompt + answer: ngram-simple then drafts nothing.
NO_MATCH_NGRAM = 1024
_DECODED = re.compile(rb"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_ENCODED = re.compile(rb"encoded\s+(\d+) tokens")
_COUNT = re.compile(rb"(n_drafted|n_accept)\s*=\s*(\d+)")


# -- models ---------------------------------------------------------------------------------


def bench_cache() -> Path:
    default = Path.home() / ".cache" / "specllama-bench"
    path = Path(os.environ.get("SPECLLAMA_BENCH_MODELS", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


def fixed_tokens(vocab: Path) -> np.ndarray:
    """The ids the permutation leaves in place, so that no answer reaches one: every token
    whose type is not NORMAL (control, user-defined, unused), and every token llama.cpp ends
    a generation at (in the Qwen2.5 vocabulary also the NORMAL token 128247, "</s>")."""
    import gguf

    types = np.asarray(gguf.GGUFReader(vocab).fields["tokenizer.ggml.token_type"].contents())
    with LlamaBackend(vocab, n_ctx=64, extra_buffers=False) as model:
        eog = [t for t in range(model.n_vocab) if model.is_eog(t)]
    return np.union1d(np.flatnonzero(types != int(gguf.TokenType.NORMAL)), eog)


def make_targets(shape_name: str, acceptances: Sequence[float]) -> tuple[dict, np.ndarray]:
    """{a: path} of the synthetic MTP targets (written once, cached), and the permutation
    that their greedy text follows."""
    import gguf

    vocab = reproduce.fetch(reproduce.DRAFT)
    n_vocab = len(gguf.GGUFReader(vocab).fields["tokenizer.ggml.tokens"].contents())
    mapping = qwen35_models.next_token_map(n_vocab, fixed=fixed_tokens(vocab))
    # The permutation's digest in the name: a file written for another permutation is not reused.
    digest = hashlib.sha256(mapping.astype(np.int64).tobytes()).hexdigest()[:8]
    shape = qwen35_models.SHAPES[shape_name]
    paths = {}
    for a in acceptances:
        path = bench_cache() / f"qwen35-{shape.name}-mtp-a{a:g}.qwen-vocab-{digest}.F16.gguf"
        if not path.exists():
            print(f"writing {path.name} (once)", file=sys.stderr, flush=True)
            started = time.perf_counter()
            partial = path.with_suffix(".partial")
            qwen35_models.write_qwen35(
                partial, shape, vocab, next_token=mapping,
                mtp_next=qwen35_models.partly_right(mapping, a), dtype=np.float16,
            )  # fmt: skip
            partial.replace(path)
            print(
                f"  {path.stat().st_size / 1e9:.2f} GB in {time.perf_counter() - started:.0f} s",
                file=sys.stderr,
            )
        paths[a] = path
    return paths, mapping


def expected_answer(mapping: np.ndarray, prompt: Sequence[int], n: int) -> list[int]:
    out, token = [], prompt[-1]
    for _ in range(n):
        token = int(mapping[token])
        out.append(token)
    return out


# -- llama.cpp ------------------------------------------------------------------------------


def run_llama_cpp(
    binary: Path, model: Path, spec: list[str], text: str, n: int, threads: int, n_ctx: int
) -> dict:
    command = [
        str(binary / "llama-speculative-simple"),
        *("-m", str(model), *spec, "-p", text, "-n", str(n), "--temp", "0"),
        *("-t", str(threads), "-c", str(n_ctx)),
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
    reported, time_s = int(decoded.group(1)), float(decoded.group(2))
    # Its count includes the end-of-generation token it samples; an answer that stopped short
    # of N tokens ended with one (specllama.bench.llamacpp `read_log`).
    ended = reported <= n
    tokens = reported - 1 if ended else reported
    counts = {k.decode(): int(v) for k, v in _COUNT.findall(log)}
    return {
        "n_prompt": int(encoded.group(1)),
        "n_generated": tokens,
        "time_s": time_s,
        "tokens_per_s": tokens / time_s if time_s > 0 else 0.0,
        "n_drafted": counts.get("n_drafted", 0),
        "n_accepted": counts.get("n_accept", 0),
        "finish_reason": "stop" if ended else "length",
        "stdout": done.stdout,  # "\n\n", the prompt's pieces, the answer's pieces, "\n\n\n\n"
    }


def run_llama_bench(binary: Path, model: Path, n: int, depth: int, threads: int) -> float:
    """llama.cpp's own decode speed, target alone: `llama-bench -p 0 -n N -d DEPTH` (tg N after
    a context of DEPTH tokens; its warm-up run first), tokens/s. A cross-check of lc-target."""
    command = [
        str(binary / "llama-bench"),
        *("-m", str(model), "-p", "0", "-n", str(n), "-d", str(depth), "-r", "1"),
        *("-t", str(threads), "-o", "json"),
    ]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(binary), env.get("LD_LIBRARY_PATH", "")) if p
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"llama-bench: exit {done.returncode}: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout)[0]["avg_ts"])


# -- specllama ------------------------------------------------------------------------------


class Ours:
    """specllama's configurations on two engines: the target alone (no MTP layers loaded, as
    `--drafter none`), and the target with its MTP head (fixed lengths and the default)."""

    def __init__(self, model: Path, threads: int, n_ctx: int) -> None:
        common = {"target": model, "n_ctx": n_ctx, "n_threads": threads}
        self.plain = Engine(EngineConfig(drafter="none", adaptive=False, **common))
        self.mtp = Engine(EngineConfig(drafter="mtp", adaptive=True, **common))
        self.params = SamplingParams()

    def close(self) -> None:
        self.mtp.close()
        self.plain.close()

    def run(self, config: str, tokens: list[int], n: int) -> tuple[list[int], dict]:
        if config == "sl-target":
            events = generate(
                self.plain.target, NoDrafter(), tokens, self.params,
                max_tokens=n, controller=FixedLength(0),
            )  # fmt: skip
            head = None
        elif config == "sl-adaptive":
            self.mtp.use_drafter("mtp")  # a fresh drafter and controller, as a new run has
            controller = self.mtp.new_controller(adaptive=True)
            events = self.mtp.generate(tokens, self.params, max_tokens=n, controller=controller)
            head = self.mtp.mtp_head
        else:
            k = int(config.removeprefix("sl-mtp-k"))
            head = self.mtp.mtp_head
            assert head is not None
            events = generate(
                self.mtp.target, MtpDrafter(head), tokens, self.params,
                max_tokens=n, controller=FixedLength(k),
            )  # fmt: skip
        target = (self.plain if config == "sl-target" else self.mtp).target
        target_before = target.n_decoded
        head_before = head.n_decoded if head is not None else 0
        out: list[int] = []
        finish: FinishEvent | None = None
        for event in events:
            if isinstance(event, TokenEvent):
                out.append(event.token)
            elif isinstance(event, FinishEvent):
                finish = event
        assert finish is not None
        s = finish.stats
        stats = s.as_dict()
        stats["n_draft_rounds"] = s.n_draft_rounds
        stats["overhead_s"] = round(s.overhead_s, 4)
        stats["python_share"] = round(s.overhead_s / s.time_s, 4) if s.time_s > 0 else 0.0
        # Tokens each context evaluated, prefill included: a recurrent target that restores a
        # checkpoint, or a head that catches up, shows here.
        stats["target_tokens_evaluated"] = target.n_decoded - target_before
        stats["head_tokens_evaluated"] = (head.n_decoded - head_before) if head else 0
        return out, stats

    def measure_head(self, k: int) -> dict:
        """One target token, a verify of k + 1 tokens and one MTP head step, interleaved and
        repeated (`calibration.measure`); leaves both contexts empty."""
        head = self.mtp.mtp_head
        assert head is not None
        measured = calibration.measure(self.mtp.target, head, sizes=(1, k + 1), repeats=3)
        verify = dict(measured.costs.verify_s)
        step = measured.costs.draft_step_s
        return {
            "target_token_ms": round(1000 * verify[1], 3),
            f"verify_{k + 1}_ms": round(1000 * verify[k + 1], 3),
            "head_step_ms": round(1000 * step, 3),
            "head_catchup_ms_per_token": round(1000 * measured.costs.draft_catchup_s, 3),
            "head_step_over_target_token": round(step / verify[1], 4),
            "problems": list(measured.problems),
        }


# -- the run --------------------------------------------------------------------------------


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return str(machine_facts()["cpu"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-bin", type=Path, default=Path("/tmp/llama-build/bin"))
    parser.add_argument("--shape", choices=("tiny", "2b"), default="2b")
    parser.add_argument("--acceptance", type=float, nargs="+", default=[0.3, 0.8, 0.95])
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3, 4], help="fixed lengths")
    parser.add_argument("--llama-k", type=int, default=3, help="llama.cpp's --spec-draft-n-max")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--ctx", type=int, default=4096)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--recalibrate", action="store_true", help="measure the calibration even if one is cached"
    )
    args = parser.parse_args()
    if args.llama_k not in args.ks:
        parser.error(f"--llama-k {args.llama_k} must be one of --ks (the ratio compares them)")
    if not (args.llama_bin / "llama-speculative-simple").exists():
        parser.error(f"no llama-speculative-simple in {args.llama_bin}")
    has_bench = (args.llama_bin / "llama-bench").exists()
    threads = args.threads or default_threads()
    n = args.max_tokens
    out_path = args.out or HERE / "results" / f"issue26-mtp-{args.shape}.json"
    cpu = cpu_name()
    print(f"CPU: {cpu}; threads: {threads}; shape {args.shape}; N={n}", file=sys.stderr)
    load = os.getloadavg()[0]
    if load > 0.5:
        print(
            f"warning: load average {load:.1f}: other programs are running, and spinning threads "
            "make both engines' speeds noise (llama.cpp's the most: it polls)",
            file=sys.stderr,
        )

    models, mapping = make_targets(args.shape, args.acceptance)
    k_lc = args.llama_k
    names = [
        "sl-target", *(f"sl-mtp-k{k}" for k in args.ks), "sl-adaptive",
        "lc-target", f"lc-mtp-k{k_lc}",
    ]  # fmt: skip
    spec = {
        "lc-target": ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n",
                      str(NO_MATCH_NGRAM)],
        f"lc-mtp-k{k_lc}": ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(k_lc)],
    }  # fmt: skip

    runs: list[dict] = []
    per_a: dict[str, dict] = {}
    started = time.perf_counter()
    for a, model in models.items():
        ours = Ours(model, threads, args.ctx)
        try:
            target = ours.mtp.target
            prompts = []
            for pid, text in PROMPTS:
                assert "\\" not in text  # llama.cpp unescapes -p
                tokens = target.tokenize(text, add_bos=True, special=True)
                assert len(tokens) + n + 64 < min(NO_MATCH_NGRAM, args.ctx)
                prompts.append((pid, text, tokens, expected_answer(mapping, tokens, n)))
            assert len({p[2][-1] for p in prompts}) == len(prompts), "same last token"
            cal = ours.mtp.calibrate(
                refresh=args.recalibrate,
                on_measure=lambda why: print(f"calibrating ({why})", file=sys.stderr),
            )
            calibration_info = {**ours.mtp.calibration.as_dict(), "costs": cal.as_dict()}
            for config in names:  # warm up: page the weights in, first-call costs
                if config.startswith("sl-"):
                    ours.run(config, prompts[0][2], 4)
            heads, bench_tg = [], []
            depth = round(statistics.mean(len(p[2]) for p in prompts))
            for repeat in range(args.repeats):
                heads.append(ours.measure_head(k_lc))
                if has_bench:
                    tg = run_llama_bench(args.llama_bin, model, n, depth, threads)
                    bench_tg.append(round(tg, 3))
                    print(f"a={a:g} r{repeat} llama-bench tg{n}: {tg:.2f} tok/s", file=sys.stderr)
                for i, (pid, text, tokens, answer) in enumerate(prompts):
                    shift = (i + repeat) % len(names)
                    for name in names[shift:] + names[:shift]:
                        row = {"acceptance": a, "config": name, "prompt_id": pid}
                        row["repeat"] = repeat
                        row["loadavg_1m"] = round(os.getloadavg()[0], 2)
                        if name in spec:
                            got = run_llama_cpp(
                                args.llama_bin, model, spec[name], text, n, threads, args.ctx
                            )
                            stdout = got.pop("stdout")
                            want = b"".join(target.token_bytes(t, special=True) for t in answer)
                            prompt_bytes = b"".join(
                                target.token_bytes(t, special=True) for t in tokens
                            )
                            row["prompt_tokens_equal"] = got["n_prompt"] == len(tokens)
                            row["text_equal"] = stdout.startswith(b"\n\n" + prompt_bytes + want)
                            row.update(got)
                            if not row["prompt_tokens_equal"]:
                                raise SystemExit(
                                    f"{name} {pid}: llama.cpp encoded {got['n_prompt']} prompt "
                                    f"tokens, specllama {len(tokens)}"
                                )
                        else:
                            out, stats = ours.run(name, tokens, n)
                            row.update(stats)
                            row["text_equal"] = out == answer
                        runs.append(row)
                        print(
                            f"a={a:g} r{repeat} {pid} {name}: {row['tokens_per_s']:.2f} tok/s, "
                            f"{row['n_accepted']}/{row['n_drafted']} kept"
                            + ("" if row["text_equal"] else "  TEXT DIFFERS"),
                            file=sys.stderr,
                            flush=True,
                        )
            per_a[f"{a:g}"] = {
                "model": {"path": str(model), "size": model.stat().st_size},
                "extra_buffers": ours.mtp.target.extra_buffers,
                "prompt_tokens": {pid: len(tokens) for pid, _, tokens, _ in prompts},
                "calibration": calibration_info,
                "head_step": heads,
                "llama_bench_tg_tokens_per_s": bench_tg,
            }
        finally:
            ours.close()

    summary = summarise(runs, names, args.ks, k_lc)
    data = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**machine_facts(), "cpu_lscpu": cpu, "threads": threads},
        "settings": {
            "shape": args.shape, "max_tokens": n, "repeats": args.repeats, "ks": args.ks,
            "llama_k": k_lc, "n_ctx": args.ctx, "llama_bin": str(args.llama_bin),
            "prompts": dict(PROMPTS), "seconds": round(time.perf_counter() - started, 1),
        },
        "acceptances": per_a,
        "runs": runs,
        "summary": summary,
    }  # fmt: skip
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print_table(data, names, k_lc)
    print(f"\nwritten: {out_path}")
    bad = [r for r in runs if not r["text_equal"]]
    if bad:
        raise SystemExit(f"{len(bad)} run(s) whose text is not the target alone's")


# -- the report -----------------------------------------------------------------------------


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def summarise(runs: list[dict], names: list[str], ks: Sequence[int], k_lc: int) -> dict:
    """Per acceptance: each configuration's tokens/s (median, min-max), acceptance and Python
    time per round; and ratios, each the median (min-max) of the same prompt and repeat's pair."""
    by: dict[tuple[float, str], list[dict]] = defaultdict(list)
    for r in runs:
        by[(r["acceptance"], r["config"])].append(r)
    out: dict[str, dict] = {}
    for a in sorted({r["acceptance"] for r in runs}):
        configs = {}
        for name in names:
            rows = by[(a, name)]
            drafted = sum(r["n_drafted"] for r in rows)
            cell = {
                "tokens_per_s": _spread([r["tokens_per_s"] for r in rows]),
                "acceptance": round(sum(r["n_accepted"] for r in rows) / drafted, 4)
                if drafted
                else None,
                "n_generated": _spread([r["n_generated"] for r in rows]),
                "text_equal": all(r["text_equal"] for r in rows),
            }
            if name.startswith("sl-"):
                cell["overhead_ms_per_round"] = _spread([r["overhead_ms_per_round"] for r in rows])
                cell["python_share"] = _spread([r["python_share"] for r in rows])
                cell["mean_accepted_per_round"] = _spread(
                    [r["mean_accepted_per_round"] for r in rows]
                )
            configs[name] = cell
        best = max(ks, key=lambda k: configs[f"sl-mtp-k{k}"]["tokens_per_s"]["median"])

        def ratio(num: str, den: str, a: float = a) -> dict[str, float]:
            base = {(r["prompt_id"], r["repeat"]): r["tokens_per_s"] for r in by[(a, den)]}
            values = [r["tokens_per_s"] / base[(r["prompt_id"], r["repeat"])] for r in by[(a, num)]]
            return _spread(values)

        out[f"{a:g}"] = {
            "configs": configs,
            "best_fixed": f"sl-mtp-k{best}",
            "ratios": {
                f"sl-mtp-k{k_lc} / lc-mtp-k{k_lc}": ratio(f"sl-mtp-k{k_lc}", f"lc-mtp-k{k_lc}"),
                f"sl-adaptive / sl-mtp-k{best} (best fixed)": ratio(
                    "sl-adaptive", f"sl-mtp-k{best}"
                ),
                "sl-adaptive / sl-target": ratio("sl-adaptive", "sl-target"),
                f"sl-mtp-k{k_lc} / sl-target": ratio(f"sl-mtp-k{k_lc}", "sl-target"),
                f"lc-mtp-k{k_lc} / lc-target": ratio(f"lc-mtp-k{k_lc}", "lc-target"),
                "sl-target / lc-target": ratio("sl-target", "lc-target"),
            },
        }
    return out


# The goals: (ratio name prefix, acceptances where it applies, at least).
GOALS = (
    ("sl-mtp-k{k} / lc-mtp-k{k}", (0.8, 0.95), 1.0),
    ("sl-adaptive / sl-mtp-k", (0.95,), 0.97),
    ("sl-adaptive / sl-target", (0.3,), 0.97),
)


def _goal(name: str, a: float, k: int) -> str:
    for prefix, where, least in GOALS:
        if name.startswith(prefix.format(k=k)) and any(abs(a - w) < 1e-9 for w in where):
            return f" goal >= {least:g}"
    return ""


def print_table(data: dict, names: list[str], k_lc: int) -> None:
    machine, settings = data["machine"], data["settings"]
    load = _spread([r["loadavg_1m"] for r in data["runs"]])
    print(
        f"\nCPU: {machine['cpu_lscpu']}; threads: {machine['threads']}; "
        f"shape {settings['shape']} F16; N={settings['max_tokens']}, "
        f"{settings['repeats']} repeat(s) x {len(settings['prompts'])} prompts, greedy; "
        f"1-min load average before each run: median {load['median']:.2f}, max {load['max']:.2f}"
    )
    for a, block in data["summary"].items():
        heads = data["acceptances"][a]["head_step"]
        step = statistics.median(h["head_step_over_target_token"] for h in heads)
        token = statistics.median(h["target_token_ms"] for h in heads)
        head = statistics.median(h["head_step_ms"] for h in heads)
        tg = data["acceptances"][a]["llama_bench_tg_tokens_per_s"]
        tg_line = f"; llama-bench tg: {statistics.median(tg):.2f} tok/s" if tg else ""
        print(
            f"\n### a = {a}: one target token {token:.1f} ms, one MTP head step {head:.1f} ms "
            f"({step:.2f}x){tg_line}\n"
        )
        print(
            "| config | tok/s median (min-max) | acceptance | Python ms/round (share) | text ok |"
        )
        print("|---|---:|---:|---:|:---:|")
        for name in names:
            cell = block["configs"][name]
            tps = cell["tokens_per_s"]
            acc = "-" if cell["acceptance"] is None else f"{cell['acceptance']:.2f}"
            over = cell.get("overhead_ms_per_round")
            share = cell.get("python_share", {}).get("median", 0.0)
            py = "-" if over is None else f"{over['median']:.2f} ({100 * share:.0f}%)"
            mark = "yes" if cell["text_equal"] else "NO"
            best = " (best fixed)" if name == block["best_fixed"] else ""
            print(
                f"| {name}{best} | {tps['median']:.2f} ({tps['min']:.2f}-{tps['max']:.2f}) | "
                f"{acc} | {py} | {mark} |"
            )
        print("\n| ratio (paired runs) | median (min-max) | goal |")
        print("|---|---:|---|")
        for name, r in block["ratios"].items():
            goal = _goal(name, float(a), k_lc)
            verdict = ""
            if goal:
                least = float(goal.split(">=")[1])
                verdict = " met" if r["median"] >= least else " MISSED"
            print(
                f"| {name} | {r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f}) |{goal}{verdict} |"
            )


if __name__ == "__main__":
    main()
