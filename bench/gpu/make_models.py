"""Synthetic Qwen2-shaped GGUF models for measuring costs on a machine the real ones can't reach.

The weights are random (tiled from one random block: values don't change the cost of a matrix
product), the tokenizer is Qwen2.5's real one (copied from a vocabulary-only GGUF), so the
shapes, vocabulary and kernels are those of the real pair. Acceptance is meaningless here:
measure costs, and combine them with acceptance measured on the real models.

    python bench/gpu/make_models.py --vocab qwen-vocab.gguf --out models/ [--small]
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np


@dataclass(frozen=True)
class Shape:
    name: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    tied_output: bool


# Qwen2.5-7B-Instruct and Qwen2.5-0.5B-Instruct (config.json of each).
TARGET_7B = Shape("target-7b", 28, 3584, 18944, 28, 4, tied_output=False)
DRAFT_05B = Shape("draft-0.5b", 24, 896, 4864, 14, 2, tied_output=True)
# Tiny shapes to check the scripts themselves on a CPU.
TARGET_SMALL = Shape("target-small", 4, 256, 512, 4, 2, tied_output=False)
DRAFT_SMALL = Shape("draft-small", 2, 128, 256, 2, 1, tied_output=True)

_BLOCK = np.random.default_rng(0).normal(0.0, 0.02, size=1 << 20).astype(np.float16)


def _weights(*shape: int) -> np.ndarray:
    return np.resize(_BLOCK, shape)


def write_model(shape: Shape, vocab_path: Path, out: Path) -> Path:
    reader = gguf.GGUFReader(vocab_path)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].contents())
    writer = gguf.GGUFWriter(out, "qwen2")
    for field in reader.fields.values():
        if field.name.startswith("tokenizer."):
            sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    writer.add_name(shape.name)
    writer.add_context_length(32768)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    head_dim = shape.n_embd // shape.n_head
    kv = shape.n_head_kv * head_dim
    ones = np.ones(shape.n_embd, dtype=np.float32)
    writer.add_tensor("token_embd.weight", _weights(n_vocab, shape.n_embd))
    for i in range(shape.n_layer):
        block = f"blk.{i}"
        writer.add_tensor(f"{block}.attn_norm.weight", ones)
        writer.add_tensor(f"{block}.attn_q.weight", _weights(shape.n_embd, shape.n_embd))
        writer.add_tensor(f"{block}.attn_q.bias", np.zeros(shape.n_embd, dtype=np.float32))
        writer.add_tensor(f"{block}.attn_k.weight", _weights(kv, shape.n_embd))
        writer.add_tensor(f"{block}.attn_k.bias", np.zeros(kv, dtype=np.float32))
        writer.add_tensor(f"{block}.attn_v.weight", _weights(kv, shape.n_embd))
        writer.add_tensor(f"{block}.attn_v.bias", np.zeros(kv, dtype=np.float32))
        writer.add_tensor(f"{block}.attn_output.weight", _weights(shape.n_embd, shape.n_embd))
        writer.add_tensor(f"{block}.ffn_norm.weight", ones)
        writer.add_tensor(f"{block}.ffn_gate.weight", _weights(shape.n_ff, shape.n_embd))
        writer.add_tensor(f"{block}.ffn_up.weight", _weights(shape.n_ff, shape.n_embd))
        writer.add_tensor(f"{block}.ffn_down.weight", _weights(shape.n_embd, shape.n_ff))
    writer.add_tensor("output_norm.weight", ones)
    if not shape.tied_output:
        writer.add_tensor("output.weight", _weights(n_vocab, shape.n_embd))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--small", action="store_true", help="tiny shapes, to test the script")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    shapes = (TARGET_SMALL, DRAFT_SMALL) if args.small else (TARGET_7B, DRAFT_05B)
    for shape in shapes:
        path = write_model(shape, args.vocab, args.out / f"{shape.name}.f16.gguf")
        print(f"{path} {path.stat().st_size / 1e9:.2f} GB", flush=True)


if __name__ == "__main__":
    main()
