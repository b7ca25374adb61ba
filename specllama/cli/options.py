"""What the commands share: option aliases, and the one place errors become one line. What a
command reads besides its options is `specllama.cli.inputs`; how model options become an
engine, `specllama.cli.loading`.

Every SpecllamaError is caught in `friendly_errors` and printed as one line; SPECLLAMA_DEBUG=1
lets the traceback through instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

import typer

from specllama.cli import ui
from specllama.errors import SpecllamaError, UsageError
from specllama.family.thinking import REASONING_MODES, ReasoningMode
from specllama.llama import amx, rpc

F = TypeVar("F", bound=Callable[..., Any])


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
        help="model (a draft of another vocabulary drafts text, re-tokenised for the target), "
        "mtp (the target's own draft head), eagle3, dflash or assistant (the head "
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

ReasoningOpt = Annotated[
    str,
    typer.Option(
        "--reasoning",
        metavar="on|off|auto",
        help="Thinking, for a model whose family thinks: on, off (the template's own switch, "
        "or an empty thinking block closed before the answer) or auto (the template's "
        "default).",
    ),
]
ReasoningBudget = Annotated[
    int,
    typer.Option(
        "--reasoning-budget",
        metavar="N",
        help="Most tokens of thinking; then its end is written and the answer follows "
        "(-1: no bound; 0: thinking off).",
    ),
]


def reasoning_choice(mode: str, budget: int) -> tuple[ReasoningMode, int | None]:
    """--reasoning and --reasoning-budget checked: the mode, and the budget (None: no bound).
    A budget of 0 is thinking off."""
    if mode not in REASONING_MODES:
        raise UsageError(f"--reasoning is on, off or auto, not {mode!r}")
    if budget < -1:
        raise UsageError(f"--reasoning-budget is a number of tokens, or -1; got {budget}")
    if budget == 0:
        return "off", None
    return cast(ReasoningMode, mode), (budget if budget > 0 else None)


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
