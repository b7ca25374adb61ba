"""Whether llama.cpp's AMX kernels can be trusted on this machine; if not, run without them.

A llama.cpp built for its own machine (GGML_NATIVE, pip's default) on an Intel CPU with AMX
compiles its AMX matrix kernels in. On some kernels and VMs those kernels die with SIGILL (a
`tilezero` in a worker thread) on the first batched decode of a quantised model, killing the
whole process with a bare "Illegal instruction" (upstream llama.cpp PR #26954). They sit behind
llama.cpp's "extra buffer types" (`use_extra_bufts`), which also hold the CPU repack buffers:
turning those off avoids the crash but costs speed (a 4-token verify of a 1.5B Q4_K_M target:
208 ms instead of 133 ms), and a rebuild without AMX keeps the speed.

The decision (`decide`), for each model about to be loaded:

1. a forced choice wins: the caller's (`--extra-buffers on|off`), else SPECLLAMA_EXTRA_BUFFERS;
2. nothing is at stake (extra buffers on) when the build has no AMX kernels, the CPU has no AMX,
   or the model has no tensor of a type the AMX kernels take;
3. otherwise a child process loads the model and decodes a few batches with the extra buffers
   on (`run_probe`): if it dies by a signal, the AMX path crashes here and the extra buffers go
   off. The verdict is cached per llama.cpp build and CPU, so the probe runs once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from specllama.errors import UsageError
from specllama.llama.gguf_info import tensor_types
from specllama.paths import cache_dir

log = logging.getLogger("specllama")

ENV_VAR = "SPECLLAMA_EXTRA_BUFFERS"
SETTINGS = ("auto", "on", "off")

# ggml types with AMX kernels (ggml-cpu/amx/common.h, qtype_has_amx_kernels):
# Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS.
AMX_TYPES = frozenset({2, 3, 8, 12, 13, 14, 23})

# Probe outcomes.
WORKS = "works"
CRASHES = "crashes"
INCONCLUSIVE = "inconclusive"

PROBE_BATCH = 64  # a batch well past one token: one-token decodes take another code path
PROBE_DECODES = 2
PROBE_TIMEOUT_S = 180.0

# /proc/cpuinfo flag -> the ggml CMake option that compiles kernels for it. ggml turns the
# first six on by default once GGML_NATIVE is off, so they are also written out when absent.
_CMAKE_OPTIONS = (
    ("sse4_2", "GGML_SSE42", True),
    ("avx", "GGML_AVX", True),
    ("avx2", "GGML_AVX2", True),
    ("bmi2", "GGML_BMI2", True),
    ("fma", "GGML_FMA", True),
    ("f16c", "GGML_F16C", True),
    ("avx_vnni", "GGML_AVX_VNNI", False),
    ("avx512f", "GGML_AVX512", False),
    ("avx512vbmi", "GGML_AVX512_VBMI", False),
    ("avx512_vnni", "GGML_AVX512_VNNI", False),
    ("avx512_bf16", "GGML_AVX512_BF16", False),
)


@dataclass(frozen=True)
class Cpu:
    name: str
    flags: frozenset[str]
    kernel: str

    @property
    def has_amx(self) -> bool:
        return {"amx_tile", "amx_int8"} <= self.flags


def this_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> Cpu:
    """The CPU's model name and feature flags (Linux); no flags where /proc/cpuinfo is absent."""
    name, flags = platform.processor() or platform.machine(), frozenset[str]()
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    name = value.strip()
                elif key.strip() == "flags":
                    flags = frozenset(value.split())
                    break
    except OSError:
        pass
    return Cpu(name, flags, platform.release())


def build_has_amx(system_info: str) -> bool:
    """llama.cpp lists AMX_INT8 among the CPU features it was compiled with."""
    return "AMX_INT8 = 1" in system_info


def cmake_args(cpu: Cpu, system_info: str = "") -> str:
    """CMAKE_ARGS for a llama-cpp-python build with every kernel this CPU can run except AMX
    (and the GPU backend the current build has, so a rebuild keeps it, and RPC)."""
    args = ["-DGGML_NATIVE=OFF"]
    for flag, option, default_on in _CMAKE_OPTIONS:
        if flag in cpu.flags:
            args.append(f"-D{option}=ON")
        elif default_on:
            args.append(f"-D{option}=OFF")
    if "CUDA" in system_info:
        args.append("-DGGML_CUDA=on")
    args.append("-DGGML_RPC=ON")  # --rpc and `specllama worker`
    return " ".join(args)


def rebuild_command(args: str) -> str:
    return f'CMAKE_ARGS="{args}" pip install --force-reinstall --no-cache-dir llama-cpp-python'


# -- the decision -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeResult:
    outcome: str  # WORKS, CRASHES or INCONCLUSIVE
    detail: str  # e.g. "died with SIGILL"


@dataclass(frozen=True)
class Decision:
    extra_buffers: bool
    reason: str  # a short phrase, for doctor and the warning
    probe: ProbeResult | None = None  # when a probe was consulted

    @property
    def fallback(self) -> bool:
        """The extra buffers are off because the AMX path is not trusted (not by choice)."""
        return self.probe is not None and not self.extra_buffers


def setting_from(choice: str | None) -> str:
    """The effective setting: the caller's choice, else the environment, else auto."""
    value = (choice or os.environ.get(ENV_VAR) or "auto").strip().lower()
    if value not in SETTINGS:
        source = "--extra-buffers" if choice else ENV_VAR
        raise UsageError(f"{source} must be one of {', '.join(SETTINGS)}, got {value!r}")
    return value


def decide(
    setting: str,
    *,
    build_amx: bool,
    cpu_amx: bool,
    model_amx: bool,
    probe: Callable[[], ProbeResult],
) -> Decision:
    """Extra buffer types on or off for one model (module docstring). `probe` is called only
    when the answer depends on it."""
    if setting == "on":
        return Decision(True, f"forced on ({ENV_VAR} or --extra-buffers)")
    if setting == "off":
        return Decision(False, f"forced off ({ENV_VAR} or --extra-buffers)")
    if not build_amx:
        return Decision(True, "this llama.cpp build has no AMX kernels")
    if not cpu_amx:
        return Decision(True, "this CPU has no AMX")
    if not model_amx:
        return Decision(True, "the model has no tensors the AMX kernels take")
    result = probe()
    if result.outcome == WORKS:
        return Decision(True, "the AMX kernels work here (probed)", result)
    if result.outcome == CRASHES:
        return Decision(False, f"the AMX kernels crash here ({result.detail})", result)
    return Decision(False, f"the AMX probe was inconclusive ({result.detail})", result)


# -- the probe --------------------------------------------------------------------------------


def run_probe(model: Path, *, timeout_s: float = PROBE_TIMEOUT_S, command: list[str] | None = None):
    """Decode a few batches of `model` in a child process with the extra buffers on, and tell
    how the child ended. `command` replaces the child (tests)."""
    command = command or [sys.executable, "-m", "specllama.llama.amx_probe", str(model)]
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return ProbeResult(INCONCLUSIVE, f"no answer within {timeout_s:.0f} s")
    except OSError as exc:
        return ProbeResult(INCONCLUSIVE, f"could not start: {exc}")
    if done.returncode < 0:
        return ProbeResult(CRASHES, f"the probe died with {_signal_name(-done.returncode)}")
    if done.returncode == 0 and done.stdout.strip().endswith(b"ok"):
        return ProbeResult(WORKS, f"{PROBE_DECODES} batches of {PROBE_BATCH} tokens decoded")
    last = (done.stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
    return ProbeResult(INCONCLUSIVE, f"exit {done.returncode}: {last}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# -- the cached verdict -----------------------------------------------------------------------


def _verdict_path(build_id: dict[str, object], cpu: Cpu) -> Path:
    key = {"build": build_id, "cpu": [cpu.name, sorted(cpu.flags), cpu.kernel]}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir() / "amx-probe" / f"{digest}.json"


def cached_verdict(build_id: dict[str, object], cpu: Cpu) -> ProbeResult | None:
    try:
        data = json.loads(_verdict_path(build_id, cpu).read_text(encoding="utf-8"))
        return ProbeResult(data["outcome"], data["detail"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def cached_probe(model: Path, build_id: dict[str, object], cpu: Cpu) -> ProbeResult:
    """The cached verdict for this build and CPU, or probe with `model` now and cache a clear
    verdict (an inconclusive one is tried again next time)."""
    if (known := cached_verdict(build_id, cpu)) is not None:
        return known
    log.info("checking once whether llama.cpp's AMX kernels work on this CPU…")
    result = run_probe(model)
    if result.outcome != INCONCLUSIVE:
        path = _verdict_path(build_id, cpu)
        data = {**asdict(result), "model": str(model), "created": time.strftime("%Y-%m-%dT%H:%M")}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".partial")
            partial.write_text(json.dumps(data, indent=2), encoding="utf-8")
            partial.replace(path)
        except OSError:
            pass  # a read-only cache: probed again next time, no more
    return result


_warned: set[str] = set()


def extra_buffers_for(
    model: Path, *, system_info: str, build_id: dict[str, object], choice: str | None = None
) -> Decision:
    """The decision for loading `model` with this build on this CPU. When the AMX path is not
    trusted, says so once per process (a warning on the `specllama` logger) with the rebuild
    command that restores full speed."""
    cpu = this_cpu()
    build_amx = build_has_amx(system_info)
    decision = decide(
        setting_from(choice),
        build_amx=build_amx,
        cpu_amx=cpu.has_amx or (build_amx and not cpu.flags),  # flags unknown: find out
        model_amx=build_amx and bool(tensor_types(model) & AMX_TYPES),
        probe=lambda: cached_probe(model, build_id, cpu),
    )
    if decision.fallback and decision.reason not in _warned:
        _warned.add(decision.reason)
        log.warning(
            "%s: running without llama.cpp's extra buffer types (slower); for full speed, "
            "rebuild without AMX: %s",
            decision.reason,
            rebuild_command(cmake_args(cpu, system_info)),
        )
    return decision


# -- for `specllama doctor` -------------------------------------------------------------------


@dataclass(frozen=True)
class AmxReport:
    build_amx: bool  # the build has AMX kernels
    cpu_amx: bool  # the CPU reports AMX
    probe: str  # WORKS, CRASHES, INCONCLUSIVE, or "not run" / "not needed"
    extra_buffers: bool  # what a quantised model gets
    reason: str
    cmake_args: str  # a build for this CPU with everything but AMX

    @property
    def rebuild_command(self) -> str:
        return rebuild_command(self.cmake_args)

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def report(
    system_info: str,
    build_id: dict[str, object],
    probe_model: Path | None = None,
    choice: str | None = None,
) -> AmxReport:
    """The decision a quantised model would get here. Probes with `probe_model` (a quantised
    model at hand) when the answer depends on it and nothing is cached yet."""
    cpu = this_cpu()
    build_amx = build_has_amx(system_info)
    probed: list[ProbeResult] = []

    def probe() -> ProbeResult:
        result = cached_verdict(build_id, cpu)
        if result is None and probe_model is not None:
            result = cached_probe(probe_model, build_id, cpu)
        result = result or ProbeResult(INCONCLUSIVE, "not probed yet: no quantised model here")
        probed.append(result)
        return result

    decision = decide(
        setting_from(choice),
        build_amx=build_amx,
        cpu_amx=cpu.has_amx or (build_amx and not cpu.flags),
        model_amx=True,
        probe=probe,
    )
    return AmxReport(
        build_amx=build_amx,
        cpu_amx=cpu.has_amx,
        probe=probed[0].outcome if probed else "not needed",
        extra_buffers=decision.extra_buffers,
        reason=decision.reason,
        cmake_args=cmake_args(cpu, system_info),
    )
