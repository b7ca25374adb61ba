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
import gguf_reading
import head_models
import llama_sdist
import model_factory
import numpy as np
import qwen35_models
from chat_templates import all_templates

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


def qwen_saying_hello() -> Path:
    """A tiny F32 llama with Qwen2's tokenizer and Qwen2.5's chat template (tools and all)
    that answers every chat prompt "Hello" and stops: its next-token permutation takes the
    template's last token (the newline after `<|im_start|>assistant`) to "Hello" and "Hello"
    to `<|im_end|>`, at a logit no sampling overrides. A stand-in where a test needs long
    prompts served as a real model serves them, fast, and answers that end (a coding agent's
    protocol), not what a model would say."""

    def build(dst: Path) -> None:
        vocab = vocab_file("qwen2")
        tokens = gguf_reading.read(vocab).fields["tokenizer.ggml.tokens"].contents()
        newline, hello, end = (tokens.index(text) for text in ("\u010a", "Hello", "<|im_end|>"))
        # As `head_models.next_token_map`, with the newline and "Hello" taken out of the
        # permutation of the rest for the cycle.
        fixed = np.union1d(head_models.unmoved_tokens(vocab), [newline, hello])
        mapping = qwen35_models.next_token_map(len(tokens), fixed=fixed)
        mapping[[newline, hello, end]] = [hello, end, newline]  # a cycle: still a permutation
        template = all_templates()["Qwen-Qwen2.5-7B-Instruct"]
        head_models.write_llama_target(
            dst, head_models.TINY, vocab, next_token=mapping, chat_template=template
        )

    return model_factory._derived("llama-tiny.qwen2-vocab.says-hello.F32.gguf", build)


def without_chat_template(src: Path) -> Path:
    """`src` (its tensors as they are) without `tokenizer.chat_template`: a draft that has no
    template of its own."""

    def build(dst: Path) -> None:
        reader = gguf_reading.read(src)
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
