"""The command line: thin Typer commands that parse options and call the layers below.

Every SpecllamaError is caught in one place (`friendly_errors`) and printed as one line;
SPECLLAMA_DEBUG=1 lets the traceback through instead.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from specllama import ui
from specllama.chat import Message
from specllama.errors import SpecllamaError, UsageError
from specllama.sampling import SamplingParams
from specllama.session import DRAFTERS, Engine, EngineConfig
from specllama.speculative import FinishEvent, TokenEvent

app = typer.Typer(
    help="Speculative decoding on llama.cpp: same output as the target model, only faster.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def main() -> None:
    """Speculative decoding on llama.cpp: same output as the target model, only faster."""


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

    return wrapper  # type: ignore[return-value]


# -- shared options (Annotated aliases, reused by every command that loads models) ------------

Target = Annotated[
    str | None, typer.Option("--target", "-t", help="Target model: a local .gguf path.")
]
Draft = Annotated[
    str | None, typer.Option("--draft", "-d", help="Draft model: a local .gguf path.")
]
DrafterOpt = Annotated[
    str | None,
    typer.Option(
        "--drafter", help="model, ngram, or none (the target alone). Default: model if a draft."
    ),
]
DraftMax = Annotated[int, typer.Option("--draft-max", "-k", help="Most tokens drafted a round.")]
GpuLayers = Annotated[int, typer.Option("--gpu-layers", help="Target layers to offload to GPU.")]
GpuLayersDraft = Annotated[
    int, typer.Option("--gpu-layers-draft", help="Draft layers to offload to GPU.")
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


def resolve_model(ref: str) -> Path:
    path = Path(ref).expanduser()
    if not path.exists():
        raise SpecllamaError(f"model file not found: {ref}")
    return path


def engine_config(
    target: str | None,
    draft: str | None,
    drafter: str | None,
    draft_max: int,
    ctx: int,
    gpu_layers: int,
    gpu_layers_draft: int,
    threads: int | None,
) -> EngineConfig:
    if target is None:
        raise UsageError("no target model: pass --target PATH.gguf")
    if drafter is None:
        drafter = "model" if draft else "ngram"
    if drafter not in DRAFTERS:
        raise UsageError(f"unknown drafter {drafter!r}: choose one of {', '.join(DRAFTERS)}")
    return EngineConfig(
        target=resolve_model(target),
        draft=resolve_model(draft) if draft and drafter == "model" else None,
        drafter=drafter,
        draft_max=draft_max,
        n_ctx=ctx,
        n_gpu_layers=gpu_layers,
        n_gpu_layers_draft=gpu_layers_draft,
        n_threads=threads,
    )


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
        raise UsageError("stdin looks like a binary file, not text")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"stdin is not UTF-8 text (byte {exc.start})") from None


@app.command()
@friendly_errors
def run(
    prompt: Annotated[str | None, typer.Argument(help="The prompt; stdin is appended.")] = None,
    target: Target = None,
    draft: Draft = None,
    drafter: DrafterOpt = None,
    draft_max: DraftMax = 4,
    gpu_layers: GpuLayers = 0,
    gpu_layers_draft: GpuLayersDraft = 0,
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
) -> None:
    """Answer one prompt: the text on stdout, a one-line summary on stderr."""
    params = SamplingParams(temperature, top_k, top_p, min_p, seed)
    config = engine_config(
        target, draft, drafter, draft_max, ctx, gpu_layers, gpu_layers_draft, threads
    )
    text = read_prompt(prompt)
    if max_tokens < 1:
        raise UsageError(f"--max-tokens must be at least 1, got {max_tokens}")
    messages = [Message("system", system)] if system else []
    messages.append(Message("user", text))

    with Engine(config) as engine:
        tokens = engine.prompt_tokens(messages, chat_template=not no_chat_template)
        pieces: list[str] = []
        stream = engine.target_text_stream()
        finish: FinishEvent | None = None
        for event in engine.generate(tokens, params, max_tokens=max_tokens):
            if isinstance(event, TokenEvent):
                piece = stream.feed(event.token)
                pieces.append(piece)
                if not json_out:
                    ui.write_text(piece)
            elif isinstance(event, FinishEvent):
                finish = event
        tail = stream.flush()
        pieces.append(tail)

    assert finish is not None  # generate always ends with a FinishEvent
    if json_out:
        print(json.dumps({"text": "".join(pieces), **finish.stats.as_dict()}))
    else:
        ui.write_text(tail + "\n")
        ui.print_summary(finish.stats)
