"""Where GGUF models already are on this machine, read-only: Ollama, LM Studio, the Hugging Face
cache, llama.cpp's older flat cache, specllama's own cache, and folders the user names.

- The Hugging Face cache (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub) holds
  models--OWNER--NAME/snapshots/REVISION/PATH, as links into blobs/ or, where links cannot be
  made, as the files themselves; huggingface_hub's `scan_cache_dir` reads both. llama.cpp's
  `-hf` downloads there too now (common/hf-cache.cpp).
- llama.cpp's flat cache, from before: files OWNER_REPO_FILE.gguf in LLAMA_CACHE, else
  $XDG_CACHE_HOME/llama.cpp or ~/.cache/llama.cpp on Linux, ~/Library/Caches/llama.cpp on
  macOS, %LOCALAPPDATA%/llama.cpp on Windows (common.cpp, `fs_get_cache_directory`).
- specllama's own cache: models/NAME/FILE.gguf under `paths.cache_dir()` (pip mirrors).
- Folders given with --dir, and those saved with --add-dir (`local_dirs`), searched in depth.
A store that does not exist is simply absent; nothing here writes anywhere.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from specllama.models import lmstudio, ollama
from specllama.models.catalog import Catalog
from specllama.models.hub import hf_cache_dir, mirror_path
from specllama.models.local_files import Findings, Problem, collect, files_in, is_model_name
from specllama.paths import cache_dir

STORES = ("ollama", "lmstudio", "hf", "llama.cpp", "specllama", "folder")


def llama_cpp_cache_dir() -> Path:
    if override := os.environ.get("LLAMA_CACHE"):
        return Path(override).expanduser()
    if sys.platform == "win32":
        return (
            Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / "llama.cpp"
        )
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "llama.cpp"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llama.cpp"


def hf_cache_models() -> Findings:
    """GGUF files in the Hugging Face cache, named `hf:OWNER/REPO/PATH` (with @REVISION for a
    snapshot that no branch points at)."""
    from huggingface_hub import CacheNotFound, scan_cache_dir

    try:
        info = scan_cache_dir(hf_cache_dir())
    except (CacheNotFound, OSError):
        return Findings()
    files: dict[Path, str] = {}
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        for revision in sorted(repo.revisions, key=lambda r: (not r.refs, r.commit_hash)):
            at = "" if revision.refs else f"@{revision.commit_hash}"
            for file in sorted(revision.files, key=lambda f: str(f.file_path)):
                inside = file.file_path.relative_to(revision.snapshot_path).as_posix()
                files.setdefault(file.file_path, f"hf:{repo.repo_id}{at}/{inside}")
    findings = _named(files, "hf")
    findings.problems += [Problem(str(hf_cache_dir()), str(w)) for w in info.warnings]
    return findings


def llama_cpp_models() -> Findings:
    folder = llama_cpp_cache_dir()
    return collect(files_in(folder, recursive=False), "llama.cpp")


def specllama_models(catalog: Catalog | None = None) -> Findings:
    """specllama's own downloads, named by the catalogue where one of its models is the file."""
    names = {}
    if catalog is not None:
        names = {mirror_path(m).resolve(): name for name, m in catalog.models.items()}
    folder = cache_dir() / "models"
    paths = [p for sub in _subfolders(folder) for p in files_in(sub, recursive=False)]
    return collect(paths, "specllama", lambda p: names.get(p.resolve(), str(p)))


def folder_models(folders: Iterable[Path]) -> Findings:
    findings = Findings()
    for folder in folders:
        if not folder.is_dir():
            findings.problems.append(Problem(str(folder), "not a folder"))
            continue
        findings.extend(collect(files_in(folder, recursive=True), "folder"))
    return findings


def find_all(folders: Iterable[Path] = (), *, catalog: Catalog | None = None) -> Findings:
    """Every store, in the order of STORES; a file found twice (a folder inside a store, a
    link, a hard link) is kept once, where it was found first."""
    everything = Findings()
    listers: list[Callable[[], Findings]] = [
        ollama.find_models,
        lmstudio.find_models,
        hf_cache_models,
        llama_cpp_models,
        lambda: specllama_models(catalog),
        lambda: folder_models(folders),
    ]
    for lister in listers:
        everything.extend(lister())
    seen: set[tuple[int, int]] = set()
    unique = []
    for found in everything.found:
        try:
            st = os.stat(found.path)
        except OSError:
            continue  # gone since it was listed
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            unique.append(found)
    return Findings(unique, everything.problems)


def _named(files: dict[Path, str], store: str) -> Findings:
    wanted = [p for p in files if is_model_name(p.name)]
    return collect(wanted, store, lambda p: files[p])


def _subfolders(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir())
    except OSError:
        return []
