"""--rpc with real workers: `specllama worker` processes on localhost ports (CPU backend) hold
the F32 target's layers, the Q4_1 draft runs here. Greedy output equals the target alone run
here, token for token; a worker killed or hung in the middle of an answer is one error line and
exit 1 within the timeout; a worker stops on Ctrl-C with exit 0."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from rpc_workers import WorkerProcess, free_port, needs_rpc, specllama_command

from specllama.llama.backend import LlamaBackend

pytestmark = [pytest.mark.slow, needs_rpc]

PROMPT = "Write a short story about a robot who learns to paint."
N = 48


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    # Calibrations are keyed by the workers' (random) ports: keep them out of the user's cache.
    return {"SPECLLAMA_CACHE": str(tmp_path_factory.mktemp("cache"))}


@pytest.fixture(scope="module")
def workers(env: dict[str, str]) -> Iterator[list[WorkerProcess]]:
    started = [WorkerProcess(env=env), WorkerProcess(env=env)]
    yield started
    for worker in started:
        worker.kill()


def specllama(
    *args: str, env: dict[str, str], timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        specllama_command(*map(str, args)),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
    )


def run_tokens(*args: str, env: dict[str, str]) -> tuple[list[int], dict]:
    """`run --jsonl`: the token ids, and the final stats."""
    done = specllama("run", PROMPT, "-n", N, "--threads", "1", "--jsonl", *args, env=env)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    return [e["token"] for e in events if e["type"] == "token"], events[-1]


@pytest.fixture(scope="module")
def reference(smol_f32: Path, env: dict[str, str]) -> tuple[list[int], dict]:
    """The F32 target alone, here."""
    return run_tokens("--target", smol_f32, "--drafter", "none", env=env)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and "warning:" not in line]


def test_greedy_through_a_worker_equals_the_target_alone_here(
    workers: list[WorkerProcess], smol_f32: Path, smol_q4: Path, reference, env
) -> None:
    args = ["-t", smol_f32, "-d", smol_q4, "--fixed", "-k", "4", "--rpc", workers[0].endpoint]
    tokens, stats = run_tokens(*args, env=env)
    assert tokens == reference[0] and len(tokens) == N
    # Speculation happened, through the worker: rounds that kept several tokens each.
    assert stats["drafter"] == "model" and stats["n_drafted"] > 0 and stats["n_accepted"] > 0
    assert 0 < stats["n_rounds"] < stats["n_generated"]


def test_greedy_across_two_workers_adaptive_equals_the_target_alone_here(
    workers: list[WorkerProcess], smol_f32: Path, smol_q4: Path, reference, env
) -> None:
    both = ",".join(w.endpoint for w in workers)
    tokens, stats = run_tokens("-t", smol_f32, "-d", smol_q4, "--rpc", both, env=env)
    assert tokens == reference[0]
    assert stats["n_rounds"] > 0 and stats["drafter"] == "ngram+model"


def test_the_target_layers_are_split_over_both_workers(
    workers: list[WorkerProcess], smol_f32: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="specllama.llama_cpp")
    endpoints = [w.endpoint for w in workers]
    with LlamaBackend(smol_f32, n_ctx=256, n_gpu_layers=-1, workers=endpoints) as target:
        logits = target.decode(target.tokenize("Hello"), [0])
        assert logits.shape == (1, target.n_vocab)
    logged = caplog.text
    assert "offloaded 31/31 layers" in logged, logged[-2000:]
    for endpoint in endpoints:  # llama.cpp's device list: RPC0 and RPC1, one per worker
        assert f"({endpoint})" in logged


def test_a_worker_killed_in_the_middle_of_an_answer_is_one_line_and_exit_1(
    smol_f32: Path, smol_q4: Path, env: dict[str, str]
) -> None:
    worker = WorkerProcess(env=env)
    try:
        client = _start_answer(smol_f32, smol_q4, worker, env)
        worker.kill()
        killed = time.monotonic()
        _, stderr = client.communicate(timeout=60)
        elapsed = time.monotonic() - killed
    finally:
        worker.kill()
    assert client.returncode == 1, stderr
    lines = error_lines(stderr)
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: lost the connection to the RPC worker at {worker.endpoint}")
    # Nothing of ggml's own abort (a warning on a machine with AMX names -DGGML_ flags).
    assert "Traceback" not in stderr
    assert not any(word in stderr for word in ("ggml-rpc", "ggml_abort", "GGML_ASSERT"))
    assert elapsed < 10


def test_a_hung_worker_is_one_line_and_exit_1_after_the_timeout(
    smol_f32: Path, smol_q4: Path, env: dict[str, str]
) -> None:
    worker = WorkerProcess(env=env)
    try:
        client = _start_answer(smol_f32, smol_q4, worker, {**env, "SPECLLAMA_RPC_TIMEOUT": "3"})
        worker.process.send_signal(signal.SIGSTOP)  # alive and connected, never answering
        stopped = time.monotonic()
        _, stderr = client.communicate(timeout=60)
        elapsed = time.monotonic() - stopped
    finally:
        worker.process.send_signal(signal.SIGCONT)
        worker.kill()
    assert client.returncode == 1, stderr
    lines = error_lines(stderr)
    assert len(lines) == 1, stderr
    expected = f"error: the RPC worker at {worker.endpoint} did not answer within 3 s"
    assert lines[0].startswith(expected) and "SPECLLAMA_RPC_TIMEOUT" in lines[0]
    assert "Traceback" not in stderr
    assert 2.5 < elapsed < 15


def _start_answer(
    target: Path, draft: Path, worker: WorkerProcess, env: dict[str, str]
) -> subprocess.Popen[str]:
    """A long answer through the worker, returned once its first text has arrived."""
    command = specllama_command(
        "run", "Tell a very long story, in many chapters, about a lighthouse keeper.",
        "-t", str(target), "-d", str(draft), "--fixed", "-n", "2000", "--ctx", "4096",
        "--threads", "1", "--rpc", worker.endpoint,
    )  # fmt: skip
    client = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **env},
    )
    assert client.stdout is not None
    assert client.stdout.read(1), client.communicate()[1]  # the answer has begun
    return client


def test_a_port_where_nothing_listens_and_a_bad_address(smol_q4: Path, env) -> None:
    port = free_port()
    done = specllama("run", "Hi", "-t", smol_q4, "--rpc", f"127.0.0.1:{port}", env=env)
    assert done.returncode == 1 and done.stdout == ""
    assert error_lines(done.stderr) == [
        f"error: nothing listens on 127.0.0.1:{port} (hint: start `specllama worker` there "
        "(or llama.cpp's rpc-server))"
    ]
    bad = specllama("run", "Hi", "-t", smol_q4, "--rpc", "127.0.0.1:99999", env=env)
    assert bad.returncode == 2 and len(error_lines(bad.stderr)) == 1
    assert "port must be a number" in bad.stderr


def test_the_worker_banner_a_taken_port_and_ctrl_c(env: dict[str, str]) -> None:
    worker = WorkerProcess(env=env)
    try:
        banner = worker.stderr
        assert f"specllama worker {worker.endpoint}" in banner and "RPC protocol" in banner
        assert "CPU" in banner and "warning" not in banner  # loopback: no warning
        again = specllama("worker", "--port", worker.port, "--cpu", env=env, timeout=60)
        assert again.returncode == 1
        assert error_lines(again.stderr)[0].startswith(
            f"error: cannot listen on 127.0.0.1:{worker.port}"
        )
        assert worker.interrupt() == 0
        assert "worker stopped" in worker.stderr and "Traceback" not in worker.stderr
    finally:
        worker.kill()


def test_serve_answers_through_a_worker(
    workers: list[WorkerProcess], smol_f32: Path, smol_q4: Path, reference, env
) -> None:
    command = specllama_command(
        "serve", "-t", str(smol_f32), "-d", str(smol_q4), "--fixed", "--threads", "1",
        "--port", "0", "--rpc", workers[1].endpoint,
    )  # fmt: skip
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
    try:
        assert server.stderr is not None
        url = ""
        for line in server.stderr:
            if line.startswith("specllama serve http"):
                url = line.split()[-1]
                break
        assert url, "the server did not start"
        facts = [server.stderr.readline() for _ in range(2)]  # the chat page's URL, the pair
        assert "layers on RPC workers" in facts[1], facts
        _wait_until_listening(url)  # the banner comes first; the socket listens once ready
        messages = [{"role": "user", "content": PROMPT}]
        body = {"model": smol_f32.name, "max_tokens": N, "messages": messages}
        request = urllib.request.Request(
            f"{url}/chat/completions",
            json.dumps(body).encode(),
            {"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as reply:
                answer = json.load(reply)
        except OSError as exc:  # say why: the server's own last words
            server.send_signal(signal.SIGINT)
            _, rest = server.communicate(timeout=30)
            raise AssertionError(f"{exc}; the server (exit {server.returncode}): {rest}") from exc
        assert answer["choices"][0]["message"]["content"] == reference[1]["text"]
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(30)


def _wait_until_listening(url: str, timeout: float = 60) -> None:
    address = urllib.parse.urlsplit(url)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((address.hostname, address.port), timeout=5).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"{url} never listened"
            time.sleep(0.1)


def test_models_counts_the_workers_memory(workers: list[WorkerProcess], env) -> None:
    done = specllama("models", "--json", "--rpc", workers[0].endpoint, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    default = rows["qwen2.5-coder-1.5b"]
    assert default["fit"] == "rpc" and "on the workers" in default["fit_detail"]
