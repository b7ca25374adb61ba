"""The command-line side of the models already on this machine: `specllama models --local`
(list, pair, --measure; --dir, --add-dir, --remove-dir) and `--draft auto`."""

from __future__ import annotations

import json
from pathlib import Path

from rich.markup import escape
from rich.text import Text

from specllama.bench import pair_probe
from specllama.cli import catalog_view, local_view, ui
from specllama.errors import SpecllamaError
from specllama.llama.backend import build_facts
from specllama.models import local, local_dirs, local_pairs
from specllama.models.catalog import load_catalog
from specllama.models.hardware import default_gpu_layers, probe_machine
from specllama.models.local import LocalModel
from specllama.models.local_files import Problem


def probe_settings(threads: int | None = None) -> pair_probe.ProbeSettings:
    """The settings --measure measures with (and looks measurements up by): the defaults of
    `run` on this machine."""
    layers = default_gpu_layers(build_facts())
    return pair_probe.ProbeSettings(
        threads, layers, layers, tokens=pair_probe.PROBE_TOKENS, prompts=pair_probe.PROBE_CATEGORIES
    )


def show_local(
    dirs: list[Path],
    add: list[Path],
    remove: list[Path],
    *,
    measure: bool,
    json_out: bool,
) -> None:
    console = ui.stderr_console()
    for folder in add:
        local_dirs.add_dir(folder)
        console.print(f"[dim]saved {folder}: it is searched from now on[/dim]")
    for folder in remove:
        local_dirs.remove_dir(folder)
        console.print(f"[dim]forgot {folder}[/dim]")
    with console.status("looking for models…"):
        found = local.scan(dirs, catalog=load_catalog())
    usable = [m for m in found.models if m.header.vocab is not None]
    problems = found.problems + [
        Problem(m.ref, f"no vocabulary llama.cpp knows (tokenizer {m.header.tokenizer!r})")
        for m in found.models
        if m.header.vocab is None
    ]
    settings = probe_settings()
    measured = _measured_lookup(settings)
    machine, offload = probe_machine(), build_facts().gpu_offload
    heads = found.heads  # drafts for the models they fit, beside the draft models

    def propose() -> list[local_pairs.LocalPair]:
        return local_pairs.propose_pairs(
            usable, machine, offload, found.detailed, measured, heads=heads
        )

    pairs = propose()
    if measure and pairs:
        _measure_all(pairs, settings)
        pairs = propose()
    problems += local_pairs.unpaired_heads(heads, pairs)
    groups = local_pairs.vocab_groups(usable, found.detailed)
    found.cache.save()  # details read for vocabularies of other sizes
    if json_out:
        print(json.dumps(local_view.local_json(groups, pairs, problems), indent=2))
    elif not found.models and not problems:
        catalog_view.show(
            Text("no GGUF models found (Ollama, LM Studio, the Hugging Face and llama.cpp "
                 "caches, specllama's cache); name a folder with --dir", style="yellow")
        )  # fmt: skip
    else:
        any_measured = any(p.speedup is not None for p in pairs)
        catalog_view.show(local_view.local_view(groups, pairs, problems, any_measured))


def models_with_mtp() -> list[str] | None:
    """The REFs of the models here that carry their own draft head, for `doctor` (headers only,
    from the cache after the first look); None when the stores cannot be searched."""
    try:
        found = local.scan(catalog=load_catalog())
    except SpecllamaError:  # doctor reports the rest of the machine all the same
        return None
    return [m.ref for m in local_view.mtp_models([found.models])]


def _measured_lookup(settings: pair_probe.ProbeSettings) -> local_pairs.Measured:
    def lookup(target: LocalModel, draft: LocalModel) -> float | None:
        found = pair_probe.cached(target.path, draft.path, settings)
        return found.speedup if found else None

    return lookup


def _measure_all(pairs: list[local_pairs.LocalPair], settings: pair_probe.ProbeSettings) -> None:
    console = ui.stderr_console()
    for i, pair in enumerate(pairs, 1):
        what = f"{pair.target.ref} with {pair.draft.ref}"

        def say(what: str = what, i: int = i) -> None:
            console.print(f"[dim]measuring {i}/{len(pairs)}: {escape(what)}…[/dim]")

        try:
            result = pair_probe.measure(pair.target.path, pair.draft.path, settings, on_measure=say)
        except SpecllamaError as exc:  # one pair llama.cpp cannot run: say so, go on
            console.print(f"[yellow]{escape(what)}: {escape(str(exc))}[/yellow]")
            continue
        console.print(
            f"[dim]{escape(what)}: {result.speedup:.2f}x expected (acceptance "
            f"{result.acceptance:.0%}, {result.best_k} drafts a round)[/dim]"
        )


def auto_draft(target: Path, threads: int | None = None) -> Path:
    """--draft auto: the best draft found on this machine for `target`, said on stderr."""
    settings = probe_settings(threads)
    with ui.stderr_console().status("looking for a draft model…"):
        found = local.scan(catalog=load_catalog())
        machine, offload = probe_machine(), build_facts().gpu_offload
        pair = local_pairs.auto_draft(target, machine, offload, _measured_lookup(settings), found)
    why = f"measured {pair.speedup:.2f}x" if pair.speedup is not None else "by the rule of thumb"
    ui.stderr_console().print(
        f"[dim]--draft auto: {escape(pair.draft.ref)} "
        f"({local_view.params(pair.draft)} {pair.draft.header.quant or ''}, "
        f"{pair.cost_ratio:.2f} of the target's size; {why})[/dim]"
    )
    return pair.draft.path
