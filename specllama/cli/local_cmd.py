"""The command-line side of the models already on this machine: `specllama models --local`
(list, pair, --measure; --dir, --add-dir, --remove-dir) and `--draft auto`.

--measure measures every pair proposed, the own MTP head of each model that carries one that
runs here, and n-gram lookup alone for each of those targets (what --draft auto weighs them
against); --draft auto reads those measurements back (`local_pairs.draft_choices`)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.markup import escape
from rich.text import Text

from specllama.bench import pair_probe
from specllama.cli import catalog_view, local_view, ui
from specllama.engine.control import HEADS
from specllama.errors import SpecllamaError
from specllama.llama.library import build_facts
from specllama.models import local, local_dirs, local_pairs
from specllama.models.catalog import load_catalog
from specllama.models.hardware import default_gpu_layers, probe_machine
from specllama.models.local import LocalModel
from specllama.models.local_files import Problem
from specllama.models.local_pairs import MTP, NGRAM, DraftChoice
from specllama.session import mtp_problem

# What one --measure job measures: a target with a draft file, or with one of its own drafters.
Job = tuple[LocalModel, LocalModel | str]


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
    if measure and (jobs := _jobs(usable, pairs)):
        _measure_all(jobs, settings)
        pairs = propose()
    problems += local_pairs.unpaired_heads(heads, pairs)
    groups = local_pairs.vocab_groups(usable, found.detailed)
    found.cache.save()  # details read for vocabularies of other sizes
    own = {m.path: speedups for m in usable if (speedups := _own_measured(m, measured))}
    if json_out:
        print(json.dumps(local_view.local_json(groups, pairs, problems, own), indent=2))
    elif not found.models and not problems:
        catalog_view.show(
            Text("no GGUF models found (Ollama, LM Studio, the Hugging Face and llama.cpp "
                 "caches, specllama's cache); name a folder with --dir", style="yellow")
        )  # fmt: skip
    else:
        any_measured = any(p.speedup is not None for p in pairs)
        catalog_view.show(local_view.local_view(groups, pairs, problems, any_measured, own))


def models_with_mtp() -> list[str] | None:
    """The REFs of the models here that carry their own draft head, for `doctor` (headers only,
    from the cache after the first look); None when the stores cannot be searched."""
    try:
        found = local.scan(catalog=load_catalog())
    except SpecllamaError:  # doctor reports the rest of the machine all the same
        return None
    return [m.ref for m in local_view.mtp_models([found.models])]


def _measured_lookup(settings: pair_probe.ProbeSettings) -> local_pairs.Measured:
    def lookup(target: LocalModel, draft: LocalModel | str) -> float | None:
        found = pair_probe.cached(target.path, _draft_of(draft), settings)
        return found.speedup if found else None

    return lookup


def _draft_of(draft: LocalModel | str) -> pair_probe.Draft:
    return draft if isinstance(draft, str) else draft.path


def _mtp_runs(model: LocalModel) -> bool:
    return model.has_mtp and mtp_problem(model.path) is None


def _jobs(models: list[LocalModel], pairs: list[local_pairs.LocalPair]) -> list[Job]:
    """What --measure measures: every pair; the MTP head of each model with one that runs here;
    n-gram lookup alone for each model with any other way to draft, to weigh them by."""
    with_mtp = [m for m in models if _mtp_runs(m)]
    targets = {m.path for m in with_mtp} | {p.target.path for p in pairs}
    jobs: list[Job] = [(p.target, p.draft) for p in pairs] + [(m, MTP) for m in with_mtp]
    return jobs + [(m, NGRAM) for m in models if m.path in targets]


def _own_measured(model: LocalModel, measured: local_pairs.Measured) -> dict[str, float]:
    """What was measured of the model's own drafters, by name."""
    found = {name: measured(model, name) for name in (MTP, NGRAM)}
    return {name: speedup for name, speedup in found.items() if speedup is not None}


def _measure_all(jobs: list[Job], settings: pair_probe.ProbeSettings) -> None:
    console = ui.stderr_console()
    for i, (target, draft) in enumerate(jobs, 1):
        what = f"{target.ref} with {_draft_label(draft)}"

        def say(what: str = what, i: int = i) -> None:
            console.print(f"[dim]measuring {i}/{len(jobs)}: {escape(what)}…[/dim]")

        try:
            result = pair_probe.measure(target.path, _draft_of(draft), settings, on_measure=say)
        except SpecllamaError as exc:  # one pair llama.cpp cannot run: say so, go on
            console.print(f"[yellow]{escape(what)}: {escape(str(exc))}[/yellow]")
            continue
        console.print(f"[dim]{escape(what)}: {result.speedup:.2f}x expected ({_how(result)})[/dim]")
        if not result.trusted:
            console.print(
                "[yellow]  the costs failed their checks (a busy machine?): a rough figure[/yellow]"
            )


def _draft_label(draft: LocalModel | str) -> str:
    if isinstance(draft, LocalModel):
        return draft.ref
    return "its own MTP head" if draft == MTP else "n-gram lookup alone"


def _how(result: pair_probe.Measurement) -> str:
    if result.rounds_drafted is None:
        return f"acceptance {result.acceptance:.0%}, {result.best_k} drafts a round"
    if result.rounds_drafted == 0:
        return "nothing to draft from in these prompts"
    return f"drafted in {result.rounds_drafted:.0%} of rounds, acceptance {result.acceptance:.0%}"


def auto_draft(
    target: Path, threads: int | None = None, drafter: str | None = None
) -> tuple[Path | None, str | None]:
    """--draft auto: what pays best on this machine for `target` (a draft model, a draft head,
    its own MTP head or n-gram lookup), said on stderr: the draft file it needs (None for the
    target's own drafters) and the drafter. A --drafter given narrows the choice to its kind;
    one that needs no file (mtp, ngram, none) leaves nothing to choose."""
    if drafter is not None and drafter not in ("model", *HEADS):
        return None, drafter
    settings = probe_settings(threads)
    with ui.stderr_console().status("looking for a draft…"):
        found = local.scan(catalog=load_catalog())
        machine, offload = probe_machine(), build_facts().gpu_offload
        choice = local_pairs.auto_draft(
            target, machine, offload, _measured_lookup(settings), found,
            mtp_runs=mtp_problem(target) is None, only=drafter,
        )  # fmt: skip
    ui.stderr_console().print(f"[dim]{escape(auto_line(choice))}[/dim]")
    return choice.path, choice.drafter


def auto_line(choice: DraftChoice) -> str:
    """What --draft auto chose, and why, in one line."""
    if choice.speedup is not None:
        best_of = choice.n_measured > 1
        why = f"measured {choice.speedup:.2f}x" + (
            f", the best of {choice.n_measured} measured here" if best_of else ""
        )
    else:
        why = "by the rule of thumb" + ("; none measured here pays" * (choice.n_measured > 0))
    if choice.pair is not None:
        draft = choice.pair.draft
        kind = f"{draft.head_kind} head, " if draft.head_kind else ""
        kind += "across tokenizers, " if choice.pair.across_tokenizers else ""
        return (
            f"--draft auto: {draft.ref} ({kind}{local_view.params(draft)} "
            f"{draft.header.quant or ''}, {choice.pair.cost_ratio:.2f} of the target's size; "
            f"{why})"
        )
    if choice.drafter == MTP:
        return f"--draft auto: the target's own MTP head (--drafter mtp; {why})"
    return f"--draft auto: n-gram lookup, no draft model (--drafter ngram; {why})"
