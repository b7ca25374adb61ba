"""Small GGUF files written with the `gguf` package: a vocabulary and a few tiny tensors, in
whatever key order a test needs (for the header reader's search paths), and byte-level
serialization of token lists (for vocabulary prints without files)."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

import gguf
import numpy as np


def vocab(n: int, prefix: str = "tok") -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def serialize(texts: Sequence[str | bytes]) -> tuple[bytes, list[int]]:
    """GGUF strings one after the other, and where each begins (plus where the last ends)."""
    parts, offsets, at = [], [], 0
    for text in texts:
        raw = text.encode() if isinstance(text, str) else text
        offsets.append(at)
        parts.append(struct.pack("<Q", len(raw)) + raw)
        at += 8 + len(raw)
    offsets.append(at)
    return b"".join(parts), offsets


def write_gguf(
    path: Path,
    tokens: Sequence[str],
    *,
    merges: Sequence[str] | None = None,
    arch: str = "llama",
    tokenizer: str = "gpt2",
    bos: int | None = 1,
    eos: int | None = 2,
    add_bos: bool | None = False,
    token_types: bool = True,
    before_tokens: dict[str, int] | None = None,
    after_tokens: dict[str, int] | None = None,
    tensors: dict[str, tuple[int, ...]] | None = None,
    extra: dict[str, object] | None = None,
) -> Path:
    """A GGUF file: general keys, then `before_tokens` (uint32 keys), the tokenizer model, the
    tokens, their types, `after_tokens`, the merges, then the special ids; tensors of zeros."""
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name("test model")
    writer.add_context_length(256)
    for key, value in (extra or {}).items():
        if isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_uint32(key, int(value))
    for key, value in (before_tokens or {}).items():
        writer.add_uint32(key, value)
    writer.add_tokenizer_model(tokenizer)
    writer.add_token_list(list(tokens))
    if token_types:  # as converters write them, right after the tokens
        writer.add_token_types([1] * len(tokens))
    for key, value in (after_tokens or {}).items():
        writer.add_uint32(key, value)
    if merges is not None:
        writer.add_token_merges(list(merges))
    if bos is not None:
        writer.add_bos_token_id(bos)
    if eos is not None:
        writer.add_eos_token_id(eos)
    if add_bos is not None:
        writer.add_add_bos_token(add_bos)
    for name, shape in (tensors or {"token_embd.weight": (4, 8)}).items():
        writer.add_tensor(name, np.zeros(shape, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def merges_for(tokens: Sequence[str]) -> list[str]:
    """BPE-shaped merges ("left right") over the tokens."""
    return [f"{a} {b}" for a, b in pairwise(tokens[5:])]
