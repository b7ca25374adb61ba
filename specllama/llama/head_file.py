"""A draft head in its own GGUF (EAGLE-3, DFlash): what every kind shares.

Such a head runs in a second llama.cpp context beside its target's (`HeadFile`), and names some
of its target's layers (`<arch>.target_layers`). The target's context writes the input of each
of them for every token it evaluates (`llama_set_embeddings_layer_inp`), and `LayerInputs` keeps
them by position, the layers side by side, until the head reads them.

The staging calls (`llama-ext.h`) are exported under C++-mangled names; this llama-cpp-python
binds the nextn ones but not the layer-input ones, so they are bound here, by name, and probed
once (`staging_calls`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from specllama.errors import ModelLoadError, SpecllamaError, UsageError
from specllama.llama.backend import LlamaBackend
from specllama.llama.evaluated import EvaluatedTokens
from specllama.llama.library import load_llama
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
    lib = load_llama()
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
    if load_llama().llama_model_meta_val_str(model, key.encode(), buffer, len(buffer)) < 0:
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
        self.n_embd = load_llama().llama_model_n_embd(target._model)
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


def fill_rows(batch, rows: np.ndarray, first_pos: int, *, outputs: bool) -> None:
    """Put `rows` in an embedding llama_batch at positions from `first_pos`, sequence 0, every
    row output or none."""
    for i in range(len(rows)):
        batch.pos[i] = first_pos + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = outputs
    batch.n_tokens = len(rows)
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    ctypes.memmove(batch.embd, rows.ctypes.data, rows.nbytes)


class HeadFile(EvaluatedTokens):
    """A draft head for `target` from its own file, in its own context (own KV cache, sequence
    0), fed the target's rows at the layers it names (`self.inputs`).

    A kind says what its heads are called (`heads`, for messages), why a file cannot draft for
    this target (`_pairing_problem`, which also reads what the kind needs from the file), and
    makes its batches (`_make_batches`, `_batches`).
    """

    kind: str
    heads: str  # "EAGLE-3 heads"
    n_batch_min = 1  # the context's batch holds at least this many tokens

    def __init__(
        self, target: LlamaBackend, path: str | Path, *, n_gpu_layers: int = 0, n_batch: int = 512
    ) -> None:
        bound = staging_calls(self.heads)
        if isinstance(bound, str):
            raise UsageError(bound, hint="--drafter ngram or model; upgrade llama-cpp-python")
        lib = load_llama()
        self._lib, self._calls, self._ext, self.target = lib, bound, bound.ext, target
        self.path = Path(path)
        model_params = lib.llama_model_default_params()
        model_params.n_gpu_layers = n_gpu_layers
        self._model = lib.llama_model_load_from_file(str(self.path).encode(), model_params)
        if not self._model:
            raise ModelLoadError(f"llama.cpp could not load the draft head {self.path}")
        self._ctx = None
        try:
            problem = self._pairing_problem()
            if problem is not None:
                raise UsageError(problem, hint="pass the head made for this target with --draft")
            self._make_context(n_batch)
        except SpecllamaError:
            lib.llama_model_free(self._model)
            raise
        self.tokens: list[int] = []
        self.n_decoded = 0  # rows evaluated over the lifetime (reuse shows up here)
        self.decode_seconds = 0.0

    def _pairing_problem(self) -> str | None:
        raise NotImplementedError

    def _make_batches(self) -> None:
        raise NotImplementedError

    def _batches(self) -> list:
        """The llama_batches `_make_batches` made, to free."""
        raise NotImplementedError

    def _target_layer_ids(self, architecture: str) -> list[int]:
        """The target layers the head names, [] for a file of another architecture."""
        arch = model_meta(self._model, "general.architecture")
        return target_layer_ids(self._calls, self._model) if arch == architecture else []

    def _make_context(self, n_batch: int) -> None:
        lib, target = self._lib, self.target
        params = lib.llama_context_default_params()
        params.n_ctx = target.n_ctx
        params.n_batch = params.n_ubatch = max(n_batch, self.n_batch_min)
        params.n_threads = params.n_threads_batch = target.n_threads
        params.ctx_other = target._ctx  # the target's token embeddings and head, if shared
        if target.exact:  # as the target: F32 cache, no flash attention
            params.type_k = params.type_v = lib.GGML_TYPE_F32
            params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self._ctx = lib.llama_init_from_model(self._model, params)
        if not self._ctx:
            raise ModelLoadError(f"llama.cpp could not create a context for {self.path}")
        self._memory = lib.llama_get_memory(self._ctx)
        self.n_batch = min(lib.llama_n_batch(self._ctx), lib.llama_n_ubatch(self._ctx))
        self.n_embd = lib.llama_model_n_embd(self._model)
        self.n_vocab = target.n_vocab
        self.inputs = LayerInputs(target, self.layer_ids, self._calls)
        self._make_batches()

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            lib = self._lib
            self.inputs.close()
            for batch in self._batches():
                lib.llama_batch_free(batch)
            lib.llama_free(self._ctx)
            lib.llama_model_free(self._model)
            self._ctx = None

    def __del__(self) -> None:
        self.close()

    def check_fits(self, n_tokens: int) -> None:
        self.target.check_fits(n_tokens)

    @property
    def n_ctx(self) -> int:
        return self.target.n_ctx

    def _forget(self, n_past: int) -> None:
        self._lib.llama_memory_seq_rm(self._memory, 0, n_past, -1)
