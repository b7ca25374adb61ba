"""Exact mode: CPU kernels that give a token verified in a batch the logits it gets alone.

ggml-cpu picks some matrix kernels by the batch's width, so a token verified among k others gets
slightly different logits than the same token decoded alone, and a greedy or seeded answer can
part from the target alone's at a near-tie (research/RESULTS.md, "Issue 43, item 1"):

1. the tiled K-quant matmul (Q2_K..Q6_K, IQ*) takes batches of 8+ rows; switched off by the
   environment variable GGML_CPU_TILED_MM=0, which ggml reads ONCE per process (std::call_once,
   at the first matmul it plans): so exact mode is a choice for the whole process, made before
   its first model loads;
2. repacked weights (llama.cpp's extra buffer types) use a gemm for 4+ rows and a gemv below:
   the model is loaded without them (`use_extra_bufts = false`);
3. llamafile's sgemm takes F16/F32 matmuls of 2+ rows: compile-time only (GGML_LLAMAFILE=OFF),
   so a build that has it cannot make F16/F32/BF16 files exact; `problems` says so.

With 1 and 2 off, Q4_K_M, Q8_0 and Q4_0 files give bit-identical logits batch vs alone on the
CPU (flash attention on). GPU kernels are chosen by batch width too (CUDA: MMQ/MMVQ/cuBLAS);
nothing here covers them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from specllama.errors import UsageError

TILED_ENV = "GGML_CPU_TILED_MM"
# general.file_type values whose weights are floats (F32, F16, BF16): their matmuls go through
# llamafile's sgemm for 2+ rows when the build has it.
FLOAT_FILE_TYPES = frozenset({0, 1, 32})

# Whether the first model this process loaded ran with the tiled matmul on (None: none yet).
# ggml has fixed its choice from then on.
_tiled_at_first_load: bool | None = None


def tiled_matmul_on(environ: Mapping[str, str] | None = None) -> bool:
    """What ggml makes of GGML_CPU_TILED_MM: on unless set to something C's atoi reads as 0."""
    value = (os.environ if environ is None else environ).get(TILED_ENV)
    return value is None or _atoi(value) != 0


def _atoi(text: str) -> int:
    """C's atoi: the leading integer after blanks, 0 when there is none."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else 0


def use_batch_invariant_kernels() -> None:
    """Switch the tiled K-quant matmul off for this process, before llama.cpp reads the switch.

    Raises UsageError when a model already loaded in this process with it on: ggml read the
    switch then, and will not read it again."""
    if _tiled_at_first_load:
        raise UsageError(
            f"exact mode must be chosen before the first model loads: this process already "
            f"ran one with ggml's tiled matmul on ({TILED_ENV} is read once per process)",
            hint=f"start a new process with --exact, or with {TILED_ENV}=0 in its environment",
        )
    os.environ[TILED_ENV] = "0"  # putenv: C's getenv sees it


def note_model_load() -> None:
    """Record, at the first model load, how ggml will have chosen for this whole process."""
    global _tiled_at_first_load
    if _tiled_at_first_load is None:
        _tiled_at_first_load = tiled_matmul_on()


def problems(
    name: str,
    *,
    file_type: int | None,
    all_f32: bool,
    system_info: str,
    offloaded_to: str | None = None,
) -> list[str]:
    """One line for each reason exact mode cannot hold for this target here (none: it holds,
    as measured on the CPU). `offloaded_to`: where its offloaded layers run ("the GPU"), if
    anywhere."""
    lines = []
    float_weights = all_f32 or file_type in FLOAT_FILE_TYPES
    if float_weights and "LLAMAFILE = 1" in system_info:
        lines.append(
            f"--exact cannot hold for {name}: its F16/F32 weights go through llamafile's sgemm "
            "for batches and ggml's own dot products alone (this build has LLAMAFILE = 1); "
            "answers may still part from the target alone's (a build with -DGGML_LLAMAFILE=OFF "
            "is exact here, as are Q4_K_M/Q8_0/Q4_0 files)"
        )
    if offloaded_to:
        lines.append(
            f"--exact covers this process's CPU kernels only: {name}'s layers on "
            f"{offloaded_to} run kernels picked by batch width there (CUDA: MMQ, MMVQ, cuBLAS), "
            "not made to agree (--gpu-layers 0 keeps the target here, on the CPU)"
        )
    return lines
