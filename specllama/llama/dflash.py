"""A DFlash draft head: a small model in its own GGUF (architecture "dflash") that guesses a
whole block of tokens in one decode, from the target's hidden states.

The head names some of the target's layers (`dflash.target_layers`); their inputs, side by side,
are the target's features of a position (`specllama.llama.head_file`). The head's cache holds,
at every position the target has verified, what its encoder makes of those features: a decode
of feature rows (an embedding batch) writes them there. A draft is one decode of the block
[last token, mask, ..., mask] at the positions after them, with attention that is not causal:
each mask's logits guess the token at its position. The block is dropped from the cache at
once, so the cache only ever holds the target's features.

llama.cpp drives it the same way (common/speculative.cpp, `draft-dflash`). It injects the whole
verify batch, rejected drafts included, and drops them later; this injects what the target kept.
"""

from __future__ import annotations

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

ARCHITECTURE = "dflash"
_HEADS = "DFlash heads"
_DEFAULT_BLOCK = 16  # llama.cpp's, for a file without dflash.block_size
_ROWS_KEPT_BEHIND = 64


def dflash_support() -> str | None:
    """None when this llama-cpp-python can run DFlash heads, else what it lacks (one line)."""
    bound = staging_calls(_HEADS)
    return bound if isinstance(bound, str) else None


def pairing_problem(
    head_name: str,
    target_name: str,
    *,
    architecture: str | None,
    layer_ids: Sequence[int],
    head_embd: int,
    head_vocab: int,
    mask_token: int,
    variant: str | None,
    target_layers: int,
    target_embd: int,
    target_vocab: int,
) -> str | None:
    """Why this head cannot draft for this target (one line), or None."""
    if architecture != ARCHITECTURE:
        return f"{head_name} is not a DFlash head (architecture {architecture})"
    if variant is not None:
        return f"{head_name} is a {variant} head; specllama runs DFlash heads (not yet {variant})"
    if not layer_ids:
        return f"{head_name} names no target layers (dflash.target_layers)"
    if head_embd != target_embd:
        return f"{head_name} drafts for a model {head_embd} wide; {target_name} is {target_embd}"
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
    if mask_token < 0:
        return f"{head_name} has no mask token (tokenizer.ggml.mask_token_id)"
    return None


def _variant(model) -> str | None:
    """The DFlash variants this does not run: DFlash2 (a selector over the logits) and DSpark
    (a Markov head): their drafts are read differently."""
    if model_meta(model, f"{ARCHITECTURE}.selector_top_k") not in (None, "0"):
        return "DFlash2"
    if model_meta(model, f"{ARCHITECTURE}.has_confidence_head") is not None:
        return "DSpark"
    return None


class DFlashHead(HeadFile):
    """A DFlash head for `target`: `self.tokens[p]` is the token at position p, whose target
    features the cache holds there."""

    kind = "dflash"
    heads = _HEADS

    def _pairing_problem(self) -> str | None:
        lib, model, target = self._lib, self._model, self.target
        arch = model_meta(model, "general.architecture")
        self.layer_ids = self._target_layer_ids(ARCHITECTURE)
        self.mask_token = lib.llama_vocab_mask(lib.llama_model_get_vocab(model))
        block = model_meta(model, f"{ARCHITECTURE}.block_size")
        self.block_size = int(block) if block and block.isdigit() else _DEFAULT_BLOCK
        self.n_batch_min = self.block_size
        # The anchor takes the block's first place: the masks guess the rest.
        self.max_draft = self.block_size - 1
        return pairing_problem(
            self.path.name,
            target.path.name,
            architecture=arch,
            layer_ids=self.layer_ids,
            head_embd=lib.llama_model_n_embd(model),
            head_vocab=lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model)),
            mask_token=self.mask_token,
            variant=_variant(model) if arch == ARCHITECTURE else None,
            target_layers=lib.llama_model_n_layer(target._model),
            target_embd=lib.llama_model_n_embd(target._model),
            target_vocab=target.n_vocab,
        )

    def _make_batches(self) -> None:
        lib = self._lib
        causal = model_meta(self._model, f"{ARCHITECTURE}.attention.causal") == "true"
        lib.llama_set_causal_attn(self._ctx, causal)  # a block's masks see each other
        self._feature_batch = lib.llama_batch_init(self.n_batch, self.inputs.width, 1)
        self._block_batch = lib.llama_batch_init(self.n_batch, 0, 1)

    def _batches(self) -> list:
        return [self._feature_batch, self._block_batch]

    # -- drafting ---------------------------------------------------------------------------

    def catch_up(self, context: Sequence[int]) -> None:
        """Write the target's features of every position of `context` but the last (those the
        target has evaluated) that the cache does not hold yet."""
        verified = context[:-1]
        self.rollback(self.common_prefix(verified))
        for start in range(self.n_past, len(verified), self.n_batch):
            stop = min(start + self.n_batch, len(verified))
            self._write_features(verified[start:stop], self.inputs.rows.read(start, stop))
        # A next turn of a chat may part from this text a little before its end.
        self.inputs.rows.release_before(len(verified) - _ROWS_KEPT_BEHIND)

    def guess_block(self, last: int, n_masks: int) -> np.ndarray:
        """The logits of `n_masks` masks after `last` (the token after the cache's text), one
        row each: a view valid until the next decode."""
        self.check_fits(self.n_past + 1 + n_masks)
        lib, batch, start = self._lib, self._block_batch, self.n_past
        # All the block's rows are output: llama.cpp's DFlash graph ignores the selection (asked
        # for the masks' rows, it hands back the first ones). The anchor's row is not read.
        fill_batch(batch, [last] + [self.mask_token] * n_masks, start, range(n_masks + 1))
        started = time.perf_counter()
        status = lib.llama_decode(self._ctx, batch)
        # The block leaves the cache at once: it holds the target's features only.
        lib.llama_memory_seq_rm(self._memory, 0, start, -1)
        if status != 0:
            raise SpecllamaError(f"llama.cpp failed to evaluate the DFlash head ({status})")
        self.n_decoded += 1 + n_masks
        pointer = lib.llama_get_logits(self._ctx)
        logits = np.ctypeslib.as_array(pointer, shape=(n_masks + 1, self.n_vocab))[1:]
        logits.flags.writeable = False
        self.decode_seconds += time.perf_counter() - started
        return logits

    def _write_features(self, tokens: Sequence[int], rows: np.ndarray) -> None:
        lib, batch, n = self._lib, self._feature_batch, len(tokens)
        fill_rows(batch, rows, self.n_past, outputs=False)
        started = time.perf_counter()
        status = lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise SpecllamaError(f"llama.cpp failed to write the DFlash head's features ({status})")
        self.decode_seconds += time.perf_counter() - started
        self.n_decoded += n
        self.tokens.extend(tokens)

    def decode(
        self, tokens: Sequence[int], logits_at: Sequence[int] = (), *, copy: bool = True
    ) -> np.ndarray:
        """What the calibration times: a draft step is a block of one mask after one token; any
        other batch is the features of its positions written (rows of zeros: the cost does not
        depend on them), with zero logits."""
        if len(tokens) == 1 and logits_at:
            return self.guess_block(tokens[0], 1).copy()
        self._write_features(tokens, np.zeros((len(tokens), self.inputs.width), np.float32))
        return np.zeros((len(logits_at), self.n_vocab), dtype=np.float32)
