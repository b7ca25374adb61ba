"""One reader per GGUF file for the model builders: gguf's reader parses every metadata value
in Python (~6 s for SmolLM2's 49K-token vocabulary, ~18 s for Qwen2's 152K, on 2 cores), and
the builders read the same few files again and again (SmolLM2's fourteen times)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import gguf


def read(path: Path | str) -> gguf.GGUFReader:
    """The reader of `path`, parsed once while the file stays as it is."""
    stat = os.stat(path)
    return _read(str(Path(path).resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=32)
def _read(path: str, mtime_ns: int, size: int) -> gguf.GGUFReader:
    return gguf.GGUFReader(path)
