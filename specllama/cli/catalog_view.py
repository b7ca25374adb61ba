"""Rich views of the catalogue side: download progress, the `models` table, `doctor`."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from specllama.cli.ui import stderr_console
from specllama.llama.amx import CRASHES, WORKS, AmxReport
from specllama.models.catalog import Catalog, ModelRef
from specllama.models.hardware import Doctor, PairRow

ProgressFor = Callable[[ModelRef], Callable[[int, int], None]]
MTP_NAMES_SHOWN = 3  # `doctor` names a few; `models --local` lists them all


def show(renderable: RenderableType) -> None:
    """Tables and paths for the user go to stdout (they are the command's output)."""
    Console(no_color=bool(os.environ.get("NO_COLOR")), highlight=False).print(renderable)


def notice_printer(console: Console) -> Callable[[str], None]:
    return lambda line: console.print(Text(line, style="dim"))


@contextmanager
def download_progress(console: Console | None = None) -> Iterator[ProgressFor]:
    """Yields `progress_for(model)`: a (done, total) callback drawing one bar per model.

    Bars appear only when a download actually reports bytes, so a cached model shows nothing.
    """
    console = console or stderr_console()
    bars = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )

    started: list[bool] = []

    def progress_for(model: ModelRef) -> Callable[[int, int], None]:
        task: list[int] = []

        def update(done: int, total: int) -> None:
            if not task:
                if not started:
                    bars.start()
                    started.append(True)
                task.append(bars.add_task(model.name, total=total or model.size))
            bars.update(task[0], completed=done, total=total or model.size)

        return update

    try:
        yield progress_for
    finally:
        if started:  # stopping a bar that never started still prints an empty line
            bars.stop()


def _size(n: int | None, exact: bool) -> str:
    if n is None:
        return "?"
    return f"{'' if exact else '~'}{n / 1e9:.2f} GB"


def models_table(rows: list[PairRow], catalog: Catalog) -> Table:
    """Narrow enough for an 80-column terminal; `--json` has every field."""
    table = Table(
        header_style="bold",
        caption="* default pair   ? size/sha256 not verified   fits: where it would run "
        "(rpc: the target on the --rpc workers)   x-tok: drafts across tokenizers",
    )
    for column in ("pair", "target", "draft", "size", "here", "fits"):
        table.add_column(column)
    for row in rows:
        size = None
        if row.target_size is not None and row.draft_size is not None:
            size = row.target_size + row.draft_size
        marks = ("*" if row.default else "") + ("" if row.verified else "?")
        table.add_row(
            f"{row.name}{marks}",
            _short(catalog.model(row.target)),
            _draft_cell(row, catalog),
            _size(size, row.size_exact),
            "[green]yes[/green]" if row.downloaded else "no",
            row.fit,
        )
    return table


def _short(model: ModelRef) -> str:
    return f"{model.params or '?'} {model.quant or ''}".strip()


def _draft_cell(row: PairRow, catalog: Catalog) -> str:
    """The draft's size, and the head's kind where the draft is a head (own MTP layers: none)."""
    if row.own_heads:
        return "n-gram lookup" if row.drafter == "ngram" else "own MTP head"
    draft = _short(catalog.model(row.draft))
    if row.drafter == "model":
        return draft + (" (x-tok)" if row.across_tokenizers else "")
    return f"{draft} {_HEAD_NAMES.get(row.drafter, row.drafter)}"


def _amx_rows(amx: AmxReport) -> list[tuple[str, str]]:
    yes_no = {True: "yes", False: "no"}
    probe = {CRASHES: "[red]crashes[/red]", WORKS: "[green]works[/green]"}.get(amx.probe, amx.probe)
    buffers = "[green]on[/green]" if amx.extra_buffers else "[yellow]off[/yellow]"
    return [
        (
            "AMX kernels",
            f"compiled in: {yes_no[amx.build_amx]} · CPU has AMX: {yes_no[amx.cpu_amx]} · "
            f"probe: {probe}",
        ),
        ("extra buffers", f"{buffers} for quantised models ({escape(amx.reason)})"),
        ("CMAKE_ARGS here", f"{amx.cmake_args} (this CPU's kernels, AMX left out)"),
    ]


def _mtp_row(refs: list[str]) -> tuple[str, str]:
    """One short line: how many local models carry their own draft head, and a few of them."""
    if not refs:
        return ("MTP draft heads", "no local model carries its own")
    names = ", ".join(escape(r) for r in refs[:MTP_NAMES_SHOWN])
    if len(refs) > MTP_NAMES_SHOWN:
        names += f" and {len(refs) - MTP_NAMES_SHOWN} more (models --local)"
    return ("MTP draft heads", f"{len(refs)} local model(s) carry their own: {names} "
            "(--drafter mtp)")  # fmt: skip


_HEAD_NAMES = {"eagle3": "EAGLE-3", "dflash": "DFlash", "assistant": "Gemma 4 assistant"}


def doctor_table(
    report: Doctor,
    calibrations: list[dict[str, object]] = (),
    mtp_models: list[str] | None = None,
    mtp_missing: str | None = None,
    heads_missing: dict[str, str | None] | None = None,
) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    offload = (
        f"[green]yes[/green] ({report.gpu_backend})"
        if report.gpu_offload
        else "[yellow]no[/yellow]"
    )
    rows = [
        ("llama-cpp-python", report.llama_cpp_version),
        ("GPU offload", offload),
        ("default --gpu-layers", str(report.default_gpu_layers)),
        ("RAM", f"{report.machine.ram_total / 1e9:.1f} GB"),
        ("CPU cores", str(report.machine.physical_cores)),
    ]
    if report.machine.vram_total:
        rows.append(("VRAM", f"{report.machine.vram_total / 1e9:.1f} GB"))
    if report.reinstall_hint:
        rows.append(("to use a GPU", report.reinstall_hint))
    rows.append(
        ("RPC (--rpc, worker)", "[green]yes[/green]" if report.rpc else "[yellow]no[/yellow]")
    )
    if report.rpc_hint:
        rows.append(("to add RPC", report.rpc_hint))
    if report.amx is not None:
        rows.extend(_amx_rows(report.amx))
    for cache in report.caches:
        state = f"{cache.size_bytes / 1e9:.2f} GB" if cache.exists else "empty"
        rows.append(("cache", f"{cache.path} ({state})"))
    rows.append(("user catalogue", str(report.user_catalog)))
    rows.append(("hub", report.hub_endpoint + (" (offline)" if report.offline else "")))
    rows.append(("python", f"{report.python} on {report.platform}"))
    for measured in calibrations:  # what the adaptive controller works from, per pair
        pair = Path(str(measured["target"])).name
        if measured["draft"]:
            pair += f" + {Path(str(measured['draft'])).name}"
        if measured.get("stale"):
            state = f"stale, measured again next run: {measured['stale']}"
        else:
            state = f"measured {measured['created']}, {measured['checks']}"
        rows.append(("calibration", f"{pair}: {measured['summary']} ({state})"))
    rows.append(("MTP heads (--drafter mtp)", escape(mtp_missing or "this build runs them")))
    if mtp_models is not None:  # None: the local stores could not be searched
        rows.append(_mtp_row(mtp_models))
    for kind, missing in (heads_missing or {}).items():
        label = f"{_HEAD_NAMES.get(kind, kind)} heads (--draft HEAD)"
        rows.append((label, escape(missing or "this build runs them")))
    rows.extend(("note", note) for note in report.notes)
    for key, value in rows:
        table.add_row(key, value)
    return table
