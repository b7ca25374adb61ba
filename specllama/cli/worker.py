"""`specllama worker`: this machine's GPUs (or its CPU) served to other machines with ggml's own
RPC server (what llama.cpp's rpc-server runs, here in-process), so that a client's `--rpc` puts
its target's layers here. One client at a time; no authentication: trusted networks only.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading

from rich.console import Console

from specllama.cli import ui
from specllama.errors import RpcError
from specllama.llama import backend, library, rpc

log = logging.getLogger("specllama.cli.worker")

_VERSION = re.compile(r"Starting RPC server v(\S+)")


def run(host: str, port: int, *, gpu: bool | None, threads: int | None) -> None:
    """Serve until Ctrl-C, then leave with exit code 0."""
    console = ui.stderr_console()
    try:
        serve(host, port, gpu=gpu, threads=threads, console=console)
    except KeyboardInterrupt:
        console.print("[dim]worker stopped[/dim]")
        sys.stderr.flush()
        # The server thread is inside ggml, maybe serving a client: end the process without
        # running C++ teardown under it.
        os._exit(0)


def serve(host: str, port: int, *, gpu: bool | None, threads: int | None, console: Console) -> None:
    """Serve until interrupted (KeyboardInterrupt); RpcError when it cannot start."""
    devices = library.worker_devices(gpu)
    address = rpc.ipv4_of(host)  # ggml's server binds a literal IPv4 address
    endpoint = f"{address}:{port}"
    rpc.check_port_free(address, port)  # ggml's own bind failure would say nothing useful
    if not rpc.is_loopback(address):
        ui.print_warning(
            f"listening on {host}: the RPC protocol has no authentication, so anyone who can "
            "reach this port can use this machine's backend and memory. Trusted networks only.",
            console,
        )
    version = _quiet_server_output()
    threads = threads or backend.default_threads()
    server = threading.Thread(
        target=library.serve_rpc, args=(endpoint, devices, threads), daemon=True
    )
    server.start()
    if not rpc.wait_listening(endpoint, server.is_alive):
        raise RpcError(f"could not listen on {endpoint}")
    version.wait(2.0)  # ggml prints its banner when the first connection (ours) is accepted
    protocol = f"RPC protocol {version.text}" if version.text else "RPC"
    served = " + ".join(
        f"{d.name} ({d.description}, {d.free_bytes / 1e9:.1f} GB free)" for d in devices
    )
    if any(d.is_cpu for d in devices):
        served += f", {threads} thread{'s' if threads > 1 else ''}"
    ui.print_serving(
        endpoint,
        [
            f"{protocol} · serving {served}",
            f"clients: specllama run --rpc {host}:{port} … (one at a time; the draft stays "
            "on the client)",
            "Ctrl-C stops the worker",
        ],
        console,
        title="specllama worker ",
    )
    while server.is_alive():
        server.join(0.5)
    raise RpcError(f"the RPC server on {endpoint} stopped")


class _Version(threading.Event):
    text = ""


def _quiet_server_output() -> _Version:
    """ggml's server prints its banner and a line per connection on C's stdout (the client's
    first look adds a few connections of its own). Catch them: keep the protocol version for
    our banner, log the rest at debug level. specllama itself prints on stderr only."""
    version = _Version()
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    os.dup2(write_end, 1)
    os.close(write_end)

    def read() -> None:
        with os.fdopen(read_end, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                found = _VERSION.search(line)
                if found:
                    version.text = found.group(1)
                    version.set()
                log.debug(line.rstrip())

    threading.Thread(target=read, daemon=True).start()
    return version
