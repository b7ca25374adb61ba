"""`specllama bench`: the target alone against speculative configurations, on the same prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from specllama.cli import ui
from specllama.cli.options import (
    Adaptive,
    Configs,
    Ctx,
    Draft,
    DrafterOpt,
    DraftMax,
    ExtraBuffers,
    GpuLayers,
    GpuLayersDraft,
    MaxTokens,
    MinP,
    PairOpt,
    PromptsFile,
    Rpc,
    Seed,
    Target,
    Temperature,
    Threads,
    TopK,
    TopP,
    calibrate_with_notice,
    check_max_tokens,
    engine_config,
)
from specllama.engine.sampling import SamplingParams
from specllama.session import Engine


def bench(
    pair: PairOpt = None,
    target: Target = None,
    draft: Draft = None,
    drafter: DrafterOpt = None,
    draft_max: DraftMax = None,
    gpu_layers: GpuLayers = None,
    gpu_layers_draft: GpuLayersDraft = None,
    ctx: Ctx = 4096,
    threads: Threads = None,
    extra_buffers: ExtraBuffers = None,
    rpc: Rpc = None,
    temperature: Temperature = 0.0,
    top_k: TopK = 40,
    top_p: TopP = 1.0,
    min_p: MinP = 0.0,
    seed: Seed = None,
    max_tokens: MaxTokens = 128,
    adaptive: Adaptive = True,
    prompts: PromptsFile = None,
    configs: Configs = None,
    category: Annotated[
        list[str] | None, typer.Option("--category", help="Only these categories (repeatable).")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most N prompts.")] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="Rounds per prompt.")] = 2,
    warmup: Annotated[bool, typer.Option("--warmup/--no-warmup", help="One warm-up round.")] = True,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the full results as JSON to FILE.")
    ] = None,
    plot_file: Annotated[
        Path | None, typer.Option("--plot", help="Write a PNG plot (needs specllama[plot]).")
    ] = None,
) -> None:
    """Target alone vs. speculative configurations, interleaved, on the same prompts."""
    from specllama.bench import report as bench_report
    from specllama.bench import runner as bench_mod
    from specllama.bench.prompts import load_prompts, select_prompts

    if plot_file is not None:
        bench_report.check_plot_support()
    check_max_tokens(max_tokens)
    chosen = select_prompts(load_prompts(prompts), category, limit)
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    config = engine_config(
        pair=pair,
        target=target,
        draft=draft,
        drafter=drafter,
        draft_max=draft_max,
        ctx=ctx,
        gpu_layers=gpu_layers,
        gpu_layers_draft=gpu_layers_draft,
        threads=threads,
        extra_buffers=extra_buffers,
        adaptive=adaptive,
        rpc_workers=rpc,
    )
    plan = bench_mod.parse_configs(
        configs or bench_mod.default_configs(has_draft=config.draft is not None, mtp=config.mtp),
        has_draft=config.draft is not None,
        has_mtp=config.mtp,
        draft_max=config.draft_max,
        adaptive_draft_max=config.adaptive_draft_max,
        adaptive=adaptive,
    )
    console = ui.stderr_console()
    with Engine(config) as engine:
        if any(c.adaptive for c in plan):
            calibrate_with_notice(engine)
        with bench_report.progress_bar(console) as progress:
            result = bench_mod.run_bench(
                engine,
                chosen,
                plan,
                params,
                max_tokens=max_tokens,
                repeats=repeats,
                warmup=warmup,
                progress=progress,
            )
    report = bench_mod.to_json(result)
    bench_report.print_report(report)
    if json_file is not None:
        json_file.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        console.print(f"[dim]results written to {json_file}[/dim]")
    if plot_file is not None:
        bench_report.write_plot(report, plot_file)
        console.print(f"[dim]plot written to {plot_file}[/dim]")
