"""Workers for the target (`--rpc HOST:PORT,...`): addresses, a first look before llama.cpp
connects, what a failure means in one line, and a watchdog so that nothing waits forever.

No llama.cpp here: the first look runs `python -m specllama.llama.ggml_rpc probe` in a child
process, because ggml aborts the process that meets a failing worker (ggml-rpc.cpp,
GGML_ABORT); what happens later, in the process that generates, library.py turns into an
RpcError through the same `describe_abort`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from specllama.errors import RpcError, SpecllamaError, UsageError

DEFAULT_PORT = 50052  # llama.cpp's rpc-server's, and `specllama worker`'s
CONNECT_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 20.0
# Longest wait for the workers while they load weights or evaluate one batch (at most n_batch
# tokens): a worker that hangs, or a network that drops without closing the connection, is
# reported after this instead of waiting forever.
TIMEOUT_ENV = "SPECLLAMA_RPC_TIMEOUT"
DEFAULT_TIMEOUT_S = 120.0

WORKER_HINT = "start `specllama worker` there (or llama.cpp's rpc-server)"


@dataclass(frozen=True)
class WorkerDevice:
    name: str
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class Worker:
    endpoint: str
    devices: tuple[WorkerDevice, ...]

    @property
    def free_bytes(self) -> int:
        return sum(d.free_bytes for d in self.devices)

    @property
    def total_bytes(self) -> int:
        return sum(d.total_bytes for d in self.devices)


# -- addresses ---------------------------------------------------------------------------------


def parse_endpoints(text: str) -> tuple[str, ...]:
    """`HOST:PORT,HOST:PORT` -> normalised endpoints (a HOST alone gets the default port)."""
    found: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            raise UsageError(f"--rpc {text!r} has an empty address", hint="--rpc HOST:PORT,...")
        endpoint = _endpoint(part)
        if endpoint in found:
            raise UsageError(f"--rpc lists {endpoint} twice")
        found.append(endpoint)
    return tuple(found)


def _endpoint(part: str) -> str:
    if part.count(":") > 1 or part.startswith("["):
        raise UsageError(
            f"--rpc {part}: llama.cpp's RPC client takes IPv4 addresses and host names only",
            hint="use an IPv4 address or a host name",
        )
    host, _, port_text = part.partition(":")
    if not host or any(c.isspace() for c in host):
        raise UsageError(f"--rpc {part!r}: no host", hint="--rpc HOST:PORT,...")
    port = DEFAULT_PORT
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise UsageError(f"--rpc {part}: the port must be a number from 1 to 65535")
        port = int(port_text)
    return f"{host}:{port}"


def split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether `host` only reaches this machine: `worker` and `serve` warn otherwise."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def ipv4_of(host: str) -> str:
    """llama.cpp's RPC sockets are IPv4 only, and its server binds a literal address."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        raise RpcError(f"cannot resolve the host {host!r} to an IPv4 address") from None


# -- a first look, before llama.cpp connects -------------------------------------------------


def check_workers(
    endpoints: Sequence[str], *, version: str = "", timeout_s: float = PROBE_TIMEOUT_S
) -> list[Worker]:
    """Each worker reachable, speaking this build's protocol, and its devices' memory.
    `version`: this llama-cpp-python's, for the hint when the protocols differ."""
    for endpoint in endpoints:
        check_reachable(endpoint)
    command = [sys.executable, "-m", "specllama.llama.ggml_rpc", "probe", *endpoints]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        out, stderr, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        answered = {r.get("endpoint") for r in _records(out)}
        silent = next((e for e in endpoints if e not in answered), endpoints[-1])
        raise RpcError(
            f"the RPC worker at {silent} accepted the connection but did not answer within "
            f"{timeout_s:g} s",
            hint="a worker serves one client at a time: is another client using it? Is it an "
            "RPC worker at all?",
        ) from None
    workers = []
    for record in _records(out):
        if "error" in record:
            where = [record.get("endpoint") or ", ".join(endpoints)]
            error, log = record["error"], record.get("log", [])
            raise describe_abort(error, log, where, version, first_contact=True)
        devices = tuple(
            WorkerDevice(d["name"], d["free_bytes"], d["total_bytes"]) for d in record["devices"]
        )
        workers.append(Worker(record["endpoint"], devices))
    if code != 0 or len(workers) != len(endpoints):
        tail = stderr.strip().splitlines()[-1:] or [f"exit status {code}"]
        raise RpcError(f"could not look at the RPC workers: {tail[0]}")
    return workers


def _records(out: str) -> list[dict]:
    records = []
    for line in out.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def check_reachable(endpoint: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A TCP connection, with a timeout (llama.cpp's own connect has none)."""
    host, port = split(endpoint)
    address = ipv4_of(host)
    try:
        socket.create_connection((address, port), timeout=timeout_s).close()
    except ConnectionRefusedError:
        raise RpcError(f"nothing listens on {endpoint}", hint=WORKER_HINT) from None
    except TimeoutError:
        raise RpcError(
            f"{endpoint} did not accept a connection within {timeout_s:g} s",
            hint="check the address, and that a firewall lets the port through",
        ) from None
    except OSError as exc:
        raise RpcError(f"cannot connect to {endpoint}: {exc.strerror or exc}") from None


def describe_abort(
    message: str,
    log: Sequence[str],
    endpoints: Sequence[str],
    version: str = "",
    *,
    first_contact: bool = False,
) -> RpcError:
    """ggml's abort message (and its last log lines) -> what happened, in one line.
    `first_contact`: in the first look at a worker, before it served anything."""
    where = ", ".join(endpoints)
    same = "install the same llama-cpp-python version on both machines" + (
        f" (here: {version})" if version else ""
    )
    mismatch = next((line for line in log if "version mismatch" in line), None)
    if mismatch is not None:
        theirs = mismatch.rsplit(":", 1)[-1].strip()
        return RpcError(
            f"the RPC worker at {where} speaks RPC protocol {theirs}, not this build's",
            hint=same,
        )
    if "handshake failed" in message:
        return RpcError(f"the RPC worker at {where} refused the handshake", hint=same)
    if "Failed to connect" in message:
        return RpcError(f"could not connect to the RPC worker at {where}", hint=WORKER_HINT)
    if "crashed or returned malformed response" in message:
        if first_contact:  # e.g. a worker whose protocol's handshake is another size
            return RpcError(
                f"the RPC worker at {where} closed the connection during the handshake",
                hint=f"is it an RPC worker? If so, {same}",
            )
        gone = [e for e in endpoints if not _accepts(e)] or list(endpoints)
        return RpcError(
            f"lost the connection to the RPC worker at {', '.join(gone)}",
            hint="it stopped, or the network dropped; the answer is incomplete",
        )
    return RpcError(f"llama.cpp's RPC backend failed: {message.split(': ', 1)[-1]}")


def _accepts(endpoint: str, timeout_s: float = 1.0) -> bool:
    host, port = split(endpoint)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
        return True
    except OSError:
        return False


def check_port_free(address: str, port: int) -> None:
    """Bind as ggml's server will (SO_REUSEADDR), and let go: a taken port is a clear error."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((address, port))
    except OSError as exc:
        raise RpcError(
            f"cannot listen on {address}:{port}: {exc.strerror or exc}",
            hint="another worker may use the port: choose one with --port",
        ) from None
    finally:
        probe.close()


def wait_listening(endpoint: str, alive: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """True once `endpoint` accepts connections; False when `alive()` turns false first."""
    host, port = split(endpoint)
    if host == "0.0.0.0":
        host = "127.0.0.1"
    deadline = time.monotonic() + timeout_s
    while alive() and time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1.0).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def timeout_from_env() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        raise UsageError(f"{TIMEOUT_ENV}={text!r} is not a number of seconds") from None
    if value <= 0:
        raise UsageError(f"{TIMEOUT_ENV} must be positive, got {text}")
    return value


# -- errors the process cannot survive -------------------------------------------------------

FatalHandler = Callable[[SpecllamaError], None]
_fatal_handler: list[FatalHandler] = []


def set_fatal_handler(handler: FatalHandler) -> None:
    """What reports an error the process cannot survive (an RPC worker lost in the middle of a
    decode: llama.cpp aborts, or waits forever). The process ends after it, with the error's
    exit code. The default writes one line on stderr."""
    _fatal_handler[:] = [handler]


def fatal(error: SpecllamaError) -> None:
    """Report `error` (the handler above), then end the process at once: no return."""
    try:
        (_fatal_handler[0] if _fatal_handler else _write_fatal)(error)
    finally:
        os._exit(error.exit_code)


def _write_fatal(error: SpecllamaError) -> None:
    hint = f" (hint: {error.hint})" if error.hint else ""
    sys.stderr.write(f"error: {error}{hint}\n")
    sys.stderr.flush()


# -- the watchdog --------------------------------------------------------------------------------


class Watchdog:
    """Calls `on_timeout` when an `armed()` span goes `timeout_s` without `feed()`.

    llama.cpp waits for a worker's answer without a timeout, inside a C call that Python cannot
    interrupt, so `on_timeout` must end the process (`fatal` above does).
    """

    def __init__(self, timeout_s: float, on_timeout: Callable[[], None]) -> None:
        self.timeout_s = timeout_s
        self._on_timeout = on_timeout
        self._deadline: float | None = None
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    @contextmanager
    def armed(self) -> Iterator[None]:
        with self._wake:
            self._deadline = time.monotonic() + self.timeout_s
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True)
                self._thread.start()
            self._wake.notify()
        try:
            yield
        finally:
            with self._wake:  # under the lock: a span that ended is never reported
                self._deadline = None

    def feed(self) -> None:
        """Progress: the span gets its full timeout again."""
        with self._wake:
            if self._deadline is not None:
                self._deadline = time.monotonic() + self.timeout_s

    def _watch(self) -> None:
        with self._wake:
            while True:
                deadline = self._deadline
                if deadline is None:
                    self._wake.wait()
                elif time.monotonic() >= deadline:
                    self._on_timeout()
                    self._deadline = None
                else:
                    self._wake.wait(deadline - time.monotonic())


def timeout_error(endpoints: Sequence[str], timeout_s: float) -> RpcError:
    return RpcError(
        f"the RPC worker at {', '.join(endpoints)} did not answer within {timeout_s:g} s",
        hint=f"it may hang, or the network may be down; {TIMEOUT_ENV} sets the limit",
    )
