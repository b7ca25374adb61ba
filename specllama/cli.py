"""The command line: thin Typer commands that parse options and call the layers below.

Every SpecllamaError is caught in one place (`friendly_errors`) and printed as one line;
SPECLLAMA_DEBUG=1 lets the traceback through instead.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from specllama import calibration, hub, ui, ui_catalog
from specllama.backend import build_facts
from specllama.catalog import Catalog, ModelRef, Pair, load_catalog, parse_ref
from specllama.chat import Message
from specllama.drafters import NoDrafter
from specllama.errors import SpecllamaError, UsageError
from specllama.hardware import default_gpu_layers, doctor_report, pair_rows
from specllama.sampling import SamplingParams
from specllama.session import Engine, EngineConfig, check_draft_max, check_drafter
from specllama.speculative import FinishEvent, TokenEvent
from specllama.ui_catalog import ProgressFor, download_progress

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


F = TypeVar("F", bound=Callable[..., Any])


def friendly_errors(command: F) -> F:
    """Turn our errors into one red line and an exit code; keep tracebacks for bugs."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except SpecllamaError as exc:
            if os.environ.get("SPECLLAMA_DEBUG") == "1":
                raise
            ui.print_error(str(exc), exc.hint)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            ui.print_error("interrupted")
            raise typer.Exit(130) from None
        except BrokenPipeError:
            # The reader of stdout went away (`| head`): stop quietly, as Unix tools do, and
            # point stdout at /dev/null so the interpreter's final flush does not fail again.
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None

    return wrapper  # type: ignore[return-value]


# -- shared options (Annotated aliases, reused by every command that loads models) ------------

PairOpt = Annotated[
    str | None,
    typer.Option("--pair", "-p", help="A draft/target pair from the catalogue (default pair)."),
]
Target = Annotated[
    str | None,
    typer.Option(
        "--target", "-t", help="Target: catalogue name, .gguf path or hf:owner/repo/file."
    ),
]
Draft = Annotated[
    str | None,
    typer.Option("--draft", "-d", help="Draft: catalogue name, .gguf path or hf:owner/repo/file."),
]
DrafterOpt = Annotated[
    str | None,
    typer.Option(
        "--drafter", help="model, ngram, or none (the target alone). Default: model if a draft."
    ),
]
DraftMax = Annotated[
    int | None,
    typer.Option("--draft-max", "-k", help="Most tokens drafted a round (default: the pair's)."),
]
GpuLayers = Annotated[
    int | None,
    typer.Option("--gpu-layers", help="Target layers on the GPU (-1 all; default: all if any)."),
]
GpuLayersDraft = Annotated[
    int | None,
    typer.Option("--gpu-layers-draft", help="Draft layers on the GPU (default as --gpu-layers)."),
]
Ctx = Annotated[int, typer.Option("--ctx", help="Context size in tokens.")]
Threads = Annotated[
    int | None, typer.Option("--threads", help="CPU threads (default: physical cores).")
]
Temperature = Annotated[float, typer.Option("--temperature", help="0 = greedy.")]
TopK = Annotated[int, typer.Option("--top-k", help="Keep the k likeliest tokens (0 = all).")]
TopP = Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass.")]
MinP = Annotated[float, typer.Option("--min-p", help="Drop tokens below min-p x the top one.")]
Seed = Annotated[int | None, typer.Option("--seed", help="Random seed for sampling.")]
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-n", help="Most tokens to generate.")]
System = Annotated[str | None, typer.Option("--system", help="System prompt.")]
NoTemplate = Annotated[
    bool, typer.Option("--no-chat-template", help="Send the prompt as is, without the template.")
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object at the end.")]
Adaptive = Annotated[
    bool,
    typer.Option(
        "--adaptive/--fixed",
        help="Adaptive: choose draft length and source (n-gram, then the draft model) each "
        "round from measured costs, off when it does not pay. Fixed: always --draft-max.",
    ),
]
JsonlOut = Annotated[
    bool,
    typer.Option("--jsonl", help="Stream JSON lines: one per token, then one with the stats."),
]


def resolve_models(
    pair: str | None, target: str | None, draft: str | None
) -> tuple[Path, Path | None, Pair | None]:
    """--pair, or --target/--draft REFs, or the default pair -> local files (downloaded if
    needed, with progress on stderr)."""
    if pair is not None and (target or draft):
        raise UsageError("use either --pair or --target/--draft, not both")
    catalog = load_catalog()
    console = ui.stderr_console()

    notice = ui_catalog.notice_printer(console)
    with download_progress(console) as progress_for:
        if target is None:
            if draft is not None:
                raise UsageError("--draft needs a --target")
            target_path, draft_path, chosen = hub.resolve_pair(
                catalog, pair, progress_for=progress_for, notice=notice
            )
            return target_path, draft_path, chosen
        paths = [
            _fetch(ref, catalog, progress_for, notice) if ref else None for ref in (target, draft)
        ]
    return paths[0], paths[1], None


def _fetch(
    ref: str | ModelRef | Path, catalog: Catalog, progress_for: ProgressFor, notice: hub.Notice
) -> Path:
    model = parse_ref(ref, catalog) if isinstance(ref, str) else ref
    if isinstance(model, Path):
        return model
    return hub.ensure_model(model, progress=progress_for(model), notice=notice)


def engine_config(
    *,
    pair: str | None,
    target: str | None,
    draft: str | None,
    drafter: str | None,
    draft_max: int | None,
    ctx: int,
    gpu_layers: int | None,
    gpu_layers_draft: int | None,
    threads: int | None,
    adaptive: bool = True,
) -> EngineConfig:
    """The command-line model options -> what the Engine loads (validated before any download)."""
    if drafter is not None:
        check_drafter(drafter)
    if draft_max is not None:
        check_draft_max(draft_max)
    target_path, draft_path, chosen = resolve_models(pair, target, draft)
    if drafter is None:
        drafter = chosen.drafter if chosen else ("model" if draft_path else "ngram")
    if draft_max is None:
        draft_max = chosen.draft_max if chosen else 4
    offload = default_gpu_layers(build_facts())
    return EngineConfig(
        target=target_path,
        draft=draft_path if drafter == "model" else None,
        drafter=drafter,
        draft_max=draft_max,
        n_ctx=ctx,
        n_gpu_layers=offload if gpu_layers is None else gpu_layers,
        n_gpu_layers_draft=offload if gpu_layers_draft is None else gpu_layers_draft,
        n_threads=threads,
        adaptive=adaptive,
    )


def calibrate_with_notice(engine: Engine) -> None:
    """Measure this machine's costs once per model pair (cached), saying so on stderr."""
    if engine.config.adaptive and not isinstance(engine.drafter, NoDrafter):
        engine.calibrate(
            on_measure=lambda: ui.stderr_console().print(
                "[dim]measuring this machine's decode costs (once per model pair)…[/dim]"
            )
        )


def check_max_tokens(max_tokens: int) -> None:
    if max_tokens < 1:
        raise UsageError(f"--max-tokens must be at least 1, got {max_tokens}")


def read_prompt(argument: str | None) -> str:
    """The prompt argument, stdin when piped, or both (stdin appended as context)."""
    piped = None
    if not sys.stdin.isatty():
        raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
        piped = _decode_stdin(raw) if isinstance(raw, bytes) else raw
    parts = [p for p in (argument, piped) if p and p.strip()]
    if not parts:
        raise UsageError("the prompt is empty: pass it as an argument or pipe it on stdin")
    return "\n\n".join(p.strip("\n") for p in parts)


def _decode_stdin(raw: bytes) -> str:
    if b"\x00" in raw:
        raise UsageError(
            "stdin looks like a binary file, not text", hint="pipe a text file, or the prompt"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"stdin is not UTF-8 text (byte {exc.start})",
            hint="convert it first, e.g. iconv -f latin1 -t utf-8 FILE | specllama run ...",
        ) from None


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
        adaptive=adaptive,
    )
    messages = [Message("system", system)] if system else []
    messages.append(Message("user", text))

    with Engine(config) as engine:
        calibrate_with_notice(engine)
        tokens = engine.prompt_tokens(messages, chat_template=not no_chat_template)
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
    if jsonl_out:
        ui.write_json_line({"type": "stats", "text": "".join(pieces), **finish.stats.as_dict()})
    elif json_out:
        print(json.dumps({"text": "".join(pieces), **finish.stats.as_dict()}))
    else:
        ui.write_text(tail + "\n")
        ui.print_summary(finish.stats)


NoColor = Annotated[
    bool, typer.Option("--no-color", help="No colours (also when NO_COLOR is set or not a tty).")
]
Record = Annotated[
    Path | None,
    typer.Option("--record", help="On exit, save the session's screen as an SVG picture."),
]


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
    from specllama import repl

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
        adaptive=adaptive,
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
def models(json_out: JsonOut = False) -> None:
    """The catalogue of draft/target pairs: sizes, what is downloaded, what fits this machine."""
    catalog = load_catalog()
    rows = pair_rows(catalog, build_facts())
    if json_out:
        print(json.dumps([row.as_json() for row in rows], indent=2))
    else:
        ui_catalog.show(ui_catalog.models_table(rows, catalog))


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
            path = _fetch(model, catalog, progress_for, ui_catalog.notice_printer(console))
            ui_catalog.show(str(path))


@app.command()
@friendly_errors
def doctor(json_out: JsonOut = False) -> None:
    """This llama.cpp build (GPU offload?), RAM/VRAM, caches, and how to enable a GPU."""
    report = doctor_report(build_facts(), catalog=load_catalog())
    calibrations = calibration.cached_calibrations()
    if json_out:
        print(json.dumps({**report.as_json(), "calibrations": calibrations}, indent=2))
    else:
        ui_catalog.show(ui_catalog.doctor_table(report, calibrations))


PromptsFile = Annotated[
    Path | None,
    typer.Option("--prompts", help="JSONL prompt file (default: the bundled set of ~30)."),
]
Configs = Annotated[
    str,
    typer.Option(
        "--configs", help="Comma-separated: target, model:K, ngram:K, adaptive (target is implied)."
    ),
]


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
    from specllama import bench as bench_mod

    if plot_file is not None:
        bench_mod.check_plot_support()
    check_max_tokens(max_tokens)
    chosen = bench_mod.load_prompts(prompts)
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
        adaptive=adaptive,
    )
    plan = bench_mod.parse_configs(
        configs,
        has_draft=config.draft is not None,
        draft_max=config.draft_max,
        adaptive=adaptive,
    )
    console = ui.stderr_console()
    with Engine(config) as engine:
        if any(c.adaptive for c in plan):
            calibrate_with_notice(engine)
        with bench_mod.progress_bar(console) as progress:
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
    bench_mod.print_report(report)
    if json_file is not None:
        json_file.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        console.print(f"[dim]results written to {json_file}[/dim]")
    if plot_file is not None:
        bench_mod.write_plot(report, plot_file)
        console.print(f"[dim]plot written to {plot_file}[/dim]")
