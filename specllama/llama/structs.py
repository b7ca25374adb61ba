"""llama.cpp's C structures as llama-cpp-python's ctypes exposes them, for every context here
(the backend, the MTP head, the head files, Gemma's assistant): filling a llama_batch, and
asking a parameters structure whether this version has a field (fields come and go).
"""

from __future__ import annotations

import ctypes
from collections.abc import Container, Sequence


def has_field(struct: ctypes.Structure, name: str) -> bool:
    """Whether this llama-cpp-python's ctypes structure has `name` (fields come and go)."""
    return any(field[0] == name for field in type(struct)._fields_)


def fill_batch(
    batch,
    tokens: Sequence[int],
    first_pos: int,
    logits_at: Container[int],
    *,
    seq: int = 0,
    offset: int = 0,
) -> None:
    """Put `tokens` in a llama_batch from index `offset` on, at positions from `first_pos` of
    sequence `seq`, with logits wanted at the indices in `logits_at` (indices into `tokens`)."""
    for i, token in enumerate(tokens):
        at = offset + i
        batch.token[at] = token
        batch.pos[at] = first_pos + i
        batch.n_seq_id[at] = 1
        batch.seq_id[at][0] = seq
        batch.logits[at] = i in logits_at
    batch.n_tokens = offset + len(tokens)
