"""Files from the llama-cpp-python sdist of the version installed here (llama.cpp's own chat
templates and vocabulary files): the sdist is fetched once from the package index and kept in
the test models' cache; each set of files is unpacked from it once, into a folder that appears
only when whole."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import model_factory


def pinned() -> str:
    return version("llama-cpp-python")


def sdist() -> Path:
    """The sdist's tarball, downloaded on first use."""
    path = model_factory.cache_dir() / f"llama_cpp_python-{pinned()}.tar.gz"
    if path.exists():
        return path
    with tempfile.TemporaryDirectory(dir=model_factory.cache_dir()) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             "-d", tmp, f"llama-cpp-python=={pinned()}"],
            check=True,
        )  # fmt: skip
        (downloaded,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        downloaded.rename(path)
    return path


def unpacked(folder: str, wanted: Callable[[str], bool]) -> Path:
    """The sdist's files whose path (below its top folder) is `wanted`, flat in `folder` of
    the test models' cache."""
    target = model_factory.cache_dir() / folder
    if target.is_dir():
        return target
    with tempfile.TemporaryDirectory(dir=model_factory.cache_dir()) as tmp:
        partial = Path(tmp) / "files"
        partial.mkdir()
        with tarfile.open(sdist()) as archive:
            for member in archive.getmembers():
                name = member.name.split("/", 1)[-1]
                if member.isfile() and wanted(name):
                    data = archive.extractfile(member).read()
                    (partial / Path(name).name).write_bytes(data)
        partial.rename(target)
    return target
