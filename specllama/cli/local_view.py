"""Rich views of `specllama models --local`: the models found, the pairs, the problem lines; and
the JSON of the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from specllama.llama.vocab import VOCAB_TYPE_NAMES
from specllama.models.local import LocalModel
from specllama.models.local_files import Problem
from specllama.models.local_pairs import CANNOT_RUN, LocalPair

MAX_PAIRS_SHOWN = 20
# A model's own drafters measured here (--measure): its path -> {"mtp"/"ngram": speedup}.
OwnMeasured = dict[Path, dict[str, float]]


def params(model: LocalModel) -> str:
    """The size label the converter wrote, else the parameters counted from the tensors."""
    if model.header.size_label:
        return model.header.size_label
    n = model.header.n_params
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def local_view(
    groups: list[list[LocalModel]],
    pairs: list[LocalPair],
    problems: list[Problem],
    measured: bool,
    own: OwnMeasured | None = None,
) -> RenderableType:
    parts: list[RenderableType] = [models_table(groups, own)]
    if pairs:
        parts.append(pairs_table(pairs, measured))
        best = pairs[0]
        parts.append(
            Text.from_markup(
                f"[dim]run the first:[/dim] specllama run --target {escape(best.target.ref)} "
                f'--draft {escape(best.draft.ref)} "..."',
            )
        )
    else:
        parts.append(Text("no draft/target pairs among these models", style="yellow"))
    if own := mtp_models(groups):
        parts.append(
            Text.from_markup(
                f"[dim]with its own draft head:[/dim] specllama run --target "
                f'{escape(own[0].ref)} --drafter mtp "..."',
            )
        )
    for problem in problems:
        parts.append(Text(f"skipped {problem.where}: {problem.reason}", style="dim"))
    return Group(*parts)


def mtp_models(groups: list[list[LocalModel]]) -> list[LocalModel]:
    """The models that carry their own draft head (MTP layers), largest first."""
    return sorted((m for g in groups for m in g if m.has_mtp), key=lambda m: -m.size)


def models_table(groups: list[list[LocalModel]], own: OwnMeasured | None = None) -> Table:
    """One row per model, grouped by vocabulary (models in a group can draft for each other);
    an MTP column only when some model carries its own draft head (most never do), with the
    speedup --measure found for it; an n-gram column once n-gram lookup alone was measured."""
    own = own or {}
    with_mtp = bool(mtp_models(groups))
    with_ngram = any("ngram" in speedups for speedups in own.values())
    caption = (
        "vocab: models with the same letter share one"
        + ("   MTP: its own draft head (--drafter mtp)" if with_mtp else "")
        + ("   n-gram: lookup alone, expected here (--measure)" if with_ngram else "")
    )
    table = Table(header_style="bold", caption=caption)
    table.add_column("vocab", no_wrap=True)
    table.add_column("model (REF, and its name)", overflow="fold")
    table.add_column("size", no_wrap=True)
    table.add_column("ctx", no_wrap=True, justify="right")
    if with_mtp:
        table.add_column("MTP", no_wrap=True)
    if with_ngram:
        table.add_column("n-gram", no_wrap=True)
    for i, group in enumerate(groups):
        letter = chr(ord("A") + i) if i < 26 else str(i + 1)
        for model in sorted(group, key=lambda m: -m.size):
            context = model.header.context_length
            row = [
                letter,
                f"{escape(model.ref)}\n[dim]{escape(model.label)}[/dim]",
                f"{params(model)} {model.header.quant or '?'}\n{_gb(model.size)}",
                f"{context:,}" if context else "?",
            ]
            speedups = own.get(model.path, {})
            if with_mtp:
                row.append(_mtp_cell(model, speedups.get("mtp")))
            if with_ngram:
                row.append(_speedup(speedups.get("ngram")))
            table.add_row(*row)
    return table


def _mtp_cell(model: LocalModel, speedup: float | None) -> str:
    n = model.header.n_nextn
    if not model.has_mtp:
        return ""
    return f"[green]yes[/green] ({n} layer{'s' * (n > 1)})" + _speedup(speedup, prefix=", ")


def _speedup(speedup: float | None, *, prefix: str = "", missing: str = "") -> str:
    if speedup == CANNOT_RUN:
        return f"{prefix}[yellow]cannot run[/yellow]"
    return missing if speedup is None else f"{prefix}{speedup:.2f}x"


def pairs_table(pairs: list[LocalPair], measured: bool) -> Table:
    caption = "cost: a draft step next to a target token (by size).  " + (
        "speedup: expected here (--measure)"
        if measured
        else "Ranked by a rule of thumb (where it runs, same family, cheaper draft); "
        "--measure ranks by what this machine measures"
    )
    table = Table(header_style="bold", caption=caption)
    table.add_column("#", no_wrap=True)
    table.add_column("target", overflow="fold")
    table.add_column("draft", overflow="fold")
    for column in ("cost", "fits", "speedup"):
        table.add_column(column, no_wrap=True)
    for rank, pair in enumerate(pairs[:MAX_PAIRS_SHOWN], 1):
        speedup = _speedup(pair.speedup, missing="-")
        table.add_row(
            str(rank),
            escape(pair.target.ref),
            escape(pair.draft.ref) + _draft_note(pair),
            f"{pair.cost_ratio:.2f}",
            pair.fit.verdict,
            speedup,
        )
    if len(pairs) > MAX_PAIRS_SHOWN:
        table.add_row("", f"[dim]... {len(pairs) - MAX_PAIRS_SHOWN} more (--json)[/dim]", "", "",
                      "", "")  # fmt: skip
    return table


def _draft_note(pair: LocalPair) -> str:
    if pair.across_tokenizers:
        return " [dim](across tokenizers)[/dim]"
    if pair.draft.head_kind:
        return f" [dim]({pair.draft.head_kind} head)[/dim]"
    return "" if pair.same_family else " [dim](other family)[/dim]"


def local_json(
    groups: list[list[LocalModel]],
    pairs: list[LocalPair],
    problems: list[Problem],
    own: OwnMeasured | None = None,
) -> dict[str, Any]:
    group_of = {id(m): i for i, g in enumerate(groups) for m in g}
    models = [m for g in groups for m in g]
    own = own or {}
    return {
        "models": [_model_json(m, group_of[id(m)], own.get(m.path, {})) for m in models],
        "pairs": [
            {
                "target": p.target.ref,
                "draft": p.draft.ref,
                "target_path": str(p.target.path),
                "draft_path": str(p.draft.path),
                "drafter": p.drafter,  # model, or the draft head's kind (--drafter)
                "draft_cost": round(p.cost_ratio, 4),
                "same_family": p.same_family,
                # Another vocabulary: the draft's text is re-tokenised for the target.
                "across_tokenizers": p.across_tokenizers,
                "fit": p.fit.verdict,
                "fit_detail": p.fit.detail,
                "speedup": p.speedup,
            }
            for p in pairs
        ],
        "problems": [{"where": p.where, "reason": p.reason} for p in problems],
    }


def _model_json(model: LocalModel, group: int, own: dict[str, float]) -> dict[str, Any]:
    header, vocab = model.header, model.header.vocab
    return {
        "ref": model.ref,
        "path": str(model.path),
        "store": model.found.store,
        "name": header.name,
        "architecture": header.architecture,
        "size_label": header.size_label,
        "params": header.n_params,
        "quant": header.quant,
        "size": model.size,
        "context_length": header.context_length,
        "mtp": model.has_mtp,  # carries its own draft head: --drafter mtp
        "n_nextn": header.n_nextn,
        # Expected here (--measure), None where not measured: with its own MTP head, and with
        # n-gram lookup alone.
        "mtp_speedup": own.get("mtp"),
        "ngram_speedup": own.get("ngram"),
        "vocab_group": group,
        "vocab": None
        if vocab is None
        else {
            "type": VOCAB_TYPE_NAMES.get(vocab.vocab_type, vocab.vocab_type),
            "tokenizer": header.tokenizer,
            "pre": header.tokenizer_pre,
            "n_vocab": vocab.n_vocab,
            "bos": vocab.bos,
            "eos": vocab.eos,
            "add_bos": vocab.add_bos,
        },
    }
