"""Finding models in the stores other tools keep, laid out as those tools lay them out, with
real GGUF files; reading them never writes there."""

from __future__ import annotations

import json

import pytest
from store_fakes import hf_model, lmstudio_model, ollama_model, place, snapshot

from specllama.errors import LocalModelError, UsageError
from specllama.models import lmstudio, ollama, stores
from specllama.models.local_files import is_model_name, split_parts
from specllama.models.ollama import OllamaName


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", True),
        ("Model.GGUF", True),
        ("mmproj-model-f16.gguf", False),
        ("model.imatrix.gguf", False),
        ("mtp-head.gguf", False),
        ("eagle3-llama.gguf", True),  # read: a head is known by its architecture
        ("big-00001-of-00003.gguf", True),
        ("big-00002-of-00003.gguf", False),
        ("model.safetensors", False),
    ],
)
def test_which_file_names_are_models(name, model):
    assert is_model_name(name) is model


def test_a_split_model_lists_its_parts_and_names_a_missing_one(tmp_path):
    for i in (1, 2):
        (tmp_path / f"big-0000{i}-of-00003.gguf").write_bytes(b"GGUF")
    parts, missing = split_parts(tmp_path / "big-00001-of-00003.gguf")
    assert [p.name for p in parts][-1] == "big-00003-of-00003.gguf"
    assert missing == "split part big-00003-of-00003.gguf is missing"
    (tmp_path / "big-00003-of-00003.gguf").write_bytes(b"GGUF")
    assert split_parts(tmp_path / "big-00001-of-00003.gguf")[1] is None


@pytest.mark.parametrize(
    ("text", "parts", "shown"),
    [
        ("qwen2.5-coder:1.5b", ("registry.ollama.ai", "library", "qwen2.5-coder", "1.5b"),
         "qwen2.5-coder:1.5b"),
        ("llama3", ("registry.ollama.ai", "library", "llama3", "latest"), "llama3:latest"),
        ("jmorganca/mymodel:v1", ("registry.ollama.ai", "jmorganca", "mymodel", "v1"),
         "jmorganca/mymodel:v1"),
        ("localhost:5000/ns/m", ("localhost:5000", "ns", "m", "latest"),
         "localhost:5000/ns/m:latest"),
    ],
)  # fmt: skip
def test_ollama_names_take_ollamas_defaults(text, parts, shown):
    name = OllamaName.parse(text)
    assert (name.host, name.namespace, name.model, name.tag) == parts
    assert str(name) == shown


@pytest.mark.parametrize("text", ["", "a/b/c/d", "bad name", ":tag", "-x"])
def test_a_bad_ollama_name_is_a_usage_error(text):
    with pytest.raises(UsageError, match="bad Ollama model name"):
        OllamaName.parse(text)


@pytest.fixture
def ollama_store(bare_machine, smol_q4, smol_draft, tmp_path):
    store = bare_machine / ".ollama" / "models"
    ollama_model(store, "smollm2", "135m", smol_q4)
    ollama_model(
        store, "smollm2", "4layers", smol_draft,
        extra_layers=[("application/vnd.ollama.image.draft", b"GGUF a draft head")],
    )  # fmt: skip
    ollama_model(store, "gone", "latest", None, digest="ab" * 32)
    return store


@pytest.mark.slow
def test_the_ollama_store_lists_its_models_and_a_dangling_digest(ollama_store, smol_q4):
    found = ollama.find_models()
    refs = {f.ref: f.path for f in found.found}
    assert refs.keys() == {"ollama:smollm2:135m", "ollama:smollm2:4layers"}
    assert refs["ollama:smollm2:135m"].read_bytes()[:4] == b"GGUF"
    assert refs["ollama:smollm2:135m"].stat().st_size == smol_q4.stat().st_size
    assert [p.reason for p in found.problems] == [
        f"ollama:gone:latest: blob sha256-{'ab' * 32} is missing"
    ]


@pytest.mark.slow
def test_ollama_refs_resolve_to_the_blob_without_regard_to_case(ollama_store):
    blob = ollama.resolve("ollama:smollm2:135m")
    assert blob.parent == ollama_store / "blobs" and blob.name.startswith("sha256-")
    assert ollama.resolve("ollama:SmolLM2:135M") == blob
    assert ollama.resolve("ollama:registry.ollama.ai/library/smollm2:135m") == blob


@pytest.mark.slow
def test_an_unknown_ollama_name_lists_close_ones(ollama_store):
    with pytest.raises(LocalModelError, match="no Ollama model smollm2:latest") as err:
        ollama.resolve("ollama:smollm2")
    assert "ollama:smollm2:135m" in err.value.hint
    with pytest.raises(LocalModelError, match="blob sha256-abab"):
        ollama.resolve("ollama:gone")


@pytest.mark.slow
def test_ollama_models_overrides_the_default_store(ollama_store, tmp_path, monkeypatch, smol_q4):
    other = tmp_path / "elsewhere"
    ollama_model(other, "only-here", "latest", smol_q4)
    monkeypatch.setenv("OLLAMA_MODELS", str(other))
    assert [f.ref for f in ollama.find_models().found] == ["ollama:only-here:latest"]


def test_no_ollama_store_is_simply_absent(bare_machine):
    assert ollama.find_models().found == []
    with pytest.raises(LocalModelError, match="no Ollama model") as err:
        ollama.resolve("ollama:llama3")
    assert "no Ollama models found" in err.value.hint


@pytest.mark.slow
def test_a_manifest_list_names_the_model_of_a_child(bare_machine, smol_q4):
    store = bare_machine / ".ollama" / "models"
    child = ollama_model(store, "tmp", "child", smol_q4)
    data = json.loads(child.read_text())
    child.unlink()
    listed = {"schemaVersion": 2, "mediaType": ollama.MANIFEST_LIST,
              "manifests": [{**data, "runner": "ollama", "format": "gguf"}]}  # fmt: skip
    path = store / "manifests" / "registry.ollama.ai" / "library" / "multi" / "latest"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(listed))
    assert [f.ref for f in ollama.find_models().found] == ["ollama:multi:latest"]


@pytest.fixture
def lmstudio_elsewhere(bare_machine, tmp_path, smol_q4, smol_draft, smol_bad_vocab):
    """LM Studio's home named by the pointer file, its models moved by settings.json."""
    home = tmp_path / "lm-home"
    home.mkdir()
    (bare_machine / lmstudio.POINTER).write_text(str(home) + "\n")
    models = tmp_path / "big-disk" / "lm-models"
    (home / "settings.json").write_text(json.dumps({"downloadsFolder": str(models)}))
    lmstudio_model(models, "bartowski", "SmolLM2-GGUF", smol_q4, "SmolLM2-Q4_1.gguf")
    lmstudio_model(models, "bartowski", "SmolLM2-GGUF", smol_draft, "SmolLM2-4layers.gguf")
    lmstudio_model(models, "HuggingFaceTB", "Tiny", smol_bad_vocab, "tiny.gguf")
    (models / "HuggingFaceTB" / "Tiny" / "mmproj-tiny.gguf").write_bytes(b"GGUF")
    return models


@pytest.mark.slow
def test_lm_studio_models_are_found_where_its_settings_put_them(lmstudio_elsewhere):
    refs = sorted(f.ref for f in lmstudio.find_models().found)
    assert refs == [
        "lmstudio:HuggingFaceTB/Tiny",  # one model there (the projector does not count)
        "lmstudio:bartowski/SmolLM2-GGUF/SmolLM2-4layers.gguf",
        "lmstudio:bartowski/SmolLM2-GGUF/SmolLM2-Q4_1.gguf",
    ]
    assert lmstudio.resolve("lmstudio:HuggingFaceTB/Tiny").name == "tiny.gguf"
    assert lmstudio.resolve("lmstudio:bartowski/SmolLM2-GGUF/SmolLM2-Q4_1.gguf").is_file()
    with pytest.raises(LocalModelError, match="holds 2 models: name the file") as err:
        lmstudio.resolve("lmstudio:bartowski/SmolLM2-GGUF")
    assert "SmolLM2-4layers.gguf" in err.value.hint
    with pytest.raises(LocalModelError, match="no LM Studio model") as err:
        lmstudio.resolve("lmstudio:bartowski/SmolLM3-GGUF")
    assert "bartowski/SmolLM2-GGUF" in err.value.hint


@pytest.mark.slow
def test_lmstudio_home_overrides_and_the_default_home_is_used(
    bare_machine, tmp_path, monkeypatch, smol_q4
):
    lmstudio_model(bare_machine / ".lmstudio" / "models", "a", "b", smol_q4, "m.gguf")
    assert [f.ref for f in lmstudio.find_models().found] == ["lmstudio:a/b"]
    other = tmp_path / "other-home"
    lmstudio_model(other / "models", "c", "d", smol_q4, "m.gguf")
    monkeypatch.setenv("LMSTUDIO_HOME", str(other))
    assert [f.ref for f in lmstudio.find_models().found] == ["lmstudio:c/d"]


@pytest.mark.slow
@pytest.mark.parametrize("symlinks", [True, False])
def test_the_hugging_face_cache_with_and_without_symlinks(
    bare_machine, tmp_path, monkeypatch, smol_q4, symlinks
):
    cache = tmp_path / "hf-hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    hf_model(cache, "HuggingFaceTB/SmolLM2-GGUF", "q4/SmolLM2.Q4_1.gguf", smol_q4,
             symlinks=symlinks)  # fmt: skip
    hf_model(cache, "HuggingFaceTB/SmolLM2-GGUF", "mmproj-SmolLM2.gguf", smol_q4,
             symlinks=symlinks)  # fmt: skip
    found = stores.hf_cache_models()
    assert [f.ref for f in found.found] == ["hf:HuggingFaceTB/SmolLM2-GGUF/q4/SmolLM2.Q4_1.gguf"]
    assert found.found[0].path.read_bytes()[:4] == b"GGUF"
    assert found.problems == []


@pytest.mark.slow
def test_llama_cpp_flat_cache_default_and_override(bare_machine, tmp_path, monkeypatch, smol_q4):
    place(smol_q4, bare_machine / ".cache" / "llama.cpp" / "owner_repo_SmolLM2.Q4_1.gguf")
    (bare_machine / ".cache" / "llama.cpp" / "manifest=owner=repo=latest.json").write_text("{}")
    assert [f.path.name for f in stores.llama_cpp_models().found] == [
        "owner_repo_SmolLM2.Q4_1.gguf"
    ]
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "nowhere"))
    assert stores.llama_cpp_models().found == []


@pytest.mark.slow
def test_a_file_in_two_stores_is_listed_once(lmstudio_elsewhere, ollama_store, tmp_path, smol_q4):
    place(smol_q4, tmp_path / "mine" / "same-file-again.gguf")
    found = stores.find_all([lmstudio_elsewhere, tmp_path / "mine"])
    # Ollama's two models, then of LM Studio's three the one Ollama does not hold (its Q4_1
    # and 4-layer files are Ollama's blobs, linked), and nothing from the folders.
    assert [f.ref for f in found.found] == [
        "ollama:smollm2:135m", "ollama:smollm2:4layers", "lmstudio:HuggingFaceTB/Tiny"
    ]  # fmt: skip


@pytest.mark.slow
def test_finding_and_resolving_write_nothing_in_any_store(
    ollama_store, lmstudio_elsewhere, bare_machine, tmp_path
):
    before = snapshot(tmp_path)
    stores.find_all([tmp_path / "big-disk"])
    ollama.resolve("ollama:smollm2:135m")
    lmstudio.resolve("lmstudio:HuggingFaceTB/Tiny")
    assert snapshot(tmp_path) == before
