"""The real chat templates llama.cpp tests against (`vendor/llama.cpp/models/templates/*.jinja`
in the llama-cpp-python sdist of the version installed here): fetched once from the package
index, unpacked into the test models' cache, never copied into this repository.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import llama_sdist

MEMBER = "vendor/llama.cpp/models/templates/"

# Templates that take tools but write calls in a shape nothing here reads, and why.
NOT_READ = {
    "MiniMax-M3": "the argument's name is its tag (`<city>v</city>`): no fixed marker",
    "muse-glimmer": "the name is written twice, once in the turn's header",
    "meetkai-functionary-medium-v3.2": "a call begins with its bare name (`>>>f\\n{...}`)",
}


def templates_dir() -> Path:
    """The folder of `NAME.jinja` files, unpacked on first use."""
    return llama_sdist.unpacked(
        f"chat-templates-{llama_sdist.pinned()}",
        lambda name: name.startswith(MEMBER) and name.endswith(".jinja"),
    )


@cache
def all_templates() -> dict[str, str]:
    """Every template, by file name without `.jinja`."""
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(templates_dir().glob("*.jinja"))}


def template_names() -> list[str]:
    return list(all_templates())
