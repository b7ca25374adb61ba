"""What the commands share: option aliases, the one place errors become one line, reading the
prompt, and turning model options into an EngineConfig (downloading models when needed).

Every SpecllamaError is caught in `friendly_errors` and printed as one line; SPECLLAMA_DEBUG=1
lets the traceback through instead.
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
from rich.markup import escape

from specllama.cli import catalog_view, ui
from specllama.cli.catalog_view import ProgressFor, download_progress
from specllama.cli.local_cmd import auto_draft
from specllama.engine.constraint import ConstraintSpec, Grammar
from specllama.engine.control import HEADS
from specllama.engine.drafters import NoDrafter
from specllama.errors import ConstraintError, RpcError, SpecllamaError, UsageError
from specllama.llama import amx, rpc
from specllama.llama import exact as exact_mode
from specllama.llama.library import build_facts
from specllama.models import hub
from specllama.models.catalog import Catalog, ModelRef, Pair, load_catalog, parse_ref
from specllama.models.hardware import default_gpu_layers, rpc_reinstall_hint
from specllama.session import (
    ADAPTIVE_DRAFT_MAX,
    Engine,
    EngineConfig,
    check_draft_max,
    check_drafter,
    default_drafter,
    mtp_problem,
)

F = TypeVar("F", bound=Callable[..., Any])
DRAFT_AUTO = "auto"


def friendly_errors(command: F) -> F:
    """Turn our errors into one red line and an exit code; keep tracebacks for bugs."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        rpc.set_fatal_handler(_report_fatal)
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


def _report_fatal(error: SpecllamaError) -> None:
    """An error the process cannot survive (an RPC worker lost in the middle of a decode): the
    same one line, then backend ends the process."""
    with contextlib.suppress(OSError, ValueError):
        if sys.stdout.isatty():
            sys.stdout.write("\n")  # after a partial answer
        sys.stdout.flush()
    ui.print_error(str(error), error.hint)


# -- shared options (Annotated aliases, reused by every command that loads models) ------------

PairOpt = Annotated[
    str | None,
    typer.Option("--pair", "-p", help="A draft/target pair from the catalogue (default pair)."),
]
Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        "-t",
        help="Target: catalogue name, .gguf path, hf:owner/repo/file, ollama:NAME\\[:TAG] or "
        "lmstudio:PUBLISHER/REPO\\[/FILE].",
    ),
]
Draft = Annotated[
    str | None,
    typer.Option(
        "--draft",
        "-d",
        help="Draft: a REF as for --target (a draft model, or a draft head's file), or auto "
        "(what pays best here: a draft model or head found on this machine, the target's MTP "
        "head, or n-gram lookup; `specllama models --local --measure`).",
    ),
]
DrafterOpt = Annotated[
    str | None,
    typer.Option(
        "--drafter",
        help="model, mtp (the target's own draft head), eagle3, dflash or assistant (the head "
        "in --draft's file), ngram, or none (the target alone). "
        "Default: a --draft named, else mtp where the target has it, else model if a draft.",
    ),
]
DraftMax = Annotated[
    int | None,
    typer.Option(
        "--draft-max",
        "-k",
        help="Tokens a round with --fixed (default: the pair's); the adaptive cap (default 16).",
    ),
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
ExtraBuffers = Annotated[
    str | None,
    typer.Option(
        "--extra-buffers",
        help="auto, on or off: llama.cpp's extra CPU buffer types (weight repacking, AMX). "
        f"auto turns them off only where the AMX kernels crash. Env: {amx.ENV_VAR}.",
    ),
]
Exact = Annotated[
    bool,
    typer.Option(
        "--exact",
        help="Exact mode: llama.cpp's CPU kernels that give a token verified in a batch the "
        "logits it gets alone (no weight repacking, no tiled matmul), so the answer is the "
        "target alone's token for token on quantised files too; slower, mostly in prompt "
        "processing. Says at start where it cannot hold (F16/F32 files on a llamafile build, "
        "layers on a GPU).",
    ),
]
Temperature = Annotated[float, typer.Option("--temperature", help="0 = greedy.")]
TopK = Annotated[int, typer.Option("--top-k", help="Keep the k likeliest tokens (0 = all).")]
TopP = Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass.")]
MinP = Annotated[float, typer.Option("--min-p", help="Drop tokens below min-p x the top one.")]
Seed = Annotated[
    int | None,
    typer.Option(
        "--seed",
        help="Seed for sampling: the same seed gives the same answer with any drafter "
        "(default: one is drawn and reported).",
    ),
]
MaxTokens = Annotated[int, typer.Option("--max-tokens", "-n", help="Most tokens to generate.")]
System = Annotated[str | None, typer.Option("--system", help="System prompt.")]
NoTemplate = Annotated[
    bool, typer.Option("--no-chat-template", help="Send the prompt as is, without the template.")
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object at the end.")]
Rpc = Annotated[
    str | None,
    typer.Option(
        "--rpc",
        metavar="HOST:PORT,...",
        help="Run the target's layers on these RPC workers (`specllama worker` there); the "
        f"draft stays here. Env {rpc.TIMEOUT_ENV}: seconds to wait for a worker.",
    ),
]
Adaptive = Annotated[
    bool,
    typer.Option(
        "--adaptive/--fixed",
        help="Adaptive: choose draft length and source (n-gram, then the draft model or the "
        "MTP head) each round from measured costs, off when it does not pay. Fixed: always "
        "--draft-max.",
    ),
]
JsonlOut = Annotated[
    bool,
    typer.Option("--jsonl", help="Stream JSON lines: one per token, then one with the stats."),
]
JsonSchemaFile = Annotated[
    Path | None,
    typer.Option(
        "--json-schema",
        metavar="FILE",
        help="Every answer is JSON that satisfies this JSON Schema (a .json file), enforced "
        "token by token; the same text with any drafter.",
    ),
]
GrammarFile = Annotated[
    Path | None,
    typer.Option(
        "--grammar",
        metavar="FILE",
        help="Every answer follows this grammar: GBNF (llama.cpp's), or llguidance's Lark "
        "dialect in a .lark file.",
    ),
]


Remember = Annotated[
    Path | None,
    typer.Option(
        "--remember",
        metavar="DIR",
        help="Keep the memory of prompts and answers (what n-gram lookup drafts from) in DIR "
        "between runs; without it the memory lasts the process.",
    ),
]
PredictionFile = Annotated[
    Path | None,
    typer.Option(
        "--prediction",
        metavar="FILE",
        help="The answer you expect (e.g. the file being edited): drafted from, the answer "
        "stays the model's; --json says how much of it was kept.",
    ),
]


def read_prediction(path: Path | None) -> str | None:
    """--prediction FILE's text (None: no prediction), or one usage line."""
    return None if path is None else _read_text_file(path, "--prediction")


def constraint_spec(json_schema: Path | None, grammar: Path | None) -> ConstraintSpec | None:
    """--json-schema FILE or --grammar FILE -> what every answer must be (None: free text).
    The files are read and the schema parsed here, before any model loads; whether it
    compiles is the engine's to say (`Engine.compile_constraint`)."""
    if json_schema is not None and grammar is not None:
        raise UsageError("--json-schema and --grammar exclude each other: pick one")
    if json_schema is not None:
        text = _read_text_file(json_schema, "--json-schema")
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--json-schema {json_schema} is not JSON: {exc.msg} (line {exc.lineno}, "
                f"column {exc.colno})"
            ) from None
        if not isinstance(schema, dict | bool):
            raise UsageError(
                f"--json-schema {json_schema} is not a JSON Schema: it holds a JSON "
                f"{type(schema).__name__}, not an object"
            )
        return ConstraintSpec.json_schema(schema)
    if grammar is not None:
        text = _read_text_file(grammar, "--grammar")
        kind = "lark" if grammar.suffix.lower() == ".lark" else "gbnf"
        return ConstraintSpec(kind, text)
    return None


def compile_rule(engine: Engine, spec: ConstraintSpec | None) -> Grammar | None:
    """`spec` compiled for the loaded target (None: free text). llguidance's compile errors
    carry a dump of the grammar under their first line; the first line says what is wrong."""
    if spec is None:
        return None
    try:
        return engine.compile_constraint(spec)
    except ConstraintError as exc:
        first = str(exc).splitlines()[0].rstrip()
        raise ConstraintError(first, hint=exc.hint) from None


def _read_text_file(path: Path, option: str) -> str:
    """A text file an option names, or one usage line saying what is wrong with it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{option} {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{option} {path} is a folder, not a file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{option} {path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{option} {path} cannot be read: {exc.strerror}") from None
    if not text.strip():
        raise UsageError(f"{option} {path} is empty")
    return text


def resolve_models(
    pair: str | None, target: str | None, draft: str | None
) -> tuple[Path, Path | None, Pair | None]:
    """--pair, or --target/--draft REFs, or the default pair -> local files (downloaded if
    needed, with progress on stderr); no draft yet for --draft auto (`engine_config`)."""
    if pair is not None and (target or draft):
        raise UsageError("use either --pair or --target/--draft, not both")
    catalog = load_catalog()
    console = ui.stderr_console()

    notice = catalog_view.notice_printer(console)
    with download_progress(console) as progress_for:
        if target is None:
            if draft is not None:
                raise UsageError("--draft needs a --target")
            target_path, draft_path, chosen = hub.resolve_pair(
                catalog, pair, progress_for=progress_for, notice=notice
            )
            return target_path, draft_path, chosen
        auto = draft == DRAFT_AUTO
        paths = [
            fetch_model(ref, catalog, progress_for, notice) if ref else None
            for ref in (target, None if auto else draft)
        ]
    return paths[0], paths[1], None


def fetch_model(
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
    extra_buffers: str | None = None,
    adaptive: bool = True,
    rpc_workers: str | None = None,
    remember: Path | None = None,
    n_seq: int | None = 1,
    exact: bool = False,
) -> EngineConfig:
    """The command-line model options -> what the Engine loads (validated before any download)."""
    if drafter is not None:
        check_drafter(drafter)
    if draft_max is not None:
        check_draft_max(draft_max)
    buffers = amx.setting_from(extra_buffers)
    if exact:
        if buffers == "on":
            raise UsageError(
                f"--exact loads the models without extra buffers: --extra-buffers on (or "
                f"{amx.ENV_VAR}=on) contradicts it",
                hint="leave it out: --exact turns them off",
            )
        # For the whole process, before anything below can load a model (ggml reads it once).
        exact_mode.use_batch_invariant_kernels()
    workers = workers_option(rpc_workers)
    if workers and gpu_layers == 0:
        raise UsageError("--gpu-layers 0 leaves the --rpc workers nothing to run")
    rpc_timeout_s = rpc.timeout_from_env()
    target_path, draft_path, chosen = resolve_models(pair, target, draft)
    if draft == DRAFT_AUTO:  # what pays here: a draft model or head, the target's MTP, n-gram
        draft_path, drafter = auto_draft(target_path, threads, drafter)
    if drafter is None and chosen:
        drafter = chosen.drafter
    if drafter is None:  # the default picks mtp only where the target's head runs here
        named = draft not in (None, DRAFT_AUTO)
        drafter = default_drafter(target_path, draft_path, draft_named=named)
    elif drafter == "mtp" and (problem := mtp_problem(target_path)):
        raise UsageError(problem, hint="--drafter ngram, or model with a --draft")
    # A --draft-max given caps the adaptive controller too; the pair's is for --fixed.
    adaptive_draft_max = draft_max or ADAPTIVE_DRAFT_MAX
    if draft_max is None:
        draft_max = chosen.draft_max if chosen else 4
    offload = default_gpu_layers(build_facts())
    if gpu_layers is None:  # with workers, every target layer goes to them (and local GPUs)
        gpu_layers = -1 if workers else offload
    return EngineConfig(
        target=target_path,
        draft=draft_path if drafter in ("model", *HEADS) else None,  # a head's file drafts too
        drafter=drafter,
        draft_max=draft_max,
        adaptive_draft_max=adaptive_draft_max,
        n_ctx=ctx,
        n_gpu_layers=gpu_layers,
        n_gpu_layers_draft=offload if gpu_layers_draft is None else gpu_layers_draft,
        n_threads=threads,
        extra_buffers={"on": True, "off": False}.get(buffers),
        adaptive=adaptive,
        rpc=workers,
        remember=remember,
        rpc_timeout_s=rpc_timeout_s,
        n_seq=n_seq,
        exact=exact,
    )


def served_name(ref: str, path: Path) -> str:
    """The model id `serve` gives a --target: its Ollama or LM Studio name, else its file name."""
    for prefix in ("ollama:", "lmstudio:"):
        if ref.startswith(prefix):
            return ref.removeprefix(prefix)
    return path.name


def workers_option(text: str | None) -> tuple[str, ...]:
    """--rpc HOST:PORT,... -> endpoints, refused at once by a build without RPC."""
    if text is None:
        return ()
    workers = rpc.parse_endpoints(text)
    check_rpc_build()
    return workers


def check_rpc_build() -> None:
    facts = build_facts()
    if not facts.rpc:
        raise RpcError(
            "this llama-cpp-python was built without RPC", hint=rpc_reinstall_hint(facts)
        )


def calibrate_with_notice(engine: Engine, *, always: bool = False) -> None:
    """Say what the pair cannot do here (`Engine.notices`), then measure this machine's costs
    once per model pair (cached), saying so on stderr: for the adaptive controller, or
    `always` (bench's quick plan reads them)."""
    for line in engine.notices:
        ui.stderr_console().print(f"[yellow]{escape(line)}[/yellow]", highlight=False)
    if always or (engine.config.adaptive and not isinstance(engine.drafter, NoDrafter)):
        engine.calibrate(on_measure=_measuring_notice)


def _measuring_notice(reason: str) -> None:
    why = "" if reason == "none cached" else f" ({escape(reason)})"
    ui.stderr_console().print(
        f"[dim]measuring this machine's decode costs (once per model pair){why}…[/dim]",
        markup=True,
        highlight=False,
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


NoColor = Annotated[
    bool, typer.Option("--no-color", help="No colours (also when NO_COLOR is set or not a tty).")
]
Record = Annotated[
    Path | None,
    typer.Option("--record", help="On exit, save the session's screen as an SVG picture."),
]


PromptsFile = Annotated[
    Path | None,
    typer.Option(
        "--prompts",
        metavar="FILE.jsonl",
        help='Your own prompts, one JSON object a line: {"category": ..., "prompt": ...} or '
        '{"category": ..., "messages": [...]} (default: the bundled 40). Quick: the first '
        "of each category; --full: all.",
    ),
]
Configs = Annotated[
    str | None,
    typer.Option(
        "--configs",
        help="Comma-separated: target, model:K, pipe:K (the draft model drafting the next round "
        "while the target verifies), mtp:K (the target's own draft head), eagle3:K, dflash:K or"
        " assistant:K (the head in --draft's file, by its kind), ngram:K, adaptive (target is "
        "implied). Default, quick: adaptive and the fixed ones that matter here (the draft "
        "model or head at the length this machine's costs favour, ngram:8); --full: model:2, "
        "model:4 (mtp:2, mtp:4 or the head's eagle3:2, eagle3:4 without a draft model), "
        "ngram:8, adaptive.",
    ),
]
BenchMaxTokens = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        "-n",
        help="Most tokens a run (default, quick: the most of 128, 96, 64, 48, 32 that fit "
        "3 minutes here; --full: 128).",
    ),
]
Repeats = Annotated[
    int | None,
    typer.Option(
        "--repeats",
        help="Rounds per prompt (default: quick 1, the target alone twice for the noise; "
        "--full 2).",
    ),
]
Full = Annotated[
    bool,
    typer.Option(
        "--full",
        help="Every prompt and the whole matrix of configurations, 128 tokens, 2 rounds "
        "(about 30 minutes on a 2-core CPU with the default pair).",
    ),
]
VsLlamaCpp = Annotated[
    str | None,
    typer.Option(
        "--vs-llamacpp",
        metavar="[DIR]",
        help="Also run llama.cpp's own llama-speculative-simple (the draft model, its n-gram "
        "drafters) on the same prompts: from PATH, or from DIR (a folder holding it, or a "
        "source build). Missing or broken: one line, the bench runs without it.",
    ),
]
ReportFile = Annotated[
    Path | None,
    typer.Option(
        "--report",
        metavar="FILE.html",
        help="Write one self-contained HTML page (charts, machine, pair, calibration, every "
        "run), readable offline.",
    ),
]


LocalOpt = Annotated[
    bool,
    typer.Option(
        "--local",
        help="The GGUF models already on this machine (Ollama, LM Studio, the Hugging Face and "
        "llama.cpp caches, saved folders) and the draft/target pairs among them.",
    ),
]
Dirs = Annotated[
    list[Path] | None,
    typer.Option(
        "--dir",
        metavar="DIR",
        help="Also look in this folder, in depth (repeatable; implies --local).",
    ),
]
AddDirs = Annotated[
    list[Path] | None,
    typer.Option(
        "--add-dir",
        metavar="DIR",
        help="Look in this folder from now on, also for --draft auto (repeatable).",
    ),
]
RemoveDirs = Annotated[
    list[Path] | None,
    typer.Option(
        "--remove-dir", metavar="DIR", help="Stop looking in a folder saved with --add-dir."
    ),
]
Measure = Annotated[
    bool,
    typer.Option(
        "--measure",
        help="Time each proposed pair here (the calibration and a short probe of acceptance; "
        "cached) and rank them by the speedup to expect (implies --local).",
    ),
]
