"""Synthetic qwen35 (Qwen3.5/3.6 architecture) GGUFs with an MTP draft head, behaviour known by
construction. No real MTP GGUF can reach this machine; these load and run in llama.cpp as the
real ones do (gated delta-net recurrent layers beside attention, one nextn block).

- The trunk adds nothing: every block's projection into the residual stream (ssm_out,
  attn_output, ffn_down) is zero, so the stream stays the token's embedding while every matrix
  product still runs at full cost. Embeddings are random unit vectors; the output row of token
  v is the embedding of the token before it, so the greedy next token is `next_token[x]`, a
  fixed permutation, with a wide margin ("bigram" model).
- The MTP block reads (token x[p+1], the target's hidden row h[p]) and predicts x[p+2]. Its
  eh_proj keeps only the token half (`uses_hidden=False`): the head then maps x[p+1] to
  `mtp_next[x[p+1]]`, which is `next_token` on a fraction a of the tokens and a cyclic shift
  of it on the rest (wrong there), so a drafted token is accepted with probability a.
- `uses_hidden=True` keeps only the hidden half: the head sees h[p], the embedding of x[p], and
  maps it to next(next(x[p])). A draft is right only when the hidden row paired with a token is
  the target's row of the token before it: an off-by-one in pairing loses every draft. (Its own
  hidden row then names x[p] again, so only the first token of each draft is right.)
- At least one layer is recurrent: an all-attention qwen35 aborts in its first decode.

    python tests/qwen35_models.py --vocab some.gguf --out DIR --shape 1.5b --acceptance 0.8
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import gguf
import gguf_reading
import numpy as np

ARCH = "qwen35"
_BLOCK = np.random.default_rng(0).normal(0.0, 0.02, size=1 << 20).astype(np.float32)


@dataclass(frozen=True)
class Shape:
    name: str
    n_layer: int  # trunk layers; every `interval`-th is full attention, the rest recurrent
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    ssm_state: int  # head size of the delta net (keys and values)
    ssm_k_heads: int
    ssm_v_heads: int
    interval: int = 4


TINY = Shape("tiny", 2, 64, 128, 2, 1, 32, 16, 2, 2, interval=2)
# Qwen3.5-2B's trunk (config.json): the 1.5B-class cost the benchmark needs.
SHAPE_2B = Shape("2b", 24, 2048, 6144, 8, 2, 256, 128, 16, 16)
# Qwen3.5-9B's trunk, for the GPU run (7B-class costs).
SHAPE_9B = Shape("9b", 32, 4096, 12288, 16, 4, 256, 128, 16, 32)
SHAPES = {s.name: s for s in (TINY, SHAPE_2B, SHAPE_9B)}


def control_tokens(vocab_src: Path) -> np.ndarray:
    """The ids the tokenizer marks as control tokens (end of turn, end of text, ...)."""
    types = gguf_reading.read(vocab_src).fields["tokenizer.ggml.token_type"].contents()
    return np.flatnonzero(np.asarray(types) == int(gguf.TokenType.CONTROL))


def next_token_map(n_vocab: int, seed: int = 0, fixed: np.ndarray | None = None) -> np.ndarray:
    """A random permutation of the ordinary tokens; the `fixed` ids (control tokens) map to
    themselves and nothing else maps to them, so that no answer ends by chance."""
    rng = np.random.default_rng(seed)
    mapping = np.arange(n_vocab)
    ordinary = np.setdiff1d(mapping, fixed if fixed is not None else [])
    mapping[ordinary] = rng.permutation(ordinary)
    return mapping


def partly_right(mapping: np.ndarray, acceptance: float, seed: int = 1) -> np.ndarray:
    """`mapping` on a fraction `acceptance` of the tokens it moves, a cyclic shift of it among
    the rest (still a permutation, and wrong on each of them)."""
    rng = np.random.default_rng(seed)
    moved = np.flatnonzero(mapping != np.arange(len(mapping)))
    wrong = moved[rng.random(len(moved)) >= acceptance]
    out = mapping.copy()
    out[wrong] = mapping[np.roll(wrong, 1)]
    return out


def _weights(*shape: int) -> np.ndarray:
    return np.resize(_BLOCK, shape)


def _head(embeddings: np.ndarray, maps_to: np.ndarray, logit: float) -> np.ndarray:
    """Output rows that make `maps_to[t]` the greedy token after a stream of embedding[t] (after
    RMS norm: sqrt(n_embd) * embedding[t]), with logit `logit`."""
    before = np.empty_like(maps_to)
    before[maps_to] = np.arange(len(maps_to))
    return embeddings[before] * (logit / np.sqrt(embeddings.shape[1]))


def write_qwen35(
    out: Path,
    shape: Shape,
    vocab_src: Path,
    *,
    next_token: np.ndarray,
    mtp_next: np.ndarray | None,
    uses_hidden: bool = False,
    logit: float = 30.0,
    dtype: type = np.float32,
) -> Path:
    """Write the model; `mtp_next` None writes no MTP block. Tokenizer from `vocab_src`."""
    reader = gguf_reading.read(vocab_src)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    assert len(next_token) == n_vocab
    writer = gguf.GGUFWriter(out, ARCH)
    for field in reader.fields.values():
        if field.name.startswith("tokenizer."):
            sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    _write_hparams(writer, shape, n_nextn=0 if mtp_next is None else 1)
    f32 = dtype == np.float32
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if f32 else gguf.LlamaFileType.MOSTLY_F16)

    rng = np.random.default_rng(shape.n_embd)
    embeddings = rng.standard_normal((n_vocab, shape.n_embd), dtype=np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    ones = np.ones(shape.n_embd, dtype=np.float32)

    def matrix(array: np.ndarray) -> np.ndarray:
        return array.astype(dtype)

    def stored(name: str, array: np.ndarray) -> np.ndarray:
        """Vectors and the delta net's conv kernel stay F32 (llama.cpp's ssm_conv takes
        nothing else, and its converter keeps it so); matrices take `dtype`."""
        return array if array.ndim == 1 or name.endswith("ssm_conv1d.weight") else matrix(array)

    writer.add_tensor("token_embd.weight", matrix(embeddings))
    for il in range(shape.n_layer):
        recurrent = (il + 1) % shape.interval != 0
        tensors = _recurrent_block(shape) if recurrent else _attention_block(shape)
        for name, array in tensors.items():
            writer.add_tensor(f"blk.{il}.{name}", stored(name, array))
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", matrix(_head(embeddings, next_token, logit)))
    if mtp_next is not None:
        il = shape.n_layer
        tensors = _attention_block(shape)
        eye = np.eye(shape.n_embd, dtype=np.float32)
        zero = np.zeros_like(eye)
        # eh_proj maps concat(enorm(token embedding), hnorm(hidden row)) back to n_embd.
        tensors["nextn.eh_proj.weight"] = np.hstack([zero, eye] if uses_hidden else [eye, zero])
        tensors["nextn.enorm.weight"] = ones
        tensors["nextn.hnorm.weight"] = ones
        tensors["nextn.shared_head_norm.weight"] = ones
        head_map = next_token[mtp_next] if uses_hidden else mtp_next
        tensors["nextn.shared_head_head.weight"] = _head(embeddings, head_map, logit)
        for name, array in tensors.items():
            writer.add_tensor(f"blk.{il}.{name}", stored(name, array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _write_hparams(writer: gguf.GGUFWriter, shape: Shape, n_nextn: int) -> None:
    writer.add_name(f"synthetic qwen35 {shape.name}")
    writer.add_context_length(32768)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer + n_nextn)  # the nextn blocks follow the trunk
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_key_length(shape.head_dim)
    writer.add_value_length(shape.head_dim)
    writer.add_rope_dimension_count(shape.head_dim // 4)
    # MRoPE sections sum to half the rotated dimensions (text only uses the first).
    sections = [shape.head_dim // 8, 0, 0, 0]
    writer.add_array(f"{ARCH}.rope.dimension_sections", sections)
    writer.add_rope_freq_base(10_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_uint32(f"{ARCH}.ssm.conv_kernel", 4)
    writer.add_uint32(f"{ARCH}.ssm.inner_size", shape.ssm_state * shape.ssm_v_heads)
    writer.add_uint32(f"{ARCH}.ssm.state_size", shape.ssm_state)
    writer.add_uint32(f"{ARCH}.ssm.time_step_rank", shape.ssm_v_heads)
    writer.add_uint32(f"{ARCH}.ssm.group_count", shape.ssm_k_heads)
    writer.add_uint32(f"{ARCH}.full_attention_interval", shape.interval)
    writer.add_uint32(f"{ARCH}.nextn_predict_layers", n_nextn)


def _attention_block(shape: Shape) -> dict[str, np.ndarray]:
    n, kv = shape.n_embd, shape.n_head_kv * shape.head_dim
    q = shape.n_head * shape.head_dim
    return {
        "attn_norm.weight": np.ones(n, dtype=np.float32),
        "post_attention_norm.weight": np.ones(n, dtype=np.float32),
        "attn_q.weight": _weights(2 * q, n),  # query and gate
        "attn_k.weight": _weights(kv, n),
        "attn_v.weight": _weights(kv, n),
        "attn_output.weight": np.zeros((n, q), dtype=np.float32),  # adds nothing
        "attn_q_norm.weight": np.ones(shape.head_dim, dtype=np.float32),
        "attn_k_norm.weight": np.ones(shape.head_dim, dtype=np.float32),
        **_ffn(shape),
    }


def _recurrent_block(shape: Shape) -> dict[str, np.ndarray]:
    n = shape.n_embd
    key_dim = shape.ssm_state * shape.ssm_k_heads
    value_dim = shape.ssm_state * shape.ssm_v_heads
    return {
        "attn_norm.weight": np.ones(n, dtype=np.float32),
        "post_attention_norm.weight": np.ones(n, dtype=np.float32),
        "attn_qkv.weight": _weights(2 * key_dim + value_dim, n),
        "attn_gate.weight": _weights(value_dim, n),
        "ssm_conv1d.weight": _weights(2 * key_dim + value_dim, 4),
        "ssm_dt.bias": np.zeros(shape.ssm_v_heads, dtype=np.float32),
        "ssm_a": -np.ones(shape.ssm_v_heads, dtype=np.float32),
        "ssm_beta.weight": _weights(shape.ssm_v_heads, n),
        "ssm_alpha.weight": _weights(shape.ssm_v_heads, n),
        "ssm_norm.weight": np.ones(shape.ssm_state, dtype=np.float32),
        "ssm_out.weight": np.zeros((n, value_dim), dtype=np.float32),  # adds nothing
        **_ffn(shape),
    }


def _ffn(shape: Shape) -> dict[str, np.ndarray]:
    return {
        "ffn_gate.weight": _weights(shape.n_ff, shape.n_embd),
        "ffn_up.weight": _weights(shape.n_ff, shape.n_embd),
        "ffn_down.weight": np.zeros((shape.n_embd, shape.n_ff), dtype=np.float32),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=Path, required=True, help="a GGUF to take the tokenizer")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="2b")
    parser.add_argument("--acceptance", type=float, nargs="+", default=[0.8])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shape = SHAPES[args.shape]
    n_vocab = len(gguf_reading.read(args.vocab).fields["tokenizer.ggml.tokens"].contents())
    mapping = next_token_map(n_vocab, fixed=control_tokens(args.vocab))
    dtype = np.float32 if shape is TINY else np.float16
    for a in args.acceptance:
        path = args.out / f"qwen35-{shape.name}-mtp-a{a:g}.gguf"
        write_qwen35(
            path, shape, args.vocab, next_token=mapping, mtp_next=partly_right(mapping, a),
            dtype=dtype,
        )  # fmt: skip
        print(f"{path} {path.stat().st_size / 1e9:.2f} GB", flush=True)


if __name__ == "__main__":
    main()
