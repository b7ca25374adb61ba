"""`specllama bench`: the target alone against speculative configurations, on the same prompts."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer
from rich.markup import escape
from typer.core import TyperCommand

from specllama.cli import ui
from specllama.cli.inputs import check_max_tokens
from specllama.cli.loading import calibrate_with_notice, engine_config
from specllama.cli.options import (
    Adaptive,
    BenchMaxTokens,
    Configs,
    Ctx,
    Draft,
    DrafterOpt,
    DraftMax,
    Exact,
    ExtraBuffers,
    Full,
    GpuLayers,
    GpuLayersDraft,
    MinP,
    PairOpt,
    PromptsFile,
    Repeats,
    ReportFile,
    Rpc,
    Seed,
    Target,
    Temperature,
    Threads,
    TopK,
    TopP,
    VsLlamaCpp,
)
from specllama.engine.sampling import SamplingParams
from specllama.errors import UsageError
from specllama.session import Engine

if TYPE_CHECKING:
    from rich.console import Console

    from specllama.bench.configs import BenchConfig
    from specllama.bench.llamacpp import LlamaCpp, LlamaCppConfig
    from specllama.bench.prompts import BenchPrompt

ON_PATH = ""  # --vs-llamacpp without a folder: look on PATH
REPORT_MARGIN_S = 5.0  # of the quick bench's 3 minutes, for printing and writing the results


class BenchCommand(TyperCommand):
    """`--vs-llamacpp [DIR]`: the folder may be left out (then PATH is searched), which Typer's
    parser cannot say; the arguments get the empty folder before it parses them."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given: list[str] = []
        for i, arg in enumerate(args):
            given.append(arg)
            if arg == "--vs-llamacpp":
                following = args[i + 1] if i + 1 < len(args) else None
                if following is None or following.startswith("-"):
                    given.append(ON_PATH)
        return super().parse_args(ctx, given)


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
    exact: Exact = False,
    rpc: Rpc = None,
    temperature: Temperature = 0.0,
    top_k: TopK = 40,
    top_p: TopP = 1.0,
    min_p: MinP = 0.0,
    seed: Seed = None,
    max_tokens: BenchMaxTokens = None,
    adaptive: Adaptive = True,
    prompts: PromptsFile = None,
    configs: Configs = None,
    full: Full = False,
    category: Annotated[
        list[str] | None, typer.Option("--category", help="Only these categories (repeatable).")
    ] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="At most N prompts.")] = None,
    repeats: Repeats = None,
    warmup: Annotated[bool, typer.Option("--warmup/--no-warmup", help="One warm-up round.")] = True,
    vs_llamacpp: VsLlamaCpp = None,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the full results as JSON to FILE.")
    ] = None,
    report_file: ReportFile = None,
    plot_file: Annotated[
        Path | None, typer.Option("--plot", help="Write a PNG plot (needs specllama[plot]).")
    ] = None,
) -> None:
    """Is speculative decoding faster here, and for what? The target alone against speculative
    configurations, interleaved, on the same prompts.

    Quick by default (about 3 minutes on a 2-core CPU): one prompt per category, the target
    alone, the default (adaptive) and the fixed configurations that matter for this pair on this
    machine, with as many tokens as 3 minutes allow. Your own prompts: --prompts FILE.jsonl.
    Everything: --full. Beside llama.cpp's own: --vs-llamacpp [DIR]. A page: --report FILE.html.
    """
    from specllama.bench import llamacpp
    from specllama.bench import report as bench_report
    from specllama.bench.configs import parse_configs
    from specllama.bench.plan import QUICK_BUDGET_S, plan_for
    from specllama.bench.prompts import load_prompts, select_prompts
    from specllama.bench.runner import run_bench
    from specllama.bench.summary import to_json
    from specllama.engine.control import HEADS

    if plot_file is not None:
        from specllama.bench.plot import check_plot_support

        check_plot_support()
    if max_tokens is not None:
        check_max_tokens(max_tokens)
    for option, path in (("--json", json_file), ("--report", report_file), ("--plot", plot_file)):
        _check_writable(option, path)  # before the runs, not after minutes of them
    chosen = select_prompts(load_prompts(prompts), category, limit)
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    tool = _find_llamacpp(vs_llamacpp)  # before any download: its one line comes first
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
        exact=exact,
    )

    head = config.drafter if config.drafter in HEADS else None  # a head in --draft's file

    def configs_of(spec: str) -> list[BenchConfig]:
        return parse_configs(
            spec,
            has_draft=config.draft is not None and head is None,
            has_mtp=config.mtp,
            head=head,
            draft_max=config.draft_max,
            adaptive_draft_max=config.adaptive_draft_max,
            adaptive=adaptive,
        )

    if configs:
        configs_of(configs)  # a bad --configs is refused before any model loads
    console = ui.stderr_console()
    started = time.monotonic()
    with Engine(config) as engine:
        calibrate_with_notice(engine, always=not full)
        plan = plan_for(
            engine,
            chosen,
            full=full,
            configs=configs,
            max_tokens=max_tokens,
            repeats=repeats,
            budget_s=QUICK_BUDGET_S - REPORT_MARGIN_S - (time.monotonic() - started),
        )
        for note in plan.notes:
            console.print(f"[dim]{escape(note)}[/dim]")
        planned = configs_of(plan.configs)
        external = _llamacpp_configs(tool, engine, plan.prompts, params, planned)
        with bench_report.progress_bar(console) as progress:
            result = run_bench(
                engine,
                plan.prompts,
                planned,
                params,
                max_tokens=plan.max_tokens,
                repeats=plan.repeats,
                warmup=warmup,
                warmup_tokens=plan.warmup_tokens,
                noise_check=plan.noise_check,
                external=external,
                progress=progress,
            )
    result.plan = plan.as_dict()
    if tool is not None and external:
        result.tools[llamacpp.TOOL] = tool.as_dict()
    for notice in result.notices:
        ui.print_warning(notice)
    report = to_json(result)
    bench_report.print_report(report)
    _write_outputs(report, console, json_file, report_file, plot_file)


def _check_writable(option: str, path: Path | None) -> None:
    if path is None:
        return
    folder = path.expanduser().resolve().parent
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        raise UsageError(
            f"{option} {path}: cannot write a file there", hint="give a file in a folder you own"
        )


def _find_llamacpp(where: str | None) -> LlamaCpp | None:
    """llama.cpp's binary for --vs-llamacpp, or None (not asked for, or not usable: one line)."""
    from specllama.bench import llamacpp

    if where is None:
        return None
    try:
        return llamacpp.find(where)
    except llamacpp.LlamaCppUnavailable as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        ui.print_warning(f"{exc}{hint}: the bench runs without llama.cpp")
        return None


def _llamacpp_configs(
    tool: LlamaCpp | None,
    engine: Engine,
    prompts: list[BenchPrompt],
    params: SamplingParams,
    planned: list[BenchConfig],
) -> list[LlamaCppConfig]:
    """llama.cpp's configurations beside ours, its draft model (or head) at our fixed draft
    length."""
    from specllama.bench import llamacpp
    from specllama.engine.control import HEADS

    if tool is None:
        return []
    fixed = [
        c.draft_max
        for c in planned
        if c.drafter in ("model", "mtp", *HEADS) and not c.adaptive and not c.pipelined
    ]
    try:
        return llamacpp.configs_for(
            tool,
            engine,
            prompts,
            params,
            draft_max=fixed[0] if fixed else engine.draft_max,
        )
    except llamacpp.LlamaCppUnavailable as exc:
        ui.print_warning(f"{exc}: the bench runs without llama.cpp")
        return []


def _write_outputs(
    report: dict[str, Any],
    console: Console,
    json_file: Path | None,
    report_file: Path | None,
    plot_file: Path | None,
) -> None:
    from specllama.bench.html_report import write_html
    from specllama.bench.plot import write_plot

    if json_file is not None:
        json_file.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        console.print(f"[dim]results written to {escape(str(json_file))}[/dim]")
    if report_file is not None:
        write_html(report, report_file)
        console.print(f"[dim]report written to {escape(str(report_file))}[/dim]")
    if plot_file is not None:
        write_plot(report, plot_file)
        console.print(f"[dim]plot written to {escape(str(plot_file))}[/dim]")
