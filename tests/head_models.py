"""Synthetic draft heads that come as their own GGUF, and their targets, written with `gguf`;
their behaviour is known by construction. Only EAGLE-3 so far (`research/make_heads.py` says
why the others wait).

The target is a plain llama whose trunk adds nothing (every projection into the residual
stream is zero, as in tests/qwen35_models.py): the input of every layer at position p is the
embedding of the token x[p], a random unit vector, and the greedy next token is
`next_token[x]`, a fixed permutation of the ordinary tokens.

The EAGLE-3 head at position p reads the pair (token x[p+1], g[p]), g[p] being its fusion
(`fc`) of the target's layer inputs at p, and predicts x[p+2]. Two constructions:

- `uses_hidden=False` ("token" head): the features are zeroed (`fc` zero, and the residual
  takes them normed and weighted by a zero `attn_norm_2`), and the one attention layer attends
  to its own position only (queries and keys are the normed token embedding, scaled so that
  a token's dot product with itself outweighs every other by far), so the residual stream is
  the token's embedding; the output maps it to `head_next[x]`, which is `next_token` on a
  fraction a of the tokens and wrong on the rest. Drafting on from its own guess works the
  same way, so a draft is accepted token by token with probability a.
- `uses_hidden=True`: the attention adds nothing and `fc` passes the first target layer's input
  through, so the stream is the embedding of x[p] and the output maps it to
  next(head_next[x[p]]): right exactly when the feature paired with a token is the target's
  row of the token before it. Its own next row names x[p] again, so only the first token of
  each draft can be right; its acceptance is a on that token.

    python research/make_heads.py OUT --kind eagle3 --accept 0.8 --size tiny
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import gguf_reading
import numpy as np
import qwen35_models
from qwen35_models import _head, _weights


@dataclass(frozen=True)
class LlamaShape:
    name: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    target_layers: tuple[int, int, int]  # the layers an EAGLE-3 head reads (low, middle, high)


TINY = LlamaShape("tiny", 4, 64, 128, 2, 1, (0, 2, 3))
# Qwen2.5-1.5B's trunk (config.json): the 1.5B-class cost of the benchmark.
SHAPE_1_5B = LlamaShape("1.5b", 28, 1536, 8960, 12, 2, (2, 14, 25))
# Llama-3.1-8B's trunk (EAGLE-3 heads exist for it): the GPU run's 7B-class costs.
SHAPE_8B = LlamaShape("8b", 32, 4096, 14336, 32, 8, (2, 16, 29))
SHAPES = {s.name: s for s in (TINY, SHAPE_1_5B, SHAPE_8B)}
# Token texts that end a generation in llama.cpp whatever their type: the permutation leaves
# them in place (in Qwen2.5's vocabulary "</s>" is an ordinary token).
_EOG_TEXTS = ("</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>",
              "<end_of_turn>", "<|end|>", "<|return|>", "<|call|>")  # fmt: skip
# Self-attention strength of the "token" head: the logit gap between a token's own position and
# any other (random unit vectors: dot products up to ~0.5 against 1.0 for itself).
_SELF_ATTENTION = 400.0


def _copy_tokenizer(
    writer: gguf.GGUFWriter, vocab_src: Path, chat_template: str | None = None
) -> int:
    """The tokenizer of `vocab_src`, with `chat_template` instead of its own if given."""
    reader = gguf_reading.read(vocab_src)
    for field in reader.fields.values():
        if field.name.startswith("tokenizer."):
            value = field.contents()
            if field.name == "tokenizer.chat_template" and chat_template is not None:
                value = chat_template
            sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, value, field.types[0], sub_type=sub)
    return len(reader.fields["tokenizer.ggml.tokens"].contents())


def embeddings(shape: LlamaShape, n_vocab: int) -> np.ndarray:
    rng = np.random.default_rng(shape.n_embd)
    out = rng.standard_normal((n_vocab, shape.n_embd), dtype=np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def _hparams(
    writer: gguf.GGUFWriter, shape: LlamaShape, n_layer: int, n_head: int, n_head_kv: int
) -> None:
    writer.add_context_length(32768)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)


def _finish(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_llama_target(
    out: Path,
    shape: LlamaShape,
    vocab_src: Path,
    *,
    next_token: np.ndarray,
    logit: float = 30.0,
    dtype: type = np.float32,
    chat_template: str | None = None,
) -> Path:
    """A llama whose greedy text follows `next_token` (tokenizer from `vocab_src`, with
    `chat_template` instead of its own if given)."""
    writer = gguf.GGUFWriter(out, "llama")
    n_vocab = _copy_tokenizer(writer, vocab_src, chat_template)
    assert len(next_token) == n_vocab
    writer.add_name(f"synthetic llama {shape.name}")
    _hparams(writer, shape, shape.n_layer, shape.n_head, shape.n_head_kv)
    f32 = dtype == np.float32
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if f32 else gguf.LlamaFileType.MOSTLY_F16)
    emb = embeddings(shape, n_vocab)
    n, head_dim = shape.n_embd, shape.n_embd // shape.n_head
    kv = shape.n_head_kv * head_dim
    ones = np.ones(n, dtype=np.float32)
    writer.add_tensor("token_embd.weight", emb.astype(dtype))
    for il in range(shape.n_layer):
        tensors = {
            "attn_norm.weight": ones,
            "attn_q.weight": _weights(n, n).astype(dtype),
            "attn_k.weight": _weights(kv, n).astype(dtype),
            "attn_v.weight": _weights(kv, n).astype(dtype),
            "attn_output.weight": np.zeros((n, n), dtype=dtype),  # adds nothing
            "ffn_norm.weight": ones,
            "ffn_gate.weight": _weights(shape.n_ff, n).astype(dtype),
            "ffn_up.weight": _weights(shape.n_ff, n).astype(dtype),
            "ffn_down.weight": np.zeros((n, shape.n_ff), dtype=dtype),  # adds nothing
        }
        for name, array in tensors.items():
            writer.add_tensor(f"blk.{il}.{name}", array)
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", _head(emb, next_token, logit).astype(dtype))
    _finish(writer)
    return out


def write_eagle3_head(
    out: Path,
    shape: LlamaShape,
    vocab_src: Path,
    *,
    next_token: np.ndarray,
    head_next: np.ndarray,
    uses_hidden: bool = False,
    logit: float = 30.0,
    dtype: type = np.float32,
    target_layers: tuple[int, ...] | None = None,
    target_hidden_size: int | None = None,
) -> Path:
    """An EAGLE-3 head for the target of `write_llama_target` (same shape and vocabulary)."""
    arch = "eagle3"
    writer = gguf.GGUFWriter(out, arch)
    n_vocab = _copy_tokenizer(writer, vocab_src)
    writer.add_name(f"synthetic eagle3 {shape.name}")
    # The "token" head's attention must find each token's own position: one head of the full
    # width, or (wider models, where a GPU's attention kernels want heads of 128) heads of 128
    # whose partial dot products still single it out.
    n_head = shape.n_embd // 128 if shape.n_embd > 2048 else 1
    head_dim = shape.n_embd // n_head
    _hparams(writer, shape, 1, n_head, n_head)
    writer.add_array(f"{arch}.target_layers", list(target_layers or shape.target_layers))
    writer.add_uint32(f"{arch}.target_hidden_size", target_hidden_size or shape.n_embd)
    if not uses_hidden:
        # The residual takes the normed features, which attn_norm_2 zeroes: drafting on from
        # its own row (the last token's embedding) must not leak that token into the next.
        writer.add_bool(f"{arch}.norm_before_residual", True)
    f32 = dtype == np.float32
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if f32 else gguf.LlamaFileType.MOSTLY_F16)
    emb = embeddings(shape, n_vocab)
    n = shape.n_embd
    n_tgt = target_hidden_size or n
    eye, zero = np.eye(n, dtype=np.float32), np.zeros((n, n), dtype=np.float32)
    ones = np.ones(n, dtype=np.float32)
    fc = np.zeros((n, 3 * n_tgt), dtype=np.float32)
    if uses_hidden:
        fc[:, :n] = eye  # the first target layer's input, as it is
    # Queries and keys: the normed token embedding (sqrt(n) * e), scaled so that a token's
    # logit for itself, s^2 n |e_head|^2 / sqrt(head_dim), is about _SELF_ATTENTION in every
    # head. Values: the token embedding itself, back into the stream.
    scale = np.sqrt(_SELF_ATTENTION / np.sqrt(head_dim)) if not uses_hidden else 0.0
    qk = np.hstack([eye * scale, zero])
    value = np.hstack([eye / np.sqrt(n), zero])
    maps_to = next_token[head_next] if uses_hidden else head_next
    tensors = {
        "attn_norm.weight": ones,
        "attn_norm_2.weight": ones if uses_hidden else np.zeros(n, dtype=np.float32),
        "attn_q.weight": qk,
        "attn_k.weight": qk,
        "attn_v.weight": value,
        "attn_output.weight": eye if not uses_hidden else zero,
        "ffn_norm.weight": ones,
        "ffn_gate.weight": _weights(shape.n_ff, n),
        "ffn_up.weight": _weights(shape.n_ff, n),
        "ffn_down.weight": np.zeros((n, shape.n_ff), dtype=np.float32),
    }
    writer.add_tensor("fc.weight", fc.astype(dtype))
    for name, array in tensors.items():
        writer.add_tensor(f"blk.0.{name}", array if array.ndim == 1 else array.astype(dtype))
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", _head(emb, maps_to, logit).astype(dtype))
    _finish(writer)
    return out


# -- DFlash --------------------------------------------------------------------------------------

# The attention margin of the DFlash construction: the logit gap, in every head, between the
# position a head should read and every other.
_DFLASH_MARGIN = 40.0


def dflash_code_width(n_embd: int) -> int:
    """The width of a token's code in a DFlash head as wide as its target (the head's width is
    its target's, llama.cpp's rule): heads of this width, 8 or more of them."""
    return min(64, n_embd // 8)


def dflash_block_size(n_embd: int) -> int:
    """The largest block the construction fits: the anchor's code, one slot per mask and the
    flags take a head each."""
    return min(16, n_embd // dflash_code_width(n_embd) - 1)


def write_dflash_head(
    out: Path,
    shape: LlamaShape,
    vocab_src: Path,
    *,
    head_next: np.ndarray,
    n_layer: int = 1,
    logit: float = 100.0,
    dtype: type = np.float32,
    target_layers: tuple[int, ...] | None = None,
) -> Path:
    """A DFlash head for the target of `write_llama_target` whose guess for the i-th token after
    the anchor is head_next applied i times: each drafted token is right where head_next is.

    A token's embedding is a random code (one head wide, c dimensions) and a flag: ordinary or
    the mask. The block is [anchor, mask x (B - 1)] at positions n..n+B-1, attention not causal.
    Attention head j (one per mask offset j + 1) lets the mask at offset i read the anchor only
    when i = j + 1: queries and keys are normed per head, so only their directions count, and
    RoPE (NeoX pairs, frequency factors set here) turns the mask's query in pair 0 by i*theta
    against the anchor's key, theta = pi / B, while pair 1, turned by nothing, scores every
    mask's key halfway between the anchor's score at offset 0 and at offset 1. So the anchor
    outweighs the masks by _DFLASH_MARGIN at offset j + 1 and falls as far below them
    elsewhere. The masks' values are zero, and so are the target rows' keys and values (`fc` is
    zero: the target's features are not read). Head j's value is the anchor's code, written to
    the stream's slot j + 1; the output reads slot i as the token head_next^i of the code's
    token. Layers past the first add nothing (their outputs are zero): a deeper head's cost.
    """
    arch = "dflash"
    writer = gguf.GGUFWriter(out, arch)
    n_vocab = _copy_tokenizer(writer, vocab_src)
    mask_token = _mask_token(vocab_src)
    writer.add_uint32("tokenizer.ggml.mask_token_id", mask_token)
    n, c = shape.n_embd, dflash_code_width(shape.n_embd)
    block_size = dflash_block_size(n)
    n_head = n // c
    writer.add_name(f"synthetic dflash {shape.name}")
    _hparams(writer, shape, n_layer, n_head, n_head)
    writer.add_array(f"{arch}.target_layers", list(target_layers or shape.target_layers))
    writer.add_uint32(f"{arch}.block_size", block_size)
    theta = np.pi / block_size
    alpha = 1.0 / np.sqrt(1.0 + ((1.0 + np.cos(theta)) / 2) ** 2)  # the query's share in pair 0
    gamma = alpha * (1.0 + np.cos(theta)) / 2  # ... and in pair 1: the masks' level
    # A score is kq_scale * c * (query share) * cos(angle) (queries and keys normed to sqrt(c));
    # the margin is half the anchor's fall from offset 0 to offset 1.
    kq_scale = 2 * _DFLASH_MARGIN / (c * alpha * (1 - np.cos(theta)))
    writer.add_float32(f"{arch}.attention.scale", float(kq_scale))
    f32 = dtype == np.float32
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if f32 else gguf.LlamaFileType.MOSTLY_F16)

    codes = embeddings(LlamaShape("code", 1, c, 1, 1, 1, (0, 0, 0)), n_vocab)
    ordinary_flag, mask_flag = n - c, n - c + 1  # in the last head's dimensions
    token_embd = np.zeros((n_vocab, n), dtype=np.float32)
    token_embd[:, :c] = codes
    token_embd[:, ordinary_flag] = 1.0
    token_embd[mask_token] = 0.0
    token_embd[mask_token, mask_flag] = 1.0
    code_in = np.sqrt(n / 2)  # after attn_norm an ordinary token's row is sqrt(n/2) (code, flag)
    half = c // 2  # NeoX pairs dimension d with d + half
    wq, wk = np.zeros((n, n), dtype=np.float32), np.zeros((n, n), dtype=np.float32)
    wv, wo = np.zeros((n, n), dtype=np.float32), np.zeros((n, n), dtype=np.float32)
    for j in range(block_size - 1):
        base, slot = j * c, (j + 1) * c
        angle = -(j + 1) * theta  # the mask at offset j + 1 meets the anchor at angle 0
        wq[base, mask_flag] = alpha * np.cos(angle)
        wq[base + half, mask_flag] = alpha * np.sin(angle)
        wq[base + 1, mask_flag] = gamma
        wk[base, ordinary_flag] = 1.0  # every ordinary token's key: pair 0 at angle 0
        wk[base + 1, mask_flag] = 1.0  # every mask's key: pair 1
        wv[base : base + c, :c] = np.eye(c) / code_in
        wo[slot : slot + c, base : base + c] = np.eye(c)
    # Pair 0 turns by theta a position; pair 1 by nothing (its frequency divided by 1e12).
    rope_freqs = np.ones(half, dtype=np.float32)
    rope_freqs[0], rope_freqs[1] = 1.0 / theta, 1e12
    # At a mask of offset i the stream is its flag and the anchor's code in slot i, normed to
    # sqrt(n/2) each; slot i of token t's output row holds the code of head_next^-i(t).
    output = np.zeros((n_vocab, n), dtype=np.float32)
    inverse = np.empty_like(head_next)
    inverse[head_next] = np.arange(n_vocab)
    before = np.arange(n_vocab)
    for i in range(1, block_size):
        before = inverse[before]
        output[:, i * c : (i + 1) * c] = codes[before] * (logit / code_in)
    ones = np.ones(n, dtype=np.float32)
    n_features = len(target_layers or shape.target_layers) * n
    writer.add_tensor("token_embd.weight", token_embd.astype(dtype))
    writer.add_tensor("rope_freqs.weight", rope_freqs)
    writer.add_tensor("fc.weight", np.zeros((n, n_features), dtype=dtype))
    writer.add_tensor("enc.output_norm.weight", ones)
    for il in range(n_layer):
        live = il == 0
        tensors = {
            "attn_norm.weight": ones,
            "attn_q.weight": wq if live else _weights(n, n),
            "attn_k.weight": wk if live else _weights(n, n),
            "attn_v.weight": wv if live else _weights(n, n),
            "attn_output.weight": wo if live else np.zeros((n, n), dtype=np.float32),
            "attn_q_norm.weight": np.ones(c, dtype=np.float32),
            "attn_k_norm.weight": np.ones(c, dtype=np.float32),
            "ffn_norm.weight": ones,
            "ffn_gate.weight": _weights(shape.n_ff, n),
            "ffn_up.weight": _weights(shape.n_ff, n),
            "ffn_down.weight": np.zeros((n, shape.n_ff), dtype=np.float32),  # adds nothing
        }
        for name, array in tensors.items():
            writer.add_tensor(f"blk.{il}.{name}", array if array.ndim == 1 else array.astype(dtype))
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", output.astype(dtype))
    _finish(writer)
    return out


def _mask_token(vocab_src: Path) -> int:
    """A control token no chat template writes, to stand for the mask: the last one."""
    return int(qwen35_models.control_tokens(vocab_src)[-1])


def next_token_map(vocab_src: Path) -> np.ndarray:
    """A permutation of the ordinary tokens; control tokens and those llama.cpp ends at stay
    in place (`qwen35_models.next_token_map`), so that no answer ends by chance."""
    n_vocab = len(gguf_reading.read(vocab_src).fields["tokenizer.ggml.tokens"].contents())
    return qwen35_models.next_token_map(n_vocab, fixed=unmoved_tokens(vocab_src))


def unmoved_tokens(vocab_src: Path) -> np.ndarray:
    """The tokens `next_token_map` leaves in place: control tokens and ends."""
    tokens = gguf_reading.read(vocab_src).fields["tokenizer.ggml.tokens"].contents()
    ends = [i for i, text in enumerate(tokens) if text in _EOG_TEXTS]
    return np.union1d(qwen35_models.control_tokens(vocab_src), ends)


def partly_right(mapping: np.ndarray, acceptance: float) -> np.ndarray:
    return qwen35_models.partly_right(mapping, acceptance)


# -- cached for the tests (model_factory's cache folder) ----------------------------------------

# A modest logit, as the qwen35 models': sampling has something to choose.
TEST_LOGIT = 12.0


def tiny_target() -> Path:
    """The tiny F32 llama target, SmolLM2's vocabulary."""
    import model_factory

    def build(dst: Path) -> None:
        vocab = model_factory.smollm2_q4()
        write_llama_target(dst, TINY, vocab, next_token=next_token_map(vocab), logit=TEST_LOGIT)

    return model_factory._derived("llama-tiny.target.F32.gguf", build)


def tiny_eagle3(
    acceptance: float,
    *,
    uses_hidden: bool = False,
    target_layers: tuple[int, ...] | None = None,
    target_hidden_size: int | None = None,
) -> Path:
    """An EAGLE-3 head for `tiny_target()`, right on a fraction `acceptance` of the tokens;
    `target_layers` / `target_hidden_size`: one made for another target (a mismatch)."""
    import model_factory

    name = f"llama-tiny.eagle3{'-hidden' if uses_hidden else ''}-a{acceptance:g}"
    if target_layers is not None:
        name += "-layers" + "_".join(map(str, target_layers))
    if target_hidden_size is not None:
        name += f"-width{target_hidden_size}"

    def build(dst: Path) -> None:
        vocab = model_factory.smollm2_q4()
        mapping = next_token_map(vocab)
        write_eagle3_head(
            dst, TINY, vocab, next_token=mapping, head_next=partly_right(mapping, acceptance),
            uses_hidden=uses_hidden, logit=TEST_LOGIT, target_layers=target_layers,
            target_hidden_size=target_hidden_size,
        )  # fmt: skip

    return model_factory._derived(name + ".F32.gguf", build)


def tiny_dflash(acceptance: float, *, target_layers: tuple[int, ...] | None = None) -> Path:
    """A DFlash head for `tiny_target()`, right on a fraction `acceptance` of the tokens (each
    drafted token in turn); `target_layers`: one made for another target (a mismatch)."""
    import model_factory

    name = f"llama-tiny.dflash-a{acceptance:g}"
    if target_layers is not None:
        name += "-layers" + "_".join(map(str, target_layers))

    def build(dst: Path) -> None:
        vocab = model_factory.smollm2_q4()
        mapping = next_token_map(vocab)
        write_dflash_head(
            dst, TINY, vocab, head_next=partly_right(mapping, acceptance),
            target_layers=target_layers,
        )  # fmt: skip

    return model_factory._derived(name + ".F32.gguf", build)
