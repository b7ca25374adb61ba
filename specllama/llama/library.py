"""The llama.cpp library, loaded once: its log routed to Python logging, what this build can do,
and ggml's devices and RPC workers (with the abort an RPC failure ends in, made one line).

Every module of `specllama.llama` that calls llama.cpp gets it from `load_llama()`.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from specllama.errors import RpcError
from specllama.llama import ggml_rpc, rpc

log = logging.getLogger("specllama.llama_cpp")

# llama.cpp's and ggml's last log lines: what an abort message alone does not say (the RPC
# client logs "RPC server version mismatch: 6.0.0", then aborts with "handshake failed").
_recent_log: deque[str] = deque(maxlen=8)


@cache
def load_llama():
    """Import llama_cpp once, and route its log lines to Python logging (debug level)."""
    import llama_cpp

    @llama_cpp.llama_log_callback
    def to_logging(level: int, text: bytes, _user_data: ctypes.c_void_p) -> None:
        _recent_log.append(text.decode("utf-8", "replace").strip())
        if log.isEnabledFor(logging.DEBUG):
            log.debug(_recent_log[-1])

    llama_cpp.llama_log_set(to_logging, ctypes.c_void_p(0))
    load_llama.callback = to_logging  # keep the ctypes callback alive
    llama_cpp.llama_backend_init()
    return llama_cpp


@dataclass(frozen=True)
class BuildFacts:
    """What this llama.cpp build can do."""

    version: str
    gpu_offload: bool  # a local GPU: RPC workers do not count
    system_info: str
    library: str = ""  # the libllama file loaded (a rebuild changes its size and time)
    rpc: bool = False  # built with ggml's RPC backend (-DGGML_RPC=ON): --rpc and `worker`

    @property
    def build_id(self) -> dict[str, object]:
        """What tells this build from another, for caches of what was learnt about it."""
        try:
            st = os.stat(self.library)
            file_id: list[object] = [self.library, st.st_size, st.st_mtime_ns]
        except OSError:
            file_id = [self.library]
        return {"version": self.version, "system_info": self.system_info, "library": file_id}


@cache
def build_facts() -> BuildFacts:
    llama_cpp = load_llama()
    has_rpc = bool(llama_cpp.llama_supports_rpc())
    # llama_supports_gpu_offload() says yes for any build with RPC (workers count as GPUs):
    # with RPC, ask ggml for a local GPU instead.
    gpu_offload = bool(llama_cpp.llama_supports_gpu_offload())
    if gpu_offload and has_rpc:
        gpu_offload = bool(_local_gpus())
    return BuildFacts(
        version=llama_cpp.__version__,
        gpu_offload=gpu_offload,
        system_info=llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
        library=str(getattr(llama_cpp.llama_cpp._lib, "_name", "")),
        rpc=has_rpc,
    )


# -- ggml: devices, RPC workers, and the abort that an RPC failure ends in ---------------------


@cache
def _ggml() -> ggml_rpc.Ggml:
    """ggml's own functions, from the libraries llama_cpp loaded."""
    return ggml_rpc.Ggml(Path(load_llama().llama_cpp._lib._name).parent)


def _local_gpus() -> list[ggml_rpc.Device]:
    kinds = (ggml_rpc.DEVICE_GPU, ggml_rpc.DEVICE_IGPU)
    return [d for d in _ggml().local_devices() if d.kind in kinds]


_rpc_endpoints: list[str] = []  # the workers this process uses, named when one is lost


@ggml_rpc.ABORT_CALLBACK
def _on_abort(message: bytes) -> None:
    """ggml is about to abort(): an RPC failure becomes one line and exit 1; anything else
    (a bug) is printed and aborts as before."""
    text = (message or b"").decode("utf-8", "replace").strip()
    if "ggml-rpc" not in text or os.environ.get("SPECLLAMA_DEBUG") == "1":
        sys.stderr.write(text + "\n")
        return
    rpc.fatal(rpc.describe_abort(text, list(_recent_log), _rpc_endpoints, build_facts().version))


def _check_rpc() -> None:
    if not build_facts().rpc:
        raise RpcError(
            "this llama-cpp-python was built without RPC",
            hint="`specllama doctor` shows the reinstall that adds it",
        )


def rpc_devices(endpoints: Sequence[str]) -> list[int]:
    """The target's devices with --rpc: every worker's, then this machine's GPUs (llama.cpp's
    order: the workers first, to keep the transfers down); the CPU takes what is left."""
    _check_rpc()
    if not _rpc_endpoints:
        _ggml().set_abort_callback(_on_abort)
    _rpc_endpoints.extend(e for e in endpoints if e not in _rpc_endpoints)
    remote = [handle for endpoint in endpoints for handle in _ggml().add_server(endpoint)]
    return remote + [d.handle for d in _local_gpus()]


def worker_devices(gpu: bool | None) -> list[ggml_rpc.Device]:
    """What `specllama worker` serves: this machine's GPUs (gpu None: when it has any), or its
    CPU (gpu False, or None without a GPU)."""
    _check_rpc()
    gpus = _local_gpus() if gpu is not False else []
    if gpu and not gpus:
        raise RpcError("this machine has no GPU this llama.cpp build can use", hint="--cpu")
    if gpus:
        return gpus
    return [d for d in _ggml().local_devices() if d.kind == ggml_rpc.DEVICE_CPU][:1]


def serve_rpc(endpoint: str, devices: Sequence[ggml_rpc.Device], threads: int) -> None:
    """ggml's RPC server on `endpoint` (IPv4:port); returns only if it cannot listen."""
    _ggml().start_server(endpoint, list(devices), threads)
