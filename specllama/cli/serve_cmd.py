"""`specllama serve`: an OpenAI-compatible HTTP server over the pair."""

from __future__ import annotations

import re
import threading
import webbrowser
from typing import Annotated

import psutil
import typer

from specllama.cli import ui
from specllama.cli.loading import calibrate_with_notice, engine_config, served_name
from specllama.cli.options import (
    Adaptive,
    Ctx,
    Draft,
    DrafterOpt,
    DraftMax,
    Exact,
    ExtraBuffers,
    GpuLayers,
    GpuLayersDraft,
    MinP,
    PairOpt,
    ReasoningBudget,
    ReasoningOpt,
    Remember,
    Rpc,
    Target,
    Threads,
    TopK,
    TopP,
    reasoning_choice,
)
from specllama.engine.sampling import SamplingParams
from specllama.errors import UsageError
from specllama.llama.rpc import is_loopback
from specllama.models.catalog import load_catalog
from specllama.session import Engine


def check_origin(origin: str) -> str:
    """--cors takes what a browser sends as Origin: scheme://host[:port], or '*'."""
    stripped = origin.strip().rstrip("/")
    if stripped != "*" and not re.fullmatch(r"https?://[^/\s]+", stripped):
        raise UsageError(
            f"--cors {origin!r} is not an origin", hint="give scheme://host[:port], or '*'"
        )
    return stripped


def default_cache_mb() -> int:
    """An eighth of the machine's memory, at most 8 GB: room for a few long conversations
    (a 12K-token prompt holds ~150 MB on a 0.5B model, ~350 MB on a 1.5B one)."""
    return min(psutil.virtual_memory().total // 8 // 2**20, 8192)


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
    exact: Exact = False,
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
    parallel: Annotated[
        int | None,
        typer.Option(
            "--parallel",
            "-np",
            metavar="N",
            min=1,
            show_default=False,
            help="Requests answered at once, each in its own slot of --ctx tokens, their "
            "decodes batched into one step. Default: 4 on a CPU; 1 on a GPU (where drafting "
            "beside the target's verify pays for one user), with a draft head or a target with "
            "recurrent layers.",
        ),
    ] = None,
    queue: Annotated[
        int,
        typer.Option("--queue", min=0, help="Requests that may wait for a free slot."),
    ] = 8,
    cors: Annotated[
        list[str] | None,
        typer.Option(
            "--cors",
            metavar="ORIGIN",
            show_default=False,
            help="Let web pages at ORIGIN (http://host:port) call the API; repeat for more, "
            "'*' for any. None by default.",
        ),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            metavar="NAME",
            show_default=False,
            help="Answer requests that reach it under NAME too (a proxy's or container's name "
            "for this machine, e.g. host.docker.internal); repeat for more.",
        ),
    ] = None,
    open_page: Annotated[
        bool, typer.Option("--open", help="Open the chat page in the browser once ready.")
    ] = False,
    remember: Remember = None,
    cache_ram: Annotated[
        int | None,
        typer.Option(
            "--cache-ram",
            metavar="MB",
            min=0,
            show_default=False,
            help="RAM for the KV state of earlier prompts, so that a conversation coming back "
            "after another evaluates only what is new (0: off). Default: an eighth of this "
            "machine's memory, at most 8 GB.",
        ),
    ] = None,
    alias: Annotated[
        list[str] | None,
        typer.Option(
            "--alias",
            metavar="NAME",
            show_default=False,
            help="Also list the model as NAME in /v1/models (requests may name any model: "
            "this server answers them all with its own); repeat for more.",
        ),
    ] = None,
    reasoning: ReasoningOpt = "auto",
    reasoning_budget: ReasoningBudget = -1,
    keepalive: Annotated[
        float,
        typer.Option(
            "--keepalive",
            metavar="SECONDS",
            min=0.1,
            help="Seconds of silence after which a stream says it is still working (while a "
            "long prompt is evaluated), so that clients with an idle timeout wait.",
        ),
    ] = 5.0,
    n_predict: Annotated[
        int | None,
        typer.Option(
            "--n-predict",
            metavar="N",
            min=1,
            show_default=False,
            help="Most tokens any answer may have, whatever the request asks (llama-server's "
            "-n): a bound on what one client can hold a slot for. Default: up to the context.",
        ),
    ] = None,
) -> None:
    """An OpenAI-compatible HTTP server (chat and text completions) over the pair, with a chat
    page at its address that shows what speculation does."""
    from specllama.server import running as server
    from specllama.server.app import Settings

    defaults = SamplingParams(temperature, top_k, top_p, min_p)
    mode, budget = reasoning_choice(reasoning, reasoning_budget)
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
        remember=remember,
        exact=exact,
        n_seq=parallel,
    )
    # A catalogue pair is served under its name; a --target under its file name (an Ollama or
    # LM Studio model under its name there: its file name is a digest or a quantisation).
    model_id = served_name(target, config.target) if target else load_catalog().pair(pair).name
    origins = tuple(check_origin(origin) for origin in cors or ())
    settings = Settings(
        model_id,
        api_key,
        queue,
        defaults,
        host=host,
        cors=origins,
        allowed_hosts=tuple(allow_host or ()),
        aliases=tuple(alias or ()),
        cache_bytes=(default_cache_mb() if cache_ram is None else cache_ram) * 2**20,
        reasoning=mode,
        reasoning_budget=budget,
        keepalive_s=keepalive,
        n_predict=n_predict,
    )
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
        url, facts = server.url_of(sock), server.startup_facts(engine, settings)

        def ready() -> None:
            ui.print_serving(f"{url}/v1", [f"chat page {url}/", *facts], console)
            if open_page:  # beside the server: a browser command may wait until it is closed
                threading.Thread(target=webbrowser.open, args=(f"{url}/",), daemon=True).start()

        server.run(
            engine,
            settings,
            sock,
            prepare=lambda: calibrate_with_notice(engine),  # on the generation thread
            on_ready=ready,
        )
    console.print("[dim]server stopped[/dim]")
