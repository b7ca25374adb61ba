"""Real `specllama worker` processes on localhost ports, and the marker for tests that need a
llama-cpp-python built with RPC (they are skipped, loudly, on a build without it)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from signals import ctrl_c_as_from_a_terminal

from specllama.llama.library import build_facts

HAS_RPC = build_facts().rpc
NO_RPC = (
    "THIS llama-cpp-python HAS NO RPC BACKEND, so the RPC tests did NOT run: install it as the "
    'README says (CMAKE_ARGS="-DGGML_RPC=ON" ... --no-cache-dir)'
)
needs_rpc = pytest.mark.skipif(not HAS_RPC, reason=NO_RPC)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def specllama_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "specllama", *args]


class WorkerProcess:
    """`specllama worker --cpu` on a free localhost port, started and ready (its banner)."""

    def __init__(self, threads: int = 1, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        command = specllama_command(
            "worker", "--port", str(self.port), "--cpu", "--threads", str(threads)
        )
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            # A worker that hangs can then be made to print every thread's stack (SIGABRT).
            env={**os.environ, "PYTHONFAULTHANDLER": "1", **(env or {})},
            preexec_fn=ctrl_c_as_from_a_terminal,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 60
        while not any("specllama worker" in line for line in self.lines):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not start: {self.stderr}")
            time.sleep(0.05)

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def interrupt(self, timeout: float = 20) -> int:
        """Ctrl-C, as a user stops it; its exit code. A worker still running after `timeout`
        fails the test with where each of its threads was."""
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
            self._reader.join(5)
            pytest.fail(f"the worker did not stop within {timeout} s of Ctrl-C:\n{self.stderr}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
