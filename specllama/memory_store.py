"""The memory of what was written, on disk, only where the user asks for it (`--remember DIR`):
it holds their prompts and answers.

One file per vocabulary (the token ids mean nothing to another tokenizer): `memory-KEY.npy`,
the remembered tokens as int32, written whole to a temporary file and renamed over the old one,
so a crash leaves the old store or the new one, never half of one. A store that cannot be read
(damaged, another format, ids outside the vocabulary) is set aside as `.damaged`, said in one
line, and memory starts empty: never a failure, and nothing on disk is lost.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import numpy as np

from specllama.errors import SpecllamaError

GAP = -1  # between documents, as TokenMemory keeps them


def store_path(folder: Path, key: str) -> Path:
    return folder / f"memory-{key}.npy"


def load_tokens(folder: Path, key: str, n_vocab: int) -> tuple[np.ndarray, str | None]:
    """(the remembered tokens, a notice or None). Empty when there is no store yet."""
    path = store_path(folder, key)
    if not path.exists():
        return np.zeros(0, dtype=np.int32), None
    try:
        tokens = np.load(path, allow_pickle=False)
        if tokens.ndim != 1 or tokens.dtype != np.int32:
            raise ValueError(f"an array of {tokens.dtype} in {tokens.ndim} dimensions")
        if len(tokens) and (tokens.min() < GAP or tokens.max() >= n_vocab):
            raise ValueError("token ids outside this model's vocabulary")
    except (OSError, ValueError, EOFError) as exc:
        aside = path.with_suffix(".npy.damaged")
        with contextlib.suppress(OSError):  # a folder we may not write to: left where it is
            os.replace(path, aside)
        return np.zeros(0, dtype=np.int32), (
            f"the memory in {path} could not be read ({exc}): starting afresh"
            + (f", the old file kept as {aside.name}" if aside.exists() else "")
        )
    return tokens, None


def save_tokens(folder: Path, key: str, tokens: np.ndarray) -> None:
    """Write the store atomically (a temporary file renamed over the old)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".partial", delete=False) as out:
            partial = Path(out.name)
            np.save(out, np.asarray(tokens, dtype=np.int32), allow_pickle=False)
        os.replace(partial, store_path(folder, key))
    except OSError as exc:
        if "partial" in locals():
            partial.unlink(missing_ok=True)
        raise SpecllamaError(
            f"cannot save the memory in {folder}: {exc.strerror or exc}",
            hint="choose a folder you can write to with --remember DIR",
        ) from None
