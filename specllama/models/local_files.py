"""What a store of GGUF files holds that specllama can run: the found models and the problems,
and the file-name rules every store shares.

Skipped by name: multimodal projectors (`mmproj`), importance matrices (`imatrix`), draft
heads for other runners (`mtp-`), and every part of a split model but the first
(`-00001-of-0000N.gguf`: llama.cpp loads the rest from it). Draft heads in their own file
(EAGLE-3, DFlash) are read and known by their architecture (`local.LocalScan.heads`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

_SKIPPED = ("mmproj", "imatrix", "mtp-")
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class Found:
    """A model file in a store: what to load, where it was found, and what to type for it."""

    path: Path  # the file llama.cpp loads (the first part of a split model)
    store: str  # "ollama", "lmstudio", "hf", "llama.cpp", "specllama", "folder"
    ref: str  # a REF that names it: ollama:NAME:TAG, lmstudio:..., hf:..., a name, or the path
    parts: tuple[Path, ...] = field(default=())  # every part of a split model, in order

    @property
    def files(self) -> tuple[Path, ...]:
        return self.parts or (self.path,)


@dataclass(frozen=True)
class Problem:
    """Something in a store that is not a usable model: one line in the listing."""

    where: str
    reason: str


@dataclass
class Findings:
    found: list[Found] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def extend(self, other: Findings) -> None:
        self.found.extend(other.found)
        self.problems.extend(other.problems)


def is_model_name(name: str) -> bool:
    """A .gguf file name that is a model of its own (see the module docstring)."""
    lower = name.lower()
    if not lower.endswith(".gguf") or any(word in lower for word in _SKIPPED):
        return False
    split = _SPLIT.match(name)
    return split is None or int(split["part"]) == 1


def split_parts(path: Path) -> tuple[tuple[Path, ...], str | None]:
    """The parts of a split model named by its first part, and what is missing; ((), None)
    for a file that is not split."""
    split = _SPLIT.match(path.name)
    if split is None:
        return (), None
    count, width = int(split["count"]), len(split["part"])
    parts = tuple(
        path.with_name(f"{split['stem']}-{i:0{width}d}-of-{split['count']}.gguf")
        for i in range(1, count + 1)
    )
    missing = [p.name for p in parts if not p.is_file()]
    return parts, (f"split part {missing[0]} is missing" if missing else None)


def found_file(path: Path, store: str, ref: str | None = None) -> Found | Problem:
    """A model file (or the first part of a split one) as found in a store."""
    parts, missing = split_parts(path)
    if missing:
        return Problem(str(path), missing)
    return Found(path, store, ref or str(path), parts)


def files_in(folder: Path, *, recursive: bool) -> Iterator[Path]:
    """The model files in a folder (sorted; unreadable folders are skipped, not fatal)."""
    if not recursive:
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return
        yield from (folder / n for n in names if is_model_name(n) and (folder / n).is_file())
        return
    for root, dirs, names in os.walk(folder, onerror=lambda _: None):
        dirs.sort()
        for name in sorted(names):
            if is_model_name(name) and os.path.isfile(os.path.join(root, name)):
                yield Path(root, name)


def collect(
    paths: Iterable[Path], store: str, ref_of: Callable[[Path], str] | None = None
) -> Findings:
    """Findings for model files of one store; `ref_of(path)` names them (default: the path)."""
    findings = Findings()
    for path in paths:
        item = found_file(path, store, ref_of(path) if ref_of else None)
        (findings.problems if isinstance(item, Problem) else findings.found).append(item)
    return findings
