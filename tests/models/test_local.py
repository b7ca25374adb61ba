"""The models on a machine stocked in every store: found, read once (the header cache), grouped
by the vocabulary rule and paired; damaged files are lines, never failures."""

from __future__ import annotations

import os

import gemma4_models
import head_models
import pytest
from gguf_fakes import vocab, write_gguf
from store_fakes import place

from specllama.errors import LocalModelError
from specllama.models import local, local_dirs
from specllama.models.hardware import FIT_CPU, Machine
from specllama.models.header_cache import HeaderCache
from specllama.models.local_pairs import (
    CANNOT_RUN,
    MIN_SIZE_RATIO,
    MTP,
    NGRAM,
    auto_draft,
    best_draft,
    head_problem,
    propose_pairs,
    unpaired_heads,
    vocab_groups,
)

pytestmark = pytest.mark.slow

BIG = Machine(ram_total=64 << 30, ram_available=32 << 30, physical_cores=2, logical_cores=2)
SMALL = Machine(ram_total=800 << 20, ram_available=400 << 20, physical_cores=2, logical_cores=2)


def by_ref(scan):
    return {m.ref: m for m in scan.models}


def test_every_store_is_found_and_every_damaged_file_is_one_line(stocked_machine):
    scan = local.scan([stocked_machine["mine"]])
    roles = {role: ref for role, ref in stocked_machine.items()}
    assert set(by_ref(scan)) == {roles[r] for r in ("q4", "f32", "draft4", "draft2", "bad_vocab")}
    reasons = {p.where: p.reason for p in scan.problems}
    assert any("ollama:broken:latest: blob sha256-" in r for r in reasons.values())
    assert "not a GGUF file" in reasons["ollama:notgguf:latest"]
    assert "ends inside its header" in reasons[roles["cut"]]
    assert "not a GGUF file" in reasons[os.path.join(roles["mine"], "notes.gguf")]
    assert len(scan.problems) == 4


def test_the_facts_of_each_model(stocked_machine):
    models = by_ref(local.scan())
    q4, f32 = models[stocked_machine["q4"]], models[stocked_machine["f32"]]
    assert q4.header.quant == "Q4_1" and f32.header.quant == "F32"
    assert q4.header.n_params == f32.header.n_params  # the same weights, quantised
    assert q4.header.size_label == "135M" and q4.family == "smollm2"
    assert f32.size > 5 * q4.size


def test_incompatible_vocabularies_are_never_grouped_nor_paired(stocked_machine):
    scan = local.scan()
    groups = vocab_groups(scan.models, scan.detailed)
    refs = [sorted(m.ref for m in g) for g in groups]
    roles = stocked_machine
    assert refs[0] == sorted(roles[r] for r in ("q4", "f32", "draft4", "draft2"))
    assert refs[1] == [roles["bad_vocab"]]
    pairs = propose_pairs(scan.models, BIG, False, scan.detailed)
    assert all(roles["bad_vocab"] not in (p.target.ref, p.draft.ref) for p in pairs)


def test_pairs_a_target_with_drafts_several_times_smaller_best_first(stocked_machine):
    scan = local.scan()
    pairs = propose_pairs(scan.models, BIG, False, scan.detailed)
    roles = stocked_machine
    assert [(p.target.ref, p.draft.ref) for p in pairs] == [
        (roles["f32"], roles["q4"]),  # the cheapest draft of the same family first
        (roles["f32"], roles["draft2"]),
        (roles["f32"], roles["draft4"]),
    ]
    assert all(p.fit.verdict == FIT_CPU and p.same_family for p in pairs)
    assert pairs[0].cost_ratio < 0.2


def test_nothing_is_proposed_that_does_not_fit_this_machine(stocked_machine):
    scan = local.scan()
    assert propose_pairs(scan.models, SMALL, False, scan.detailed) == []


def test_the_best_draft_for_a_target(stocked_machine):
    scan = local.scan()
    target = by_ref(scan)[stocked_machine["f32"]]
    pair, compatible = best_draft(target, scan.models, BIG, False, scan.detailed)
    assert pair.draft.ref == stocked_machine["q4"] and compatible == 3
    changed = by_ref(scan)[stocked_machine["bad_vocab"]]
    assert best_draft(changed, scan.models, BIG, False, scan.detailed) == (None, 0)


def test_a_second_scan_reads_no_header_and_a_changed_file_is_read_again(stocked_machine, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    own = write_gguf(mine / "own.gguf", vocab(50))  # not a link to a shared test model
    first = local.scan([mine])
    assert first.cache.reads == 8  # six models and the two damaged files
    second = local.scan([mine])
    assert second.cache.reads == 0
    assert [m.header for m in second.models] == [m.header for m in first.models]
    os.utime(own, ns=(1, 1))
    assert local.scan([mine]).cache.reads == 1


def test_a_damaged_header_cache_is_read_again_not_fatal(stocked_machine):
    local.scan()
    path = HeaderCache().path
    path.write_text("{ not json")
    assert len(local.scan().models) == 5


def test_vocabularies_of_different_sizes_within_128_are_compared_by_their_detail(
    bare_machine, tmp_path
):
    folder = tmp_path / "sizes"
    folder.mkdir()
    tokens = vocab(300)
    write_gguf(folder / "target.gguf", [*tokens, *vocab(64, "pad")],
               tensors={"token_embd.weight": (400, 400)})  # fmt: skip
    write_gguf(folder / "draft.gguf", tokens, tensors={"token_embd.weight": (100, 100)})
    other = [*tokens[:200], "other", *tokens[201:]]
    write_gguf(folder / "other.gguf", other, tensors={"token_embd.weight": (100, 100)})
    scan = local.scan([folder])
    assert all(m.header.vocab_print.detail is None for m in scan.models)  # the fast read
    pairs = propose_pairs(scan.models, BIG, False, scan.detailed)
    assert [(p.target.path.name, p.draft.path.name) for p in pairs] == [
        ("target.gguf", "draft.gguf")
    ]
    reread = HeaderCache().header(folder / "target.gguf", detail=True)
    assert reread.vocab_print.detail is not None  # the detail was read once, and cached
    assert HeaderCache().reads == 0


def test_saved_folders_are_scanned_and_can_be_forgotten(bare_machine, tmp_path):
    folder = tmp_path / "saved"
    folder.mkdir()
    write_gguf(folder / "m.gguf", vocab(50))
    assert local.scan().models == []
    local_dirs.add_dir(folder)
    assert [m.path.name for m in local.scan().models] == ["m.gguf"]
    local_dirs.remove_dir(folder)
    assert local.scan().models == []


def test_a_file_that_cannot_be_read_now_is_a_line_and_is_not_remembered(
    bare_machine, tmp_path, monkeypatch
):
    folder = tmp_path / "locked"
    folder.mkdir()
    locked = write_gguf(folder / "locked.gguf", vocab(50))
    real_access = os.access
    monkeypatch.setattr(  # as for a file of another user (root reads everything)
        os, "access", lambda p, mode: False if str(p) == str(locked) else real_access(p, mode)
    )
    scan = local.scan([folder])
    assert scan.models == []
    assert [p.reason for p in scan.problems] == ["cannot read locked.gguf: permission denied"]
    monkeypatch.setattr(os, "access", real_access)
    assert [m.path for m in local.scan([folder]).models] == [locked]


# -- draft heads in their own file ------------------------------------------------------------


def head_folder(tmp_path, *extra):
    """The tiny synthetic target and its EAGLE-3 head under a name once skipped, and `extra`
    (name, file) pairs, in a folder of their own."""
    folder = tmp_path / "heads"
    place(head_models.tiny_target(), folder / "target.gguf")
    place(head_models.tiny_eagle3(0.8), folder / "eagle3-tiny.gguf")
    for name, path in extra:
        place(path, folder / name)
    return folder


def names(pairs):
    return sorted((p.target.path.name, p.draft.path.name) for p in pairs)


def test_a_draft_head_is_found_by_its_architecture_and_drafts_for_its_target(
    bare_machine, tmp_path
):
    scan = local.scan([head_folder(tmp_path)])
    assert [(m.path.name, m.head_kind) for m in scan.heads] == [("eagle3-tiny.gguf", "eagle3")]
    assert [m.path.name for m in scan.models] == ["target.gguf"] and scan.problems == []
    pairs = propose_pairs(scan.models, BIG, False, scan.detailed, heads=scan.heads)
    [pair] = pairs
    assert names(pairs) == [("target.gguf", "eagle3-tiny.gguf")]
    assert pair.drafter == "eagle3" and pair.same_family and pair.fit.verdict == FIT_CPU
    # Paired though it is over half the target's size: the draft models' size rule is not its.
    assert pair.cost_ratio > 1 / MIN_SIZE_RATIO
    assert propose_pairs(scan.models, BIG, False, scan.detailed) == []  # no heads, no pair
    assert unpaired_heads(scan.heads, pairs) == []
    [line] = unpaired_heads(scan.heads, [])
    assert line.where == scan.heads[0].ref and "an eagle3 draft head" in line.reason


def test_a_head_does_not_draft_for_a_model_of_another_vocabulary(bare_machine, tmp_path):
    other = write_gguf(tmp_path / "other.gguf", vocab(49152, "other"))
    scan = local.scan([head_folder(tmp_path, ("other.gguf", other))])
    [head], by_name = scan.heads, {m.path.name: m for m in scan.models}
    assert head_problem(head, by_name["other.gguf"], scan.detailed) is not None
    pairs = propose_pairs(scan.models, BIG, False, scan.detailed, heads=scan.heads)
    assert names(pairs) == [("target.gguf", "eagle3-tiny.gguf")]


def test_a_head_drafts_only_for_models_as_wide_as_the_rows_it_reads(
    bare_machine, tmp_path, smol_q4
):
    """SmolLM2 shares the tiny target's vocabulary, but its rows are 576 wide, not 64; a head
    made for a 96-wide target drafts for neither."""
    wide = head_models.tiny_eagle3(0.8, target_hidden_size=96)
    scan = local.scan([head_folder(tmp_path, ("smol.gguf", smol_q4), ("wide.gguf", wide))])
    heads, by_name = {m.path.name: m for m in scan.heads}, {m.path.name: m for m in scan.models}
    said = head_problem(heads["eagle3-tiny.gguf"], by_name["smol.gguf"], scan.detailed)
    assert said == "it reads rows 64 wide, the model's are 576"
    pairs = propose_pairs(scan.models, BIG, False, scan.detailed, heads=scan.heads)
    assert [n for n in names(pairs) if n[1] != "target.gguf"] == [
        ("target.gguf", "eagle3-tiny.gguf")
    ]  # and SmolLM2 with the tiny target as its draft model
    assert [line.where for line in unpaired_heads(scan.heads, pairs)] == [heads["wide.gguf"].ref]


def test_a_gemma_4_assistant_drafts_only_for_a_gemma_4_target_as_wide_as_it_reads(
    bare_machine, tmp_path
):
    """The tiny llama target and the tiny gemma4 target share SmolLM2's vocabulary, and the
    assistant's own rows are narrower than either: it pairs with the gemma4 target alone, by
    the width it reads (embedding_length_out), and one made for another width with neither."""
    extra = [
        ("gemma4.gguf", gemma4_models.tiny_target()),
        ("assistant.gguf", gemma4_models.tiny_assistant(0.8)),
        ("assistant-96.gguf", gemma4_models.tiny_assistant(0.8, backbone=96)),
    ]
    scan = local.scan([head_folder(tmp_path, *extra)])
    heads, by_name = {m.path.name: m for m in scan.heads}, {m.path.name: m for m in scan.models}
    assert heads["assistant.gguf"].head_kind == "assistant" and scan.problems == []
    said = head_problem(heads["assistant.gguf"], by_name["target.gguf"], scan.detailed)
    assert said == "it drafts for gemma4 models"
    pairs = propose_pairs(scan.models, BIG, False, scan.detailed, heads=scan.heads)
    assert [n for n in names(pairs) if n[1].startswith("assistant")] == [
        ("gemma4.gguf", "assistant.gguf")
    ]
    assert [p.drafter for p in pairs if p.draft.path.name == "assistant.gguf"] == ["assistant"]
    unpaired = unpaired_heads(scan.heads, pairs)
    assert [line.where for line in unpaired] == [heads["assistant-96.gguf"].ref]


# -- --draft auto: every way to draft for the target ------------------------------------------


def smol_with_a_head(stocked_machine, tmp_path):
    """The stocked machine's SmolLM2 models, and an EAGLE-3 head that reads rows as wide as
    SmolLM2's (576): a head for the F32 target beside its three draft models."""
    head = place(
        head_models.tiny_eagle3(0.8, target_hidden_size=576), tmp_path / "heads" / "eagle3.gguf"
    )
    scan = local.scan([head.parent])
    target = by_ref(scan)[stocked_machine["f32"]]
    return scan, target, head


def measured_as(speedups):
    """A lookup of measurements (what `--measure` cached) by draft file or own drafter name."""
    return lambda _target, draft: speedups.get(draft if isinstance(draft, str) else draft.path)


def test_draft_auto_drafts_with_a_head_made_for_the_target_by_the_rule_of_thumb(
    stocked_machine, tmp_path
):
    scan, target, head = smol_with_a_head(stocked_machine, tmp_path)
    choice = auto_draft(target.path, BIG, False, found=scan)
    assert (choice.drafter, choice.path, choice.speedup) == ("eagle3", head, None)
    # Asked for a draft model, it is the draft model the listing ranks first.
    model = auto_draft(target.path, BIG, False, found=scan, only="model")
    best, _ = best_draft(target, scan.models, BIG, False, scan.detailed)
    assert (model.drafter, model.path) == ("model", best.draft.path)
    with pytest.raises(LocalModelError, match="no dflash draft head on this machine drafts for"):
        auto_draft(target.path, BIG, False, found=scan, only="dflash")


def test_draft_auto_chooses_what_was_measured_to_pay_most(stocked_machine, tmp_path):
    scan, target, head = smol_with_a_head(stocked_machine, tmp_path)
    q4 = by_ref(scan)[stocked_machine["q4"]].path
    speedups = {head: 1.2, q4: 1.4, NGRAM: 1.1}
    choice = auto_draft(target.path, BIG, False, measured_as(speedups), scan)
    assert (choice.drafter, choice.path, choice.n_measured) == ("model", q4, 3)
    assert choice.speedup == max(speedups.values())
    # N-gram lookup alone, once measured best, drafts with no file at all.
    speedups[NGRAM] = 1.5
    choice = auto_draft(target.path, BIG, False, measured_as(speedups), scan)
    assert (choice.drafter, choice.path, choice.speedup) == (NGRAM, None, 1.5)
    # What was measured not to pay ranks below what was not measured (the rule of thumb),
    # and n-gram lookup is never chosen unmeasured.
    speedups = {head: 0.8, q4: 0.9}
    choice = auto_draft(target.path, BIG, False, measured_as(speedups), scan)
    others = (
        by_ref(scan)[stocked_machine["draft2"]].path,
        by_ref(scan)[stocked_machine["draft4"]].path,
    )
    assert choice.drafter == "model" and choice.path in others and choice.speedup is None
    # A head the probe could not load is never chosen, not even by the rule of thumb.
    choice = auto_draft(target.path, BIG, False, measured_as({head: CANNOT_RUN}), scan)
    assert choice.drafter == "model" and choice.n_measured == 0


def test_draft_auto_drafts_with_the_targets_own_mtp_head_where_it_runs(
    bare_machine, qwen35_mtp, tmp_path
):
    target = place(qwen35_mtp, tmp_path / "mtp" / "qwen35.gguf")
    scan = local.scan([target.parent])
    choice = auto_draft(target, BIG, False, found=scan, mtp_runs=True)
    assert (choice.drafter, choice.path, choice.speedup) == (MTP, None, None)
    # Measured, n-gram lookup and the head are weighed against each other.
    choice = auto_draft(
        target, BIG, False, measured_as({MTP: 1.3, NGRAM: 1.6}), scan, mtp_runs=True
    )
    assert (choice.drafter, choice.speedup, choice.n_measured) == (NGRAM, 1.6, 2)
    # Where the head does not run here, nothing drafts for it: the plain case's line.
    with pytest.raises(LocalModelError, match="has a vocabulary compatible with"):
        auto_draft(target, BIG, False, found=scan, mtp_runs=False)
