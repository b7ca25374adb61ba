"""The AMX guard: the decision with the probe's outcomes faked, the probe's reading of how a
real child process ended, the cache, the one-line warning, and one real probe."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from specllama.errors import UsageError
from specllama.llama import amx
from specllama.llama.amx import CRASHES, INCONCLUSIVE, WORKS, Cpu, ProbeResult
from specllama.llama.backend import LlamaBackend
from specllama.llama.library import build_facts

AMX_FLAGS = frozenset(
    {
        *("sse4_2", "avx", "avx2", "bmi2", "fma", "f16c", "avx_vnni", "avx512f", "avx512vbmi"),
        *("avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"),
    }
)
AMX_CPU = Cpu("Intel(R) Xeon(R) Platinum 8488C", AMX_FLAGS, "6.8.0")
AMX_BUILD = "CPU : AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | REPACK = 1 |"


class FakeProbe:
    def __init__(self, outcome: str) -> None:
        self.outcome = outcome
        self.calls = 0

    def __call__(self, *_: object, **__: object) -> ProbeResult:
        self.calls += 1
        return ProbeResult(self.outcome, f"faked {self.outcome}")


def decide(setting="auto", build_amx=True, cpu_amx=True, model_amx=True, outcome=WORKS):
    probe = FakeProbe(outcome)
    decision = amx.decide(
        setting, build_amx=build_amx, cpu_amx=cpu_amx, model_amx=model_amx, probe=probe
    )
    return decision, probe.calls


# -- the decision -----------------------------------------------------------------------------


def test_a_crashing_amx_path_turns_the_extra_buffers_off():
    decision, calls = decide(outcome=CRASHES)
    assert (decision.extra_buffers, decision.fallback, calls) == (False, True, 1)
    assert "crash" in decision.reason


def test_a_working_amx_path_keeps_them_on():
    decision, calls = decide(outcome=WORKS)
    assert (decision.extra_buffers, decision.fallback, calls) == (True, False, 1)


def test_an_inconclusive_probe_plays_safe():
    decision, _ = decide(outcome=INCONCLUSIVE)
    assert not decision.extra_buffers and decision.fallback


@pytest.mark.parametrize(
    "where", [dict(build_amx=False), dict(cpu_amx=False), dict(model_amx=False)]
)
def test_nothing_is_probed_when_amx_cannot_be_involved(where):
    decision, calls = decide(outcome=CRASHES, **where)
    assert decision.extra_buffers and calls == 0


@pytest.mark.parametrize(("setting", "on"), [("on", True), ("off", False)])
def test_a_forced_choice_wins_without_probing(setting, on):
    decision, calls = decide(setting, outcome=CRASHES if on else WORKS)
    assert decision.extra_buffers is on and calls == 0 and not decision.fallback


def test_setting_comes_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.delenv(amx.ENV_VAR, raising=False)
    assert amx.setting_from(None) == "auto"
    monkeypatch.setenv(amx.ENV_VAR, "OFF")
    assert amx.setting_from(None) == "off"
    assert amx.setting_from("on") == "on"
    monkeypatch.setenv(amx.ENV_VAR, "maybe")
    with pytest.raises(UsageError, match=amx.ENV_VAR):
        amx.setting_from(None)
    with pytest.raises(UsageError, match="--extra-buffers"):
        amx.setting_from("sometimes")


# -- the rebuild command --------------------------------------------------------------------


def test_cmake_args_keep_every_kernel_of_this_cpu_but_amx():
    args = amx.cmake_args(AMX_CPU).split()
    assert args[0] == "-DGGML_NATIVE=OFF"
    assert "-DGGML_AVX512=ON" in args and "-DGGML_AVX512_BF16=ON" in args
    assert "-DGGML_AVX_VNNI=ON" in args
    assert not [a for a in args if "AMX" in a]


def test_cmake_args_turn_off_what_the_cpu_lacks_and_keep_the_gpu_backend():
    old = Cpu("old", frozenset({"sse4_2", "avx"}), "5.4")
    args = amx.cmake_args(old, system_info="CUDA : ARCHS = 900 | CPU : AVX = 1").split()
    assert "-DGGML_AVX=ON" in args and "-DGGML_AVX2=OFF" in args and "-DGGML_FMA=OFF" in args
    assert not [a for a in args if "AVX512" in a]
    assert "-DGGML_CUDA=on" in args
    assert "-DGGML_RPC=ON" in args  # a rebuild keeps --rpc and `specllama worker`


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n"
        "flags\t\t: fpu avx2 amx_tile amx_int8 avx512f\n\nprocessor\t: 1\n"
    )
    cpu = amx.this_cpu(cpuinfo)
    assert cpu.name == "Intel(R) Xeon(R) Processor" and cpu.has_amx
    assert "avx512f" in cpu.flags and "fpu" in cpu.flags


# -- the probe, on real child processes -----------------------------------------------------


def child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_child_killed_by_sigill_reads_as_a_crash():
    result = amx.run_probe(
        Path("unused"), command=child("import os, signal; os.kill(os.getpid(), signal.SIGILL)")
    )
    assert result.outcome == CRASHES and "SIGILL" in result.detail


def test_a_child_that_fails_otherwise_is_inconclusive():
    result = amx.run_probe(Path("unused"), command=child("raise SystemExit('no such model')"))
    assert result.outcome == INCONCLUSIVE and "no such model" in result.detail
    hung = amx.run_probe(Path("x"), command=child("import time; time.sleep(5)"), timeout_s=0.5)
    assert hung.outcome == INCONCLUSIVE


def test_the_verdict_is_cached_per_build_and_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path))
    probe = FakeProbe(CRASHES)
    monkeypatch.setattr(amx, "run_probe", probe)
    build = {"version": "0.3.36", "system_info": AMX_BUILD, "library": ["libllama.so", 1, 2]}
    for _ in range(3):
        assert amx.cached_probe(Path("m.gguf"), build, AMX_CPU).outcome == CRASHES
    assert probe.calls == 1
    rebuilt = {**build, "library": ["libllama.so", 1, 3]}
    amx.cached_probe(Path("m.gguf"), rebuilt, AMX_CPU)
    assert probe.calls == 2


def test_an_inconclusive_verdict_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path))
    probe = FakeProbe(INCONCLUSIVE)
    monkeypatch.setattr(amx, "run_probe", probe)
    for _ in range(2):
        amx.cached_probe(Path("m.gguf"), {"version": "x"}, AMX_CPU)
    assert probe.calls == 2


def test_the_fallback_warns_once_with_the_rebuild_command(smol_q4, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path))
    monkeypatch.delenv(amx.ENV_VAR, raising=False)
    monkeypatch.setattr(amx, "this_cpu", lambda: AMX_CPU)
    monkeypatch.setattr(amx, "run_probe", FakeProbe(CRASHES))
    monkeypatch.setattr(amx, "_warned", set())
    caplog.set_level(logging.INFO, logger="specllama")
    for _ in range(2):
        decision = amx.extra_buffers_for(smol_q4, system_info=AMX_BUILD, build_id={"v": 1})
        assert not decision.extra_buffers
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert "crash" in warnings[0] and 'CMAKE_ARGS="-DGGML_NATIVE=OFF' in warnings[0]
    assert "AMX_" not in warnings[0].split("CMAKE_ARGS")[1]


def test_an_f32_model_needs_no_probe(smol_f32, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path))
    monkeypatch.delenv(amx.ENV_VAR, raising=False)
    monkeypatch.setattr(amx, "this_cpu", lambda: AMX_CPU)
    probe = FakeProbe(CRASHES)
    monkeypatch.setattr(amx, "run_probe", probe)
    decision = amx.extra_buffers_for(smol_f32, system_info=AMX_BUILD, build_id={"v": 1})
    assert decision.extra_buffers and probe.calls == 0


# -- for real, on this machine ----------------------------------------------------------------


@pytest.mark.slow
def test_the_real_probe_and_the_decision_it_leads_to(smol_q4):
    """The probe's child loads the Q4_1 model with the extra buffers on and decodes batches.
    Where AMX cannot be involved it must work; where it can, its verdict must be one that the
    loaded model then survives: a wrong 'works' would kill this test process below."""
    facts = build_facts()
    result = amx.run_probe(smol_q4)
    amx_possible = amx.build_has_amx(facts.system_info) and amx.this_cpu().has_amx
    assert result.outcome == WORKS if not amx_possible else result.outcome in (WORKS, CRASHES)
    with LlamaBackend(smol_q4, n_ctx=256) as model:  # the automatic decision
        assert model.extra_buffers == (result.outcome == WORKS)
        rows = model.decode(list(range(10, 10 + amx.PROBE_BATCH)), [amx.PROBE_BATCH - 1])
        assert rows.shape == (1, model.n_vocab)


@pytest.mark.slow
@pytest.mark.parametrize("extra_buffers", [True, False])
def test_the_backend_passes_the_choice_to_llama_cpp(smol_q4, caplog, extra_buffers):
    # With the extra buffer types on, llama.cpp considers its CPU_REPACK buffer for each
    # weight (an AMX build: its AMX buffer), and says so in its load log; with them off, it
    # never does.
    caplog.set_level(logging.DEBUG, logger="specllama.llama_cpp")
    facts = build_facts()
    safe = amx.extra_buffers_for(smol_q4, system_info=facts.system_info, build_id=facts.build_id)
    with LlamaBackend(smol_q4, n_ctx=256, extra_buffers=extra_buffers) as model:
        assert model.extra_buffers is extra_buffers
        if safe.extra_buffers or not extra_buffers:  # not where the AMX kernels crash
            model.decode([1, 2, 3, 4], [3])
    extra = "CPU_REPACK" in caplog.text or "AMX model buffer" in caplog.text
    assert extra is extra_buffers


@pytest.mark.slow
def test_run_on_a_machine_whose_amx_kernels_crash_answers_with_one_warning(
    smol_q4, tmp_path, monkeypatch
):
    """`specllama run` as a user on such a machine sees it: the probe's crash is faked (this
    machine may have no AMX); the decision, the warning and the run that follows are real."""
    from typer.testing import CliRunner

    from specllama.cli.app import app

    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path))
    monkeypatch.delenv(amx.ENV_VAR, raising=False)
    monkeypatch.setattr(amx, "this_cpu", lambda: AMX_CPU)
    monkeypatch.setattr(amx, "build_has_amx", lambda _info: True)
    monkeypatch.setattr(amx, "run_probe", FakeProbe(CRASHES))
    monkeypatch.setattr(amx, "_warned", set())
    args = ["run", "Say hi.", "--target", str(smol_q4), "--drafter", "none", "-n", "4"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "crash" in warnings[0] and "CMAKE_ARGS=" in warnings[0]
    assert result.stdout.strip()

    doctor = json.loads(CliRunner().invoke(app, ["doctor", "--json"]).stdout)["amx"]
    assert doctor["probe"] == CRASHES and doctor["extra_buffers"] is False
