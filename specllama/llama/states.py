"""Copying a context's state out and back in, through llama.cpp's llama_state_seq_* calls: a
sequence's whole state (its KV cache: a prompt cache's `SavedState`) and sequence 0's recurrent
layers alone (the checkpoint a recurrent model's rollback goes back to).

The bytes stay in ctypes arrays, as llama.cpp wrote them: no copy into Python objects.
`LlamaBackend` keeps the methods its callers use (`save_sequence`, `checkpoint`, ...) and the
bookkeeping of what its context holds; these functions only move the bytes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from specllama.llama.evaluated import SavedState


def sequence_state_size(lib: Any, ctx: Any, seq: int) -> int:
    """The bytes `save_sequence` would copy (measured without copying)."""
    return int(lib.llama_state_seq_get_size(ctx, seq))


def save_sequence(lib: Any, ctx: Any, seq: int, tokens: Sequence[int]) -> SavedState:
    """Sequence `seq`'s KV cache copied out, with the tokens it holds."""
    size = lib.llama_state_seq_get_size(ctx, seq)
    data = (ctypes.c_uint8 * size)()  # kept as is: no copy into Python objects
    written = lib.llama_state_seq_get_data(ctx, data, size, seq)
    return SavedState(tuple(tokens), data, written)


def load_sequence(lib: Any, ctx: Any, memory: Any, seq: int, saved: SavedState) -> bool:
    """Make sequence `seq` hold `saved` (False, and the sequence empty, if llama.cpp refuses
    it). Any sequence's saved state loads into any other."""
    lib.llama_memory_seq_rm(memory, seq, 0, -1)
    if saved.size == 0:
        return False
    return bool(lib.llama_state_seq_set_data(ctx, saved.data, saved.size, seq))


def save_recurrent(lib: Any, ctx: Any, reuse: ctypes.Array | None) -> tuple[ctypes.Array, int]:
    """Sequence 0's recurrent state (not its KV cache) copied out, into `reuse` where it is
    large enough (a draft checkpoints every round); returns the buffer and the bytes written."""
    flags = lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
    size = lib.llama_state_seq_get_size_ext(ctx, 0, flags)
    state = reuse
    if state is None or len(state) < size:
        state = (ctypes.c_uint8 * size)()  # kept as is: no copy into Python objects
    written = lib.llama_state_seq_get_data_ext(ctx, state, size, 0, flags)
    return state, written


def load_recurrent(lib: Any, ctx: Any, state: ctypes.Array, size: int) -> bool:
    """Put a state from `save_recurrent` back into sequence 0's recurrent layers (False if
    llama.cpp refuses it)."""
    flags = lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
    return bool(lib.llama_state_seq_set_data_ext(ctx, state, size, 0, flags))
