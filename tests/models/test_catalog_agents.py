"""The agent models of the catalogue (issue 51): each is there with what drafts for it, every
draft speaks its target's vocabulary, and the hub facts pinned for them hang together."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from specllama.errors import CatalogError
from specllama.models import catalog as cat
from specllama.models import hardware as hw
from specllama.models import hub

# pair -> (what its target's repo is named after, who drafts)
AGENT_PAIRS = {
    "qwen3-coder-30b": ("Qwen3-Coder-30B-A3B", "model"),
    "qwen3.6-35b-a3b-mtp": ("Qwen3.6-35B-A3B", "mtp"),
    "qwen3.6-35b-a3b": ("Qwen3.6-35B-A3B", "model"),
    "qwen3.6-27b-mtp": ("Qwen3.6-27B", "mtp"),
    "qwen3.6-27b": ("Qwen3.6-27B", "model"),
    "gpt-oss-20b-ngram": ("gpt-oss-20b", "ngram"),
    "devstral-small-ngram": ("Devstral-Small-2507", "ngram"),
    "devstral-small": ("Devstral-Small-2507", "model"),
    "gemma-4-e4b-mtp": ("gemma-4-E4B", "assistant"),
    "gemma-4-12b-mtp": ("gemma-4-12B", "assistant"),
}
# Qwen3.5 and Qwen3.6 have a tokenizer of their own (248,320 tokens, Qwen3's 151,936): a draft
# for them must come from these two generations, never from Qwen3.
NEW_QWEN = ("Qwen3.5-", "Qwen3.6-")


@dataclass(frozen=True)
class CpuBuild:  # what `hardware.pair_rows` reads of a llama.cpp build
    version: str = "0.3.36"
    gpu_offload: bool = False
    system_info: str = "CPU : AVX2 = 1 |"
    rpc: bool = True


@pytest.fixture(autouse=True)
def _no_user_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(cat.CATALOG_ENV, raising=False)


@pytest.fixture
def builtin() -> cat.Catalog:
    return cat.load_catalog()


@pytest.mark.parametrize(("name", "expected"), AGENT_PAIRS.items())
def test_each_agent_model_is_there_with_what_drafts_for_it(
    builtin: cat.Catalog, name: str, expected: tuple[str, str]
) -> None:
    family, drafter = expected
    pair, target, draft = builtin.pair_models(name)
    assert family in target.repo and pair.drafter == drafter
    if drafter in cat.SELF_DRAFTERS:  # no second file
        assert pair.own_heads and draft == target
    else:
        assert not pair.own_heads and draft.file != target.file


@pytest.mark.parametrize("name", AGENT_PAIRS)
def test_each_agent_draft_speaks_its_target_s_vocabulary(builtin: cat.Catalog, name: str) -> None:
    _, target, draft = builtin.pair_models(name)
    assert draft.tokenizer == target.tokenizer
    if any(tag in target.repo for tag in NEW_QWEN):
        assert any(tag in draft.repo for tag in NEW_QWEN), draft.repo


def test_the_two_qwen_vocabularies_are_two_families(builtin: cat.Catalog) -> None:
    coder = builtin.pair_models("qwen3-coder-30b")[1]
    qwen36 = builtin.pair_models("qwen3.6-27b")[1]
    assert coder.tokenizer != qwen36.tokenizer


def test_hub_checksums_come_with_the_revision_they_hold_at(builtin: cat.Catalog) -> None:
    # A checksum read from the hub, not measured here, breaks the download once the file is
    # uploaded again, unless the revision it was read at is pinned with it.
    for model in builtin.models.values():
        if model.sha256 and not model.verified:
            assert model.revision, model.name


def test_pinned_sizes_agree_with_parameters_and_quantisation(builtin: cat.Catalog) -> None:
    # A dropped or doubled digit in a size would mislead the fit check; the estimate from the
    # parameter count and the bits per weight catches it (embeddings make small models heavy).
    for model in builtin.models.values():
        estimate = replace(model, size=None).approx_size
        if model.size is not None and estimate is not None:
            assert 0.5 < model.size / estimate < 2, model.name


def test_a_lookup_pair_is_one_file_fetched_and_counted_once(builtin: cat.Catalog) -> None:
    pair, target, _ = builtin.pair_models("gpt-oss-20b-ngram")
    assert hub.models_to_pull(pair.name, builtin) == [target]
    machine = hw.Machine(64 * 10**9, 32 * 10**9, 4, 8, (), False)
    rows = hw.pair_rows(builtin, CpuBuild(), machine, is_downloaded=lambda _: False)
    row = next(r for r in rows if r.name == pair.name)
    assert row.draft_size == 0 and row.target_size == target.approx_size


M = "[models.m]\nrepo = 'a/b'\nfile = 'f.gguf'\ntokenizer = 't'\n"


def test_a_lookup_pair_may_leave_out_its_draft_and_a_model_pair_may_not(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text(M + "\n[pairs.look]\ntarget = 'm'\ndrafter = 'ngram'\n", encoding="utf-8")
    pair = cat.load_catalog(user=user).pair("look")
    assert pair.draft == "m" and pair.own_heads and pair.drafter == cat.NGRAM
    user.write_text(M + "\n[pairs.x]\ntarget = 'm'\ndrafter = 'model'\n", encoding="utf-8")
    with pytest.raises(CatalogError) as err:
        cat.load_catalog(user=user)
    assert f'"{cat.NGRAM}"' in (err.value.hint or "")
