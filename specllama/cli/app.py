"""The command line: thin Typer commands that parse options and call the layers below.

Options, error handling and model resolution shared by the commands live in `cli_options`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from specllama.chat import Message
from specllama.cli import catalog_view, local_cmd, ui
from specllama.cli.catalog_view import download_progress
from specllama.cli.options import (
    Adaptive,
    AddDirs,
    Configs,
    Ctx,
    Dirs,
    Draft,
    DrafterOpt,
    DraftMax,
    ExtraBuffers,
    GpuLayers,
    GpuLayersDraft,
    JsonlOut,
    JsonOut,
    LocalOpt,
    MaxTokens,
    Measure,
    MinP,
    NoColor,
    NoTemplate,
    PairOpt,
    PromptsFile,
    Record,
    RemoveDirs,
    Rpc,
    Seed,
    System,
    Target,
    Temperature,
    Threads,
    TopK,
    TopP,
    calibrate_with_notice,
    check_max_tokens,
    check_rpc_build,
    engine_config,
    fetch_model,
    friendly_errors,
    read_prompt,
    served_name,
    workers_option,
)
from specllama.engine.events import FinishEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import check_prompt_fits
from specllama.errors import UsageError
from specllama.llama import amx
from specllama.llama.backend import build_facts
from specllama.llama.rpc import DEFAULT_PORT, check_workers, is_loopback
from specllama.models import hub
from specllama.models.catalog import load_catalog
from specllama.models.hardware import doctor_report, pair_rows, smallest_quantised_model
from specllama.policy import calibration
from specllama.session import Engine

app = typer.Typer(
    help="Speculative decoding on llama.cpp: same output as the target model, only faster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """Speculative decoding on llama.cpp: same output as the target model, only faster."""
    # huggingface_hub logs resume attempts on stderr; our progress bar says it already.
    from huggingface_hub.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    ui.show_engine_messages()


@app.command()
@friendly_errors
def run(
    prompt: Annotated[str | None, typer.Argument(help="The prompt; stdin is appended.")] = None,
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
    max_tokens: MaxTokens = 256,
    system: System = None,
    no_chat_template: NoTemplate = False,
    json_out: JsonOut = False,
    jsonl_out: JsonlOut = False,
    adaptive: Adaptive = True,
) -> None:
    """Answer one prompt: the text on stdout, a one-line summary on stderr."""
    if json_out and jsonl_out:
        raise UsageError("--json and --jsonl exclude each other: pick one")
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    # Every check of the user's input before anything is downloaded or loaded.
    text = read_prompt(prompt)
    check_max_tokens(max_tokens)
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
    messages = [Message("system", system)] if system else []
    messages.append(Message("user", text))

    with Engine(config) as engine:
        tokens = engine.prompt_tokens(messages, chat_template=not no_chat_template)
        check_prompt_fits(tokens, engine.target.n_ctx)  # before measuring costs
        calibrate_with_notice(engine)
        pieces: list[str] = []
        stream = engine.target_text_stream()
        finish: FinishEvent | None = None
        for event in engine.generate(tokens, params, max_tokens=max_tokens):
            if isinstance(event, TokenEvent):
                piece = stream.feed(event.token)
                pieces.append(piece)
                if jsonl_out:
                    ui.write_json_line(
                        {
                            "type": "token",
                            "token": event.token,
                            "text": piece,
                            "from_draft": event.from_draft,
                        }
                    )
                elif not json_out:
                    ui.write_text(piece)
            elif isinstance(event, FinishEvent):
                finish = event
        tail = stream.flush()
        pieces.append(tail)

    assert finish is not None  # generate always ends with a FinishEvent
    stats = finish.stats.as_dict()
    if engine.calibration is not None:  # which calibration the adaptive controller started from
        stats["calibration"] = engine.calibration.as_dict()
    if jsonl_out:
        ui.write_json_line({"type": "stats", "text": "".join(pieces), **stats})
    elif json_out:
        print(json.dumps({"text": "".join(pieces), **stats}))
    else:
        ui.write_text(tail + "\n")
        ui.print_summary(finish.stats)


@app.command()
@friendly_errors
def chat(
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
    max_tokens: MaxTokens = 512,
    system: System = None,
    no_chat_template: NoTemplate = False,
    no_color: NoColor = False,
    record: Record = None,
    adaptive: Adaptive = True,
) -> None:
    """Chat in the terminal: answers stream coloured by origin, with live stats (/help)."""
    from specllama.cli import repl

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
    check_max_tokens(max_tokens)
    view = ui.ChatView(color=ui.color_wanted(no_color), record=record is not None)
    with ui.stderr_console().status("loading models…"):
        engine = Engine(config)
    with engine:
        calibrate_with_notice(engine)  # before the first turn, not inside it
        code = repl.chat(
            engine,
            view,
            params=params,
            max_tokens=max_tokens,
            system=system,
            chat_template=not no_chat_template,
            record=record,
        )
    raise typer.Exit(code)


@app.command()
@friendly_errors
def models(
    json_out: JsonOut = False,
    rpc: Rpc = None,
    local: LocalOpt = False,
    dirs: Dirs = None,
    add_dirs: AddDirs = None,
    remove_dirs: RemoveDirs = None,
    measure: Measure = False,
) -> None:
    """The catalogue of draft/target pairs: sizes, what is downloaded, what fits this machine
    (with --rpc: the target on those workers, the draft here). With --local: the models
    already on this machine, and the pairs among them."""
    if local or dirs or add_dirs or remove_dirs or measure:
        if rpc:
            raise UsageError("--rpc does not go with --local", hint="list the catalogue with --rpc")
        local_cmd.show_local(
            dirs or [], add_dirs or [], remove_dirs or [], measure=measure, json_out=json_out
        )
        return
    catalog, endpoints = load_catalog(), workers_option(rpc)
    free = None
    if endpoints:
        free = sum(w.free_bytes for w in check_workers(endpoints, version=build_facts().version))
    rows = pair_rows(catalog, build_facts(), workers_free=free)
    if json_out:
        print(json.dumps([row.as_json() for row in rows], indent=2))
    else:
        catalog_view.show(catalog_view.models_table(rows, catalog))


@app.command()
@friendly_errors
def worker(
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (0.0.0.0: every interface).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port.")] = DEFAULT_PORT,
    gpu: Annotated[
        bool | None,
        typer.Option(
            "--gpu/--cpu",
            show_default=False,
            help="Serve the GPUs, or the CPU (default: the GPUs if any).",
        ),
    ] = None,
    threads: Threads = None,
) -> None:
    """Serve this machine's GPUs (or CPU) to other machines' --rpc: their target's layers run
    here. No authentication: trusted networks only."""
    from specllama.cli import worker as worker_mod

    check_rpc_build()
    worker_mod.run(host, port, gpu=gpu, threads=threads)


@app.command()
@friendly_errors
def pull(
    name: Annotated[str, typer.Argument(help="A pair name, or one model REF.")],
) -> None:
    """Download a pair (or one model) into the cache, with its checksum checked."""
    catalog = load_catalog()
    console = ui.stderr_console()
    with download_progress(console) as progress_for:
        for model in hub.models_to_pull(name, catalog):
            path = fetch_model(model, catalog, progress_for, catalog_view.notice_printer(console))
            catalog_view.show(str(path))


@app.command()
@friendly_errors
def doctor(json_out: JsonOut = False) -> None:
    """This llama.cpp build (GPU offload?), RAM/VRAM, caches, and how to enable a GPU."""
    facts, catalog = build_facts(), load_catalog()
    amx_report = amx.report(
        facts.system_info, facts.build_id, probe_model=smallest_quantised_model(catalog)
    )
    report = doctor_report(facts, catalog=catalog, amx=amx_report)
    calibrations = calibration.cached_calibrations()
    if json_out:
        print(json.dumps({**report.as_json(), "calibrations": calibrations}, indent=2))
    else:
        catalog_view.show(catalog_view.doctor_table(report, calibrations))


@app.command()
@friendly_errors
def bench(
    pair: PairOpt = None,
    target: Target = None,
    draft: Draft = None,
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
    configs: Configs = "target,model:2,model:4,ngram:8,adaptive",
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
    from specllama.bench.prompts import load_prompts

    if plot_file is not None:
        bench_report.check_plot_support()
    check_max_tokens(max_tokens)
    chosen = load_prompts(prompts)
    if category:
        known = {p.category for p in chosen}
        missing = [c for c in category if c not in known]
        if missing:
            raise UsageError(
                f"no prompts in category {', '.join(missing)}",
                hint=f"categories: {', '.join(sorted(known))}",
            )
        chosen = [p for p in chosen if p.category in category]
    if limit is not None:
        chosen = chosen[: max(limit, 1)]
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    config = engine_config(
        pair=pair,
        target=target,
        draft=draft,
        drafter=None,
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
        configs,
        has_draft=config.draft is not None,
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


@app.command()
@friendly_errors
def serve(
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
    adaptive: Adaptive = True,
    temperature: Annotated[
        float, typer.Option("--temperature", help="For requests that set none (0 = greedy).")
    ] = 0.0,
    top_k: TopK = 40,
    top_p: TopP = 1.0,
    min_p: MinP = 0.0,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (0.0.0.0: every interface).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: a free one).")
    ] = 8080,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            envvar="SPECLLAMA_API_KEY",
            show_default=False,
            help="Require 'Authorization: Bearer KEY' on every /v1 request.",
        ),
    ] = None,
    queue: Annotated[
        int,
        typer.Option("--queue", min=0, help="Requests that may wait behind the running one."),
    ] = 8,
) -> None:
    """An OpenAI-compatible HTTP server (chat and text completions) over the pair."""
    from specllama.server import app as server

    defaults = SamplingParams(temperature, top_k, top_p, min_p)
    if api_key is not None and not api_key.strip():
        raise UsageError("--api-key is empty", hint="give a key, or leave the option out")
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
    # A catalogue pair is served under its name; a --target under its file name (an Ollama or
    # LM Studio model under its name there: its file name is a digest or a quantisation).
    model_id = served_name(target, config.target) if target else load_catalog().pair(pair).name
    settings = server.Settings(model_id, api_key, queue, defaults)
    console = ui.stderr_console()
    if api_key is None and not is_loopback(host):
        ui.print_warning(
            f"listening on {host} without --api-key: anyone who can reach this machine can "
            "use the models",
            console,
        )
    sock = server.bind(host, port)  # before loading: a taken port fails at once
    with console.status("loading models…"):
        engine = Engine(config)
    with engine:
        ui.show_log(server.log, console)  # a line per answer, and errors
        url, facts = f"{server.url_of(sock)}/v1", server.startup_facts(engine, settings)
        server.run(
            engine,
            settings,
            sock,
            prepare=lambda: calibrate_with_notice(engine),  # on the generation thread
            on_ready=lambda: ui.print_serving(url, facts, console),
        )
    console.print("[dim]server stopped[/dim]")
