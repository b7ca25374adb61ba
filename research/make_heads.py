#!/usr/bin/env python3
"""Issue 34: a synthetic target and its separate draft head, the head's first-token acceptance
known by construction (tests/head_models.py says how). Prints one JSON line
{"target": PATH, "head": PATH}.

    python research/make_heads.py OUT --kind eagle3 --accept 0.8 --size tiny
    python research/make_heads.py OUT --kind dflash --accept 0.8 --size 1.5b   # F16
    python research/make_heads.py OUT --kind eagle3 --accept 0.8 --size 1.5b   # F16, 3.2 GB
    python research/make_heads.py OUT --size 8b --vocab qwen.gguf              # F16, ~17 GB
    python research/make_heads.py OUT --kind eagle3 --accept 1 --uses-hidden   # pairing check

The vocabulary (tokenizer and size) is SmolLM2's, the tests' model (`--vocab GGUF` for another).
The target is a llama; an EAGLE-3 head reads three of its layers' inputs, a DFlash head guesses
a block of tokens at once (as long as the target's width allows: 7 at tiny, 16 at 1.5b; its
`--layers` are decoders past the first that add nothing, for a deeper head's cost). Files
already written are reused (their names carry the kind, size, acceptance and construction).

A Gemma 4 assistant (`--kind gemma4-assistant`) comes with a gemma4 target of its own
(tests/gemma4_models.py: sliding and full layers, shared KV layers, per-layer embeddings at tiny,
logit softcapping): the assistant reads that target's last row and its KV cache.
`--construction` says what it drafts from: the token (default), the target's row (as
`--uses-hidden`) or the target's KV cache ("kv"); llama.cpp runs the pair as `-md HEAD
--spec-type draft-mtp`.

    python research/make_heads.py OUT --kind gemma4-assistant --accept 0.5 --size tiny
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # head_models, model_factory

import gemma4_models  # noqa: E402
import head_models  # noqa: E402

KINDS = ("eagle3", "dflash", "gemma4-assistant")


def write_pair(
    out: Path,
    *,
    accept: float,
    kind: str = "eagle3",
    size: str = "tiny",
    uses_hidden: bool = False,
    layers: int = 1,
    vocab: Path | None = None,
    construction: str | None = None,
) -> tuple[Path, Path]:
    """(target, head) under `out`, written unless already there."""
    if vocab is None:
        import model_factory

        vocab = model_factory.smollm2_q4()
    if kind == "gemma4-assistant":
        construction = construction or ("hidden" if uses_hidden else "token")
        return write_gemma4_pair(out, accept=accept, size=size, construction=construction,
                                 vocab=vocab)  # fmt: skip
    shape = head_models.SHAPES[size]
    dtype = np.float32 if shape is head_models.TINY else np.float16
    suffix = "F32" if dtype == np.float32 else "F16"
    out.mkdir(parents=True, exist_ok=True)
    mapping = head_models.next_token_map(vocab)
    head_next = head_models.partly_right(mapping, accept)
    target = out / f"llama-{size}.target.{suffix}.gguf"
    construction = (
        f"dflash-l{layers}"
        if kind == "dflash"
        else (f"eagle3-{'hidden' if uses_hidden else 'token'}")
    )
    head = out / f"llama-{size}.{construction}-a{accept:g}.{suffix}.gguf"
    if not target.exists():
        partial = target.with_suffix(".partial")
        head_models.write_llama_target(partial, shape, vocab, next_token=mapping, dtype=dtype)
        partial.replace(target)
    if not head.exists():
        partial = head.with_suffix(".partial")
        if kind == "dflash":
            head_models.write_dflash_head(
                partial, shape, vocab, head_next=head_next, n_layer=layers, dtype=dtype
            )
        else:
            head_models.write_eagle3_head(
                partial, shape, vocab, next_token=mapping, head_next=head_next,
                uses_hidden=uses_hidden, dtype=dtype,
            )  # fmt: skip
        partial.replace(head)
    return target, head


def write_gemma4_pair(
    out: Path, *, accept: float, size: str, construction: str, vocab: Path
) -> tuple[Path, Path]:
    """A gemma4 target and its assistant under `out`, written unless already there."""
    if size not in gemma4_models.SHAPES:
        raise SystemExit(f"no gemma4 shape {size!r}: {', '.join(gemma4_models.SHAPES)}")
    shape = gemma4_models.SHAPES[size]
    dtype = np.float32 if shape is gemma4_models.TINY else np.float16
    suffix = "F32" if dtype == np.float32 else "F16"
    out.mkdir(parents=True, exist_ok=True)
    mapping = head_models.next_token_map(vocab)
    target = out / f"gemma4-{size}.target.{suffix}.gguf"
    head = out / f"gemma4-{size}.assistant-{construction}-a{accept:g}.{suffix}.gguf"
    if not target.exists():
        partial = target.with_suffix(".partial")
        gemma4_models.write_gemma4_target(partial, shape, vocab, next_token=mapping, dtype=dtype)
        partial.replace(target)
    if not head.exists():
        partial = head.with_suffix(".partial")
        gemma4_models.write_gemma4_assistant(
            partial, shape, vocab, next_token=mapping,
            head_next=head_models.partly_right(mapping, accept), construction=construction,
            dtype=dtype,
        )  # fmt: skip
        partial.replace(head)
    return target, head


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--kind", choices=KINDS, default="eagle3")
    parser.add_argument("--accept", type=float, default=0.8)
    parser.add_argument("--size", choices=sorted(head_models.SHAPES), default="tiny")
    parser.add_argument("--uses-hidden", action="store_true", help="the EAGLE-3 pairing check")
    parser.add_argument(
        "--construction",
        choices=gemma4_models.CONSTRUCTIONS,
        help="what a Gemma 4 assistant drafts from (default: the token)",
    )
    parser.add_argument("--layers", type=int, default=1, help="a DFlash head's decoder layers")
    parser.add_argument("--vocab", type=Path, help="a GGUF to take the tokenizer from")
    args = parser.parse_args()
    target, head = write_pair(
        args.out, accept=args.accept, kind=args.kind, size=args.size,
        uses_hidden=args.uses_hidden, layers=args.layers, vocab=args.vocab,
        construction=args.construction,
    )  # fmt: skip
    print(json.dumps({"target": str(target), "head": str(head)}))


if __name__ == "__main__":
    main()
