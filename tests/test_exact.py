"""--exact on quantised files: every drafter writes the target alone's answer, token for token.

On this project's CPU build a token verified in a batch gets other logits than alone (ggml's
tiled K-quant matmul for 8+ rows, repacked weights' gemm for 4+ rows; research/RESULTS.md,
issue 43), and greedy or seeded answers of quantised targets part from the target alone's at
near-ties. --exact chooses kernels that do not depend on the batch's width. It is chosen once
per process, so the answers come from subprocesses (tests/exact_answers.py, and the CLI).

Files: llama.cpp's own Q4_K_M and Q8_0 of the F32 SmolLM2 (`model_factory.smollm2_quantized`);
the Q4_K_M's K-quant tensors are its ffn_down (SmolLM2's width is not a multiple of 256).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import serving
from model_factory import smollm2_f32, smollm2_q4, smollm2_quantized

from specllama.llama import exact

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
MAX_TOKENS = 192
SEED = 1234
# Raw continuations run the whole MAX_TOKENS; the chat prompt is what users send.
PROMPTS = [
    {"text": "The history of the lighthouse begins", "template": False},
    {"text": "def parse_config(path):\n    ", "template": False},
    {"text": "Write a short poem about a lighthouse keeper.", "template": True},
]
GREEDY, HOT = [0.0, SEED], [1.0, SEED]


def exact_answers(tmp_path: Path, **spec: object) -> dict[str, list[list[int]]]:
    """tests/exact_answers.py in a fresh process: the exact side never shares a process with
    models loaded without it."""
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({"max_tokens": MAX_TOKENS, "prompts": PROMPTS, **spec}))
    env = {**os.environ, "SPECLLAMA_CACHE": str(tmp_path / "cache")}  # its calibrations
    result = subprocess.run(
        [sys.executable, str(HERE / "exact_answers.py"), str(spec_file)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def assert_all_equal_target_alone(found: dict[str, list[list[int]]]) -> None:
    reference = found.pop("none")
    assert all(len(tokens) > 0 for tokens in reference)
    # The raw continuations do not stop early: the promise is checked over all 192 tokens.
    assert all(len(tokens) == MAX_TOKENS for tokens in reference[:2])
    for name, answers in found.items():
        for i, (tokens, expected) in enumerate(zip(answers, reference, strict=True)):
            parted = next((j for j, (a, b) in enumerate(zip(tokens, expected)) if a != b), None)
            assert tokens == expected, f"{name}, answer {i}: parts at token {parted}"


def test_q4_k_m_every_drafter_writes_the_target_alones_answer(tmp_path: Path):
    found = exact_answers(
        tmp_path,
        target=str(smollm2_quantized("Q4_K_M")),
        draft=str(smollm2_quantized("Q8_0")),
        exact=True,
        configs=["none", "model-fixed-k4", "ngram", "default"],
        samplings=[GREEDY, HOT],
    )
    assert_all_equal_target_alone(found)


def test_q8_0_every_drafter_writes_the_target_alones_answer(tmp_path: Path):
    found = exact_answers(
        tmp_path,
        target=str(smollm2_quantized("Q8_0")),
        draft=str(smollm2_q4()),
        exact=True,
        configs=["none", "model-fixed-k4", "default"],
        samplings=[GREEDY, HOT],
    )
    assert_all_equal_target_alone(found)


# -- the switch, as the faces report it ---------------------------------------------------------


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECLLAMA_CACHE": str(cwd / "cache"), "NO_COLOR": "1"}
    command = [sys.executable, "-m", "specllama", "run", *args, "--threads", "2"]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def test_run_exact_reports_itself_and_writes_the_target_alones_answer(tmp_path: Path):
    target, draft = smollm2_quantized("Q4_K_M"), smollm2_quantized("Q8_0")
    prompt = PROMPTS[0]["text"]
    common = [prompt, "--target", str(target), "-n", "96", "--no-chat-template", "--exact"]
    alone = run_cli(*common, "--drafter", "none", "--json", cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    speculative = run_cli(*common, "--draft", str(draft), "--fixed", cwd=tmp_path)
    assert speculative.returncode == 0, speculative.stderr
    reference = json.loads(alone.stdout)
    assert reference["exact"] is True
    assert speculative.stdout == reference["text"] + "\n"
    assert speculative.stderr.strip().splitlines()[-1].endswith(" · exact")


def test_exact_on_an_f32_file_says_at_start_that_it_cannot_hold_there(tmp_path: Path):
    """A build with llamafile's sgemm runs F32/F16 matmuls of 2+ rows through it: said at
    start, never silently."""
    from specllama.llama.library import build_facts

    if "LLAMAFILE = 1" not in build_facts().system_info:
        pytest.skip("this build has no llamafile sgemm: F32 files are exact too")
    result = run_cli("Hi", "--target", str(smollm2_f32()), "-n", "4", "--exact",
                     "--drafter", "none", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "--exact cannot hold for" in result.stderr
    assert "LLAMAFILE = 1" in result.stderr


def test_exact_and_extra_buffers_on_contradict_each_other(tmp_path: Path):
    result = run_cli("Hi", "--target", str(smollm2_q4()), "--exact", "--extra-buffers", "on",
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 2
    assert "--exact" in result.stderr and "Traceback" not in result.stderr


# -- the server ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exact_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[serving.Server]:
    """`serve --exact` on the Q4_K_M target with its Q8_0 draft, a fixed k: the draft model
    drafts every round, and the answer it remembers drafts the second time."""
    folder = tmp_path_factory.mktemp("exact-serve")
    extra = ["--draft", str(smollm2_quantized("Q8_0")), "--fixed", "--draft-max", "4", "--exact"]
    env = {"SPECLLAMA_CACHE": str(folder / "cache")}
    target = smollm2_quantized("Q4_K_M")
    yield from serving.serve(target, extra, folder / "stderr.txt", env=env, threads=2)


def test_serve_exact_gives_one_answer_cached_remembered_or_alone(exact_server: serving.Server):
    prompt = "Write a short poem about a lighthouse keeper."
    texts = []
    for specllama in ({}, {}, {"drafter": "none"}):
        body = {
            "model": exact_server.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": MAX_TOKENS,
            "temperature": 0,
            **({"specllama": specllama} if specllama else {}),
        }
        status, _, answer = exact_server.request("POST", "/v1/chat/completions", body)
        assert status == 200, answer
        texts.append(answer["choices"][0]["message"]["content"])
    assert texts[0] and texts[1] == texts[0] and texts[2] == texts[0]
    assert "exact (--exact)" in exact_server.log.read_text()
    status, _, facts = exact_server.request("GET", "/specllama/status")
    assert status == 200 and facts["exact"] is True, facts


# -- the process-wide switch (no models) ---------------------------------------------------------


def test_the_tiled_switch_reads_as_ggml_reads_it():
    assert exact.tiled_matmul_on({})
    assert exact.tiled_matmul_on({exact.TILED_ENV: "1"})
    for off in ("0", " 0", "", "off", "00"):  # C's atoi: no number reads as 0
        assert not exact.tiled_matmul_on({exact.TILED_ENV: off})


def test_exact_mode_is_refused_once_a_model_ran_without_it(monkeypatch: pytest.MonkeyPatch):
    from specllama.errors import UsageError

    monkeypatch.setattr(exact, "_tiled_at_first_load", True)
    with pytest.raises(UsageError, match="before the first model loads"):
        exact.use_batch_invariant_kernels()


def test_exact_problems_name_float_files_on_a_llamafile_build_and_gpu_layers():
    info = "CPU : AVX2 = 1 | LLAMAFILE = 1 | REPACK = 1"
    assert exact.problems("m.gguf", file_type=15, all_f32=False, system_info=info) == []
    assert exact.problems("m.gguf", file_type=1, all_f32=False, system_info=info)
    assert not exact.problems("m.gguf", file_type=1, all_f32=False, system_info="AVX2 = 1")
    on_gpu = exact.problems(
        "m.gguf", file_type=15, all_f32=False, system_info=info, offloaded_to="the GPU"
    )
    assert len(on_gpu) == 1 and "the GPU" in on_gpu[0]
