"""From the model options to an engine: the models resolved and fetched (with progress), the
EngineConfig validated before any download, RPC workers, and the calibration announced.
"""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from specllama.cli import catalog_view, ui
from specllama.cli.catalog_view import ProgressFor, download_progress
from specllama.cli.local_cmd import auto_draft
from specllama.engine.control import HEADS
from specllama.engine.drafters import NoDrafter
from specllama.errors import RpcError, UsageError
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

DRAFT_AUTO = "auto"  # --draft auto: what pays best here (`local_cmd.auto_draft`)


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
