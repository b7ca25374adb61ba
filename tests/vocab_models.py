"""Tiny models with other real tokenizers: the vocabulary-only GGUFs llama.cpp tests its
tokenizers with (`vendor/llama.cpp/models/ggml-vocab-*.gguf` in the llama-cpp-python sdist of
the version installed here, fetched once from the package index), each under a tiny synthetic
llama (`head_models.write_llama_target`: its greedy text follows a fixed permutation of the
tokens, gibberish in every script the vocabulary has). Cheap drafts and targets whose
vocabulary really differs from SmolLM2's: Qwen2's byte-level BPE, Llama 2's SentencePiece.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import head_models
import llama_sdist
import model_factory

MEMBER = "vendor/llama.cpp/models/ggml-vocab-{name}.gguf"
NAMES = ("qwen2", "llama-spm")


def vocab_file(name: str) -> Path:
    """`ggml-vocab-NAME.gguf`, unpacked on first use (with the others of `NAMES`)."""
    wanted = {MEMBER.format(name=each) for each in NAMES}
    folder = llama_sdist.unpacked(f"llama-vocabs-{llama_sdist.pinned()}", wanted.__contains__)
    return folder / f"ggml-vocab-{name}.gguf"


def tiny_with_vocab(name: str) -> Path:
    """A tiny F32 llama with the tokenizer of `ggml-vocab-NAME.gguf`."""

    def build(dst: Path) -> None:
        vocab = vocab_file(name)
        head_models.write_llama_target(
            dst,
            head_models.TINY,
            vocab,
            next_token=head_models.next_token_map(vocab),
            logit=head_models.TEST_LOGIT,
        )

    return model_factory._derived(f"llama-tiny.{name}-vocab.F32.gguf", build)


def without_chat_template(src: Path) -> Path:
    """`src` (its tensors as they are) without `tokenizer.chat_template`: a draft that has no
    template of its own."""

    def build(dst: Path) -> None:
        reader = gguf.GGUFReader(src)
        arch = reader.fields["general.architecture"].contents()
        writer = gguf.GGUFWriter(dst, arch)
        for field in reader.fields.values():
            skipped = ("general.architecture", "tokenizer.chat_template")
            if field.name.startswith("GGUF.") or field.name in skipped:
                continue
            sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub_type)
        for tensor in reader.tensors:
            writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    return model_factory._derived(f"{src.stem}.no-template.gguf", build)
