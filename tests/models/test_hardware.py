"""Fit checks, GPU facts and the rows behind `specllama models` / `doctor`, with stand-ins."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from specllama.models import hardware as hw
from specllama.models import hub
from specllama.models.catalog import load_catalog

GB = 1_000_000_000


@dataclass(frozen=True)
class FakeBuild:
    version: str = "0.3.36"
    gpu_offload: bool = False
    system_info: str = "CPU : SSE3 = 1 | AVX2 = 1 | OPENMP = 1 |"
    rpc: bool = True


CUDA = FakeBuild(gpu_offload=True, system_info="CUDA : ARCHS = 890 | CPU : AVX2 = 1 |")
METAL = FakeBuild(gpu_offload=True, system_info="Metal : EMBED_LIBRARY = 1 | CPU : NEON = 1 |")


def machine(ram: int = 16 * GB, vram: int | None = None, unified: bool = False) -> hw.Machine:
    gpus = (hw.Gpu("RTX", vram, vram),) if vram else ()
    return hw.Machine(ram, ram // 2, 4, 8, gpus, unified)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SPECLLAMA_CATALOG", raising=False)


def test_fit_verdicts() -> None:
    sizes = [4 * GB, GB // 2]
    assert hw.fits(sizes, machine(vram=8 * GB), offload=True).verdict == hw.FIT_GPU
    assert hw.fits(sizes, machine(vram=4 * GB), offload=True).verdict == hw.FIT_SPLIT
    # The same GPU, but a CPU-only build: RAM decides.
    assert hw.fits(sizes, machine(vram=8 * GB), offload=False).verdict == hw.FIT_CPU
    assert hw.fits(sizes, machine(ram=4 * GB), offload=False).verdict == hw.FIT_NO
    assert hw.fits([None, GB], machine(), offload=False).verdict == hw.FIT_UNKNOWN


def test_with_workers_the_target_fits_on_their_memory_and_the_draft_here() -> None:
    small_laptop = machine(ram=8 * GB)
    target, draft = 20 * GB, GB // 2
    assert hw.fits([target, draft], small_laptop, offload=False).verdict == hw.FIT_NO
    on_workers = hw.fits_with_workers(target, draft, small_laptop, False, workers_free=24 * GB)
    assert on_workers.verdict == hw.FIT_RPC and "on the workers" in on_workers.detail
    # Short on the workers: what the draft leaves here makes up the rest.
    split = hw.fits_with_workers(target, draft, small_laptop, False, workers_free=18 * GB)
    assert split.verdict == hw.FIT_RPC and "+ here" in split.detail
    too_big = hw.fits_with_workers(target, draft, small_laptop, False, workers_free=8 * GB)
    assert too_big.verdict == hw.FIT_NO
    no_room_for_the_draft = hw.fits_with_workers(target, 9 * GB, small_laptop, False, 99 * GB)
    assert no_room_for_the_draft.verdict == hw.FIT_NO
    assert hw.fits_with_workers(None, draft, small_laptop, False, GB).verdict == hw.FIT_UNKNOWN


def test_pair_rows_with_workers() -> None:
    rows = hw.pair_rows(load_catalog(), FakeBuild(), machine(ram=4 * GB), workers_free=64 * GB)
    by_name = {row.name: row for row in rows}
    assert by_name["qwen2.5-coder-1.5b"].fit == hw.FIT_RPC
    assert by_name["qwen2.5-coder-32b"].fit == hw.FIT_RPC  # ~20 GB: only across machines


def test_apple_unified_memory_counts_as_gpu_memory() -> None:
    fit = hw.fits([5 * GB, GB // 2], machine(ram=16 * GB, unified=True), offload=True)
    assert fit.verdict == hw.FIT_GPU


def test_memory_needed_adds_overhead() -> None:
    need = hw.memory_needed([GB])
    assert need is not None and GB < need < 2 * GB


def test_gpu_backend_and_default_layers() -> None:
    assert hw.gpu_backend(FakeBuild()) == "none"
    assert hw.gpu_backend(CUDA) == "CUDA"
    assert hw.gpu_backend(METAL) == "Metal"
    assert hw.default_gpu_layers(FakeBuild()) == 0
    assert hw.default_gpu_layers(CUDA) == -1


def test_parse_nvidia_smi() -> None:
    out = "NVIDIA GeForce RTX 4070 Laptop GPU, 8188, 7900\nNVIDIA A100, 81920, [N/A]\n"
    gpus = hw.parse_nvidia_smi(out)
    assert gpus[0] == hw.Gpu("NVIDIA GeForce RTX 4070 Laptop GPU", 8188 << 20, 7900 << 20)
    assert gpus[1].free_bytes is None
    assert hw.parse_nvidia_smi("") == ()


def test_probe_machine_reads_this_machine() -> None:
    found = hw.probe_machine(nvidia_smi=lambda: ())
    assert found.ram_total > 0 and found.physical_cores >= 1
    assert found.vram_total is None


def test_pair_rows_cover_the_catalogue() -> None:
    catalog = load_catalog()
    downloaded = {"qwen2.5-coder-0.5b-instruct-q4_k_m"}
    rows = hw.pair_rows(
        catalog, FakeBuild(), machine(ram=8 * GB), is_downloaded=lambda m: m.name in downloaded
    )
    assert [row.name for row in rows] == list(catalog.pairs)
    default = next(row for row in rows if row.default)
    assert default.name == "qwen2.5-coder-1.5b"
    assert default.size_exact and default.verified and default.fit == hw.FIT_CPU
    assert default.draft_downloaded and not default.target_downloaded and not default.downloaded
    big = next(row for row in rows if row.name == "qwen2.5-coder-32b")
    assert big.fit == hw.FIT_NO and not big.size_exact
    json.dumps([row.as_json() for row in rows])  # `models --json` needs plain data


def test_a_target_with_its_own_mtp_head_is_one_file_counted_once() -> None:
    catalog = load_catalog()
    target = catalog.model("qwen3.5-9b-mtp-q4_k_m")
    rows = {r.name: r for r in hw.pair_rows(catalog, FakeBuild(), machine(ram=16 * GB))}
    own = rows["qwen3.5-9b-mtp"]
    assert own.own_heads and own.draft == own.target and own.draft_size == 0
    assert own.target_size == target.approx_size and own.fit == hw.FIT_CPU
    assistant = rows["gemma-4-e4b-mtp"]
    assert not assistant.own_heads and assistant.drafter == "assistant"
    assert assistant.draft_size and assistant.draft_size < assistant.target_size // 50
    assert json.loads(json.dumps(own.as_json()))["own_heads"] is True


def test_pair_rows_default_uses_the_real_caches() -> None:
    rows = hw.pair_rows(load_catalog(), FakeBuild(), machine())
    assert not any(row.downloaded for row in rows)  # the caches are empty temp folders


def test_doctor_report_without_gpu_offload_says_how_to_get_it() -> None:
    report = hw.doctor_report(FakeBuild(), machine(vram=8 * GB), load_catalog())
    assert report.gpu_backend == "none" and report.default_gpu_layers == 0
    assert report.reinstall_hint and "CMAKE_ARGS" in report.reinstall_hint
    assert report.notes  # a GPU is there but unused
    data = report.as_json()
    json.dumps(data)
    assert data["machine"]["vram_total"] == 8 * GB
    assert [c["path"] for c in data["caches"]] == [str(hub.cache_dir()), str(hub.hf_cache_dir())]


def test_doctor_report_with_cuda() -> None:
    report = hw.doctor_report(CUDA, machine(vram=8 * GB))
    assert report.gpu_backend == "CUDA" and report.reinstall_hint is None
    assert report.default_gpu_layers == -1
    assert report.rpc and report.rpc_hint is None


def test_doctor_report_says_how_to_add_rpc_and_keep_the_gpu() -> None:
    report = hw.doctor_report(FakeBuild(gpu_offload=True, rpc=False, system_info=CUDA.system_info))
    assert not report.rpc
    assert report.rpc_hint == (
        'CMAKE_ARGS="-DGGML_CUDA=on -DGGML_RPC=ON" pip install --force-reinstall --no-cache-dir '
        "llama-cpp-python"
    )
    assert "-DGGML_RPC=ON" in (hw.doctor_report(FakeBuild(rpc=False)).rpc_hint or "")
