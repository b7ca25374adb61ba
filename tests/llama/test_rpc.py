"""`--rpc` without models: addresses, the first look at a worker (against fake workers that
answer the handshake wrongly or not at all), what an abort means, and the watchdog."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import rpc_workers

from specllama.errors import RpcError, UsageError
from specllama.llama import rpc

needs_rpc = rpc_workers.needs_rpc


def test_endpoints_are_normalised_and_checked() -> None:
    assert rpc.parse_endpoints("10.0.0.2:50052, gpu-box:6000") == ("10.0.0.2:50052", "gpu-box:6000")
    assert rpc.parse_endpoints("10.0.0.2") == ("10.0.0.2:50052",)  # the worker's default port
    for bad, fragment in [
        ("a:1,,b:2", "empty"),
        ("host:0", "port"),
        ("host:http", "port"),
        ("host:70000", "port"),
        (":5000", "no host"),
        ("::1:5000", "IPv4"),
        ("[::1]:5000", "IPv4"),
        ("a:1,a:1", "twice"),
    ]:
        with pytest.raises(UsageError, match=fragment):
            rpc.parse_endpoints(bad)


def test_nothing_listening_and_unknown_hosts_are_clear_errors() -> None:
    port = rpc_workers.free_port()
    with pytest.raises(RpcError, match=f"nothing listens on 127.0.0.1:{port}") as caught:
        rpc.check_reachable(f"127.0.0.1:{port}")
    assert "specllama worker" in (caught.value.hint or "")
    with pytest.raises(RpcError, match="cannot resolve"):
        rpc.check_reachable("no-such-host.invalid:50052")


def test_a_taken_port_is_refused_before_ggml_binds_it() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RpcError, match=f"cannot listen on 127.0.0.1:{port}"):
            rpc.check_port_free("127.0.0.1", port)
    rpc.check_port_free("127.0.0.1", port)  # free again


def test_abort_messages_become_one_line_each() -> None:
    where = ["127.0.0.1:1"]  # nothing listens on port 1: the lost worker is named
    lost = rpc.describe_abort(
        "ggml/src/ggml-rpc/ggml-rpc.cpp:566: Remote RPC server crashed or returned malformed "
        "response",
        [],
        where,
    )
    assert str(lost) == "lost the connection to the RPC worker at 127.0.0.1:1"
    old = rpc.describe_abort(
        "ggml-rpc.cpp:550: RPC handshake failed for 127.0.0.1:1",
        ["load_tensors: something", "RPC server version mismatch: 6.1.0"],
        where,
        "0.3.36",
    )
    assert "speaks RPC protocol 6.1.0" in str(old) and "0.3.36" in (old.hint or "")
    refused = rpc.describe_abort("ggml-rpc.cpp:547: Failed to connect to 127.0.0.1:1", [], where)
    assert str(refused) == "could not connect to the RPC worker at 127.0.0.1:1"
    other = rpc.describe_abort("ggml-rpc.cpp:1: something new", [], where)
    assert str(other) == "llama.cpp's RPC backend failed: something new"


def test_the_watchdog_fires_only_when_an_armed_span_runs_too_long() -> None:
    fired: list[float] = []
    dog = rpc.Watchdog(0.3, lambda: fired.append(time.monotonic()))
    with dog.armed():  # fed in time: never fires
        for _ in range(6):
            time.sleep(0.1)
            dog.feed()
    time.sleep(0.5)  # disarmed: never fires
    assert fired == []
    started = time.monotonic()
    with dog.armed():
        time.sleep(0.6)
    assert len(fired) == 1 and 0.25 < fired[0] - started < 0.5


def test_the_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(rpc.TIMEOUT_ENV, raising=False)
    assert rpc.timeout_from_env() == rpc.DEFAULT_TIMEOUT_S
    monkeypatch.setenv(rpc.TIMEOUT_ENV, "2.5")
    assert rpc.timeout_from_env() == 2.5
    for bad in ("soon", "0", "-1"):
        monkeypatch.setenv(rpc.TIMEOUT_ENV, bad)
        with pytest.raises(UsageError, match=rpc.TIMEOUT_ENV):
            rpc.timeout_from_env()


# -- fake workers: the probe against answers a real worker of this version never gives -------


def _fake_worker(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                client, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(client, done), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    done.set()
    server.close()


def _answer_hello_as_version_99(client: socket.socket, done: threading.Event) -> None:
    with client:
        head = client.recv(9)  # command byte (HELLO = 14), request size
        if len(head) < 9:
            return
        size = struct.unpack("<Q", head[1:])[0]
        caps = client.recv(size)
        # rpc_msg_hello_rsp: major, minor, patch, padding, then the connection capabilities
        reply = bytes([99, 0, 0, 0]) + bytes(len(caps))
        client.sendall(struct.pack("<Q", len(reply)) + reply)
        done.wait(5)


def _never_answer(client: socket.socket, done: threading.Event) -> None:
    with client:
        done.wait(30)


@pytest.fixture
def version_99() -> Iterator[str]:
    yield from _fake_worker(_answer_hello_as_version_99)


@pytest.fixture
def silent() -> Iterator[str]:
    yield from _fake_worker(_never_answer)


@needs_rpc
def test_a_worker_of_another_protocol_version_is_named_with_its_version(version_99: str) -> None:
    with pytest.raises(RpcError) as caught:
        rpc.check_workers([version_99], version="0.3.36")
    assert str(caught.value) == f"the RPC worker at {version_99} speaks RPC protocol 99.0.0, " + (
        "not this build's"
    )
    assert "same llama-cpp-python version" in (caught.value.hint or "")


@needs_rpc
def test_a_worker_that_never_answers_times_out(silent: str) -> None:
    started = time.monotonic()
    with pytest.raises(RpcError, match=f"at {silent} accepted the connection but did not answer"):
        rpc.check_workers([silent], timeout_s=2)
    assert time.monotonic() - started < 10


@needs_rpc
def test_an_rpc_abort_in_this_process_is_one_line_and_exit_1() -> None:
    """A worker gone between the first look and llama.cpp's own connection: ggml aborts in the
    process that generates, and the abort callback (on the very ggml llama.cpp loaded, not a
    second copy of it) makes that one line and exit code 1."""
    port = rpc_workers.free_port()
    code = (
        "from specllama.llama import library\n"
        f"library.rpc_devices(['127.0.0.1:{port}'])\n"
        "print('not reached')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "not reached" not in done.stdout
    assert done.stderr.strip() == (
        f"error: could not connect to the RPC worker at 127.0.0.1:{port} "
        "(hint: start `specllama worker` there (or llama.cpp's rpc-server))"
    )


def test_loopback_addresses():
    assert all(map(rpc.is_loopback, ["127.0.0.1", "::1", "localhost", "127.0.0.2"]))
    assert not any(map(rpc.is_loopback, ["0.0.0.0", "::", "192.168.1.10", "example.org"]))
