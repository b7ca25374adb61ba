"""The arithmetic of a benchmark's report: speedups pair by pair, per prompt and per category,
the machine's noise, what the figures rest on, and the JSON of `--json` (its JSON Schema is
specllama/data/bench_schema.json, `bench_schema`).

Speedup is computed pair by pair: tokens/s of a configuration divided by tokens/s of the target
alone in the same round on the same prompt; a prompt's speedup is the median over its rounds; a
category's is the median over its prompts, with the lowest and highest prompt.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

from specllama.bench.configs import TARGET
from specllama.bench.runner import BenchResult, Run

SCHEMA_ID = "specllama-bench/1"


def bench_schema() -> dict[str, Any]:
    """The JSON Schema of `--json` output (specllama/data/bench_schema.json)."""
    text = resources.files("specllama").joinpath("data", "bench_schema.json").read_text("utf-8")
    return json.loads(text)


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


def _total(runs: Sequence[Run], key: str) -> float | None:
    """The sum of a figure over the runs; None when no run knows it (another tool's)."""
    values = [r.stats.get(key) for r in runs]
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _ratio(top: float | None, bottom: float | None, scale: float = 1.0) -> float | None:
    return round(scale * top / bottom, 4) if top is not None and bottom else None


def _row(config: str, category: str, runs: list[Run], speedups: dict) -> dict[str, Any]:
    """One configuration on one category (or "all"): its runs' figures."""
    prompt_ids = sorted({r.prompt_id for r in runs})
    per_prompt = [
        statistics.median(speedups[(config, pid)])
        for pid in prompt_ids
        if speedups.get((config, pid))
    ]
    histogram: Counter[str] = Counter()
    for r in runs:
        histogram.update(r.stats.get("accepted_histogram") or {})
    own = [r for r in runs if r.tokens is not None]  # specllama's: compared with the target
    equal = sum(all(r.equals_target for r in own if r.prompt_id == pid) for pid in prompt_ids)
    return {
        "config": config,
        "category": category,
        "n_prompts": len(prompt_ids),
        "n_runs": len(runs),
        "tokens_per_s": _spread([r.stats["tokens_per_s"] for r in runs]),
        "speedup": _spread(per_prompt) if per_prompt else None,
        "acceptance_rate": _ratio(_total(runs, "n_accepted"), _total(runs, "n_drafted")),
        "mean_accepted_per_round": _ratio(
            _total(runs, "n_accepted"), _total(runs, "n_draft_rounds")
        ),
        "accepted_histogram": dict(sorted(histogram.items(), key=lambda x: int(x[0]))),
        "overhead_ms_per_round": (
            (_ratio(_total(runs, "overhead_s"), _total(runs, "n_rounds"), 1000) or 0.0)
            if own
            else None
        ),
        "equals_target": round(equal / len(prompt_ids), 4) if own else None,
        "agreement": round(statistics.mean(r.agreement or 0.0 for r in own), 4) if own else None,
    }


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
        prompt_rows.append(
            {
                "id": prompt.id,
                "category": prompt.category,
                "constrained": prompt.schema is not None,
                "speedup": row,
            }
        )

    categories = sorted({p.category for p in result.prompts})
    rows = []
    for config in result.configs:
        for category in [*categories, "all"]:
            runs = [
                r
                for r in result.runs
                if r.config == config.name and (category == "all" or r.category == category)
            ]
            if runs:
                rows.append(_row(config.name, category, runs, speedups))
    return {"prompts": prompt_rows, "summary": rows, "noise": target_noise(result.runs)}


def target_noise(runs: Iterable[Run]) -> dict[str, float] | None:
    """How far the target alone's own runs of one prompt are apart: the faster over the
    slower, minus 1, per prompt run twice or more (median, lowest, highest over the prompts).
    The same decodes, so what parts them is the machine; a prompt's speedup closer to 1.0 than
    this says nothing. None when no prompt ran twice."""
    speeds: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        if run.config == TARGET:
            speeds[run.prompt_id].append(run.stats["tokens_per_s"])
    gaps = [max(s) / min(s) - 1.0 for s in speeds.values() if len(s) > 1 and min(s) > 0]
    return _spread(gaps) if gaps else None


def _ms_per_token(runs: Iterable[Run], key: str = "time_s") -> float | None:
    """The fastest time (`key`: all of it, or `overhead_s`, the loop's own) a generated token
    took over these runs, in milliseconds: what it costs where nothing else got in the way (a
    busy moment only ever adds to it)."""
    generated = [(r.stats.get(key), r.stats["n_generated"]) for r in runs]
    times = [1000 * seconds / n for seconds, n in generated if n and seconds is not None]
    return round(min(times), 3) if times else None


def constraint_cost(result: BenchResult) -> dict[str, Any] | None:
    """What a schema costs the target alone per token: on each prompt with one, its time per
    generated token under the schema (its runs as the target alone, the noise check's too)
    over its time without it (`free_runs`), as a ratio (1.0: free; 1.10: 10% slower); the
    fastest run of each side, since the same decodes differ only by what else ran (one stall
    in a median of two would be half the figure). Two different answers, so time per token,
    not per answer. Beside it, the loop's own time a token (neither model's decode: where the
    mask is computed), which a busy machine's decodes do not blur. None without schema
    prompts."""
    rows = []
    for prompt in result.prompts:
        if prompt.schema is None:
            continue
        alone = [r for r in result.runs if r.prompt_id == prompt.id and r.config == TARGET]
        free_runs = [r for r in result.free_runs if r.prompt_id == prompt.id]
        ruled, free = _ms_per_token(alone), _ms_per_token(free_runs)
        if ruled is None or free is None:
            continue
        rows.append(
            {
                "id": prompt.id,
                "category": prompt.category,
                "constrained_ms_per_token": ruled,
                "free_ms_per_token": free,
                "ratio": round(ruled / free, 4),
                "constrained_overhead_ms_per_token": _ms_per_token(alone, "overhead_s"),
                "free_overhead_ms_per_token": _ms_per_token(free_runs, "overhead_s"),
            }
        )
    if not rows:
        return None
    return {"prompts": rows, "ratio": _spread([row["ratio"] for row in rows])}


def describe_constraint_cost(report: dict[str, Any]) -> str | None:
    """The constraint's cost in one line, or None when nothing ran under a schema."""
    cost = report.get("constraint_cost")
    if not cost:
        return None
    ratio = cost["ratio"]
    spread = f" ({ratio['min']:.2f}–{ratio['max']:.2f})" if ratio["min"] != ratio["max"] else ""
    first = cost["prompts"][0]
    loop = ""
    if first.get("constrained_overhead_ms_per_token") is not None:
        loop = (
            f"; the loop's own work {first['constrained_overhead_ms_per_token']:.2f} ms vs "
            f"{first['free_overhead_ms_per_token']:.2f} ms a token"
        )
    return (
        f"JSON Schema: the target alone takes {ratio['median']:.2f}x{spread} its time per token "
        f"without the schema ({first['id']}: {first['constrained_ms_per_token']:.1f} ms vs "
        f"{first['free_ms_per_token']:.1f} ms a token{loop}; over {len(cost['prompts'])} "
        f"prompt{'s' * (len(cost['prompts']) != 1)})"
    )


def _percent(share: float) -> str:
    """18%, or 0.4% below 10% (a small noise is not none)."""
    return f"{share:.0%}" if share >= 0.1 else f"{share:.1%}"


def rests_on(report: dict[str, Any]) -> str:
    """What the figures rest on, in one line: prompts, runs, tokens, and the noise."""
    settings = report["settings"]
    n_prompts = len(report["prompts"])
    categories = len({p["category"] for p in report["prompts"]})
    rounds = settings["repeats"]
    parts = [
        f"{n_prompts} prompt{'s' * (n_prompts != 1)} in {categories} "
        f"categor{'ies' if categories != 1 else 'y'}",
        f"{len(report['runs'])} runs ({rounds} round{'s' * (rounds != 1)} each"
        + (", the target alone twice" if settings.get("noise_check") else "")
        + ")",
        f"up to {settings['max_tokens']} tokens a run",
    ]
    noise = report.get("noise")
    if noise:
        parts.append(
            f"the target alone's runs of one prompt were {_percent(noise['median'])} apart "
            f"(median; up to {_percent(noise['max'])}): a speedup nearer 1.0 than that is noise"
        )
    else:
        parts.append("no prompt ran twice: the noise is not known")
    return "; ".join(parts)


def speedup_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows a picture shows: every configuration but the target alone, with a
    speedup."""
    return [r for r in report["summary"] if r["config"] != TARGET and r["speedup"]]


def bar_scale(rows: list[dict[str, Any]]) -> float:
    """The speedup at the far end of a bar chart: past 1.0 and every prompt's, in halves."""
    top = max([1.0, *(r["speedup"]["max"] for r in rows if r["speedup"])])
    return (int(top * 2) + 1) / 2


def to_json(result: BenchResult) -> dict[str, Any]:
    summary = summarise(result)
    return {
        "schema": SCHEMA_ID,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": result.machine,
        "models": result.models,
        "settings": result.settings,
        "plan": result.plan,
        "calibration": result.calibration,
        "tools": result.tools,
        "notices": result.notices,
        "configs": [c.as_dict() for c in result.configs],
        "prompts": summary["prompts"],
        "summary": summary["summary"],
        "noise": summary["noise"],
        "constraint_cost": constraint_cost(result),
        "runs": [r.as_dict() for r in result.runs],
        "free_runs": [r.as_dict() for r in result.free_runs],
    }
