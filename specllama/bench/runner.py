"""`specllama bench`: the same prompts, several configurations, one process, side by side.

How a benchmark runs (see `run_bench`):

1. A warm-up: the first prompt once with every configuration, not recorded.
2. For each prompt, `repeats` rounds; each round runs every configuration once, in an order
   rotated by one each round (A B C, B C A, ...), so a burst of load from other programs hits
   neighbours in time, and each configuration is paired with the target-alone run of the same
   round.
3. Speedup is computed pair by pair: tokens/s of a configuration divided by tokens/s of the
   target alone in the same round on the same prompt; a prompt's speedup is the median over its
   rounds; a category's is the median over its prompts, with the lowest and highest prompt.

tokens/s counts generated tokens over the time from the end of the target's prompt prefill
(identical for all configurations) to the last token. That time includes the draft model's own
prompt prefill: the draft context is emptied before every run, as for a new prompt.

The JSON output (`--json FILE`) follows the JSON Schema in specllama/data/bench_schema.json
(`BENCH_SCHEMA`); its fields are described there.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from specllama.bench.prompts import BenchPrompt
from specllama.engine.control import DraftController, FixedLength
from specllama.engine.drafters import (
    CombinedDrafter,
    Drafter,
    DraftModelDrafter,
    NgramDrafter,
    NoDrafter,
)
from specllama.engine.events import FinishEvent, TokenEvent
from specllama.engine.mtp import MtpDrafter
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.errors import UsageError
from specllama.llama.backend import build_facts, common_prefix_length, default_threads
from specllama.policy import calibration
from specllama.policy.controller import AdaptiveController
from specllama.session import ADAPTIVE_DRAFT_MAX, Engine

SCHEMA_ID = "specllama-bench/1"
TARGET = "target"
DEFAULT_CONFIGS = "target,model:2,model:4,ngram:8,adaptive"


def default_configs(*, has_draft: bool, mtp: bool) -> str:
    """What `specllama bench` compares when not told: the draft model's lengths, or the
    target's own head's where it drafts with that, or n-gram lookup alone."""
    if has_draft or not mtp:
        return DEFAULT_CONFIGS if has_draft else "target,ngram:8,adaptive"
    return "target,mtp:2,mtp:4,ngram:8,adaptive"


def bench_schema() -> dict[str, Any]:
    """The JSON Schema of `--json` output (specllama/data/bench_schema.json)."""
    text = resources.files("specllama").joinpath("data", "bench_schema.json").read_text("utf-8")
    return json.loads(text)


# -- configurations -------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchConfig:
    """One way of generating: `drafter` is none, model, mtp, ngram or combined (n-gram first,
    then the draft model or the target's MTP head); `adaptive` uses AdaptiveController, else
    FixedLength(draft_max); `pipelined` (fixed) drafts the next round while the target
    verifies (pipe:K)."""

    name: str
    drafter: str
    draft_max: int
    adaptive: bool
    pipelined: bool = False

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "drafter": self.drafter,
            "draft_max": self.draft_max,
            "controller": "adaptive" if self.adaptive else "fixed",
            "pipelined": self.pipelined,
        }


def parse_configs(
    spec: str,
    *,
    has_draft: bool,
    draft_max: int,
    adaptive: bool = True,
    adaptive_draft_max: int = ADAPTIVE_DRAFT_MAX,
    has_mtp: bool = False,
) -> list[BenchConfig]:
    """`target`, `model:K`, `pipe:K` (the draft model, pipelined), `mtp:K` (the target's own
    head), `ngram:K`, `adaptive` (comma-separated). The target alone is always included
    (speedups are relative to it) and comes first. `adaptive=False` (--fixed) drops the
    adaptive configuration."""
    configs = [BenchConfig(TARGET, "none", 0, False)]
    for item in (part.strip() for part in spec.split(",")):
        if not item or item == TARGET:
            continue
        name, _, k = item.partition(":")
        if name == "adaptive":
            if k:
                raise UsageError(f"bench configuration {item!r}: adaptive takes no length")
            if adaptive:
                drafter = "combined" if has_draft or has_mtp else "ngram"
                configs.append(BenchConfig("adaptive", drafter, adaptive_draft_max, True))
            continue
        if name not in ("model", "pipe", "mtp", "ngram"):
            raise UsageError(
                f"unknown bench configuration {item!r}",
                hint="use target, model:K, pipe:K, mtp:K, ngram:K or adaptive, separated by commas",
            )
        try:
            length = int(k) if k else draft_max
        except ValueError:
            raise UsageError(f"bench configuration {item!r}: K must be a number") from None
        if length < 1:
            raise UsageError(f"bench configuration {item!r}: K must be at least 1")
        if name == "mtp" and not has_mtp:
            raise UsageError(
                f"bench configuration {item!r} needs a target drafting with its own head",
                hint="pass --drafter mtp with a target that has MTP layers",
            )
        if name in ("model", "pipe") and not has_draft:
            raise UsageError(
                f"bench configuration {item!r} needs a draft model",
                hint=f"pass --draft or --pair, or leave {name}:K out of --configs",
            )
        pipelined = name == "pipe"
        drafter = "model" if pipelined else name
        configs.append(BenchConfig(f"{name}:{length}", drafter, length, False, pipelined))
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise UsageError("a bench configuration is listed twice")
    return configs


# -- running --------------------------------------------------------------------------------


@dataclass
class Run:
    config: str
    prompt_id: str
    category: str
    repeat: int
    tokens: list[int]
    stats: dict[str, Any]
    equals_target: bool | None = None
    agreement: float | None = None  # common prefix with the target alone / target's length

    def as_dict(self) -> dict[str, Any]:
        s = self.stats
        return {
            "config": self.config,
            "prompt_id": self.prompt_id,
            "category": self.category,
            "repeat": self.repeat,
            **{
                key: s[key]
                for key in (
                    "n_prompt",
                    "n_generated",
                    "time_s",
                    "tokens_per_s",
                    "n_drafted",
                    "n_accepted",
                    "acceptance_rate",
                    "n_rounds",
                    "mean_accepted_per_round",
                    "accepted_histogram",
                    "target_s",
                    "draft_s",
                    "overhead_ms_per_round",
                    "finish_reason",
                )
            },
            "n_draft_rounds": s["n_draft_rounds"],
            "equals_target": self.equals_target,
            "agreement": self.agreement,
        }


@dataclass
class BenchResult:
    settings: dict[str, Any]
    configs: list[BenchConfig]
    prompts: list[BenchPrompt]
    runs: list[Run] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None


Progress = Callable[[str, int, int], None]  # (what, done, total)


class _Runner:
    """Builds each configuration's drafter and controller on one loaded Engine."""

    def __init__(self, engine: Engine, params: SamplingParams) -> None:
        self.engine = engine
        self.params = params

    def parts(self, config: BenchConfig) -> tuple[Drafter, DraftController]:
        drafter: Drafter
        if config.drafter == "none":
            return NoDrafter(), FixedLength(0)
        if config.drafter == "ngram":
            drafter = NgramDrafter()
        elif config.drafter == "combined":
            drafter = CombinedDrafter(self._model_drafter(config))
        else:
            drafter = self._model_drafter(config)
        if config.adaptive:
            return drafter, AdaptiveController(self.engine.calibrate(), draft_max=config.draft_max)
        return drafter, FixedLength(config.draft_max, pipelined=config.pipelined)

    def _model_drafter(self, config: BenchConfig) -> Drafter:
        """The draft model, or the target's own head (an engine loads one or the other)."""
        head, model = self.engine.mtp_head, self.engine.draft_model
        if config.drafter != "model" and head is not None:
            return MtpDrafter(head)
        if model is None:
            raise UsageError(f"configuration {config.name} needs a draft model")
        return DraftModelDrafter(model)

    def run(self, config: BenchConfig, tokens: list[int], max_tokens: int) -> tuple[list, dict]:
        drafter, controller = self.parts(config)
        if self.engine.draft_model is not None:
            self.engine.draft_model.rollback(0)  # a new prompt for the draft, every run
        out: list[int] = []
        finish: FinishEvent | None = None
        for event in generate(
            self.engine.target,
            drafter,
            tokens,
            self.params,
            max_tokens=max_tokens,
            controller=controller,
        ):
            if isinstance(event, TokenEvent):
                out.append(event.token)
            elif isinstance(event, FinishEvent):
                finish = event
        assert finish is not None
        stats = finish.stats.as_dict()
        stats["n_draft_rounds"] = finish.stats.n_draft_rounds
        stats["overhead_s"] = finish.stats.overhead_s
        return out, stats


def run_bench(
    engine: Engine,
    prompts: Sequence[BenchPrompt],
    configs: Sequence[BenchConfig],
    params: SamplingParams,
    *,
    max_tokens: int = 128,
    repeats: int = 2,
    warmup: bool = True,
    progress: Progress | None = None,
) -> BenchResult:
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {repeats}")
    if not configs or configs[0].name != TARGET:
        raise UsageError("the bench needs the target alone as its first configuration")
    # One seed for every run: sampled runs then write the target alone's text too, and
    # `equals_target` checks that at any temperature (the seed is in the settings).
    params = params.with_seed()
    runner = _Runner(engine, params)
    result = BenchResult(
        settings={
            "max_tokens": max_tokens,
            "repeats": repeats,
            "warmup": warmup,
            "temperature": params.temperature,
            "top_k": params.top_k,
            "top_p": params.top_p,
            "min_p": params.min_p,
            "seed": params.seed,
            "draft_max": engine.draft_max,
            "n_ctx": engine.config.n_ctx,
            "n_threads": engine.config.n_threads or default_threads(),
            "n_gpu_layers": engine.config.n_gpu_layers,
            "n_gpu_layers_draft": engine.config.n_gpu_layers_draft,
            "extra_buffers": engine.target.extra_buffers,
            "rpc": list(engine.config.rpc),  # the target's RPC workers
        },
        configs=list(configs),
        prompts=list(prompts),
        machine=machine_facts(),
        models=_models(engine),
    )
    if any(c.adaptive for c in configs):
        costs = engine.calibrate()
        result.calibration = {
            **costs.as_dict(),
            "summary": calibration.summary(costs),
            "status": engine.calibration.as_dict(),
        }
    tokenized = [engine.prompt_tokens(list(p.messages)) for p in prompts]
    total = len(prompts) * repeats * len(configs) + (len(configs) if warmup else 0)
    done = 0

    def tick(what: str) -> None:
        nonlocal done
        done += 1
        if progress:
            progress(what, done, total)

    if warmup:
        for config in configs:
            runner.run(config, tokenized[0], min(max_tokens, 32))
            tick(f"warm-up {config.name}")
    for prompt, tokens in zip(prompts, tokenized):
        limit = prompt.max_tokens or max_tokens
        for repeat in range(repeats):
            shift = repeat % len(configs)
            order = [*configs[shift:], *configs[:shift]]
            reference: list[int] | None = None
            pending: list[Run] = []
            for config in order:
                out, stats = runner.run(config, tokens, limit)
                run = Run(config.name, prompt.id, prompt.category, repeat, out, stats)
                if config.name == TARGET:
                    reference = out
                pending.append(run)
                tick(f"{prompt.id} {config.name}")
            for run in pending:
                run.equals_target = run.tokens == reference
                run.agreement = _agreement(run.tokens, reference or [])
            result.runs.extend(pending)
    return result


def _agreement(tokens: list[int], reference: list[int]) -> float:
    if not reference:
        return 1.0 if not tokens else 0.0
    return common_prefix_length(tokens, reference) / len(reference)


def machine_facts() -> dict[str, Any]:
    facts = build_facts()
    return {
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu": calibration._cpu_name(),
        "physical_cores": default_threads(),
        "python": platform.python_version(),
        "llama_cpp": facts.version,
        "gpu_offload": facts.gpu_offload,
    }


def _models(engine: Engine) -> dict[str, Any]:
    def describe(path: Path | None) -> dict[str, Any] | None:
        if path is None:
            return None
        return {"name": Path(path).name, "path": str(path), "size": Path(path).stat().st_size}

    draft = engine.config.draft if engine.draft_model is not None else None
    return {"target": describe(engine.config.target), "draft": describe(draft)}


# -- the report -----------------------------------------------------------------------------


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def _pair_speedups(runs: Iterable[Run]) -> dict[tuple[str, str], list[float]]:
    """(config, prompt) -> speedup of each round against the target alone in that round."""
    by_round: dict[tuple[str, int], dict[str, float]] = defaultdict(dict)
    for run in runs:
        by_round[(run.prompt_id, run.repeat)][run.config] = run.stats["tokens_per_s"]
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (prompt_id, _), speeds in sorted(by_round.items()):
        base = speeds.get(TARGET)
        if not base:
            continue
        for config, tps in speeds.items():
            out[(config, prompt_id)].append(tps / base)
    return out


def summarise(result: BenchResult) -> dict[str, Any]:
    """Per prompt and per (configuration, category) figures, plus the category "all"."""
    speedups = _pair_speedups(result.runs)
    prompt_rows = []
    for prompt in result.prompts:
        row = {
            c.name: round(statistics.median(speedups[(c.name, prompt.id)]), 4)
            for c in result.configs
            if speedups.get((c.name, prompt.id))
        }
        prompt_rows.append({"id": prompt.id, "category": prompt.category, "speedup": row})

    categories = sorted({p.category for p in result.prompts})
    rows = []
    for config in result.configs:
        for category in [*categories, "all"]:
            runs = [
                r
                for r in result.runs
                if r.config == config.name and (category == "all" or r.category == category)
            ]
            if not runs:
                continue
            prompt_ids = sorted({r.prompt_id for r in runs})
            per_prompt = [
                statistics.median(speedups[(config.name, pid)])
                for pid in prompt_ids
                if speedups.get((config.name, pid))
            ]
            drafted = sum(r.stats["n_drafted"] for r in runs)
            accepted = sum(r.stats["n_accepted"] for r in runs)
            draft_rounds = sum(r.stats["n_draft_rounds"] for r in runs)
            n_rounds = sum(r.stats["n_rounds"] for r in runs)
            histogram: Counter[str] = Counter()
            for r in runs:
                histogram.update(r.stats["accepted_histogram"])
            overhead = sum(r.stats["overhead_s"] for r in runs)
            equal_prompts = sum(
                all(r.equals_target for r in runs if r.prompt_id == pid) for pid in prompt_ids
            )
            rows.append(
                {
                    "config": config.name,
                    "category": category,
                    "n_prompts": len(prompt_ids),
                    "n_runs": len(runs),
                    "tokens_per_s": _spread([r.stats["tokens_per_s"] for r in runs]),
                    "speedup": _spread(per_prompt) if per_prompt else None,
                    "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
                    "mean_accepted_per_round": (
                        round(accepted / draft_rounds, 4) if draft_rounds else None
                    ),
                    "accepted_histogram": dict(sorted(histogram.items(), key=lambda x: int(x[0]))),
                    "overhead_ms_per_round": round(1000 * overhead / n_rounds, 4)
                    if n_rounds
                    else 0.0,
                    "equals_target": round(equal_prompts / len(prompt_ids), 4),
                    "agreement": round(statistics.mean(r.agreement or 0.0 for r in runs), 4),
                }
            )
    return {"prompts": prompt_rows, "summary": rows, "noise": target_noise(result.runs)}


def target_noise(runs: Iterable[Run]) -> dict[str, float] | None:
    """How far the target alone's own rounds of one prompt are apart: the faster over the
    slower, minus 1, per prompt run twice or more (median, lowest, highest over the prompts).
    The same decodes, so what parts them is the machine; a prompt's speedup closer to 1.0 than
    this says nothing. None when no prompt ran twice."""
    speeds: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        if run.config == TARGET:
            speeds[run.prompt_id].append(run.stats["tokens_per_s"])
    gaps = [max(s) / min(s) - 1.0 for s in speeds.values() if len(s) > 1 and min(s) > 0]
    return _spread(gaps) if gaps else None


def to_json(result: BenchResult) -> dict[str, Any]:
    summary = summarise(result)
    return {
        "schema": SCHEMA_ID,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": result.machine,
        "models": result.models,
        "settings": result.settings,
        "calibration": result.calibration,
        "configs": [c.as_dict() for c in result.configs],
        "prompts": summary["prompts"],
        "summary": summary["summary"],
        "noise": summary["noise"],
        "runs": [r.as_dict() for r in result.runs],
    }
