"""The target's rows at the layers a separate draft head reads (EAGLE-3, DFlash).

Such a head names some of its target's layers (`<arch>.target_layers`). The target's context
writes the input of each of them for every token it evaluates (`llama_set_embeddings_layer_inp`),
and `LayerInputs` keeps them by position, the layers side by side, until the head reads them.

The staging calls (`llama-ext.h`) are exported under C++-mangled names; this llama-cpp-python
binds the nextn ones but not the layer-input ones, so they are bound here, by name, and probed
once (`staging_calls`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import cache
from types import SimpleNamespace

import numpy as np

from specllama.llama.backend import LlamaBackend, _llama
from specllama.llama.mtp import HiddenRows, mtp_support

# (name, mangled name (Itanium ABI)); ctypes types set in `staging_calls`, where llama_cpp is
# imported.
_STAGING = (
    ("set_layer_inp", "_Z30llama_set_embeddings_layer_inpP13llama_contextjb"),
    ("get_layer_inp", "_Z30llama_get_embeddings_layer_inpP13llama_contextj"),
    ("target_layer_ids", "_Z28llama_model_target_layer_idsPK11llama_model"),
    ("target_layer_ids_n", "_Z30llama_model_target_layer_ids_nPK11llama_model"),
)


@cache
def staging_calls(heads: str) -> SimpleNamespace | str:
    """The staging calls (and llama_cpp_ext as `ext`), or what is missing, in one line that
    says these `heads` ("EAGLE-3 heads") cannot run."""
    lib = _llama()
    reason = mtp_support()  # the nextn calls, ctx_type and ctx_other: shared with MTP
    if reason is not None:
        return reason.replace("MTP heads", heads)
    from llama_cpp import llama_cpp as bindings

    shared = bindings._lib  # the loaded libllama
    missing = [name for name, symbol in _STAGING if not hasattr(shared, symbol)]
    if missing:
        return (
            f"this llama-cpp-python ({lib.__version__}) cannot run {heads} "
            f"(its llama.cpp lacks {', '.join(missing)})"
        )
    ctx, model = lib.llama_context_p_ctypes, lib.llama_model_p_ctypes
    signatures = {
        "set_layer_inp": ([ctx, ctypes.c_uint32, ctypes.c_bool], None),
        "get_layer_inp": ([ctx, ctypes.c_uint32], ctypes.POINTER(ctypes.c_float)),
        "target_layer_ids": ([model], ctypes.POINTER(ctypes.c_int32)),
        "target_layer_ids_n": ([model], ctypes.c_uint32),
    }
    calls = {}
    for name, symbol in _STAGING:
        function = getattr(shared, symbol)
        function.argtypes, function.restype = signatures[name]
        calls[name] = function
    from llama_cpp import llama_cpp_ext

    return SimpleNamespace(**calls, ext=llama_cpp_ext)


def model_meta(model, key: str) -> str | None:
    """A GGUF metadata value of a loaded model, as text (None when the file has none)."""
    buffer = ctypes.create_string_buffer(256)
    if _llama().llama_model_meta_val_str(model, key.encode(), buffer, len(buffer)) < 0:
        return None
    return buffer.value.decode(errors="replace")


def target_layer_ids(calls: SimpleNamespace, model) -> list[int]:
    """The target layers a loaded head reads."""
    n_ids = calls.target_layer_ids_n(model)
    pointer = calls.target_layer_ids(model) if n_ids else None
    return [int(pointer[i]) for i in range(n_ids)] if pointer else []


def layers_beyond(layer_ids: Sequence[int], n_layers: int) -> int | None:
    """The first layer id a target of `n_layers` does not have, or None."""
    return next((i for i in layer_ids if not 0 <= i < n_layers), None)


class LayerInputs:
    """The inputs of `layer_ids` that `target` writes for every token it evaluates, one row per
    position (the layers side by side), from the moment this is made until `close`."""

    def __init__(self, target: LlamaBackend, layer_ids: Sequence[int], calls: SimpleNamespace):
        self.target, self.layer_ids, self._calls = target, list(layer_ids), calls
        self.n_embd = _llama().llama_model_n_embd(target._model)
        self.width = len(self.layer_ids) * self.n_embd
        self.rows = HiddenRows(self.width)
        for layer in self.layer_ids:
            calls.set_layer_inp(target._ctx, layer, True)
        target.on_decoded = self._keep

    def _keep(self, start: int, n_tokens: int) -> None:
        n = self.n_embd
        rows = np.empty((n_tokens, self.width), dtype=np.float32)
        for k, layer in enumerate(self.layer_ids):
            pointer = self._calls.get_layer_inp(self.target._ctx, layer)
            rows[:, k * n : (k + 1) * n] = np.ctypeslib.as_array(pointer, shape=(n_tokens, n))
        self.rows.write(start, rows)

    def close(self) -> None:
        self.target.on_decoded = None
        for layer in self.layer_ids:
            self._calls.set_layer_inp(self.target._ctx, layer, False)
