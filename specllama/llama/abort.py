"""Stopping a decode under way from another thread: llama.cpp's abort callback, reading a flag.

A server that stops cannot wait for a chunk of a long prompt (seconds): `LlamaBackend.
abort_decodes` sets the flag, llama.cpp stops the graph it computes at its next node, and
llama_decode returns ABORTED (the backend raises DecodeInterrupted).
"""

from __future__ import annotations

import contextlib
import ctypes

# llama_decode's status when its abort callback said stop.
ABORTED = 2


def watch_abort_flag(llama_cpp: object, ctx: object) -> ctypes.Array | None:
    """A flag llama.cpp reads before each node of a graph it computes on the CPU: set its first
    byte (`raise_abort_flag`), and the decode under way stops (`LlamaBackend.abort_decodes`).

    The callback is libc's strlen on the two-byte buffer [flag, 0]: it returns exactly 0 or 1,
    which reads as the callback's bool under any calling convention. A Python callback would
    take the GIL at every node of every decode (hundreds per token, and a wait whenever another
    thread runs Python); this costs nanoseconds. None where no C library is found: decodes then
    stop between chunks only."""
    strlen = _libc_strlen()
    if strlen is None:
        return None
    flag = ctypes.create_string_buffer(2)
    callback = llama_cpp.ggml_abort_callback(ctypes.cast(strlen, ctypes.c_void_p).value)
    llama_cpp.llama_set_abort_callback(ctx, callback, ctypes.cast(flag, ctypes.c_void_p))
    return flag


def raise_abort_flag(flag: ctypes.Array) -> None:
    """From any thread: strlen now reads 1, so the decode under way and every later one stop."""
    flag[0] = b"\x01"


def _libc_strlen() -> object | None:
    for load in (lambda: ctypes.CDLL(None), lambda: ctypes.cdll.msvcrt):
        with contextlib.suppress(OSError, AttributeError, TypeError):
            return load().strlen
    return None
