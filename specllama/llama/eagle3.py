"""An EAGLE-3 draft head: a one-layer model in its own GGUF (architecture "eagle3") that drafts
from the target's hidden states, run in a second llama.cpp context beside the target's.

The head names three target layers (`eagle3.target_layers`). The target's context writes the
input of each of them for every token it evaluates, kept by position, the three rows side by side
(`specllama.llama.head_file`). The head's encoder (`fc`, run by
`llama_encode`) fuses the three rows of position p into one row g[p]; its decoder at position p
reads the pair (token x[p+1], g[p]) and predicts x[p+2]. So the head's cache at position j
holds the token at j+1: `self.tokens` is the text shifted by one. Drafting on from its own
guess, the head pairs the guess with its own pre-norm row of the step before, as MTP does.

llama.cpp drives it the same way (common/speculative.cpp, `draft-eagle3`): encode the verified
rows, decode the pairs, then one decode per drafted token. It encodes the whole verify batch,
rejected drafts included; this encodes only what the target kept.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence

import numpy as np

from specllama.errors import SpecllamaError
from specllama.llama.head_file import (
    HeadFile,
    fill_rows,
    layers_beyond,
    model_meta,
    staging_calls,
)
from specllama.llama.structs import fill_batch

ARCHITECTURE = "eagle3"
_HEADS = "EAGLE-3 heads"
_ROWS_KEPT_BEHIND = 64
_OUTPUTS_AT_MOST = 16  # pairs in the decode that outputs (`_decode`)
_N_TARGET_LAYERS = 3  # llama.cpp's EAGLE-3 reads exactly three


def eagle3_support() -> str | None:
    """None when this llama-cpp-python can run EAGLE-3 heads, else what it lacks (one line)."""
    bound = staging_calls(_HEADS)
    return bound if isinstance(bound, str) else None


def pairing_problem(
    head_name: str,
    target_name: str,
    *,
    architecture: str | None,
    layer_ids: Sequence[int],
    hidden_size: int | None,
    head_vocab: int,
    target_layers: int,
    target_embd: int,
    target_vocab: int,
) -> str | None:
    """Why this head cannot draft for this target (one line), or None."""
    if architecture != ARCHITECTURE:
        return f"{head_name} is not an EAGLE-3 head (architecture {architecture})"
    if len(layer_ids) != _N_TARGET_LAYERS:
        return f"{head_name} names {len(layer_ids)} target layers; EAGLE-3 reads 3"
    if hidden_size is not None and hidden_size != target_embd:
        return f"{head_name} drafts for a model {hidden_size} wide; {target_name} is {target_embd}"
    beyond = layers_beyond(layer_ids, target_layers)
    if beyond is not None:
        return (
            f"{head_name} reads layer {beyond} of its target; {target_name} has "
            f"{target_layers} layers"
        )
    if head_vocab != target_vocab:
        return (
            f"{head_name} has a vocabulary of {head_vocab} tokens; {target_name} has {target_vocab}"
        )
    return None


class Eagle3Head(HeadFile):
    """An EAGLE-3 head for `target`.

    `self.tokens[j]` is the token at position j+1 of the text, paired with the fused target
    row of position j. The first `self.n_exact` were paired with the target's rows; drafting
    on pairs guesses with the head's own rows, so those are dropped before the next catch-up.
    """

    kind = "eagle3"
    heads = _HEADS
    n_exact = 0

    def _pairing_problem(self) -> str | None:
        lib, model, target = self._lib, self._model, self.target
        self.layer_ids = self._target_layer_ids(ARCHITECTURE)
        hidden = model_meta(model, f"{ARCHITECTURE}.target_hidden_size")
        return pairing_problem(
            self.path.name,
            target.path.name,
            architecture=model_meta(model, "general.architecture"),
            layer_ids=self.layer_ids,
            hidden_size=int(hidden) if hidden and hidden.isdigit() else None,
            head_vocab=lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model)),
            target_layers=lib.llama_model_n_layer(target._model),
            target_embd=lib.llama_model_n_embd(target._model),
            target_vocab=target.n_vocab,
        )

    def _make_batches(self) -> None:
        lib = self._lib
        # The target writes its layers' inputs for every batch token; the head its pre-norm row
        # for its outputs (and g for every encoded row).
        self.features = self.inputs.rows
        self._ext.llama_set_embeddings_nextn(self._ctx, True, True)
        self._encode_batch = lib.llama_batch_init(self.n_batch, self.inputs.width, 1)
        self._batch = lib.llama_batch_init(self.n_batch, self.n_embd, 1)
        self._token_ids = (lib.llama_token * self.n_batch)()
        self._batch.token = self._token_ids  # a batch entry carries a token and a row

    def _batches(self) -> list:
        self._batch.token = None  # ours, not llama_batch_init's: it must not free it
        return [self._batch, self._encode_batch]

    # -- drafting ---------------------------------------------------------------------------

    def catch_up(self, context: Sequence[int]) -> tuple[np.ndarray, np.ndarray] | None:
        """Evaluate the pairs the head has not seen of `context` (all but its last token
        evaluated by the target); return (logits, own row) for the token after `context`, or
        None for a context of one token (nothing to pair it with)."""
        if len(context) < 2:
            return None
        shifted = context[1:]
        keep = min(self.common_prefix(shifted), self.n_exact, len(shifted) - 1)
        self.rollback(keep)
        # The last few pairs in one decode that outputs them all (see `_decode`), any before
        # them in decodes that output nothing.
        last = max(keep, len(shifted) - _OUTPUTS_AT_MOST)
        for start in range(keep, last, self.n_batch):
            stop = min(start + self.n_batch, last)
            fused = self._encode(self.features.read(start, stop))
            self._decode(shifted[start:stop], fused, outputs=False)
        fused = self._encode(self.features.read(last, len(shifted)))
        out = self._decode(shifted[last:], fused)
        self.n_exact = len(shifted)
        # A next turn of a chat may part from this text a little before its end.
        self.features.release_before(len(shifted) - _ROWS_KEPT_BEHIND)
        assert out is not None
        return out

    def step(self, token: int, own_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Draft on: evaluate a guessed token with the head's own row; (logits, row) after it."""
        out = self._decode([token], own_row[None, :])
        assert out is not None
        return out

    def _encode(self, features: np.ndarray) -> np.ndarray:
        """The head's fusion of the target's rows: one row g per position (a copy)."""
        lib, batch, n = self._lib, self._encode_batch, len(features)
        # The encoder uses no positions, but llama.cpp checks that they go on from its cache's.
        fill_rows(batch, features, self.n_past, outputs=True)
        started = time.perf_counter()
        status = lib.llama_encode(self._ctx, batch)
        if status != 0:
            raise SpecllamaError(f"llama.cpp failed to encode for the EAGLE-3 head ({status})")
        pointer = self._ext.llama_get_embeddings_nextn(self._ctx)
        fused = np.ctypeslib.as_array(pointer, shape=(n, self.n_embd)).copy()
        self.decode_seconds += time.perf_counter() - started
        return fused

    def _decode(
        self, tokens: Sequence[int], rows: np.ndarray, *, outputs: bool = True
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """Evaluate tokens paired with rows; return the logits (valid until the next decode)
        and the head's pre-norm row after the last (None without `outputs`).

        llama.cpp's EAGLE-3 graph computes every row and takes no output selection: asked for
        the last row only, it hands back the first. So a decode that outputs asks for all its
        rows (the graph computes them anyway; the copy is what grows)."""
        self.check_fits(self.n_past + len(tokens))
        lib, batch = self._lib, self._batch
        n = len(tokens)
        fill_batch(batch, tokens, self.n_past, range(n) if outputs else ())
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        ctypes.memmove(batch.embd, rows.ctypes.data, rows.nbytes)
        started = time.perf_counter()
        status = lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise SpecllamaError(f"llama.cpp failed to evaluate the EAGLE-3 head ({status})")
        self.n_decoded += n
        self.tokens.extend(tokens)
        if not outputs:
            self.decode_seconds += time.perf_counter() - started
            return None
        logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(self._ctx, n - 1),
                                       shape=(self.n_vocab,))  # fmt: skip
        logits.flags.writeable = False
        own = self._ext.llama_get_embeddings_nextn_ith(self._ctx, n - 1)
        row = np.ctypeslib.as_array(own, shape=(self.n_embd,)).copy()
        self.decode_seconds += time.perf_counter() - started
        return logits, row

    def decode(
        self, tokens: Sequence[int], logits_at: Sequence[int] = (), *, copy: bool = True
    ) -> np.ndarray:
        """The logits after the last of `tokens`, each paired with a zero row: what the
        calibration times as a draft step (a step's cost does not depend on the row)."""
        self.n_exact = min(self.n_exact, self.n_past)
        rows = np.zeros((len(tokens), self.n_embd), dtype=np.float32)
        last = max(0, len(tokens) - _OUTPUTS_AT_MOST)
        if last:
            self._decode(tokens[:last], rows[:last], outputs=False)
        out = self._decode(tokens[last:], rows[last:])
        assert out is not None
        return out[0][None, :]

    def _forget(self, n_past: int) -> None:
        super()._forget(n_past)
        self.n_exact = min(self.n_exact, n_past)
