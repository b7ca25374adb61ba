"""Which of the models on this machine can draft for which: groups by the vocabulary rule `run`
applies (`compat`), and draft/target pairs proposed and ranked.

A pair is proposed when the draft's vocabulary is compatible with the target's, the draft is
at least MIN_SIZE_RATIO times smaller on disk (a decode reads every weight once, so file size
is what a draft step costs next to a target token; the reference pair, Qwen2.5-Coder 0.5B for
1.5B in Q4_K_M, is 2.3x, and a draft closer to its target's cost cannot pay for the rounds it
loses), and both fit this machine together
(`hardware.fits`, the fit check of the catalogue). Without measurements the ranking is a rule of
thumb: where the pair runs (GPU first), then drafts of the target's own family (the same
general.basename, else architecture) before others, then the cheaper draft. With measurements
(`specllama models --local --measure`), by the speedup this machine measured.

A target with no draft of its own vocabulary here (no draft model, no head, no MTP layers) is
offered drafts of another vocabulary, which draft across tokenizers (their text re-tokenised,
`specllama.engine.cross_drafter`): byte-level BPE on both sides (a SentencePiece tokenizer does
not give back the text it reads; `compat.pairing` checks that when the models load), at least
CROSS_MIN_SIZE_RATIO times smaller (their text costs time too, and they are accepted less),
the CROSS_DRAFTS_PER_TARGET cheapest. They rank after the drafts of a target's own vocabulary
until `--measure` measured them, and `--draft auto` takes one only once measured to pay.

A draft head in its own file (EAGLE-3, DFlash) drafts for a target from the target's own rows:
it is paired with each model whose vocabulary `run` accepts and whose rows are as wide as those
it reads (`head_problem`; the loader checks the rest, such as the layers it names), whatever
its size, and counts as of the target's family (it was made for a model of that width).

`--draft auto` chooses among every way this machine can draft for a target (`draft_choices`):
the heads that pair with it, its own MTP head where it carries one that runs here, the draft
models paired with it, and n-gram lookup alone. Where `--measure` measured them, by the speedup
measured: those that pay (over 1x) first; then, unmeasured, by the rule of thumb (a head made
for the target, then its own MTP head, then the draft models by their ranking; n-gram lookup
only once measured); then those measured not to pay. One the probe could not load (a head
made for a target with other layers: the headers do not say) is never chosen.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from specllama.errors import LocalModelError
from specllama.llama.vocab import MAX_VOCAB_SIZE_DIFFERENCE, VOCAB_TYPE_NAMES
from specllama.models import local
from specllama.models.compat import vocab_difference
from specllama.models.hardware import FIT_CPU, FIT_GPU, FIT_NO, FIT_SPLIT, Fit, Machine, fits
from specllama.models.local import LocalModel, LocalScan
from specllama.models.local_files import Problem

MIN_SIZE_RATIO = 2.0
CROSS_MIN_SIZE_RATIO = 4.0
CROSS_DRAFTS_PER_TARGET = 2
BYTE_LEVEL_BPE = 2  # llama.cpp's LLAMA_VOCAB_TYPE_BPE: gives back the text it reads
_FIT_RANK = {FIT_GPU: 0, FIT_SPLIT: 1, FIT_CPU: 2}

MTP, NGRAM = "mtp", "ngram"  # the target's own drafters, with no file of their own
CANNOT_RUN = 0.0  # the speedup measured of a pair the probe could not load (never chosen)

Detailed = Callable[[LocalModel], LocalModel]  # the model with its vocabulary print's detail
# (target, draft) -> the speedup measured on this machine, None when it was not measured; the
# draft is a file (a draft model or head) or one of the target's own drafters (MTP, NGRAM).
Measured = Callable[[LocalModel, LocalModel | str], float | None]


@dataclass(frozen=True)
class LocalPair:
    target: LocalModel
    draft: LocalModel
    fit: Fit
    same_family: bool
    speedup: float | None = None  # measured on this machine (expected, from the probe)
    across_tokenizers: bool = False  # another vocabulary: the draft's text is re-tokenised

    @property
    def drafter(self) -> str:
        """The drafter this pair runs with: "model", or the draft head's kind."""
        return self.draft.head_kind or "model"

    @property
    def cost_ratio(self) -> float:
        """A draft step next to a target token, by the bytes each reads."""
        return self.draft.size / self.target.size


@dataclass(frozen=True)
class DraftChoice:
    """One way to draft for a target, for --draft auto: a draft file (`pair`), or one of the
    target's own drafters (its MTP head, n-gram lookup)."""

    drafter: str  # --drafter: "model", a draft head's kind, MTP or NGRAM
    pair: LocalPair | None = None  # with the draft file
    speedup: float | None = None  # measured on this machine
    n_measured: int = 0  # of the ways to draft for the target, how many were measured

    @property
    def path(self) -> Path | None:
        """The file it drafts with (None: the target's own drafter)."""
        return self.pair.draft.path if self.pair else None


def difference(a: LocalModel, b: LocalModel, detailed: Detailed) -> str | None:
    """None when `a` can draft for `b` (and so `b` for `a`: the rule is symmetric)."""
    va, vb = a.header.vocab, b.header.vocab
    if va is None or vb is None:
        return "no vocabulary llama.cpp knows"
    if (reason := vocab_difference(va, vb)) is not None:
        return reason
    pa, pb = a.header.vocab_print, b.header.vocab_print
    assert pa is not None and pb is not None  # a vocabulary comes with its print
    if pa.n_vocab != pb.n_vocab and (pa.detail is None or pb.detail is None):
        pa, pb = detailed(a).header.vocab_print, detailed(b).header.vocab_print
        assert pa is not None and pb is not None
    return pa.first_difference(pb)


def vocab_groups(models: list[LocalModel], detailed: Detailed) -> list[list[LocalModel]]:
    """The models in groups whose members can draft for one another (connected by the rule;
    models with no vocabulary llama.cpp knows are left out), largest group first."""
    usable = [m for m in models if m.header.vocab is not None]
    parent = list(range(len(usable)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(usable):
        for j in range(i + 1, len(usable)):
            b = usable[j]
            if root(i) != root(j) and _may_match(a, b) and difference(a, b, detailed) is None:
                parent[root(j)] = root(i)
    groups: dict[int, list[LocalModel]] = {}
    for i, model in enumerate(usable):
        groups.setdefault(root(i), []).append(model)
    return sorted(groups.values(), key=lambda g: (-len(g), g[0].ref))


def group_label(group: list[LocalModel]) -> str:
    """e.g. "BPE (qwen2), 151,936 tokens"."""
    vocab, header = group[0].header.vocab, group[0].header
    assert vocab is not None
    kind = VOCAB_TYPE_NAMES.get(vocab.vocab_type, str(vocab.vocab_type))
    pre = f" ({header.tokenizer_pre})" if header.tokenizer_pre else ""
    sizes = sorted({m.header.vocab.n_vocab for m in group if m.header.vocab})
    counts = " / ".join(f"{n:,}" for n in sizes)
    return f"{kind}{pre}, {counts} tokens"


def propose_pairs(
    models: list[LocalModel],
    machine: Machine,
    offload: bool,
    detailed: Detailed,
    measured: Measured | None = None,
    heads: list[LocalModel] | None = None,
) -> list[LocalPair]:
    """Every proposed pair, best first (see the module docstring), `heads`' with the models they
    draft for among them. Each pair is checked by the rule itself: a group is connected by it,
    which sizes within 128 of each other do not make transitive."""
    pairs = []
    for group in vocab_groups(models, detailed):
        for target in group:
            for draft in group:
                small = draft.size * MIN_SIZE_RATIO <= target.size
                if small and difference(draft, target, detailed) is None:
                    pairs.append(_pair(target, draft, machine, offload, measured))
    for head in heads or []:
        for target in models:
            if head_problem(head, target, detailed) is None:
                pairs.append(_pair(target, head, machine, offload, measured))
    drafted = {p.target.path for p in pairs if p is not None}
    for target in models:
        if target.path not in drafted and not target.has_mtp:
            pairs += cross_pairs(target, models, machine, offload, detailed, measured)
    return rank([p for p in pairs if p is not None])


def cross_pairs(
    target: LocalModel,
    candidates: list[LocalModel],
    machine: Machine,
    offload: bool,
    detailed: Detailed,
    measured: Measured | None = None,
) -> list[LocalPair]:
    """The drafts of another vocabulary among `candidates` that could draft across tokenizers
    for `target` (the module docstring), the cheapest first."""
    if not _gives_text_back(target):
        return []
    found = []
    for draft in candidates:
        if draft.head_kind or not _gives_text_back(draft):
            continue
        if draft.size * CROSS_MIN_SIZE_RATIO > target.size:
            continue
        if difference(draft, target, detailed) is None:  # the same vocabulary: not across
            continue
        if (pair := _pair(target, draft, machine, offload, measured)) is not None:
            found.append(replace(pair, across_tokenizers=True))
    return sorted(found, key=lambda p: p.cost_ratio)[:CROSS_DRAFTS_PER_TARGET]


def _gives_text_back(model: LocalModel) -> bool:
    """Byte-level BPE, by its header: a tokenizer that reads text back as it was."""
    return model.header.vocab is not None and model.header.vocab.vocab_type == BYTE_LEVEL_BPE


def head_problem(head: LocalModel, target: LocalModel, detailed: Detailed) -> str | None:
    """Why a draft head cannot draft for `target` (None: it can): their vocabularies, or the
    width of the rows it reads against the target's (unknown widths pass: the loader says)."""
    if (arch := head.header.drafts_for) and arch != target.header.architecture:
        return f"it drafts for {arch} models"
    if not _may_match(head, target):
        return "vocabularies of sizes too far apart"
    if (reason := difference(head, target, detailed)) is not None:
        return reason
    reads, width = head.reads_width, target.width
    if reads is not None and width is not None and reads != width:
        return f"it reads rows {reads} wide, the model's are {width}"
    return None


def unpaired_heads(heads: list[LocalModel], pairs: list[LocalPair]) -> list[Problem]:
    """A line for each draft head that no proposed pair drafts with."""
    paired = {pair.draft.path for pair in pairs}
    return [
        Problem(head.ref, f"an {head.head_kind} draft head, and no model here that it drafts "
                "for (the same vocabulary, rows as wide as it reads) fits beside it")
        for head in heads
        if head.path not in paired
    ]  # fmt: skip


def best_draft(
    target: LocalModel,
    candidates: list[LocalModel],
    machine: Machine,
    offload: bool,
    detailed: Detailed,
    measured: Measured | None = None,
) -> tuple[LocalPair | None, int]:
    """The best draft model among `candidates` for `target`, and how many of them have a
    compatible vocabulary at all."""
    ranked, compatible = _draft_pairs(target, candidates, machine, offload, detailed, measured)
    return (ranked[0] if ranked else None), compatible


def _draft_pairs(
    target: LocalModel,
    candidates: list[LocalModel],
    machine: Machine,
    offload: bool,
    detailed: Detailed,
    measured: Measured | None,
) -> tuple[list[LocalPair], int]:
    """The draft models among `candidates` paired with `target`, ranked, and how many of them
    have a compatible vocabulary at all."""
    pairs, compatible = [], 0
    for draft in candidates:
        if _same_file(draft.path, [target]) or not _may_match(draft, target):
            continue
        if difference(draft, target, detailed) is not None:
            continue
        compatible += 1
        if draft.size * MIN_SIZE_RATIO <= target.size:
            pairs.append(_pair(target, draft, machine, offload, measured))
    return rank([p for p in pairs if p is not None]), compatible


def draft_choices(
    target: LocalModel,
    found: LocalScan,
    machine: Machine,
    offload: bool,
    measured: Measured | None = None,
    *,
    mtp_runs: bool = False,
) -> tuple[list[DraftChoice], int]:
    """Every way to draft for `target` found here, best first (the module docstring), and how
    many draft models have a compatible vocabulary at all. `mtp_runs`: the target carries MTP
    layers and this build runs them (the caller knows; the headers do not)."""
    look = measured or (lambda _target, _draft: None)
    detailed = found.detailed
    heads = [_pair(target, head, machine, offload, measured) for head in found.heads
             if head_problem(head, target, detailed) is None]  # fmt: skip
    models, compatible = _draft_pairs(target, found.models, machine, offload, detailed, measured)
    choices = [DraftChoice(p.drafter, p, p.speedup) for p in rank([h for h in heads if h])]
    if mtp_runs:
        choices.append(DraftChoice(MTP, speedup=look(target, MTP)))
    choices += [DraftChoice(p.drafter, p, p.speedup) for p in models]
    if not any(heads) and not models and not mtp_runs:  # across tokenizers, measured to pay
        crossed = cross_pairs(target, found.models, machine, offload, detailed, measured)
        choices += [DraftChoice("model", p, p.speedup) for p in crossed if (p.speedup or 0) > 1]
    if (ngram := look(target, NGRAM)) is not None:  # never chosen by the rule of thumb
        choices.append(DraftChoice(NGRAM, speedup=ngram))
    choices = [c for c in choices if c.speedup != CANNOT_RUN]
    n_measured = sum(c.speedup is not None for c in choices)
    ranked = sorted(choices, key=_by_what_pays)  # stable: the rule of thumb among the unmeasured
    return [replace(c, n_measured=n_measured) for c in ranked], compatible


def _by_what_pays(choice: DraftChoice) -> tuple[int, float]:
    """Measured to pay first, by speedup; then the unmeasured; then measured not to pay."""
    if choice.speedup is None:
        return (1, 0.0)
    return (0 if choice.speedup > 1 else 2, -choice.speedup)


def rank(pairs: list[LocalPair]) -> list[LocalPair]:
    """Measured pairs by their speedup, first; then the rule of thumb; last, those the probe
    could not load."""

    def key(pair: LocalPair) -> tuple[object, ...]:
        if pair.speedup == CANNOT_RUN:
            return (2,)
        if pair.speedup is not None:
            return (0, -pair.speedup)
        fit = _FIT_RANK.get(pair.fit.verdict, 3)
        across = pair.across_tokenizers
        return (1, across, fit, not pair.same_family, pair.cost_ratio, pair.target.ref)

    return sorted(pairs, key=key)


def _pair(
    target: LocalModel,
    draft: LocalModel,
    machine: Machine,
    offload: bool,
    measured: Measured | None,
) -> LocalPair | None:
    """The pair of a compatible, small enough draft, if both fit here together."""
    fit = fits([target.size, draft.size], machine, offload)
    if fit.verdict == FIT_NO:
        return None
    same = draft.head_kind is not None or (
        draft.family is not None and draft.family == target.family
    )
    speedup = measured(target, draft) if measured else None
    return LocalPair(target, draft, fit, same, speedup)


def _may_match(a: LocalModel, b: LocalModel) -> bool:
    """A quick look before the rule: vocabulary sizes within reach of each other."""
    va, vb = a.header.vocab, b.header.vocab
    return (
        va is not None
        and vb is not None
        and abs(va.n_vocab - vb.n_vocab) <= (MAX_VOCAB_SIZE_DIFFERENCE)
    )


def auto_draft(
    target: Path,
    machine: Machine,
    offload: bool,
    measured: Measured | None = None,
    found: LocalScan | None = None,
    *,
    mtp_runs: bool = False,
    only: str | None = None,
) -> DraftChoice:
    """--draft auto: the best way to draft for the target file on this machine
    (`draft_choices`), of the drafter `only` names when it names one ("model", a head's kind),
    or LocalModelError saying why there is none."""
    found = found or local.scan()
    model = _same_file(target, found.models) or local.model_at(target, found.cache)
    choices, compatible = draft_choices(model, found, machine, offload, measured, mtp_runs=mtp_runs)
    found.cache.save()  # details read for vocabularies of other sizes
    choices = [c for c in choices if only is None or c.drafter == only]
    if choices:
        return choices[0]
    if only not in (None, "model"):
        raise LocalModelError(
            f"--draft auto: no {only} draft head on this machine drafts for {model.label}",
            hint="`specllama models --local` lists the heads found and what they draft for",
        )
    n = len(found.models)
    if compatible == 0:
        raise LocalModelError(
            f"--draft auto: none of the {n} models on this machine has a vocabulary "
            f"compatible with {model.label}",
            hint="`specllama models --local` lists them; a draft must come from the same "
            "model family",
        )
    raise LocalModelError(
        f"--draft auto: {compatible} models could draft for {model.label}, but none is "
        f"{MIN_SIZE_RATIO:g}x smaller and fits this machine beside it",
        hint="give a --draft, or use --drafter ngram",
    )


def _same_file(path: Path, models: list[LocalModel]) -> LocalModel | None:
    try:
        wanted = os.stat(path)
    except OSError:
        return None
    for model in models:
        try:
            st = os.stat(model.path)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (wanted.st_dev, wanted.st_ino):
            return model
    return None
