"""The command line: thin Typer commands that parse options and call the layers below.

Options, error handling and model resolution shared by the commands live in `options`; the
longer commands have a module each (`bench_cmd`, `serve_cmd`, `local_cmd` for `models --local`).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from specllama.chat import Message
from specllama.cli import bench_cmd, catalog_view, local_cmd, serve_cmd, ui
from specllama.cli.answer_split import StreamedAnswer
from specllama.cli.catalog_view import download_progress
from specllama.cli.inputs import (
    check_max_tokens,
    compile_rule,
    constraint_spec,
    read_prediction,
    read_prompt,
)
from specllama.cli.loading import (
    calibrate_with_notice,
    check_rpc_build,
    engine_config,
    fetch_model,
    workers_option,
)
from specllama.cli.options import (
    Adaptive,
    AddDirs,
    Ctx,
    Dirs,
    Draft,
    DrafterOpt,
    DraftMax,
    Exact,
    ExtraBuffers,
    GpuLayers,
    GpuLayersDraft,
    GrammarFile,
    JsonlOut,
    JsonOut,
    JsonSchemaFile,
    LocalOpt,
    MaxTokens,
    Measure,
    MinP,
    NoColor,
    NoTemplate,
    PairOpt,
    PredictionFile,
    ReasoningBudget,
    ReasoningOpt,
    Record,
    Remember,
    RemoveDirs,
    Rpc,
    Seed,
    System,
    Target,
    Temperature,
    Threads,
    TopK,
    TopP,
    friendly_errors,
    reasoning_choice,
)
from specllama.engine.events import FinishEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import check_prompt_fits
from specllama.errors import UsageError
from specllama.llama import amx
from specllama.llama.assistant import assistant_support
from specllama.llama.dflash import dflash_support
from specllama.llama.eagle3 import eagle3_support
from specllama.llama.library import build_facts
from specllama.llama.mtp import mtp_support
from specllama.llama.rpc import DEFAULT_PORT, check_workers
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
    exact: Exact = False,
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
    json_schema: JsonSchemaFile = None,
    grammar: GrammarFile = None,
    prediction: PredictionFile = None,
    remember: Remember = None,
    reasoning: ReasoningOpt = "auto",
    reasoning_budget: ReasoningBudget = -1,
) -> None:
    """Answer one prompt: the text on stdout, a one-line summary on stderr (a thinking model's
    thinking, dimmed, too, when it is a terminal)."""
    if json_out and jsonl_out:
        raise UsageError("--json and --jsonl exclude each other: pick one")
    mode, budget = reasoning_choice(reasoning, reasoning_budget)
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    # Every check of the user's input before anything is downloaded or loaded.
    text = read_prompt(prompt)
    check_max_tokens(max_tokens)
    spec = constraint_spec(json_schema, grammar)
    expected = read_prediction(prediction)
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
    )
    messages = [Message("system", system)] if system else []
    messages.append(Message("user", text))

    with Engine(config) as engine:
        templated = not no_chat_template
        tokens = engine.reasoning_prompt(messages, mode, chat_template=templated)
        check_prompt_fits(tokens, engine.target.n_ctx)  # before measuring costs
        rule = compile_rule(engine, spec)
        calibrate_with_notice(engine)
        answer, output = StreamedAnswer(engine, tokens, chat_template=templated), _RunOutput()
        finish: FinishEvent | None = None
        predicted = engine.text_tokens(expected) if expected else None
        events = engine.generate_thinking(
            tokens,
            params,
            max_tokens=max_tokens,
            budget=budget,
            constraint=rule,
            prediction=predicted,
        )
        for event in events:
            if isinstance(event, TokenEvent):
                told = answer.feed(event.token)
                if jsonl_out:
                    ui.write_json_line(_token_line(event, told))
                elif not json_out:
                    output.write(told)
            elif isinstance(event, FinishEvent):
                finish = event
        tail = answer.finish()

    assert finish is not None  # generate always ends with a FinishEvent
    stats = {**finish.stats.as_dict(), "exact": config.exact}
    if engine.calibration is not None:  # which calibration the adaptive controller started from
        stats["calibration"] = engine.calibration.as_dict()
    said = {"text": answer.text, "thinking": answer.thinking}
    if jsonl_out:
        ui.write_json_line({"type": "stats", **said, **stats})
    elif json_out:
        print(json.dumps({**said, **stats}))
    else:
        output.write(tail, end=True)
        ui.print_summary(finish.stats, exact=config.exact)


def _token_line(event: TokenEvent, told: list[tuple[str, str]]) -> dict[str, object]:
    """A --jsonl line for one token: its answer text, and its thinking when it had some."""
    line: dict[str, object] = {"type": "token", "token": event.token}
    line["text"] = "".join(text for kind, text in told if kind == "text")
    thinking = "".join(text for kind, text in told if kind == "thinking")
    if thinking:
        line["thinking"] = thinking
    return {**line, "from_draft": event.from_draft}


class _RunOutput:
    """`run`'s pieces: the thinking to stderr (a terminal only), the answer to stdout."""

    def __init__(self) -> None:
        self.thinking = False  # the thinking is being written: a new line when it ends

    def write(self, told: list[tuple[str, str]], *, end: bool = False) -> None:
        for kind, text in told:
            if kind == "thinking":
                ui.write_thinking(text)
                self.thinking = True
            else:
                self._end_thinking()
                ui.write_text(text)
        if end:
            self._end_thinking()
            ui.write_text("\n")

    def _end_thinking(self) -> None:
        if self.thinking:
            ui.write_thinking("", end=True)
            self.thinking = False


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
    exact: Exact = False,
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
    json_schema: JsonSchemaFile = None,
    grammar: GrammarFile = None,
    remember: Remember = None,
    reasoning: ReasoningOpt = "auto",
    reasoning_budget: ReasoningBudget = -1,
) -> None:
    """Chat in the terminal: answers stream coloured by origin, with live stats (/help); a
    thinking model's thinking dimmed, then folded into one line (/thinking unfolds it)."""
    from specllama.cli import repl

    mode, budget = reasoning_choice(reasoning, reasoning_budget)
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    spec = constraint_spec(json_schema, grammar)
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
    )
    check_max_tokens(max_tokens)
    view = ui.ChatView(color=ui.color_wanted(no_color), record=record is not None)
    with ui.stderr_console(color=view.color).status("loading models…"):
        engine = Engine(config)
    with engine:
        rule = compile_rule(engine, spec)
        calibrate_with_notice(engine)  # before the first turn, not inside it
        code = repl.chat(
            engine,
            view,
            params=params,
            max_tokens=max_tokens,
            system=system,
            chat_template=not no_chat_template,
            record=record,
            constraint=rule,
            reasoning=mode,
            reasoning_budget=budget,
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
    mtp = local_cmd.models_with_mtp()  # local models with their own draft head
    mtp_missing = mtp_support()  # what this llama-cpp-python lacks to run them (None: nothing)
    # ... and to run the heads that come in their own file
    heads_missing = {
        "eagle3": eagle3_support(),
        "dflash": dflash_support(),
        "assistant": assistant_support(),
    }
    if json_out:
        extra = {"calibrations": calibrations, "mtp_models": mtp, "mtp_missing": mtp_missing}
        extra.update({f"{kind}_missing": missing for kind, missing in heads_missing.items()})
        print(json.dumps({**report.as_json(), **extra}, indent=2))
    else:
        table = catalog_view.doctor_table(report, calibrations, mtp, mtp_missing, heads_missing)
        catalog_view.show(table)


app.command("bench", cls=bench_cmd.BenchCommand)(friendly_errors(bench_cmd.bench))
app.command("serve")(friendly_errors(serve_cmd.serve))
