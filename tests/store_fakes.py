"""Model stores laid out as each tool lays them out, holding real GGUF files (hard links to the
cached test models, so nothing large is copied): Ollama (manifests and blobs), LM Studio (a home
pointer and a settings.json pointing elsewhere), the Hugging Face cache (with and without
symlinks) and llama.cpp's flat cache. `snapshot` records a tree, to prove nothing wrote there.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import model_factory

OLLAMA_MODEL = "application/vnd.ollama.image.model"


def place(src: Path, dst: Path) -> Path:
    """`dst` holds the file `src`: a hard link where the file system allows, else a symbolic
    link (either way the same file: nothing large is copied, and a store that holds it twice
    holds one model)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists() and dst.samefile(src):
        return dst
    try:
        os.link(src, dst)
    except OSError:
        dst.symlink_to(src)
    return dst


def ollama_model(
    store: Path,
    name: str,
    tag: str,
    model: Path | None,
    *,
    digest: str | None = None,
    namespace: str = "library",
    host: str = "registry.ollama.ai",
    extra_layers: list[tuple[str, bytes]] = (),
) -> Path:
    """A manifest manifests/HOST/NAMESPACE/NAME/TAG whose model layer is `model` (a blob named
    by its sha256; `model` None with a `digest`: a layer whose blob is missing), plus the
    usual non-model layers (template, params, license) and `extra_layers` as blobs."""
    layers = []
    if model is not None:
        digest = model_factory.sha256_of(model)
        place(model, store / "blobs" / f"sha256-{digest}")
    layers.append({"mediaType": OLLAMA_MODEL, "digest": f"sha256:{digest}", "size": 1})
    others = [
        ("application/vnd.ollama.image.template", b"{{ .Prompt }}"),
        ("application/vnd.ollama.image.params", b'{"stop": ["<|im_end|>"]}'),
        ("application/vnd.ollama.image.license", b"Apache License 2.0"),
        *extra_layers,
    ]
    for media_type, content in others:
        blob_digest = hashlib.sha256(content).hexdigest()
        blob = store / "blobs" / f"sha256-{blob_digest}"
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(content)
        layers.append({"mediaType": media_type, "digest": f"sha256:{blob_digest}", "size": 1})
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": "sha256:" + "0" * 64, "size": 2},
        "layers": layers,
    }  # fmt: skip
    path = store / "manifests" / host / namespace / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest), encoding="utf-8")
    return path


def lmstudio_model(models: Path, publisher: str, repo: str, model: Path, name: str) -> Path:
    return place(model, models / publisher / repo / name)


def hf_model(cache: Path, repo_id: str, file: str, model: Path, *, symlinks: bool = True) -> Path:
    """models--OWNER--NAME with refs/main, snapshots/COMMIT/FILE: a link to blobs/SHA256, or
    (without symlinks, as on Windows without developer mode) the file itself."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit / file
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    if not symlinks:
        return place(model, snapshot)
    blob = place(model, repo / "blobs" / model_factory.sha256_of(model))
    snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    return snapshot


def snapshot(root: Path) -> dict[str, tuple[int, int, bool]]:
    """Every entry under `root`: (size, mtime_ns, is a link), to compare before and after."""
    entries = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            entries[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, path.is_symlink())
    return entries


def stock_machine(home: Path, tmp_path: Path, models: dict[str, Path]) -> dict[str, str]:
    """Every store at once, each model file in one store: Ollama (Q4_1 and F32 SmolLM2, a
    dangling digest, a model layer that is no GGUF), LM Studio through its home pointer and a
    settings.json pointing elsewhere (the 4-layer draft, and a projector), the Hugging Face
    cache (the 2-layer draft), llama.cpp's flat cache (the changed vocabulary and a truncated
    file), and a folder of the user's (a text file named .gguf). Returns role -> ref."""
    ollama = home / ".ollama" / "models"
    ollama_model(ollama, "smollm2", "135m-q4", models["q4"])
    ollama_model(ollama, "smollm2", "135m-f32", models["f32"])
    ollama_model(ollama, "broken", "latest", None, digest="cd" * 32)
    text = ollama / "blobs" / ("sha256-" + hashlib.sha256(b"not weights").hexdigest())
    text.parent.mkdir(parents=True, exist_ok=True)
    text.write_bytes(b"not weights")
    notgguf = ollama_model(ollama, "notgguf", "latest", None, digest=text.name[7:])

    lm_home = tmp_path / "lm-home"
    lm_home.mkdir()
    (home / ".lmstudio-home-pointer").write_text(str(lm_home))
    lm_models = tmp_path / "lm-models"
    (lm_home / "settings.json").write_text(json.dumps({"downloadsFolder": str(lm_models)}))
    lmstudio_model(lm_models, "bartowski", "SmolLM2-GGUF", models["draft4"], "SmolLM2-4L.gguf")
    (lm_models / "bartowski" / "SmolLM2-GGUF" / "mmproj-SmolLM2.gguf").write_bytes(b"GGUF")

    hf = home / ".cache" / "huggingface" / "hub"
    hf_model(hf, "HuggingFaceTB/SmolLM2-2L-GGUF", "smollm2-2l.gguf", models["draft2"])

    flat = home / ".cache" / "llama.cpp"
    changed = place(models["bad_vocab"], flat / "test_changed_vocab.gguf")
    cut = flat / "test_cut.gguf"
    with open(models["q4"], "rb") as f:
        cut.write_bytes(f.read(100_000))

    mine = tmp_path / "my-models"
    mine.mkdir()
    (mine / "notes.gguf").write_text("a text file, not a model")
    return {
        "q4": "ollama:smollm2:135m-q4",
        "f32": "ollama:smollm2:135m-f32",
        "draft4": "lmstudio:bartowski/SmolLM2-GGUF",
        "draft2": "hf:HuggingFaceTB/SmolLM2-2L-GGUF/smollm2-2l.gguf",
        "bad_vocab": str(changed),
        "cut": str(cut),
        "notgguf": str(notgguf),
        "mine": str(mine),
    }
