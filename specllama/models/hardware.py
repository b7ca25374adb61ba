"""This machine: RAM and cores (psutil), GPU memory where it can be known, and fit checks.

What the llama.cpp build can do (GPU offload, version) comes from `library.build_facts()`, passed
in as `build` (any object with `.version`, `.gpu_offload`, `.system_info`), so that only llama/
imports llama_cpp and everything here is testable with a stand-in.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from specllama.llama.amx import AMX_TYPES, CRASHES, AmxReport
from specllama.llama.gguf_info import tensor_types
from specllama.models import hub
from specllama.models.catalog import SELF_DRAFTERS, Catalog, ModelRef, user_catalog_path

# Beyond the weights, a model needs its KV cache and compute buffers: at a few thousand tokens of
# context that is roughly a tenth of the weights plus a fixed amount.
_OVERHEAD_FRACTION = 0.10
_OVERHEAD_FIXED = 256 << 20
# Leave room for the OS and other programs; RAM "available" moves too much to base a table on.
_RAM_SHARE = 0.80
# Apple Silicon: Metal may use about three quarters of the unified memory.
_UNIFIED_SHARE = 0.75

# Fit verdicts, best first.
FIT_GPU = "gpu"  # everything in GPU memory
FIT_SPLIT = "gpu+cpu"  # GPU memory plus RAM (some layers on the CPU)
FIT_CPU = "cpu"  # in RAM, on the CPU
FIT_RPC = "rpc"  # with --rpc: the target on the workers (and here if need be), the draft here
FIT_NO = "no"
FIT_UNKNOWN = "?"  # a model's size is not known


class BuildInfo(Protocol):
    version: str
    gpu_offload: bool
    system_info: str
    rpc: bool


@dataclass(frozen=True)
class Gpu:
    name: str
    total_bytes: int
    free_bytes: int | None


@dataclass(frozen=True)
class Machine:
    ram_total: int
    ram_available: int
    physical_cores: int
    logical_cores: int
    gpus: tuple[Gpu, ...] = ()
    unified_memory: bool = False  # Apple Silicon: the GPU uses the RAM

    @property
    def vram_total(self) -> int | None:
        return sum(g.total_bytes for g in self.gpus) if self.gpus else None


def probe_machine(nvidia_smi: Callable[[], tuple[Gpu, ...]] | None = None) -> Machine:
    memory = psutil.virtual_memory()
    logical = psutil.cpu_count() or 1
    return Machine(
        ram_total=memory.total,
        ram_available=memory.available,
        physical_cores=psutil.cpu_count(logical=False) or logical,
        logical_cores=logical,
        gpus=(nvidia_smi or query_nvidia_gpus)(),
        unified_memory=sys.platform == "darwin" and platform.machine() == "arm64",
    )


def query_nvidia_gpus(timeout_s: float = 5.0) -> tuple[Gpu, ...]:
    """NVIDIA GPUs and their memory from nvidia-smi; () when there is none or it fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    query = "--query-gpu=name,memory.total,memory.free"
    try:
        out = subprocess.run(
            [exe, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return parse_nvidia_smi(out)


def parse_nvidia_smi(out: str) -> tuple[Gpu, ...]:
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            total = int(float(parts[1])) << 20  # MiB
        except ValueError:
            continue
        try:
            free: int | None = int(float(parts[2])) << 20
        except ValueError:
            free = None
        gpus.append(Gpu(parts[0], total, free))
    return tuple(gpus)


def gpu_backend(build: BuildInfo) -> str:
    """Which GPU backend this build offloads to, from llama.cpp's system info: CUDA, Metal..."""
    if not build.gpu_offload:
        return "none"
    known = ("CUDA", "Metal", "Vulkan", "ROCm", "HIP", "SYCL", "OpenCL", "CANN", "MUSA")
    sections = [part.split(":")[0].strip() for part in build.system_info.split("|")]
    found = [name for name in known if any(s.upper() == name.upper() for s in sections)]
    return ", ".join(found) or "yes (backend not named)"


def default_gpu_layers(build: BuildInfo) -> int:
    """-1 (all layers) when the build can offload, else 0: what --gpu-layers means by default."""
    return -1 if build.gpu_offload else 0


def reinstall_hint(machine: Machine | None = None) -> str:
    """How to get a GPU build of llama-cpp-python on this kind of machine (with RPC, which the
    README's install has: a rebuild should not lose --rpc and `specllama worker`)."""
    pip = "pip install --force-reinstall --no-cache-dir llama-cpp-python"
    if sys.platform == "darwin":
        return f'CMAKE_ARGS="-DGGML_METAL=on -DGGML_RPC=ON" {pip}'
    cuda = f'CMAKE_ARGS="-DGGML_CUDA=on -DGGML_RPC=ON" {pip}'
    if machine is not None and machine.gpus:
        return cuda + "  (needs the CUDA toolkit, nvcc)"
    return cuda + "  (NVIDIA; for other GPUs: -DGGML_VULKAN=on)"


def rpc_reinstall_hint(build: BuildInfo) -> str:
    """The rebuild that adds RPC and keeps the GPU backend this build has."""
    backend = gpu_backend(build)
    extra = {"CUDA": "-DGGML_CUDA=on ", "Metal": "-DGGML_METAL=on "}.get(backend, "")
    pip = "pip install --force-reinstall --no-cache-dir llama-cpp-python"
    return f'CMAKE_ARGS="{extra}-DGGML_RPC=ON" {pip}'


# ---------------------------------------------------------------- fit checks


@dataclass(frozen=True)
class Fit:
    verdict: str  # FIT_GPU, FIT_SPLIT, FIT_CPU, FIT_NO or FIT_UNKNOWN
    need_bytes: int | None  # memory the models need, with overhead
    detail: str


def memory_needed(sizes: Sequence[int | None]) -> int | None:
    """Memory to run models of these file sizes together (weights + KV cache + buffers)."""
    if any(size is None for size in sizes):
        return None
    return sum(int(s * (1 + _OVERHEAD_FRACTION)) + _OVERHEAD_FIXED for s in sizes if s)


def _memory(machine: Machine, offload: bool) -> tuple[int, int | None]:
    """(usable RAM, usable GPU memory or None)."""
    ram = int(machine.ram_total * _RAM_SHARE)
    if offload and machine.unified_memory:
        return ram, int(machine.ram_total * _UNIFIED_SHARE)
    return ram, machine.vram_total if offload else None


def fits(sizes: Sequence[int | None], machine: Machine, offload: bool) -> Fit:
    """Where models of these sizes would run on `machine` (`offload`: the build can use a GPU)."""
    need = memory_needed(sizes)
    if need is None:
        return Fit(FIT_UNKNOWN, None, "size unknown")
    ram, gpu = _memory(machine, offload)
    if gpu is not None and need <= gpu:
        return Fit(FIT_GPU, need, f"{_gb(need)} of {_gb(gpu)} GPU memory")
    if gpu is not None and not machine.unified_memory and need <= gpu + ram:
        return Fit(FIT_SPLIT, need, f"{_gb(need)}: {_gb(gpu)} GPU + RAM")
    if need <= ram:
        why = "" if gpu is None else " (too big for the GPU)"
        return Fit(FIT_CPU, need, f"{_gb(need)} of {_gb(ram)} usable RAM{why}")
    return Fit(FIT_NO, need, f"needs {_gb(need)}, {_gb(ram)} usable RAM")


def fits_with_workers(
    target_size: int | None,
    draft_size: int | None,
    machine: Machine,
    offload: bool,
    workers_free: int,
) -> Fit:
    """With --rpc: the draft here, the target on the workers' free memory (what ggml reports
    per RPC device) and, when that is short, on what the draft leaves here."""
    draft = fits([draft_size], machine, offload)
    target_need = memory_needed([target_size])
    if draft.need_bytes is None or target_need is None:
        return Fit(FIT_UNKNOWN, None, "size unknown")
    need = target_need + draft.need_bytes
    if draft.verdict == FIT_NO:
        return Fit(FIT_NO, need, f"the draft alone {draft.detail}")
    ram, gpu = _memory(machine, offload)
    here = (gpu or 0) if machine.unified_memory and gpu else ram + (gpu or 0)
    spare = max(here - draft.need_bytes, 0)
    if target_need <= workers_free:
        where = f"target {_gb(target_need)} on the workers ({_gb(workers_free)} free)"
    elif target_need <= workers_free + spare:
        where = f"target {_gb(target_need)}: the workers' {_gb(workers_free)} free + here"
    else:
        return Fit(
            FIT_NO, need, f"target needs {_gb(target_need)}, workers {_gb(workers_free)} free"
        )
    return Fit(FIT_RPC, need, f"{where}, draft here")


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


# ---------------------------------------------------------------- the `models` table


@dataclass(frozen=True)
class PairRow:
    name: str
    default: bool
    target: str
    draft: str
    target_size: int | None  # bytes, exact or estimated (see size_exact)
    draft_size: int | None
    size_exact: bool
    target_downloaded: bool
    draft_downloaded: bool
    fit: str  # FIT_* verdict
    fit_detail: str
    verified: bool  # both models have a pinned size and sha256
    tokenizer: str | None
    drafter: str
    draft_max: int
    description: str
    across_tokenizers: bool = False  # the draft drafts text, re-tokenised
    measured: bool | None = None  # None: the catalogue does not say

    @property
    def downloaded(self) -> bool:
        return self.target_downloaded and self.draft_downloaded

    @property
    def own_heads(self) -> bool:
        """The target drafts alone, with its own MTP layers or by looking up its text (draft
        is the target, draft_size 0)."""
        return self.drafter in SELF_DRAFTERS and self.draft == self.target

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "downloaded": self.downloaded, "own_heads": self.own_heads}


def pair_rows(
    catalog: Catalog,
    build: BuildInfo,
    machine: Machine | None = None,
    is_downloaded: Callable[[ModelRef], bool] = hub.is_cached,
    workers_free: int | None = None,
) -> list[PairRow]:
    """One row per catalogue pair: what it is, whether it is here, whether it fits (with
    `workers_free`, the free memory of --rpc workers: the target there, the draft here)."""
    machine = machine or probe_machine()
    rows = []
    for pair in catalog.pairs.values():
        target, draft = catalog.model(pair.target), catalog.model(pair.draft)
        # A target with its own MTP heads is its own draft: one file, counted once.
        draft_size = 0 if pair.own_heads else draft.approx_size
        if workers_free is None:
            fit = fits([target.approx_size, draft_size], machine, build.gpu_offload)
        else:
            fit = fits_with_workers(
                target.approx_size, draft_size, machine, build.gpu_offload, workers_free
            )
        rows.append(
            PairRow(
                name=pair.name,
                default=pair.name == catalog.default_pair,
                target=target.name,
                draft=draft.name,
                target_size=target.approx_size,
                draft_size=draft_size,
                size_exact=target.size is not None and draft.size is not None,
                target_downloaded=is_downloaded(target),
                draft_downloaded=is_downloaded(draft),
                fit=fit.verdict,
                fit_detail=fit.detail,
                verified=target.verified and draft.verified,
                tokenizer=target.tokenizer,
                drafter=pair.drafter,
                draft_max=pair.draft_max,
                description=pair.description,
                across_tokenizers=pair.across_tokenizers,
                measured=pair.measured,
            )
        )
    return rows


# ---------------------------------------------------------------- `doctor`


def smallest_quantised_model(catalog: Catalog) -> Path | None:
    """The smallest downloaded catalogue model with tensors the AMX kernels take: what
    `doctor` probes llama.cpp's AMX path with."""
    found = []
    for model in catalog.models.values():
        path = hub.cached_path(model)
        if path is not None and tensor_types(path) & AMX_TYPES:
            found.append((path.stat().st_size, str(path)))
    return Path(min(found)[1]) if found else None


@dataclass(frozen=True)
class Doctor:
    llama_cpp_version: str
    gpu_offload: bool
    gpu_backend: str
    reinstall_hint: str | None  # None when the build already offloads
    rpc: bool  # --rpc and `specllama worker` work
    rpc_hint: str | None  # the reinstall that adds RPC, when it is missing
    system_info: str
    default_gpu_layers: int
    machine: Machine
    caches: list[hub.CacheInfo]
    catalog_files: list[Path]
    user_catalog: Path
    hub_endpoint: str
    offline: bool
    python: str
    platform: str
    amx: AmxReport | None = None
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["machine"]["vram_total"] = self.machine.vram_total
        return _jsonable(data)


def doctor_report(
    build: BuildInfo,
    machine: Machine | None = None,
    catalog: Catalog | None = None,
    amx: AmxReport | None = None,
) -> Doctor:
    """Everything `specllama doctor` shows, gathered without any network access."""
    machine = machine or probe_machine()
    notes = []
    if machine.gpus and not build.gpu_offload:
        notes.append("an NVIDIA GPU is present but this llama.cpp build cannot use it")
    if amx is not None and amx.probe == CRASHES and not amx.extra_buffers:
        notes.append(
            "llama.cpp's AMX kernels crash on this CPU, so quantised models run without extra "
            f"buffer types (slower); rebuild without AMX for full speed: {amx.rebuild_command}"
        )
    return Doctor(
        llama_cpp_version=build.version,
        gpu_offload=build.gpu_offload,
        gpu_backend=gpu_backend(build),
        reinstall_hint=None if build.gpu_offload else reinstall_hint(machine),
        rpc=build.rpc,
        rpc_hint=None if build.rpc else rpc_reinstall_hint(build),
        system_info=build.system_info,
        default_gpu_layers=default_gpu_layers(build),
        machine=machine,
        caches=hub.cache_report(),
        catalog_files=list(catalog.sources) if catalog else [],
        user_catalog=user_catalog_path(),
        hub_endpoint=hub.hub_endpoint(),
        offline=hub.is_offline(),
        python=sys.version.split()[0],
        platform=f"{platform.system()} {platform.machine()}",
        amx=amx,
        notes=notes,
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value
