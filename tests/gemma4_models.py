"""A synthetic Gemma 4 target and its assistant drafter (architecture "gemma4-assistant"),
written with `gguf`; their behaviour is known by construction.

The target is a real `gemma4` to llama.cpp: sliding-window layers with a full-attention layer
every `swa_period`-th, the last `n_shared_kv` layers reusing earlier layers' KV cache, per-layer
embeddings, a layer scale and final logit softcapping. Every projection into the residual stream
is zero (attention, feed-forward and per-layer-embedding outputs), so the stream stays the token's
embedding e[x] (a random unit vector, scaled by sqrt(n_embd) as Gemma scales it); its last row,
after the output norm (`h_nextn`, the row an assistant reads), is sqrt(n_embd) e[x]; the output
maps it to `next_token[x]`, a fixed permutation, as tests/head_models.py's llama target does.
Each layer with its own KV cache writes V = e[x] (the first coordinates, RMS-normed per head).

The assistant drafts at position p from the pair (token x[p], the target's row h[p-1]) and reads
the target's KV cache of its last SWA and full layer (llama.cpp shares them through ctx_other);
it predicts x[p+1]. Drafting on, llama.cpp keeps the position and pairs each guess with the
assistant's own row. Three constructions, as the EAGLE-3 heads of head_models:

- "token": the pre-projection keeps the token's half (the target's embedding of x[p], its first
  coordinates), attention and feed-forward add nothing, the output (the tied embedding) maps the
  token's code to `head_next[x]`: right on a fraction a of the tokens, token after token, since
  drafting on works the same way.
- "hidden": the pre-projection keeps the row's half (h[p-1] = e[x[p-1]]) and the output maps it
  to next_token[head_next[x[p-1]]]: right only when the row paired with the token is the
  target's of the position before, and only on the first token of a draft.
- "kv": the pre-projection is zero; the first layer (sliding, window 2: it sees position p-1
  alone, as the target has not evaluated p) reads V = e[x[p-1]] from the target's cache and
  writes it to the stream, mapped as "hidden" maps it: right only when the target's cache
  holds exactly the text before p (a stale cell at p would be read too).

    python research/make_heads.py OUT --kind gemma4-assistant --accept 0.8 --size tiny
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import head_models
import numpy as np
from qwen35_models import _head, _weights

TARGET_ARCH = "gemma4"
ASSISTANT_ARCH = "gemma4-assistant"
CONSTRUCTIONS = ("token", "hidden", "kv")
# Gemma 4's: the tanh cap on the target's logits (its logit of TEST_LOGIT stays the argmax).
_SOFTCAP = 30.0
# The "kv" assistant's sliding window: the position before the draft's, and the draft's own
# (which the target's cache does not hold).
_KV_WINDOW = 2


@dataclass(frozen=True)
class Gemma4Shape:
    name: str
    n_layer: int  # target layers; every swa_period-th is full attention, the others sliding
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim_swa: int
    head_dim_full: int
    n_shared_kv: int  # the last layers that reuse an earlier layer's KV cache
    n_embd_per_layer: int  # per-layer embeddings' width (0: none, as the 31B)
    sliding_window: int
    swa_period: int
    # The assistant (its KV heads and head sizes are the target's: it reads the target's cache).
    a_n_layer: int
    a_n_embd: int
    a_n_ff: int
    a_n_head: int

    def is_swa(self, il: int, n_layer: int | None = None) -> bool:
        n = self.n_layer if n_layer is None else n_layer
        return (il + 1) % self.swa_period != 0 if il < n - 1 else False

    @property
    def kv_from_start(self) -> int:
        return self.n_layer - self.n_shared_kv


TINY = Gemma4Shape("tiny", 6, 64, 128, 2, 1, 64, 64, 2, 8, 512, 2, 2, 128, 128, 2)
# Gemma 4 E2B's trunk (35 layers, 4 sliding to 1 full, 20 sharing KV, one KV head of 256/512)
# without its per-layer embeddings (a lookup: file size, not compute), for 1.5B-class costs;
# an assistant of four layers, 512 wide.
SHAPE_1_5B = Gemma4Shape("1.5b", 35, 1536, 6144, 8, 1, 256, 512, 20, 0, 512, 5, 4, 512, 2048, 4)
SHAPES = {s.name: s for s in (TINY, SHAPE_1_5B)}


def _check(shape: Gemma4Shape) -> None:
    """What llama.cpp assumes of a Gemma 4 and its assistant: the last layer full, the one before
    sliding (the assistant reads those), and the same for the last layers with their own KV."""
    n, k = shape.n_layer, shape.kv_from_start
    assert not shape.is_swa(n - 1) and shape.is_swa(n - 2)
    assert k >= 2 and not shape.is_swa(k - 1) and shape.is_swa(k - 2)


def embeddings(shape: Gemma4Shape, n_vocab: int) -> np.ndarray:
    rng = np.random.default_rng(shape.n_embd + 4)
    out = rng.standard_normal((n_vocab, shape.n_embd), dtype=np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _common_hparams(writer: gguf.GGUFWriter, arch: str, shape: Gemma4Shape, swa: list[bool]):
    writer.add_context_length(32768)
    writer.add_block_count(len(swa))
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_key_length(shape.head_dim_full)
    writer.add_value_length(shape.head_dim_full)
    writer.add_uint32(f"{arch}.attention.key_length_swa", shape.head_dim_swa)
    writer.add_uint32(f"{arch}.attention.value_length_swa", shape.head_dim_swa)
    writer.add_rope_dimension_count(shape.head_dim_full)
    writer.add_uint32(f"{arch}.rope.dimension_count_swa", shape.head_dim_swa)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_float32(f"{arch}.rope.freq_base_swa", 10_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_array(f"{arch}.attention.sliding_window_pattern", swa)


def _file_type(writer: gguf.GGUFWriter, dtype: type) -> None:
    f32 = dtype == np.float32
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if f32 else gguf.LlamaFileType.MOSTLY_F16)


def _eye(rows: int, cols: int) -> np.ndarray:
    """The first min(rows, cols) coordinates, passed through."""
    return np.eye(rows, cols, dtype=np.float32)


def write_gemma4_target(
    out: Path,
    shape: Gemma4Shape,
    vocab_src: Path,
    *,
    next_token: np.ndarray,
    logit: float = 30.0,
    dtype: type = np.float32,
) -> Path:
    """A gemma4 whose greedy text follows `next_token` (tokenizer from `vocab_src`)."""
    _check(shape)
    arch = TARGET_ARCH
    writer = gguf.GGUFWriter(out, arch)
    n_vocab = head_models._copy_tokenizer(writer, vocab_src)
    assert len(next_token) == n_vocab
    writer.add_name(f"synthetic gemma4 {shape.name}")
    swa = [shape.is_swa(il) for il in range(shape.n_layer)]
    _common_hparams(writer, arch, shape, swa)
    writer.add_embedding_length(shape.n_embd)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_uint32(f"{arch}.attention.sliding_window", shape.sliding_window)
    writer.add_uint32(f"{arch}.attention.shared_kv_layers", shape.n_shared_kv)
    writer.add_uint32(f"{arch}.embedding_length_per_layer_input", shape.n_embd_per_layer)
    writer.add_float32(f"{arch}.final_logit_softcapping", _SOFTCAP)
    _file_type(writer, dtype)

    def matrix(array: np.ndarray) -> np.ndarray:
        return array if array.ndim == 1 else array.astype(dtype)

    emb = embeddings(shape, n_vocab)
    n, n_pl = shape.n_embd, shape.n_embd_per_layer
    ones = np.ones(n, dtype=np.float32)
    writer.add_tensor("token_embd.weight", matrix(emb))
    if n_pl:
        # Looked up and gated, then projected into the stream by a zero matrix: they add nothing.
        table = _weights(n_vocab, shape.n_layer * n_pl)
        writer.add_tensor("per_layer_token_embd.weight", matrix(table))
        writer.add_tensor("per_layer_model_proj.weight", matrix(_weights(shape.n_layer * n_pl, n)))
        writer.add_tensor("per_layer_proj_norm.weight", np.ones(n_pl, dtype=np.float32))
    rope_written = False
    for il in range(shape.n_layer):
        head_dim = shape.head_dim_swa if swa[il] else shape.head_dim_full
        q, kv = shape.n_head * head_dim, shape.n_head_kv * head_dim
        tensors = {
            "attn_norm.weight": ones,
            "attn_q.weight": _weights(q, n),
            "attn_q_norm.weight": np.ones(head_dim, dtype=np.float32),
            "attn_output.weight": np.zeros((n, q), dtype=np.float32),  # adds nothing
            "post_attention_norm.weight": ones,
            "layer_output_scale.weight": np.ones(1, dtype=np.float32),
            "ffn_norm.weight": ones,
            "ffn_gate.weight": _weights(shape.n_ff, n),
            "ffn_up.weight": _weights(shape.n_ff, n),
            "ffn_down.weight": np.zeros((n, shape.n_ff), dtype=np.float32),  # adds nothing
            "post_ffw_norm.weight": ones,
        }
        if il < shape.kv_from_start:  # its own KV cache: V is the token's embedding
            tensors["attn_k.weight"] = _weights(kv, n)
            tensors["attn_v.weight"] = _eye(kv, n)
            tensors["attn_k_norm.weight"] = np.ones(head_dim, dtype=np.float32)
        if n_pl:
            tensors["inp_gate.weight"] = _weights(n_pl, n)
            tensors["proj.weight"] = np.zeros((n, n_pl), dtype=np.float32)  # adds nothing
            tensors["post_norm.weight"] = ones
        for name, array in tensors.items():
            writer.add_tensor(f"blk.{il}.{name}", matrix(array))
        if not swa[il] and not rope_written:  # the full layers' RoPE factors, stored once
            writer.add_tensor("rope_freqs.weight", np.ones(head_dim // 2, dtype=np.float32))
            rope_written = True
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", matrix(_head(emb, next_token, logit)))
    head_models._finish(writer)
    return out


def codes(shape: Gemma4Shape, n_vocab: int, width: int) -> np.ndarray:
    """The unit code of each token in `width` dimensions: the first coordinates of its target
    embedding, normed (zero-padded where the width is the larger)."""
    code = np.zeros((n_vocab, width), dtype=np.float32)
    m = min(width, shape.n_embd)
    code[:, :m] = embeddings(shape, n_vocab)[:, :m]
    return code / np.linalg.norm(code, axis=1, keepdims=True)


def write_gemma4_assistant(
    out: Path,
    shape: Gemma4Shape,
    vocab_src: Path,
    *,
    next_token: np.ndarray,
    head_next: np.ndarray,
    construction: str = "token",
    logit: float = 30.0,
    dtype: type = np.float32,
    backbone: int | None = None,
) -> Path:
    """An assistant for `write_gemma4_target`'s target (same shape and vocabulary); `backbone`:
    one made for a target of another width (a mismatch)."""
    assert construction in CONSTRUCTIONS, construction
    _check(shape)
    arch = ASSISTANT_ARCH
    writer = gguf.GGUFWriter(out, arch)
    n_vocab = head_models._copy_tokenizer(writer, vocab_src)
    writer.add_name(f"synthetic gemma4-assistant {shape.name} ({construction})")
    a_layers = shape.a_n_layer
    swa = [shape.is_swa(il, a_layers) for il in range(a_layers)]
    assert swa[0], "the first layer slides (the kv construction reads through it)"
    _common_hparams(writer, arch, shape, swa)
    n, a = backbone or shape.n_embd, shape.a_n_embd
    assert a != n, "llama.cpp tells the assistant by its width differing from the target's"
    writer.add_embedding_length(a)
    writer.add_uint32(f"{arch}.embedding_length_out", n)
    writer.add_uint32(f"{arch}.nextn_predict_layers", a_layers)
    writer.add_feed_forward_length(shape.a_n_ff)
    writer.add_head_count(shape.a_n_head)
    window = _KV_WINDOW if construction == "kv" else shape.sliding_window
    writer.add_uint32(f"{arch}.attention.sliding_window", window)
    _file_type(writer, dtype)

    def matrix(array: np.ndarray) -> np.ndarray:
        return array if array.ndim == 1 else array.astype(dtype)

    code = codes(shape, n_vocab, a)
    # The pre-projection reads concat(sqrt(n) e[x[p]], h[p-1]) (h = sqrt(n) e[x[p-1]]).
    pre = np.zeros((a, 2 * n), dtype=np.float32)
    if construction == "token":
        pre[:, :n] = _eye(a, n)
    elif construction == "hidden":
        pre[:, n:] = _eye(a, n)
    maps_to = head_next if construction == "token" else next_token[head_next]
    ones = np.ones(a, dtype=np.float32)
    writer.add_tensor("token_embd.weight", matrix(_head(code, maps_to, logit)))  # the tied head
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("nextn.pre_projection.weight", matrix(pre))
    writer.add_tensor("nextn.post_projection.weight", matrix(_weights(n, a)))
    rope_written = False
    for il in range(a_layers):
        head_dim = shape.head_dim_swa if swa[il] else shape.head_dim_full
        q = shape.a_n_head * head_dim
        wo = np.zeros((a, q), dtype=np.float32)
        if construction == "kv" and il == 0:
            wo[:, :head_dim] = _eye(a, head_dim)  # the first head's read of V, into the stream
        tensors = {
            "attn_norm.weight": ones,
            "attn_q.weight": _weights(q, a),
            "attn_q_norm.weight": np.ones(head_dim, dtype=np.float32),
            "attn_output.weight": wo,
            "post_attention_norm.weight": ones,
            "layer_output_scale.weight": np.ones(1, dtype=np.float32),
            "ffn_norm.weight": ones,
            "ffn_gate.weight": _weights(shape.a_n_ff, a),
            "ffn_up.weight": _weights(shape.a_n_ff, a),
            "ffn_down.weight": np.zeros((a, shape.a_n_ff), dtype=np.float32),  # adds nothing
            "post_ffw_norm.weight": ones,
        }
        for name, array in tensors.items():
            writer.add_tensor(f"blk.{il}.{name}", matrix(array))
        if not swa[il] and not rope_written:
            writer.add_tensor("rope_freqs.weight", np.ones(head_dim // 2, dtype=np.float32))
            rope_written = True
    head_models._finish(writer)
    return out


# -- cached for the tests (model_factory's cache folder) ----------------------------------------


def tiny_target() -> Path:
    """The tiny F32 gemma4 target, SmolLM2's vocabulary."""
    import model_factory

    def build(dst: Path) -> None:
        vocab = model_factory.smollm2_q4()
        mapping = head_models.next_token_map(vocab)
        write_gemma4_target(dst, TINY, vocab, next_token=mapping, logit=head_models.TEST_LOGIT)

    return model_factory._derived("gemma4-tiny.target.F32.gguf", build)


def tiny_assistant(
    acceptance: float, *, construction: str = "token", backbone: int | None = None
) -> Path:
    """An assistant for `tiny_target()`, right on a fraction `acceptance` of the tokens;
    `backbone`: one made for a target of another width (a mismatch)."""
    import model_factory

    name = f"gemma4-tiny.assistant-{construction}-a{acceptance:g}"
    if backbone is not None:
        name += f"-backbone{backbone}"

    def build(dst: Path) -> None:
        vocab = model_factory.smollm2_q4()
        mapping = head_models.next_token_map(vocab)
        write_gemma4_assistant(
            dst, TINY, vocab, next_token=mapping,
            head_next=head_models.partly_right(mapping, acceptance), construction=construction,
            logit=head_models.TEST_LOGIT, backbone=backbone,
        )  # fmt: skip

    return model_factory._derived(name + ".F32.gguf", build)
