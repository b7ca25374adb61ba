"""Synthetic Qwen2-shaped GGUF models for measuring costs on a machine the real ones can't reach.

The weights are random (tiled from one random block: values don't change the cost of a matrix
product), the tokenizer is Qwen2.5's real one (copied from a vocabulary-only GGUF), so the
shapes, vocabulary and kernels are those of the real pair. Acceptance is meaningless here:
measure costs, and combine them with acceptance measured on the real models.

With `--acceptance A ...` the pair has a controlled acceptance instead (issue 9's recipe): each
layer's attention output and FFN down projections are zero, so the residual stream stays the
token's embedding while every matrix product still runs at full cost; embeddings are random unit
vectors, and each output row is (a multiple of) the embedding of the token that should come
before it, so the greedy next token is a fixed permutation of the current one, with a wide
margin. One target, and one draft per A that predicts the target's token for a fraction A of
the tokens (a cyclic shift among the others, so it is right nowhere else).

    python research/gpu/make_models.py --vocab qwen-vocab.gguf --out models/ [--small]
    python research/gpu/make_models.py --vocab qwen-vocab.gguf --out models/ --acceptance 0.95 0.8
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


# Qwen2.5's control tokens start here: the permutation leaves them alone, so that no answer ends.
FIRST_SPECIAL = 151643
# The greedy token's logit; others are about N(0, (LOGIT / sqrt(n_embd))^2), far below.
LOGIT = 30.0


def _weights(*shape: int) -> np.ndarray:
    return np.resize(_BLOCK, shape)


def next_token_maps(
    n_vocab: int, acceptance: list[float], seed: int = 0
) -> tuple[np.ndarray, dict[float, np.ndarray]]:
    """The target's next token of every token (a random permutation of the ordinary tokens), and
    for each acceptance a draft's: the target's on a fraction a of the tokens, a cyclic shift of
    the target's among the rest (so still a permutation, and wrong on each of them)."""
    rng = np.random.default_rng(seed)
    ordinary = min(n_vocab, FIRST_SPECIAL)
    target = np.arange(n_vocab)
    target[:ordinary] = rng.permutation(ordinary)
    drafts = {}
    for a in acceptance:
        wrong = np.flatnonzero(rng.random(ordinary) >= a)
        draft = target.copy()
        draft[wrong] = target[np.roll(wrong, 1)]
        drafts[a] = draft
    return target, drafts


def _controlled(n_vocab: int, n_embd: int, next_token: np.ndarray, seed: int):
    """(token embeddings, output rows) that make `next_token[t]` the greedy token after t."""
    rng = np.random.default_rng(seed)
    embeddings = rng.standard_normal((n_vocab, n_embd), dtype=np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    # After RMS norm the stream is sqrt(n_embd) * embedding[t]; the output row of token v is
    # the embedding of the token before it, scaled so that its logit is LOGIT.
    before = np.empty_like(next_token)
    before[next_token] = np.arange(n_vocab)
    output = embeddings[before] * (LOGIT / np.sqrt(n_embd))
    return embeddings.astype(np.float16), output.astype(np.float16)


def _into_stream(controlled: bool, *shape: int) -> np.ndarray:
    """A projection into the residual stream: zero in a controlled model (the block then adds
    nothing, at full cost), random otherwise."""
    return np.zeros(shape, dtype=np.float16) if controlled else _weights(*shape)


def write_model(
    shape: Shape, vocab_path: Path, out: Path, next_token: np.ndarray | None = None
) -> Path:
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
    controlled = next_token is not None
    if controlled:
        embeddings, output = _controlled(n_vocab, shape.n_embd, next_token, seed=shape.n_embd)
    writer.add_tensor(
        "token_embd.weight", embeddings if controlled else _weights(n_vocab, shape.n_embd)
    )
    for i in range(shape.n_layer):
        block = f"blk.{i}"
        writer.add_tensor(f"{block}.attn_norm.weight", ones)
        writer.add_tensor(f"{block}.attn_q.weight", _weights(shape.n_embd, shape.n_embd))
        writer.add_tensor(f"{block}.attn_q.bias", np.zeros(shape.n_embd, dtype=np.float32))
        writer.add_tensor(f"{block}.attn_k.weight", _weights(kv, shape.n_embd))
        writer.add_tensor(f"{block}.attn_k.bias", np.zeros(kv, dtype=np.float32))
        writer.add_tensor(f"{block}.attn_v.weight", _weights(kv, shape.n_embd))
        writer.add_tensor(f"{block}.attn_v.bias", np.zeros(kv, dtype=np.float32))
        writer.add_tensor(
            f"{block}.attn_output.weight", _into_stream(controlled, shape.n_embd, shape.n_embd)
        )
        writer.add_tensor(f"{block}.ffn_norm.weight", ones)
        writer.add_tensor(f"{block}.ffn_gate.weight", _weights(shape.n_ff, shape.n_embd))
        writer.add_tensor(f"{block}.ffn_up.weight", _weights(shape.n_ff, shape.n_embd))
        writer.add_tensor(
            f"{block}.ffn_down.weight", _into_stream(controlled, shape.n_embd, shape.n_ff)
        )
    writer.add_tensor("output_norm.weight", ones)
    if controlled:  # its own output rows, tied or not in the real model (same cost)
        writer.add_tensor("output.weight", output)
    elif not shape.tied_output:
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
    parser.add_argument("--acceptance", type=float, nargs="+", help="controlled-acceptance pair")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    target, draft = (TARGET_SMALL, DRAFT_SMALL) if args.small else (TARGET_7B, DRAFT_05B)
    if not args.acceptance:
        written = [
            write_model(s, args.vocab, args.out / f"{s.name}.f16.gguf") for s in (target, draft)
        ]
    else:
        n_vocab = len(gguf.GGUFReader(args.vocab).fields["tokenizer.ggml.tokens"].contents())
        target_map, draft_maps = next_token_maps(n_vocab, args.acceptance)
        written = [
            write_model(target, args.vocab, args.out / f"{target.name}.f16.gguf", target_map)
        ]
        for a, mapping in draft_maps.items():
            out = args.out / f"{draft.name}-a{a:g}.f16.gguf"
            written.append(write_model(draft, args.vocab, out, mapping))
    for path in written:
        print(f"{path} {path.stat().st_size / 1e9:.2f} GB", flush=True)


if __name__ == "__main__":
    main()
