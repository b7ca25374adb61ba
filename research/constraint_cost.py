#!/usr/bin/env python3
"""Which constraint engine: what llguidance, llama.cpp's grammar sampler and xgrammar cost per
generated token at a 151,936-token vocabulary (Qwen2.5-Coder) and at 49,152 (SmolLM2).

    python research/constraint_cost.py [--repeats 5] [--xgrammar-python /tmp/xgr-venv/bin/python]
        [--json research/results/issue32-constraint-cost.json]

Three grammars: a small flat JSON Schema, a nested one (arrays, enums, objects in objects) and
a Hermes tool call (`<tool_call>` + a call to edit_file whose arguments follow a schema; in
llguidance a Lark grammar with `%json`). For each, a valid answer is walked token by token as
the engine would emit it: tokens the grammar forces (llguidance's `compute_ff_tokens`) taken
whole, the rest from tokenising the remaining answer. The same token sequence then goes through
every engine, engines interleaved in one run (order rotated between repeats), because the
machine is shared and its speed drifts.

Per position, in microseconds (median and p90 over positions; the median's spread is over
repeats):
- llguidance: `unsafe_compute_mask_ptr` into an int32 bitmask (mask), unpacking it and
  `np.where` on a float32 logits row (apply), `validate_tokens([token])` (the greedy
  shortcut: is the argmax allowed?), `consume_token`, `compute_ff_tokens`;
- llama.cpp (llama-cpp-python's low-level API): `llama_sampler_apply` of
  `llama_sampler_init_grammar` (GBNF from `llama_cpp.llama_grammar.json_schema_to_gbnf`) on
  all candidates (mask), on the one candidate (llama.cpp's own greedy shortcut: the grammar
  checks the sampled token alone and resamples only when it is rejected), `llama_sampler_accept`;
- xgrammar (only with --xgrammar-python: a Python that can `import xgrammar`, which imports
  torch and transformers at the top; run as a worker process. The one measured was made with
  `python -m venv V && V/bin/pip install --no-deps xgrammar apache-tvm-ffi && V/bin/pip install
  numpy typing_extensions pydantic transformers TORCH_CPU_WHEEL`): `fill_next_token_bitmask`
  (mask), the same apply, `accept_token` (validates and consumes in one),
  `find_jump_forward_string`.
Compile: the grammar from its source, ready for its first mask (and that first mask).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

# specllama, llama_cpp, llguidance and xgrammar are imported where used: the xgrammar worker
# runs this file in another Python, which has xgrammar and none of the others.

QWEN_SMALL = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SMOLLM = "SmolLM2-135M-Instruct.Q4_1.gguf"
TARGET_MS = 35.0  # the 1.5B Q4_K_M target alone, one token after ~700 (RESULTS.md, issue 17)

# Compact JSON, as models write it and as the engine's own options ask (constraint.py).
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
SEPARATORS = (", ", ": ")

FLAT_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string"},
    },
    "required": ["name", "age", "email"],
    "additionalProperties": False,
}
FLAT_ANSWER = {"name": "Ada Lovelace", "age": 36, "email": "ada@analytical-engine.org"}


def _closed(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


NESTED_SCHEMA = _closed(
    {
        "order_id": {"type": "string"},
        "status": {"enum": ["pending", "paid", "shipped", "delivered", "cancelled"]},
        "items": {
            "type": "array",
            "items": _closed(
                {
                    "sku": {"type": "string"},
                    "quantity": {"type": "integer", "minimum": 1},
                    "unit_price": {"type": "number"},
                }
            ),
        },
        "shipping": _closed(
            {
                "method": {"enum": ["standard", "express", "pickup"]},
                "address": _closed(
                    {
                        "street": {"type": "string"},
                        "city": {"type": "string"},
                        "postcode": {"type": "string"},
                    }
                ),
            }
        ),
        "gift": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
    }
)
NESTED_ANSWER = {
    "order_id": "ORD-2024-00917",
    "status": "shipped",
    "items": [
        {"sku": "KB-MECH-87", "quantity": 1, "unit_price": 89.5},
        {"sku": "USB-C-2M", "quantity": 3, "unit_price": 7.99},
        {"sku": "MOUSE-PAD-XL", "quantity": 2, "unit_price": 14.0},
    ],
    "shipping": {
        "method": "express",
        "address": {"street": "12 Rue de Rivoli", "city": "Paris", "postcode": "75004"},
    },
    "gift": False,
    "tags": ["priority", "fragile", "returning customer"],
}

EDIT_ARGUMENTS = _closed(
    {"path": {"type": "string"}, "old_text": {"type": "string"}, "new_text": {"type": "string"}}
)
EDIT_CALL = {
    "path": "src/calc/ops.py",
    "old_text": "def add(a, b):\n    return a - b\n",
    "new_text": 'def add(a: int, b: int) -> int:\n    """The sum."""\n    return a + b\n',
}
# A Hermes call, as specllama/tool_calls.py writes its grammar: the head is fixed text, the
# arguments follow the tool's schema.
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
CALL_HEAD = '\n{"name": "edit_file", "arguments": '
CALL_TAIL = "}\n"


def compact(value: Any) -> str:
    return json.dumps(value, separators=SEPARATORS)


def tool_answer() -> str:
    return CALL_OPEN + CALL_HEAD + compact(EDIT_CALL) + CALL_TAIL + CALL_CLOSE


CASES = {
    "flat": {"schema": FLAT_SCHEMA, "answer": compact(FLAT_ANSWER)},
    "nested": {"schema": NESTED_SCHEMA, "answer": compact(NESTED_ANSWER)},
    "tool_call": {"schema": None, "answer": tool_answer()},
}

# -- the grammars, one per engine, for the same language -----------------------------------------


def lark_tool_call(special: bool) -> str:
    """llguidance's Lark: the tags as special tokens where the vocabulary has them."""

    def tag(text: str) -> str:
        return text if special else json.dumps(text)

    arguments = json.dumps({**EDIT_ARGUMENTS, "x-guidance": JSON_OPTIONS})
    return (
        f"start: {tag(CALL_OPEN)} {json.dumps(CALL_HEAD)} args {json.dumps(CALL_TAIL)}"
        f" {tag(CALL_CLOSE)}\nargs: %json {arguments}\n"
    )


def gbnf(case: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    if case != "tool_call":
        return json_schema_to_gbnf(json.dumps(CASES[case]["schema"]))
    rules = json_schema_to_gbnf(json.dumps(EDIT_ARGUMENTS))
    rules = "\n".join(
        "call-args ::=" + line[len("root ::=") :] if line.startswith("root ::=") else line
        for line in rules.splitlines()
    )
    head = " ".join(json.dumps(text) for text in (CALL_OPEN, CALL_HEAD))
    tail = " ".join(json.dumps(text) for text in (CALL_TAIL, CALL_CLOSE))
    return f"root ::= {head} call-args {tail}\n{rules}\n"


# -- timing helpers ------------------------------------------------------------------------------


def _us(start_ns: int) -> float:
    return round((time.perf_counter_ns() - start_ns) / 1000, 2)


def apply_mask(bits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """What the engine does with a bitmask (constraint.py): unpack, -inf where forbidden."""
    allowed = np.unpackbits(bits.view(np.uint8), bitorder="little")[: logits.size].astype(bool)
    return np.where(allowed, logits, -np.inf).astype(np.float32)


def apply_mask_copyto(bits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """The same row, built without the bool conversion and the second copy (a suggestion)."""
    allowed = np.unpackbits(bits.view(np.uint8), count=logits.size, bitorder="little")
    masked = np.full(logits.size, -np.inf, dtype=np.float32)
    np.copyto(masked, logits, where=allowed.view(bool))
    return masked


def logits_row(n_vocab: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(n_vocab).astype(np.float32)


# -- llguidance ----------------------------------------------------------------------------------


def llg_grammar(case: str, special: bool) -> str:
    import llguidance

    if case == "tool_call":
        return llguidance.LLMatcher.grammar_from_lark(lark_tool_call(special))
    return llguidance.LLMatcher.grammar_from_json_schema(CASES[case]["schema"], JSON_OPTIONS)


def walk(model: Model, case: str) -> tuple[list[int], list[bool]]:
    """The answer as the engine emits it: forced tokens whole, the rest as tokenised."""
    import llguidance

    matcher = llguidance.LLMatcher(model.tokenizer, llg_grammar(case, model.special), log_level=0)
    answer = CASES[case]["answer"].encode()
    pos, tokens, forced = 0, [], []
    while pos < len(answer):
        ff = list(matcher.compute_ff_tokens())
        step = ff or model.backend.tokenize(answer[pos:].decode(), add_bos=False, special=True)[:1]
        for token in step:
            piece = model.backend.token_bytes(token, special=True)
            if not answer.startswith(piece, pos) or not matcher.consume_token(token):
                raise RuntimeError(f"{case}: token {token} {piece!r} leaves the answer at {pos}")
            tokens.append(token)
            forced.append(bool(ff))
            pos += len(piece)
    if not matcher.is_accepting():
        raise RuntimeError(f"{case}: the grammar does not accept the whole answer")
    return tokens, forced


def time_llguidance(model: Model, case: str, tokens: list[int]) -> dict[str, Any]:
    import llguidance

    started = time.perf_counter_ns()
    text = llg_grammar(case, model.special)
    matcher = llguidance.LLMatcher(model.tokenizer, text, log_level=0)
    compile_us = _us(started)
    bits = np.zeros(((model.n_vocab + 31) // 32,), dtype=np.int32)
    logits = logits_row(model.n_vocab)
    names = ("mask", "apply", "apply_copyto", "validate", "consume", "ff")
    ops: dict[str, list[float]] = {k: [] for k in names}
    rejected = 0
    for token in tokens:
        t = time.perf_counter_ns()
        matcher.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
        ops["mask"].append(_us(t))
        t = time.perf_counter_ns()
        masked = apply_mask(bits, logits)
        ops["apply"].append(_us(t))
        rejected += not np.isfinite(masked[token])
        t = time.perf_counter_ns()
        lean = apply_mask_copyto(bits, logits)
        ops["apply_copyto"].append(_us(t))
        rejected += not np.array_equal(lean, masked)
        t = time.perf_counter_ns()
        matcher.validate_tokens([token])
        ops["validate"].append(_us(t))
        t = time.perf_counter_ns()
        matcher.consume_token(token)
        ops["consume"].append(_us(t))
        t = time.perf_counter_ns()
        matcher.compute_ff_tokens()
        ops["ff"].append(_us(t))
    ops["greedy"] = _sums(ops, "validate", "consume", "ff")
    ops["sampled"] = _sums(ops, "mask", "apply", "consume", "ff")
    return {
        "compile_us": compile_us,
        "first_mask_us": ops["mask"][0],
        "ops": ops,
        "rejected": rejected,
    }


def _sums(ops: dict[str, list[float]], *names: str) -> list[float]:
    return [sum(values) for values in zip(*(ops[name] for name in names), strict=True)]


# -- llama.cpp's grammar sampler -----------------------------------------------------------------

TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


def _candidates(llama_cpp: Any, data: np.ndarray) -> Any:
    pointer = data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data))
    return llama_cpp.llama_token_data_array(data=pointer, size=data.size, selected=-1, sorted=False)


def time_llamacpp(model: Model, case: str, tokens: list[int]) -> dict[str, Any]:
    import llama_cpp

    started = time.perf_counter_ns()
    vocab = model.backend._vocab
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf(case).encode(), b"root")
    compile_us = _us(started)
    if not sampler:
        raise RuntimeError(f"{case}: llama.cpp cannot compile the GBNF")
    logits = logits_row(model.n_vocab)
    every = np.zeros(model.n_vocab, dtype=TOKEN_DATA)
    every["id"] = np.arange(model.n_vocab)
    one = np.zeros(1, dtype=TOKEN_DATA)
    all_candidates, one_candidate = _candidates(llama_cpp, every), _candidates(llama_cpp, one)
    ops: dict[str, list[float]] = {k: [] for k in ("fill", "mask", "one", "accept")}
    rejected = 0
    try:
        for token in tokens:
            t = time.perf_counter_ns()
            every["logit"] = logits  # apply writes -inf into the row: a fresh one each token
            ops["fill"].append(_us(t))
            t = time.perf_counter_ns()
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(all_candidates))
            ops["mask"].append(_us(t))
            rejected += not np.isfinite(every["logit"][token])
            one[0] = (token, 1.0, 0.0)
            t = time.perf_counter_ns()
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(one_candidate))
            ops["one"].append(_us(t))
            t = time.perf_counter_ns()
            llama_cpp.llama_sampler_accept(sampler, token)
            ops["accept"].append(_us(t))
    finally:
        llama_cpp.llama_sampler_free(sampler)
    ops["greedy"] = _sums(ops, "one", "accept")
    ops["sampled"] = _sums(ops, "mask", "accept")
    return {
        "compile_us": compile_us,
        "first_mask_us": ops["mask"][0],
        "ops": ops,
        "rejected": rejected,
    }


# -- xgrammar, in a worker process of a Python that has it ---------------------------------------


def xgrammar_worker() -> None:
    """Answers one JSON request a line: {"vocab": pickle path} once, then {"case", "tokens"}."""
    import xgrammar

    compiler, n_vocab = None, 0
    for line in sys.stdin:
        request = json.loads(line)
        if "vocab" in request:
            vocab = pickle.loads(Path(request["vocab"]).read_bytes())
            started = time.perf_counter_ns()
            info = xgrammar.TokenizerInfo(
                vocab["pieces"],
                xgrammar.VocabType.RAW,
                vocab_size=len(vocab["pieces"]),
                stop_token_ids=vocab["eog"],
            )
            compiler = xgrammar.GrammarCompiler(info, max_threads=2, cache_enabled=False)
            n_vocab = len(vocab["pieces"])
            reply: dict[str, Any] = {
                "tokenizer_us": _us(started),
                "version": getattr(xgrammar, "__version__", None),
            }
        else:
            reply = _xgrammar_walk(xgrammar, compiler, n_vocab, request)
        print(json.dumps(reply), flush=True)


def _xgrammar_compile(xgrammar: Any, compiler: Any, case: str) -> Any:
    style = {"any_whitespace": False, "separators": SEPARATORS, "strict_mode": True}
    if case != "tool_call":
        return compiler.compile_json_schema(json.dumps(CASES[case]["schema"]), **style)
    head = xgrammar.Grammar.from_ebnf(f"root ::= {json.dumps(CALL_OPEN + CALL_HEAD)}")
    arguments = xgrammar.Grammar.from_json_schema(json.dumps(EDIT_ARGUMENTS), **style)
    tail = xgrammar.Grammar.from_ebnf(f"root ::= {json.dumps(CALL_TAIL + CALL_CLOSE)}")
    return compiler.compile_grammar(xgrammar.Grammar.concat(head, arguments, tail))


def _xgrammar_walk(xgrammar: Any, compiler: Any, n_vocab: int, request: dict) -> dict[str, Any]:
    started = time.perf_counter_ns()
    matcher = xgrammar.GrammarMatcher(_xgrammar_compile(xgrammar, compiler, request["case"]))
    compile_us = _us(started)
    bits = np.zeros((1, (n_vocab + 31) // 32), dtype=np.int32)
    logits = logits_row(n_vocab)
    ops: dict[str, list[float]] = {k: [] for k in ("mask", "apply", "accept", "ff")}
    rejected = 0
    for token in request["tokens"]:
        t = time.perf_counter_ns()
        matcher.fill_next_token_bitmask(bits)
        ops["mask"].append(_us(t))
        t = time.perf_counter_ns()
        masked = apply_mask(bits[0], logits)
        ops["apply"].append(_us(t))
        rejected += not np.isfinite(masked[token])
        t = time.perf_counter_ns()
        accepted = matcher.accept_token(token)
        ops["accept"].append(_us(t))
        rejected += not accepted
        t = time.perf_counter_ns()
        matcher.find_jump_forward_string()
        ops["ff"].append(_us(t))
    ops["greedy"] = _sums(ops, "accept", "ff")
    ops["sampled"] = _sums(ops, "mask", "apply", "accept", "ff")
    return {
        "compile_us": compile_us,
        "first_mask_us": ops["mask"][0],
        "ops": ops,
        "rejected": rejected,
    }


class XgrammarWorker:
    """This file's --xgrammar-worker in the Python that has xgrammar, one request at a time."""

    def __init__(self, python: str) -> None:
        self.process = subprocess.Popen(
            [python, __file__, "--xgrammar-worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the xgrammar worker ended (see its error above)")
        return json.loads(line)

    def load_vocab(self, model: Model) -> dict[str, Any]:
        lib, vocab = model.backend._lib, model.backend._vocab
        pieces = [
            b""
            if lib.llama_vocab_get_attr(vocab, t) & lib.LLAMA_TOKEN_ATTR_CONTROL
            else model.backend.token_bytes(t, special=True)
            for t in range(model.n_vocab)
        ]
        with tempfile.NamedTemporaryFile(suffix=".pickle", delete=False) as file:
            pickle.dump({"pieces": pieces, "eog": model.eog}, file)
        try:
            return self.ask({"vocab": file.name})
        finally:
            Path(file.name).unlink()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


# -- one model -----------------------------------------------------------------------------------


class Model:
    """A vocabulary as the engines see it: the llama.cpp model and llguidance's tokenizer."""

    def __init__(self, path: Path) -> None:
        from specllama.llama.backend import LlamaBackend
        from specllama.llama.grammar import tokenizer_for

        self.path = path
        self.backend = LlamaBackend(path, n_ctx=256, n_threads=1)
        self.n_vocab = self.backend.n_vocab
        started = time.perf_counter_ns()
        self.tokenizer = tokenizer_for(self.backend)
        self.tokenizer_us = _us(started)
        self.eog = [t for t in range(self.n_vocab) if self.backend.is_eog(t)]
        opens = self.backend.tokenize(CALL_OPEN, add_bos=False, special=True)
        self.special = len(opens) == 1  # <tool_call> is one token of this vocabulary


def measure_model(model: Model, repeats: int, xgrammar: XgrammarWorker | None) -> dict[str, Any]:
    walks = {case: walk(model, case) for case in CASES}
    engines: dict[str, Any] = {
        "llguidance": lambda case, tokens: time_llguidance(model, case, tokens),
        "llama.cpp": lambda case, tokens: time_llamacpp(model, case, tokens),
    }
    setup = {"llguidance_tokenizer_us": model.tokenizer_us}
    if xgrammar is not None:
        setup["xgrammar"] = xgrammar.load_vocab(model)
        engines["xgrammar"] = lambda case, tokens: xgrammar.ask({"case": case, "tokens": tokens})
    runs: dict[str, dict[str, list[dict]]] = {
        case: {name: [] for name in engines} for case in CASES
    }
    names = list(engines)
    for repeat in range(repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for case, (tokens, _) in walks.items():
            for name in order:
                runs[case][name].append(engines[name](case, tokens))
                print(f"  {model.path.name} {case} {name} repeat {repeat + 1}", file=sys.stderr)
    return {
        "model": model.path.name,
        "n_vocab": model.n_vocab,
        "setup": setup,
        "cases": {
            case: {
                "n_tokens": len(tokens),
                "forced_fraction": round(sum(forced) / len(tokens), 3),
                "tokens": tokens,
                "engines": {name: summarise(results) for name, results in runs[case].items()},
                "raw": runs[case],
            }
            for case, (tokens, forced) in walks.items()
        },
    }


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per op: the median over repeats of each repeat's median (min-max over repeats), the
    p90 of all positions of all repeats."""
    summary: dict[str, Any] = {
        "compile_us": _spread([r["compile_us"] for r in results]),
        "first_mask_us": _spread([r["first_mask_us"] for r in results]),
        "rejected": max(r["rejected"] for r in results),
    }
    for op in results[0]["ops"]:
        medians = [statistics.median(r["ops"][op]) for r in results]
        pooled = [v for r in results for v in r["ops"][op]]
        summary[op] = {**_spread(medians), "p90": round(float(np.percentile(pooled, 90)), 1)}
    return summary


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 1),
        "min": round(min(values), 1),
        "max": round(max(values), 1),
    }


# -- report --------------------------------------------------------------------------------------

ROWS = {
    "llguidance": [
        "mask",
        "apply",
        "apply_copyto",
        "validate",
        "consume",
        "ff",
        "greedy",
        "sampled",
    ],
    "llama.cpp": ["fill", "mask", "one", "accept", "greedy", "sampled"],
    "xgrammar": ["mask", "apply", "accept", "ff", "greedy", "sampled"],
}


def report(result: dict[str, Any], target_ms: float) -> str:
    lines = [f"\n{result['model']} ({result['n_vocab']:,} tokens)"]
    for case, data in result["cases"].items():
        lines.append(f"  {case}: {data['n_tokens']} tokens, {data['forced_fraction']:.0%} forced")
        for engine, summary in data["engines"].items():
            cells = [
                f"{op} {summary[op]['median']:.1f} ({summary[op]['min']:.0f}-"
                f"{summary[op]['max']:.0f}, p90 {summary[op]['p90']:.0f})"
                for op in ROWS[engine]
            ]
            share = summary["sampled"]["median"] / (target_ms * 1000)
            lines.append(
                f"    {engine:10s} compile {summary['compile_us']['median'] / 1000:.2f} ms, "
                f"first mask {summary['first_mask_us']['median']:.0f} us, "
                f"rejected {summary['rejected']}; sampled = {share:.2%} of a "
                f"{target_ms:.0f} ms token"
            )
            lines.append("      us/token: " + "; ".join(cells))
    return "\n".join(lines)


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def default_models() -> list[Path]:
    from specllama.models.catalog import load_catalog
    from specllama.models.hub import resolve_pair

    _target, draft, _pair = resolve_pair(load_catalog())
    smollm = sorted(Path.home().glob(f".cache/specllama*/**/{SMOLLM}"))
    return [draft, *smollm[:1]]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="\n".join(__doc__.splitlines()[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--repeats", type=int, default=5, help="walks per engine and grammar")
    parser.add_argument(
        "--model",
        type=Path,
        action="append",
        default=None,
        help="GGUF whose vocabulary to use (repeatable; default: the default "
        f"pair's draft, {QWEN_SMALL}, and a cached {SMOLLM})",
    )
    parser.add_argument(
        "--xgrammar-python",
        default=None,
        help="a Python that can import xgrammar (it needs torch); none: skipped",
    )
    parser.add_argument(
        "--target-ms",
        type=float,
        default=TARGET_MS,
        help="one target token, to say what share of it the constraint adds",
    )
    parser.add_argument("--json", type=Path, default=None, help="write every sample here")
    parser.add_argument("--xgrammar-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.xgrammar_worker:
        xgrammar_worker()
        return
    started = time.time()
    xgrammar = XgrammarWorker(args.xgrammar_python) if args.xgrammar_python else None
    results = []
    try:
        for path in args.model or default_models():
            model = Model(Path(path))
            results.append(measure_model(model, args.repeats, xgrammar))
            print(report(results[-1], args.target_ms), flush=True)
            model.backend.close()
    finally:
        if xgrammar is not None:
            xgrammar.close()
    import llama_cpp
    import llguidance

    facts = {
        "cpu": cpu_name(),
        "cores": len(os.sched_getaffinity(0)),
        "load_average": os.getloadavg(),
        "llguidance": getattr(llguidance, "__version__", None),
        "llama_cpp_python": llama_cpp.__version__,
        "repeats": args.repeats,
        "target_ms": args.target_ms,
        "wall_s": round(time.time() - started, 1),
    }
    print(f"\n{json.dumps(facts)}")
    if args.json:
        args.json.write_text(json.dumps({"facts": facts, "models": results}) + "\n")


if __name__ == "__main__":
    main()
