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
import os
import platform
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from specllama import calibration
from specllama.backend import build_facts, default_threads
from specllama.chat import Message
from specllama.controller import AdaptiveController, DraftController, FixedLength
from specllama.drafters import CombinedDrafter, Drafter, DraftModelDrafter, NgramDrafter, NoDrafter
from specllama.errors import UsageError
from specllama.sampling import SamplingParams, make_rng
from specllama.session import ADAPTIVE_DRAFT_MAX, Engine
from specllama.speculative import FinishEvent, TokenEvent, generate

SCHEMA_ID = "specllama-bench/1"
TARGET = "target"
DEFAULT_CONFIGS = "target,model:2,model:4,ngram:8,adaptive"
ROLES = ("system", "user", "assistant")


def _data(name: str) -> Any:
    return resources.files("specllama").joinpath("data", name)


def default_prompts_path() -> Path:
    return Path(str(_data("bench_prompts.jsonl")))


def bench_schema() -> dict[str, Any]:
    return json.loads(_data("bench_schema.json").read_text(encoding="utf-8"))


# -- prompts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    category: str
    messages: tuple[Message, ...]
    max_tokens: int | None = None  # overrides the bench's --max-tokens for this prompt


def load_prompts(path: Path | None = None) -> list[BenchPrompt]:
    """A JSONL prompt file: one object a line with `category` and either `prompt` (one user
    turn, with an optional `system`) or `messages` (a list of {role, content}, ending with a
    user turn: a multi-turn conversation); optional `id` and `max_tokens`. Blank lines and
    lines starting with # are skipped. Errors name the file and line."""
    path = path or default_prompts_path()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read the prompt file {path}: {exc.strerror}") from None
    prompts: list[BenchPrompt] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not valid JSON ({exc.msg})") from None
        prompt = _parse_prompt(entry, where, default_id=f"{len(prompts) + 1:02d}")
        if prompt.id in seen:
            raise UsageError(f"{where}: the id {prompt.id!r} is used twice")
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise UsageError(f"{path} holds no prompts")
    return prompts


def _parse_prompt(entry: object, where: str, default_id: str) -> BenchPrompt:
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: each line must be a JSON object")
    unknown = set(entry) - {"id", "category", "prompt", "system", "messages", "max_tokens"}
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    category = entry.get("category")
    if not isinstance(category, str) or not category.strip():
        raise UsageError(f"{where}: `category` must be a non-empty string")
    if ("prompt" in entry) == ("messages" in entry):
        raise UsageError(f"{where}: give either `prompt` or `messages`")
    messages: list[Message] = []
    if "prompt" in entry:
        if not isinstance(entry["prompt"], str) or not entry["prompt"].strip():
            raise UsageError(f"{where}: `prompt` must be a non-empty string")
        if isinstance(entry.get("system"), str):
            messages.append(Message("system", entry["system"]))
        messages.append(Message("user", entry["prompt"]))
    else:
        raw = entry["messages"]
        if not isinstance(raw, list) or not raw:
            raise UsageError(f"{where}: `messages` must be a non-empty list")
        for m in raw:
            if (
                not isinstance(m, dict)
                or m.get("role") not in ROLES
                or not isinstance(m.get("content"), str)
            ):
                raise UsageError(
                    f"{where}: each message needs a `role` ({', '.join(ROLES)}) and `content`"
                )
            messages.append(Message(m["role"], m["content"]))
        if messages[-1].role != "user":
            raise UsageError(f"{where}: the last message must be the user's")
    max_tokens = entry.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise UsageError(f"{where}: `max_tokens` must be a positive integer")
    prompt_id = entry.get("id", default_id)
    if not isinstance(prompt_id, str):
        raise UsageError(f"{where}: `id` must be a string")
    return BenchPrompt(prompt_id, category.strip(), tuple(messages), max_tokens)


# -- configurations -------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchConfig:
    """One way of generating: `drafter` is none, model, ngram or combined (n-gram first, then
    the draft model); `adaptive` uses AdaptiveController, else FixedLength(draft_max);
    `pipelined` (fixed) drafts the next round while the target verifies (pipe:K)."""

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
) -> list[BenchConfig]:
    """`target`, `model:K`, `pipe:K` (the draft model, pipelined), `ngram:K`, `adaptive`
    (comma-separated). The target alone is always included (speedups are relative to it) and
    comes first. `adaptive=False` (--fixed) drops the adaptive configuration."""
    configs = [BenchConfig(TARGET, "none", 0, False)]
    for item in (part.strip() for part in spec.split(",")):
        if not item or item == TARGET:
            continue
        name, _, k = item.partition(":")
        if name == "adaptive":
            if k:
                raise UsageError(f"bench configuration {item!r}: adaptive takes no length")
            if adaptive:
                drafter = "combined" if has_draft else "ngram"
                configs.append(BenchConfig("adaptive", drafter, adaptive_draft_max, True))
            continue
        if name not in ("model", "pipe", "ngram"):
            raise UsageError(
                f"unknown bench configuration {item!r}",
                hint="use target, model:K, pipe:K, ngram:K or adaptive, separated by commas",
            )
        try:
            length = int(k) if k else draft_max
        except ValueError:
            raise UsageError(f"bench configuration {item!r}: K must be a number") from None
        if length < 1:
            raise UsageError(f"bench configuration {item!r}: K must be at least 1")
        if name != "ngram" and not has_draft:
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
        model = self.engine.draft_model
        drafter: Drafter
        if config.drafter == "none":
            return NoDrafter(), FixedLength(0)
        if config.drafter == "ngram":
            drafter = NgramDrafter(ngram_max=8) if config.adaptive else NgramDrafter()
        elif model is None:
            raise UsageError(f"configuration {config.name} needs a draft model")
        elif config.drafter == "model":
            drafter = DraftModelDrafter(model)
        else:
            drafter = CombinedDrafter(DraftModelDrafter(model))
        if config.adaptive:
            return drafter, AdaptiveController(self.engine.calibrate(), draft_max=config.draft_max)
        return drafter, FixedLength(config.draft_max, pipelined=config.pipelined)

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
            rng=make_rng(self.params),
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
        result.calibration = {**costs.as_dict(), "summary": calibration.summary(costs)}
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
    n = 0
    for a, b in zip(tokens, reference):
        if a != b:
            break
        n += 1
    return n / len(reference)


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
    return {"prompts": prompt_rows, "summary": rows}


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
        "runs": [r.as_dict() for r in result.runs],
    }


def histogram_text(histogram: dict[str, int]) -> str:
    """Accepted lengths, in percent of the rounds that drafted: '0:40 1:20 4:40'."""
    total = sum(histogram.values())
    if not total:
        return "-"
    return " ".join(f"{k}:{100 * v / total:.0f}" for k, v in histogram.items())


# -- the terminal report (rich) --------------------------------------------------------------


@contextmanager
def progress_bar(console: Console) -> Iterator[Progress]:
    """A transient bar on stderr: `(what, done, total)`."""
    with RichProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("bench", total=None)

        def update(what: str, done: int, total: int) -> None:
            bar.update(task, description=f"bench {what}", completed=done, total=total)

        yield update


def print_report(report: dict[str, Any]) -> None:
    """The table on stdout: as wide as the terminal, or 160 columns when not a terminal."""
    console = Console(no_color=bool(os.environ.get("NO_COLOR")), highlight=False)
    if not console.is_terminal:
        console = Console(width=160, no_color=True, highlight=False)
    console.print(report_table(report))


def _fmt_spread(s: dict[str, float] | None, unit: str = "") -> str:
    if not s:
        return "-"
    return f"{s['median']:.2f}{unit} ({s['min']:.2f}–{s['max']:.2f})"


def report_table(report: dict[str, Any]) -> Table:
    """One row per configuration and category: speed, speedup, acceptance, overhead."""
    table = Table(title="specllama bench", title_style="bold")
    for name, justify in (
        ("config", "left"),
        ("category", "left"),
        ("tok/s", "right"),
        ("speedup (prompt range)", "right"),
        ("accept", "right"),
        ("acc/rnd", "right"),
        ("accepted length % of rounds", "left"),
        ("ovh ms", "right"),
        ("=target", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=name != "accepted length % of rounds")  # type: ignore[arg-type]
    previous = None
    for row in report["summary"]:
        if previous is not None and row["config"] != previous:
            table.add_section()
        previous = row["config"]
        rate = row["acceptance_rate"]
        mean = row["mean_accepted_per_round"]
        speedup = row["speedup"]
        style = ""
        if speedup and row["config"] != TARGET:
            style = "green" if speedup["median"] >= 1.0 else "red"
        table.add_row(
            row["config"],
            row["category"],
            f"{row['tokens_per_s']['median']:.1f}",
            Text(_fmt_spread(speedup, "x"), style=style),
            "-" if rate is None else f"{rate:.0%}",
            "-" if mean is None else f"{mean:.2f}",
            histogram_text(row["accepted_histogram"]),
            f"{row['overhead_ms_per_round']:.2f}",
            f"{row['equals_target']:.0%}",
            style="bold" if row["category"] == "all" else "",
        )
    settings = report["settings"]
    models = report["models"]
    draft = (models.get("draft") or {}).get("name", "none")
    table.caption = (
        f"target {models['target']['name']} · draft {draft} · "
        f"{settings['max_tokens']} tokens · {settings['repeats']} rounds · "
        f"temperature {settings['temperature']} · {settings['n_threads']} threads"
        + ("" if settings.get("extra_buffers", True) else " · extra buffers off")
    )
    if report.get("calibration"):
        table.caption += f"\ncalibration: {report['calibration']['summary']}"
    return table


# -- the plot (optional: matplotlib, `pip install 'specllama[plot]'`) ------------------------


def check_plot_support() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib, which is not installed",
            hint="pip install 'specllama[plot]'",
        ) from None


def write_plot(report: dict[str, Any], path: Path) -> None:
    """Two panels: speedup per configuration and category; speedup against draft length."""
    check_plot_support()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["summary"] if r["speedup"] and r["config"] != TARGET]
    configs = list(dict.fromkeys(r["config"] for r in rows))
    categories = list(dict.fromkeys(r["category"] for r in rows))
    fig, (bars, lines) = plt.subplots(1, 2, figsize=(13, 4.8), width_ratios=(2, 1))
    width = 0.8 / max(len(configs), 1)
    for i, config in enumerate(configs):
        values, errors_low, errors_high = [], [], []
        for category in categories:
            found = [r for r in rows if r["config"] == config and r["category"] == category]
            s = found[0]["speedup"] if found else {"median": 0, "min": 0, "max": 0}
            values.append(s["median"])
            errors_low.append(s["median"] - s["min"])
            errors_high.append(s["max"] - s["median"])
        xs = [j + (i - (len(configs) - 1) / 2) * width for j in range(len(categories))]
        bars.bar(xs, values, width, label=config, yerr=[errors_low, errors_high], capsize=2)
    bars.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    bars.set_xticks(range(len(categories)), categories, rotation=20, ha="right")
    bars.set_ylabel("speedup vs target alone (median, prompt range)")
    bars.legend(fontsize=8, ncols=2)
    bars.set_title("Speedup per configuration and category")

    for family, marker in (("model", "o"), ("ngram", "s")):
        for category in categories:
            points = sorted(
                (int(r["config"].split(":")[1]), r["speedup"]["median"])
                for r in rows
                if r["config"].startswith(family + ":") and r["category"] == category
            )
            if points:
                lines.plot(*zip(*points), marker=marker, label=f"{family} · {category}")
    lines.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    lines.set_xlabel("draft length k (fixed)")
    lines.set_ylabel("speedup (median over prompts)")
    lines.set_title("Speedup against draft length")
    lines.legend(fontsize=7)
    model = (report.get("models") or {}).get("target") or {}
    fig.suptitle(f"specllama bench · {model.get('name', '')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
