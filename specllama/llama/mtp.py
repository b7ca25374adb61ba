"""A model's own draft head (MTP / "nextn" layers: Qwen3.5+, GLM-5, DeepSeek V3.2), run in a
second llama.cpp context beside the target's.

The head at position j reads the token x[j] and the target's hidden row h[j-1] (its last
layer's output at the position before, normed) and predicts x[j+1]. So the target's context
writes its hidden rows for every token it evaluates (`llama_set_embeddings_nextn`, unmasked);
`HiddenRows` keeps them by position until the head has read them. Drafting on from its own
guess, the head pairs the guessed token with its own hidden row instead.

The functions are llama.cpp's staging API (`llama-ext.h`), exported under C++-mangled names
that change with llama.cpp; llama-cpp-python binds them in `llama_cpp_ext`. `mtp_support()`
probes them once; where they are missing, MTP drafting is not offered.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from functools import cache

import numpy as np

from specllama.errors import ModelLoadError, SpecllamaError, UsageError
from specllama.llama.backend import LlamaBackend
from specllama.llama.evaluated import EvaluatedTokens
from specllama.llama.library import load_llama
from specllama.llama.structs import fill_batch, has_field

_ROWS_KEPT_BEHIND = 64
_EXT_FUNCTIONS = (
    "llama_set_embeddings_nextn",
    "llama_get_embeddings_nextn",
    "llama_get_embeddings_nextn_ith",
)


@cache
def mtp_support() -> str | None:
    """None when this llama-cpp-python can run MTP heads, else what it lacks (one line)."""
    llama_cpp = load_llama()
    try:
        from llama_cpp import llama_cpp_ext
    except (ImportError, AttributeError) as e:  # AttributeError: a symbol the module binds
        return f"this llama-cpp-python ({llama_cpp.__version__}) cannot run MTP heads: {e}"
    missing = [name for name in _EXT_FUNCTIONS if not hasattr(llama_cpp_ext, name)]
    model_params = llama_cpp.llama_model_default_params()
    ctx_params = llama_cpp.llama_context_default_params()
    missing += [f for f in ("load_mtp",) if not has_field(model_params, f)]
    missing += [f for f in ("ctx_type", "ctx_other") if not has_field(ctx_params, f)]
    if not hasattr(llama_cpp, "LLAMA_CONTEXT_TYPE_MTP"):
        missing.append("LLAMA_CONTEXT_TYPE_MTP")
    if missing:
        return (
            f"this llama-cpp-python ({llama_cpp.__version__}) cannot run MTP heads "
            f"(missing {', '.join(missing)})"
        )
    return None


def _ext():
    from llama_cpp import llama_cpp_ext

    return llama_cpp_ext


class HiddenRows:
    """The target's hidden rows by position, from its decodes, until the head reads them."""

    def __init__(self, n_embd: int) -> None:
        self.n_embd = n_embd
        self._rows = np.zeros((0, n_embd), dtype=np.float32)
        self._base = 0  # the position of _rows[0]
        self._end = 0  # one past the last position written

    def write(self, start: int, rows: np.ndarray) -> None:
        if start < self._base:  # the context went back before what we keep: start afresh
            self._base = self._end = start
        needed = start + len(rows) - self._base
        if needed > len(self._rows):
            grown = np.zeros((max(needed, 2 * len(self._rows)), self.n_embd), dtype=np.float32)
            grown[: self._end - self._base] = self._rows[: self._end - self._base]
            self._rows = grown
        self._rows[start - self._base : needed] = rows
        self._end = start + len(rows)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows for positions start..stop-1. A row not kept (before the first token, or
        released) reads as zeros: the head then drafts less well there, never wrongly, since
        the target verifies every draft."""
        out = np.zeros((stop - start, self.n_embd), dtype=np.float32)
        first, last = max(start, self._base), min(stop, self._end)
        if first < last:
            out[first - start : last - start] = self._rows[first - self._base : last - self._base]
        return out

    def release_before(self, position: int) -> None:
        """Rows before `position` will not be read again (but after an edit that goes back
        further): drop them once they are half of what is kept."""
        drop = min(position, self._end) - self._base
        if drop > 0 and drop * 2 >= len(self._rows):
            kept = self._rows[drop : self._end - self._base].copy()
            self._rows = np.zeros((max(len(kept), 16), self.n_embd), dtype=np.float32)
            self._rows[: len(kept)] = kept
            self._base += drop


class MtpHead(EvaluatedTokens):
    """The target model's MTP head in its own context (own KV cache, sequence 0).

    `self.tokens` is what the head has evaluated, each paired with a hidden row. The first
    `self.n_exact` were paired with the target's rows; drafting on pairs guesses with the
    head's own rows, so those are dropped before the next catch-up.
    """

    def __init__(self, target: LlamaBackend, n_batch: int = 512) -> None:
        reason = mtp_support()
        if reason is not None:
            raise UsageError(reason, hint="--drafter ngram or model; upgrade llama-cpp-python")
        lib, ext = load_llama(), _ext()
        if lib.llama_model_n_layer_nextn(target._model) <= 0:
            raise UsageError(f"{target.path.name} has no MTP layers (its own draft head)")
        self._lib, self._ext, self.target = lib, ext, target
        params = lib.llama_context_default_params()
        params.n_ctx = target.n_ctx
        params.n_batch = params.n_ubatch = n_batch
        params.n_threads = params.n_threads_batch = target.n_threads
        params.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = target._ctx
        if target.exact:  # as the target: F32 cache, no flash attention
            params.type_k = params.type_v = lib.GGML_TYPE_F32
            params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self._ctx = lib.llama_init_from_model(target._model, params)
        if not self._ctx:
            raise ModelLoadError(f"llama.cpp could not create an MTP context for {target.path}")
        self._memory = lib.llama_get_memory(self._ctx)
        self.n_batch = min(lib.llama_n_batch(self._ctx), lib.llama_n_ubatch(self._ctx))
        self.n_embd = lib.llama_model_n_embd(target._model)
        self.n_vocab = target.n_vocab
        # The target writes a hidden row for every batch token; the head only for its outputs.
        ext.llama_set_embeddings_nextn(target._ctx, True, False)
        ext.llama_set_embeddings_nextn(self._ctx, True, True)
        self.hidden = HiddenRows(self.n_embd)
        target.on_decoded = self._keep_target_rows
        self._batch = lib.llama_batch_init(self.n_batch, self.n_embd, 1)
        self._token_ids = (lib.llama_token * self.n_batch)()
        self._batch.token = self._token_ids  # a batch entry carries a token and a hidden row
        self.tokens: list[int] = []
        self.n_exact = 0
        self.n_decoded = 0  # tokens evaluated over the lifetime (reuse shows up here)
        self.decode_seconds = 0.0

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            self.target.on_decoded = None
            self._batch.token = None  # ours, not llama_batch_init's: it must not free it
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:
        self.close()

    def _keep_target_rows(self, start: int, n_tokens: int) -> None:
        pointer = self._ext.llama_get_embeddings_nextn(self.target._ctx)
        self.hidden.write(start, np.ctypeslib.as_array(pointer, shape=(n_tokens, self.n_embd)))

    # -- drafting ---------------------------------------------------------------------------

    def catch_up(self, context: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate what the head has not seen of `context` (all but its last token evaluated
        by the target), each token paired with the target's row of the position before;
        return (logits, own hidden row) for the token after `context`."""
        keep = min(self.common_prefix(context), self.n_exact, len(context) - 1)
        self.rollback(keep)
        rows = self.hidden.read(keep - 1, len(context) - 1)
        out: tuple[np.ndarray, np.ndarray] | None = None
        for start in range(keep, len(context), self.n_batch):
            stop = min(start + self.n_batch, len(context))
            out = self._decode(context[start:stop], rows[start - keep : stop - keep])
        self.n_exact = len(context)
        # A next turn of a chat may part from this text a little before its end.
        self.hidden.release_before(len(context) - _ROWS_KEPT_BEHIND)
        assert out is not None
        return out

    def step(self, token: int, own_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Draft on: evaluate a guessed token with the head's own row; (logits, row) after it."""
        return self._decode([token], own_row[None, :])

    def _decode(self, tokens: Sequence[int], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate tokens paired with rows; return the logits (valid until the next decode)
        and the head's hidden row after the last."""
        self.check_fits(self.n_past + len(tokens))
        lib, batch = self._lib, self._batch
        n = len(tokens)
        fill_batch(batch, tokens, self.n_past, {n - 1})
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        ctypes.memmove(batch.embd, rows.ctypes.data, rows.nbytes)
        started = time.perf_counter()
        status = lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise SpecllamaError(f"llama.cpp failed to evaluate the MTP head (status {status})")
        # The logits as a view (read before the next decode; a copy costs ~55 us), the row as
        # a copy (it goes into the next decode's batch).
        logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(self._ctx, n - 1),
                                       shape=(self.n_vocab,))  # fmt: skip
        logits.flags.writeable = False
        own = self._ext.llama_get_embeddings_nextn_ith(self._ctx, n - 1)
        row = np.ctypeslib.as_array(own, shape=(self.n_embd,)).copy()
        self.decode_seconds += time.perf_counter() - started
        self.n_decoded += n
        self.tokens.extend(tokens)
        return logits, row

    def check_fits(self, n_tokens: int) -> None:
        self.target.check_fits(n_tokens)

    @property
    def n_ctx(self) -> int:
        return self.target.n_ctx

    def decode(
        self, tokens: Sequence[int], logits_at: Sequence[int] = (), *, copy: bool = True
    ) -> np.ndarray:
        """The logits after the last of `tokens`, each paired with the target's row before it
        where one is kept (zeros elsewhere): what the calibration times as a draft step."""
        rows = self.hidden.read(self.n_past - 1, self.n_past - 1 + len(tokens))
        self.n_exact = min(self.n_exact, self.n_past)
        return self._decode(tokens, rows)[0][None, :]

    def _forget(self, n_past: int) -> None:
        self._lib.llama_memory_seq_rm(self._memory, 0, n_past, -1)
        self.n_exact = min(self.n_exact, n_past)
