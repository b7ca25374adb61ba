"""Long prompts through a real `specllama serve` (issue 52): clients never wait in silence, a
cancelled prompt's evaluated tokens are reused by its retry, and SIGTERM mid-prefill ends the
server at once with every client answered.

Prefills are made long by long prompts on the F32 SmolLM2 with one thread (~12 s for ~1,300
tokens on a 2-core EPYC), and the keepalive interval is shortened (--keepalive) so that a client
with an idle timeout of IDLE_S seconds, shorter than the prefill, gets through.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import JSON_POST, Server, serve

pytestmark = pytest.mark.slow

CTX = 4096
CHUNK = 512  # the target's batch: one slot evaluates a prompt this many tokens at a time
KEEPALIVE_S = 0.3
IDLE_S = 1.5  # the clients' idle timeout: shorter than any prefill below
THREADS = 1  # so that the prefills outlast 2 * IDLE_S on a faster machine than this one too
EXTRA = ["--drafter", "none", "--keepalive", str(KEEPALIVE_S), "--cache-ram", "1"]


def long_message(tag: str, lines: int = 60) -> str:
    """About 21 tokens a line (60 lines: ~1,300 tokens, a prefill of ~12 s here); `tag` first,
    so that no two tags share a prompt prefix."""
    body = "\n".join(
        f"{i}. {tag} note {i * 7 % 13}: the parcel went from depot {i % 5} to gate {i % 11}."
        for i in range(lines)
    )
    return f"{tag}: read these notes, then say which gate came last.\n{body}"


def chat_body(text: str, **more: object) -> dict:
    messages = [{"role": "user", "content": text}]
    return {"model": "any", "messages": messages, "max_tokens": 4, "temperature": 0, **more}


@pytest.fixture(scope="module")
def server(smol_f32: Path, tmp_path_factory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("long") / "stderr.txt"
    yield from serve(smol_f32, EXTRA, log, ctx=CTX, threads=THREADS)


@pytest.fixture
def idle(server: Server) -> Server:
    server.wait_idle()
    return server


def stream_with_idle_timeout(server: Server, path: str, body: dict) -> tuple[str, float]:
    """The whole stream, read by a client that gives up after IDLE_S seconds without a byte
    (socket.timeout), and the seconds until its first `data:` line after the opening ones."""
    conn = http.client.HTTPConnection(*server.address, timeout=IDLE_S)
    conn.request("POST", path, body=json.dumps({**body, "stream": True}), headers=JSON_POST)
    started = time.monotonic()
    response = conn.getresponse()
    assert response.status == 200
    lines, first_text = [], None
    while line := response.readline():
        text = line.decode()
        lines.append(text)
        if first_text is None and _carries_text(text):
            first_text = time.monotonic() - started
    conn.close()
    assert first_text is not None, "".join(lines)
    return "".join(lines), first_text


def _carries_text(line: str) -> bool:
    """A line with some of the answer (not the opening's empty content)."""
    return bool(re.search(r'"content":"[^"]|"text_delta"|"response.output_text.delta"', line))


@pytest.mark.parametrize(
    ("path", "body", "alive"),
    [
        ("/v1/chat/completions", chat_body(long_message("chat")), ": keepalive"),
        (
            "/v1/messages",
            {
                "model": "any",
                "max_tokens": 4,
                "temperature": 0,
                "messages": [{"role": "user", "content": long_message("messages")}],
            },
            "event: ping",
        ),
        (
            "/v1/responses",
            {
                "model": "any",
                "max_output_tokens": 16,
                "temperature": 0,
                "input": long_message("responses"),
            },
            "event: response.in_progress",
        ),
    ],
    ids=["chat", "messages", "responses"],
)
def test_a_client_with_a_short_idle_timeout_gets_through_a_long_prefill(
    idle: Server, path: str, body: dict, alive: str
):
    stream, first_text = stream_with_idle_timeout(idle, path, body)
    assert first_text > 2 * IDLE_S, "the prefill must outlast the client's idle timeout"
    # Said at least once per interval meanwhile (the opening's own ping or in_progress aside).
    assert stream.count(alive) >= first_text / IDLE_S, stream
    if path == "/v1/responses":
        assert ": keepalive" in stream
        assert re.search(r'"type":"response\.(completed|incomplete)"', stream)  # 16 tokens
    else:
        assert "error" not in stream


def test_a_prompt_cancelled_mid_prefill_is_reused_by_its_retry_in_every_api(idle: Server):
    text = long_message("retry", lines=80)  # ~1,700 tokens: the retry's cancel lands mid-prompt
    # What the slot holds of an earlier test's prompt until this one is begun: not this one's.
    stale = idle.request("GET", "/slots")[2]["slots"][0]["n_held"]
    conn = http.client.HTTPConnection(*idle.address, timeout=60)
    body = json.dumps(chat_body(text, stream=True))
    conn.request("POST", "/v1/chat/completions", body=body, headers=JSON_POST)
    assert conn.getresponse().status == 200
    held = wait_for_slot(idle, lambda slot: slot["busy"] and CHUNK <= slot["n_held"] != stale)
    conn.sock.shutdown(socket.SHUT_RDWR)  # the client gives up mid-prefill
    conn.close()
    idle.wait_idle()
    found = re.findall(r"cancelled with (\d+) of the prompt's (\d+) tokens", idle.log.read_text())
    assert found, idle.log.read_text()
    evaluated, n_prompt = map(int, found[-1])
    assert held <= evaluated < n_prompt - 1  # stopped within a chunk, before the end

    status, _, answer = idle.request("POST", "/v1/chat/completions", chat_body(text))
    assert status == 200
    usage = answer["usage"]
    assert usage["prompt_tokens"] == n_prompt
    assert usage["prompt_tokens_details"]["cached_tokens"] == evaluated

    # The same conversation through the other APIs: all of it is held now.
    messages = [{"role": "user", "content": text}]
    status, _, message = idle.request(
        "POST", "/v1/messages", {"model": "any", "max_tokens": 4, "messages": messages}
    )
    assert status == 200
    assert message["usage"]["cache_read_input_tokens"] > evaluated
    status, _, response = idle.request(
        "POST", "/v1/responses", {"model": "any", "max_output_tokens": 16, "input": text}
    )
    assert status == 200
    assert response["usage"]["input_tokens_details"]["cached_tokens"] > evaluated


def wait_for_slot(server: Server, ready, timeout: float = 120) -> int:
    """Poll /slots until the first slot is `ready`; the tokens it holds then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        slot = server.request("GET", "/slots")[2]["slots"][0]
        if ready(slot):
            return slot["n_held"]
        time.sleep(0.05)
    raise AssertionError("the slot never got there")


def test_a_state_too_big_for_the_cache_is_said_once_in_the_log(server: Server):
    """--cache-ram 1: the prompts above leave states of megabytes each, never copied."""
    server.wait_idle()
    said = server.log.read_text().count("the prompt cache keeps no state")
    assert said == 1, server.log.read_text()


def test_sigterm_mid_prefill_ends_the_server_within_2_s_with_every_client_answered(
    smol_f32: Path, tmp_path: Path
):
    started = serve(smol_f32, EXTRA, tmp_path / "stderr.txt", ctx=CTX, threads=THREADS)
    server = next(started)
    answers: dict[str, object] = {}

    def streamed() -> None:
        stream, _ = _read_stream(server, chat_body(long_message("term", lines=150)))
        answers["stream"] = stream

    def waiting() -> None:
        answers["waiting"] = server.request("POST", "/v1/chat/completions", chat_body("Hi."))

    clients = [threading.Thread(target=streamed), threading.Thread(target=waiting)]
    clients[0].start()
    wait_for_slot(server, lambda slot: slot["busy"])
    clients[1].start()
    deadline = time.monotonic() + 30
    while server.health()["waiting"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # well inside the first chunk of the prompt

    server.process.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    server.process.wait(timeout=30)
    took = time.monotonic() - signalled
    for client in clients:
        client.join(timeout=10)
    with pytest.raises(StopIteration):  # the fixture's own checks: exit 0, no traceback
        next(started)
    assert took < 2, f"the server took {took:.2f} s to stop"
    assert '"code":"cancelled"' in answers["stream"]
    status, _, body = answers["waiting"]
    assert status == 503 and body["error"]["code"] == "cancelled"


def _read_stream(server: Server, body: dict) -> tuple[str, int]:
    conn = http.client.HTTPConnection(*server.address, timeout=60)
    conn.request(
        "POST", "/v1/chat/completions", body=json.dumps({**body, "stream": True}), headers=JSON_POST
    )
    response = conn.getresponse()
    return response.read().decode(), response.status
