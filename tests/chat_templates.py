"""The real chat templates llama.cpp tests against (`vendor/llama.cpp/models/templates/*.jinja`
in the llama-cpp-python sdist of the version installed here): fetched once from the package
index, unpacked into the test models' cache, never copied into this repository.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
from functools import cache
from importlib.metadata import version
from pathlib import Path

import model_factory

MEMBER = "vendor/llama.cpp/models/templates/"

# Templates that take tools but write calls in a shape nothing here reads, and why.
NOT_READ = {
    "MiniMax-M3": "the argument's name is its tag (`<city>v</city>`): no fixed marker",
    "muse-glimmer": "the name is written twice, once in the turn's header",
    "meetkai-functionary-medium-v3.2": "a call begins with its bare name (`>>>f\\n{...}`)",
}


def templates_dir() -> Path:
    """The folder of `NAME.jinja` files, unpacked on first use (files appear only when all are
    there: the folder is renamed into place)."""
    pinned = version("llama-cpp-python")
    folder = model_factory.cache_dir() / f"chat-templates-{pinned}"
    if folder.is_dir():
        return folder
    with tempfile.TemporaryDirectory(dir=model_factory.cache_dir()) as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             "-d", tmp, f"llama-cpp-python=={pinned}"],
            check=True,
        )  # fmt: skip
        (sdist,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        unpacked = Path(tmp) / "templates"
        unpacked.mkdir()
        with tarfile.open(sdist) as archive:
            for member in archive.getmembers():
                name = member.name.split("/", 1)[-1]
                if name.startswith(MEMBER) and name.endswith(".jinja") and member.isfile():
                    data = archive.extractfile(member).read()
                    (unpacked / Path(name).name).write_bytes(data)
        unpacked.rename(folder)
    return folder


@cache
def all_templates() -> dict[str, str]:
    """Every template, by file name without `.jinja`."""
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(templates_dir().glob("*.jinja"))}


def template_names() -> list[str]:
    return list(all_templates())
