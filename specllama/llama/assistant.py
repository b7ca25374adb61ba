"""Gemma 4's assistant drafter: a small model in its own GGUF (architecture "gemma4-assistant")
that drafts for a Gemma 4 target from the target's last hidden row and its KV cache.

At position p the assistant reads the pair (token x[p], the target's row h[p-1]: its output
norm's, `llama_get_embeddings_nextn`) and attends over the target's own KV cache: its sliding
layers read the target's last sliding layer's cache, its full layers the last full layer's.
llama.cpp shares those caches when the assistant's context is made with ctx_type MTP and
ctx_other = the target's context; the assistant then keeps nothing of its own (removing from
its cache does nothing, decoding writes nothing). So there is nothing to catch up on: the
target's own decodes are the assistant's context. A draft is one decode per token, all at
position p, where the target's cache ends: the first pairs x[p] with h[p-1], each further
guess is paired with the assistant's own row of the step before (llama.cpp's `draft-mtp` with
a shared cache, common/speculative.cpp, does the same).

The cache it reads must be exactly the text before p: a cell the target kept past it (a
rejected draft) would be read too. `first_guess` makes sure of it. And making the assistant's
context empties the target's cache (llama.cpp resets the cells they share), so the target is
rolled back to nothing first.

The nextn calls, ctx_type and ctx_other are MTP's (`specllama.llama.mtp.mtp_support`);
`llama_get_ctx_other` confirms the sharing took.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np

from specllama.errors import ModelLoadError, SpecllamaError, UsageError
from specllama.llama.backend import LlamaBackend
from specllama.llama.head_file import model_meta
from specllama.llama.library import load_llama
from specllama.llama.mtp import HiddenRows, mtp_support
from specllama.llama.structs import fill_batch

ARCHITECTURE = "gemma4-assistant"
TARGET_ARCHITECTURE = "gemma4"
_HEADS = "Gemma 4 assistants"
_ROWS_KEPT_BEHIND = 64
_N_BATCH = 8  # a draft decodes one token at a time


@cache
def assistant_support() -> str | None:
    """None when this llama-cpp-python can run Gemma 4 assistants, else what it lacks."""
    reason = mtp_support()
    if reason is not None:
        return reason.replace("MTP heads", _HEADS)
    lib = load_llama()
    from llama_cpp import llama_cpp_ext

    missing = [n for n in ("llama_get_ctx_other",) if not hasattr(llama_cpp_ext, n)]
    model_calls = ("llama_model_n_embd_out", "llama_model_n_head_kv")
    missing += [n for n in model_calls if not hasattr(lib, n)]
    if missing:
        return (
            f"this llama-cpp-python ({lib.__version__}) cannot run {_HEADS} "
            f"(missing {', '.join(missing)})"
        )
    return None


def pairing_problem(
    head_name: str,
    target_name: str,
    *,
    architecture: str | None,
    target_architecture: str | None,
    backbone: int,
    target_embd: int,
    head_vocab: int,
    target_vocab: int,
    head_kv: tuple[int, int | None, int | None],
    target_kv: tuple[int, int | None, int | None],
) -> str | None:
    """Why this assistant cannot draft for this target (one line), or None. `*_kv`: (KV heads,
    head size of the full layers, of the sliding ones): the assistant reads the target's cache
    with its own."""
    if architecture != ARCHITECTURE:
        return f"{head_name} is not a Gemma 4 assistant (architecture {architecture})"
    if target_architecture != TARGET_ARCHITECTURE:
        return (
            f"{head_name} drafts for Gemma 4 models; {target_name} is a {target_architecture} model"
        )
    if backbone != target_embd:
        return f"{head_name} drafts for a model {backbone} wide; {target_name} is {target_embd}"
    if head_vocab != target_vocab:
        return (
            f"{head_name} has a vocabulary of {head_vocab} tokens; {target_name} has {target_vocab}"
        )
    if head_kv != target_kv:
        return (
            f"{head_name} reads a KV cache of {_kv_text(head_kv)}; {target_name} keeps "
            f"{_kv_text(target_kv)}"
        )
    return None


def _kv_text(kv: tuple[int, int | None, int | None]) -> str:
    heads, full, sliding = kv
    return f"{heads} heads of {full} (sliding layers: {sliding})"


def _kv_shape(model, architecture: str) -> tuple[int, int | None, int | None]:
    def size(key: str) -> int | None:
        value = model_meta(model, f"{architecture}.attention.{key}")
        return int(value) if value is not None and value.isdigit() else None

    return load_llama().llama_model_n_head_kv(model), size("key_length"), size("key_length_swa")


class AssistantHead:
    """A Gemma 4 assistant for `target`, in its own context over the target's KV cache.

    It also answers the calibration's `decode`/`rollback` (`specllama.policy.calibration`): a
    batch with logits is one draft step, anything else costs nothing (there is no catch-up).
    """

    kind = "assistant"

    def __init__(self, target: LlamaBackend, path: str | Path, *, n_gpu_layers: int = 0) -> None:
        reason = assistant_support()
        if reason is not None:
            raise UsageError(reason, hint="--drafter ngram or model; upgrade llama-cpp-python")
        lib = load_llama()
        from llama_cpp import llama_cpp_ext

        self._lib, self._ext, self.target = lib, llama_cpp_ext, target
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
                raise UsageError(problem, hint="pass the assistant made for this target")
            self._make_context()
        except SpecllamaError:
            lib.llama_model_free(self._model)
            raise
        self.tokens: list[int] = []  # the calibration's text (`decode`)
        self.n_decoded = 0  # tokens evaluated over the lifetime
        self.decode_seconds = 0.0

    def _pairing_problem(self) -> str | None:
        lib, model, target = self._lib, self._model, self.target
        arch = model_meta(model, "general.architecture")
        target_arch = model_meta(target._model, "general.architecture")
        return pairing_problem(
            self.path.name,
            target.path.name,
            architecture=arch,
            target_architecture=target_arch,
            backbone=lib.llama_model_n_embd_out(model),
            target_embd=lib.llama_model_n_embd(target._model),
            head_vocab=lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model)),
            target_vocab=target.n_vocab,
            head_kv=_kv_shape(model, ARCHITECTURE),
            target_kv=_kv_shape(target._model, target_arch or ""),
        )

    def _make_context(self) -> None:
        lib, ext, target = self._lib, self._ext, self.target
        params = lib.llama_context_default_params()
        params.n_ctx = target.n_ctx  # llama.cpp takes the target cache's size anyway
        params.n_batch = params.n_ubatch = _N_BATCH
        params.n_threads = params.n_threads_batch = target.n_threads
        params.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = target._ctx
        # Making the context resets the cells of the cache it shares (llama.cpp sizes them
        # afresh): the target starts over rather than keep positions it no longer has.
        target.rollback(0)
        if target.exact:
            # As the target's: the flash-attention setting decides how V is laid out in the
            # cache both read.
            params.type_k = params.type_v = lib.GGML_TYPE_F32
            params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self._ctx = lib.llama_init_from_model(self._model, params)
        if not self._ctx:
            raise ModelLoadError(f"llama.cpp could not create a context for {self.path}")
        shared = ext.llama_get_ctx_other(self._ctx)
        if (
            ctypes.cast(shared, ctypes.c_void_p).value
            != ctypes.cast(target._ctx, ctypes.c_void_p).value
        ):
            lib.llama_free(self._ctx)
            self._ctx = None
            raise ModelLoadError(f"llama.cpp did not share {target.path.name}'s cache with "
                                 f"{self.path.name}")  # fmt: skip
        self.n_embd = lib.llama_model_n_embd(target._model)  # the rows it reads and writes
        self.n_vocab = target.n_vocab
        # The target writes its row for every token it evaluates; the assistant for its output.
        ext.llama_set_embeddings_nextn(target._ctx, True, False)
        ext.llama_set_embeddings_nextn(self._ctx, True, True)
        self.hidden = HiddenRows(self.n_embd)
        target.on_decoded = self._keep_target_rows
        self._batch = lib.llama_batch_init(_N_BATCH, self.n_embd, 1)
        self._token_ids = (lib.llama_token * _N_BATCH)()
        self._batch.token = self._token_ids  # a batch entry carries a token and a row

    def close(self) -> None:
        if getattr(self, "_ctx", None):
            self.target.on_decoded = None
            self._ext.llama_set_embeddings_nextn(self.target._ctx, False, False)
            self._batch.token = None  # ours, not llama_batch_init's: it must not free it
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._lib.llama_model_free(self._model)
            self._ctx = None

    def __del__(self) -> None:
        self.close()

    def _keep_target_rows(self, start: int, n_tokens: int) -> None:
        pointer = self._ext.llama_get_embeddings_nextn(self.target._ctx)
        self.hidden.write(start, np.ctypeslib.as_array(pointer, shape=(n_tokens, self.n_embd)))

    # -- drafting ---------------------------------------------------------------------------

    def first_guess(self, context: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """(logits, own row) for the token after `context` (at least two tokens): the target
        is brought to hold exactly all but its last token (the loop leaves it so), whose row
        pairs with the last."""
        verified = context[:-1]
        if self.target.common_prefix(verified) == len(verified):
            self.target.rollback(len(verified))
        else:
            self.target.sync(verified)
        # A next turn of a chat may part from this text a little before its end.
        self.hidden.release_before(len(verified) - _ROWS_KEPT_BEHIND)
        row = self.hidden.read(len(verified) - 1, len(verified))[0]
        return self.step(context[-1], row)

    def step(self, token: int, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate `token` paired with `row` where the target's cache ends; return the logits
        (a view valid until the next decode) and the assistant's own row after it."""
        lib, batch, position = self._lib, self._batch, self.target.n_past
        fill_batch(batch, [token], position, {0})
        row = np.ascontiguousarray(row, dtype=np.float32)
        ctypes.memmove(batch.embd, row.ctypes.data, row.nbytes)
        started = time.perf_counter()
        status = lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise SpecllamaError(f"llama.cpp failed to evaluate the Gemma 4 assistant ({status})")
        logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(self._ctx, 0),
                                       shape=(self.n_vocab,))  # fmt: skip
        logits.flags.writeable = False
        own = self._ext.llama_get_embeddings_nextn_ith(self._ctx, 0)
        own_row = np.ctypeslib.as_array(own, shape=(self.n_embd,)).copy()
        self.decode_seconds += time.perf_counter() - started
        self.n_decoded += 1
        return logits, own_row

    # -- the calibration's view: a draft context --------------------------------------------

    @property
    def n_ctx(self) -> int:
        return self.target.n_ctx

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def decode(
        self, tokens: Sequence[int], logits_at: Sequence[int] = (), *, copy: bool = True
    ) -> np.ndarray:
        """What the calibration times: with logits, one draft step (the last token, paired with
        a row of zeros: the cost does not depend on it); without, nothing to evaluate."""
        self.tokens.extend(tokens)
        if not logits_at:
            return np.zeros((0, self.n_vocab), dtype=np.float32)
        logits, _ = self.step(tokens[-1], np.zeros(self.n_embd, dtype=np.float32))
        return np.repeat(logits[None, :], len(logits_at), axis=0)

    def rollback(self, n_past: int) -> None:
        del self.tokens[n_past:]  # its cache is the target's: nothing of its own to drop
