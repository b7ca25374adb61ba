#!/usr/bin/env python3
"""Claude Code's first turn on a long context: specllama serve against llama-server (issue 52).

    python research/agent_first_turn.py --repeats 2 \\
        --server "specllama serve --target Q05.gguf --drafter none --threads 2 --ctx 32768" \\
        --server "llama-server -m Q05.gguf -t 2 -c 32768"

Each --server is a command line serving Anthropic's Messages API (the script adds `--port
PORT`); every run is on a fresh server process. Claude Code (the version tests/server/
test_coding_agents.py pins, from `.agents/`) runs `claude -p TASK --max-turns 1` in an empty
git repository with a home of its own, through a counting proxy, so that a retry shows whatever
the server logs: printed per server are the wall time of the whole run (the agent's start to
its exit), its exit status, the Messages requests it sent, and the ratio to the first server.
The proxy also reads each streamed answer: its prompt's tokens (cached ones included), the
seconds to its first piece (`content_block_delta`: the prefill), and the tokens it generated,
so that a difference in the run's time is seen as prefill or as a longer answer.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_trace import free_port, start, warm_files

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = ROOT / ".agents" / "node_modules" / ".bin" / "claude"
TASK = "Create a file named hello.txt containing exactly the word: hi"
RUN_S = 1800


class CountingProxy(ThreadingHTTPServer):
    """Relays every request to the server on `upstream`, counting the POSTs by path; bodies
    stream through as they come (a response ends when its connection closes)."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.posts: dict[str, int] = {}
        self.answers: list[Answer] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Relay)


class Answer:
    """What one streamed Messages answer said of itself, read off its events as they pass."""

    def __init__(self) -> None:
        self.sent = time.perf_counter()
        self.first_s: float | None = None  # to the first piece of the answer
        self.prompt_tokens = 0
        self.output_tokens = 0
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        for line in lines:
            if line.startswith(b"data: "):
                self._event(json.loads(line[6:]))

    def _event(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "message_start":
            usage = event["message"].get("usage", {})
            self.prompt_tokens = sum(
                usage.get(k) or 0
                for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
            )
        elif kind == "message_delta":
            self.output_tokens = event.get("usage", {}).get("output_tokens", 0)
        elif kind == "content_block_delta" and self.first_s is None:
            self.first_s = time.perf_counter() - self.sent


class _Relay(BaseHTTPRequestHandler):
    server: CountingProxy

    def do_GET(self) -> None:
        self._relay(None)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with self.server.lock:
            path = self.path.split("?")[0]
            self.server.posts[path] = self.server.posts.get(path, 0) + 1
        self._relay(body)

    def _relay(self, body: bytes | None) -> None:
        upstream = http.client.HTTPConnection("127.0.0.1", self.server.upstream, timeout=RUN_S)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host",)}
        answer = Answer() if self.path.startswith("/v1/messages") and body else None
        if answer is not None:
            with self.server.lock:
                self.server.answers.append(answer)
        upstream.request(self.command, self.path, body, headers)
        response = upstream.getresponse()
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(key, value)
        self.send_header("Connection", "close")
        self.end_headers()
        while chunk := response.read1(65536):
            if answer is not None:
                answer.feed(chunk)
            self.wfile.write(chunk)
            self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


def run_claude(base_url: str) -> tuple[float, int]:
    """(seconds from the agent's start to its exit, its exit status)."""
    with tempfile.TemporaryDirectory() as scratch:
        repo, home = Path(scratch) / "repo", Path(scratch) / "home"
        repo.mkdir()
        home.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        env |= {"HOME": str(home), "NO_COLOR": "1", "TERM": "dumb", "CI": "1"}
        env |= {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_AUTH_TOKEN": "local"}
        env |= {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "PWD": str(repo)}
        command = [str(CLAUDE), "-p", TASK, "--model", "local", "--max-turns", "1"]
        command += ["--allowedTools", "Write"]
        started = time.perf_counter()
        done = subprocess.run(
            command,
            cwd=repo,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=RUN_S,
        )
        return time.perf_counter() - started, done.returncode


def measure(command: str) -> tuple[float, int, int, list[Answer]]:
    """(the run's seconds, the agent's exit status, the Messages requests it sent, what each
    streamed answer said of itself)."""
    port = free_port()
    process = start(command, port)
    proxy = CountingProxy(port)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        seconds, status = run_claude(f"http://127.0.0.1:{proxy.server_address[1]}")
        return seconds, status, proxy.posts.get("/v1/messages", 0), proxy.answers
    finally:
        proxy.shutdown()
        process.terminate()
        process.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", action="append", required=True, help="a command line")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, int, int]]] = {s: [] for s in args.server}
    warm_files(args.server)
    for _ in range(args.repeats):
        for server in args.server:  # interleaved, so that a drift hits both alike
            seconds, status, requests, answers = measure(server)
            results[server].append((seconds, status, requests))
            print(f"{server[:70]:<70} {seconds:8.1f} s exit {status}", flush=True)
            for answer in answers:
                first = f"{answer.first_s:.1f} s" if answer.first_s is not None else "none"
                print(
                    f"    answer: {answer.prompt_tokens} prompt tokens, first piece {first}, "
                    f"{answer.output_tokens} tokens generated",
                    flush=True,
                )
    print()
    print(f"{'server':<24} {'run s (min-max)':>22} {'exits':>8} {'requests':>9} ratio")
    first = statistics.median(t for t, _, _ in results[args.server[0]])
    for server in args.server:
        times = [t for t, _, _ in results[server]]
        median = statistics.median(times)
        exits = ",".join(str(s) for _, s, _ in results[server])
        requests = ",".join(str(n) for _, _, n in results[server])
        spread = f"{median:7.1f} ({min(times):.1f}-{max(times):.1f})"
        print(
            f"{server.split()[0]:<24} {spread:>22} {exits:>8} {requests:>9} {median / first:5.2f}"
        )


if __name__ == "__main__":
    main()
