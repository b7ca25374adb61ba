"""ctypes bindings to ggml's device list and RPC backend, which llama-cpp-python does not bind.

In-process only `specllama.llama.library` uses this module. The other user is a child
process: `python -m specllama.llama.ggml_rpc probe HOST:PORT...`, started by
`specllama.llama.rpc` to look at the workers before the real client connects. ggml aborts the
whole process on any RPC failure (GGML_ABORT in ggml-rpc.cpp: a refused connection, a refused
handshake, a connection lost mid-answer), so the first contact is made where dying is harmless.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections import deque
from dataclasses import asdict, dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

# enum ggml_backend_dev_type (ggml-backend.h)
DEVICE_CPU, DEVICE_GPU, DEVICE_IGPU = 0, 1, 2

ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)  # ggml_abort_callback_t
LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

_P = ctypes.c_void_p
_SIZE = ctypes.c_size_t
_SIGNATURES: dict[str, tuple[str, list, object]] = {
    # name: (library, argtypes, restype)
    "ggml_backend_dev_count": ("ggml", [], _SIZE),
    "ggml_backend_dev_get": ("ggml", [_SIZE], _P),
    "ggml_backend_dev_type": ("base", [_P], ctypes.c_int),
    "ggml_backend_dev_name": ("base", [_P], ctypes.c_char_p),
    "ggml_backend_dev_description": ("base", [_P], ctypes.c_char_p),
    "ggml_backend_dev_memory": ("base", [_P, ctypes.POINTER(_SIZE), ctypes.POINTER(_SIZE)], None),
    "ggml_backend_reg_dev_count": ("base", [_P], _SIZE),
    "ggml_backend_reg_dev_get": ("base", [_P, _SIZE], _P),
    "ggml_set_abort_callback": ("base", [ABORT_CALLBACK], _P),
    "ggml_log_set": ("base", [LOG_CALLBACK, _P], None),
    "ggml_backend_rpc_add_server": ("rpc", [ctypes.c_char_p], _P),
    "ggml_backend_rpc_start_server": (
        "rpc",
        [ctypes.c_char_p, ctypes.c_char_p, _SIZE, _SIZE, _P],
        None,
    ),
}


@dataclass(frozen=True)
class Device:
    name: str
    description: str
    free_bytes: int
    total_bytes: int
    kind: int = DEVICE_CPU
    handle: int = 0  # ggml_backend_dev_t: valid in this process only

    @property
    def is_cpu(self) -> bool:
        return self.kind == DEVICE_CPU


def library_folder() -> Path:
    """Where llama-cpp-python keeps its native libraries (as llama_cpp itself finds them)."""
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override:
        return Path(override)
    spec = find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise OSError("llama_cpp is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def _open_library(folder: Path, stem: str) -> ctypes.CDLL | None:
    """The copy of lib`stem` that this process uses. A wheel cannot hold symlinks, so the folder
    has libggml-base.so, .so.0 and .so.0.25.3 as three files: opening another one than llama.cpp
    did would load a second ggml, with its own abort callback and device list."""
    prefixes = (f"lib{stem}.", f"{stem}.")
    found = [p for p in folder.glob(f"*{stem}.*") if p.name.startswith(prefixes)]
    found = [p for p in found if ".so" in p.name or p.suffix in (".dylib", ".dll")]
    # The soname first (libggml-base.so.0: what the other libraries ask for), then shortest.
    found.sort(key=lambda p: (p.name.partition(".so")[2].count(".") != 1, len(p.name)))
    no_load = getattr(os, "RTLD_NOLOAD", 0)
    for path in found if no_load else ():  # the copy already loaded, if there is one
        try:
            return ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL | no_load)
        except OSError:
            continue
    return ctypes.CDLL(str(found[0]), mode=ctypes.RTLD_GLOBAL) if found else None


class Ggml:
    """The ggml libraries of one llama-cpp-python install. Loading them again in a process that
    already has them (through llama_cpp) returns the same libraries, with the same device list."""

    def __init__(self, folder: Path) -> None:
        self.libs: dict[str, ctypes.CDLL] = {}
        for key, stem in (("base", "ggml-base"), ("ggml", "ggml"), ("rpc", "ggml-rpc")):
            library = _open_library(folder, stem)
            if library is not None:
                self.libs[key] = library
        if "base" not in self.libs:
            raise OSError(f"no ggml library in {folder}")
        for name, (key, argtypes, restype) in _SIGNATURES.items():
            if key in self.libs:
                function = getattr(self.libs[key], name)
                function.argtypes, function.restype = argtypes, restype
        self._callbacks: list[object] = []  # ctypes callbacks must outlive their registration

    @property
    def has_rpc(self) -> bool:
        return "rpc" in self.libs

    def _fn(self, name: str) -> Any:
        return getattr(self.libs[_SIGNATURES[name][0]], name)

    def describe(self, handle: int) -> Device:
        free, total = _SIZE(0), _SIZE(0)
        self._fn("ggml_backend_dev_memory")(handle, ctypes.byref(free), ctypes.byref(total))
        return Device(
            name=(self._fn("ggml_backend_dev_name")(handle) or b"").decode(),
            description=(self._fn("ggml_backend_dev_description")(handle) or b"").decode(),
            free_bytes=free.value,
            total_bytes=total.value,
            kind=self._fn("ggml_backend_dev_type")(handle),
            handle=handle,
        )

    def local_devices(self) -> list[Device]:
        """Every device registered in this process: the CPU, GPUs, accelerators. RPC workers
        are never registered here (library.py hands them to the target model only)."""
        count = self._fn("ggml_backend_dev_count")()
        return [self.describe(self._fn("ggml_backend_dev_get")(i)) for i in range(count)]

    def add_server(self, endpoint: str) -> list[int]:
        """Connect to a worker: its devices' handles (ggml aborts the process if it cannot)."""
        reg = self._fn("ggml_backend_rpc_add_server")(endpoint.encode())
        if not reg:  # the worker offers no device
            return []
        count = self._fn("ggml_backend_reg_dev_count")(reg)
        return [self._fn("ggml_backend_reg_dev_get")(reg, i) for i in range(count)]

    def start_server(self, endpoint: str, devices: list[Device], threads: int) -> None:
        """Serve `devices` on `endpoint` (an IPv4 address:port): returns only if it cannot
        listen; one client at a time, as llama.cpp's rpc-server."""
        handles = (_P * len(devices))(*(d.handle for d in devices))
        start = self._fn("ggml_backend_rpc_start_server")
        start(endpoint.encode(), None, threads, len(devices), ctypes.cast(handles, _P))

    def set_abort_callback(self, callback: Any) -> None:
        """`callback`: an ABORT_CALLBACK, called with ggml's message before it aborts."""
        self._callbacks.append(callback)
        self._fn("ggml_set_abort_callback")(callback)

    def set_log_callback(self, callback: Any) -> None:
        """`callback`: a LOG_CALLBACK (llama_log_set does this for llama.cpp and ggml alike)."""
        self._callbacks.append(callback)
        self._fn("ggml_log_set")(callback, None)


# -- the probe: a child process's first look at the workers ------------------------------------


def probe(endpoints: list[str]) -> int:
    """One JSON line per worker on stdout: its devices, or the error that ended the probe.
    Exit status 0 when every worker answered."""
    ggml = Ggml(library_folder())
    if not ggml.has_rpc:
        print(json.dumps({"endpoint": None, "error": "no RPC backend in this build"}), flush=True)
        return 2
    log: deque[str] = deque(maxlen=8)
    current: list[str] = [""]

    @LOG_CALLBACK
    def keep_log(level: int, text: bytes, _user: object) -> None:
        log.append((text or b"").decode("utf-8", "replace").strip())

    @ABORT_CALLBACK
    def report_abort(message: bytes) -> None:
        text = (message or b"").decode("utf-8", "replace").strip()
        record = {"endpoint": current[0], "error": text, "log": [line for line in log if line]}
        print(json.dumps(record), flush=True)
        os._exit(3)  # ggml would abort() next: end here, cleanly

    ggml.set_log_callback(keep_log)
    ggml.set_abort_callback(report_abort)
    for endpoint in endpoints:
        current[0] = endpoint
        devices = [ggml.describe(handle) for handle in ggml.add_server(endpoint)]
        if not devices:
            print(json.dumps({"endpoint": endpoint, "error": "the worker offers no device"}))
            return 3
        fields = [{k: v for k, v in asdict(d).items() if k != "handle"} for d in devices]
        print(json.dumps({"endpoint": endpoint, "devices": fields}), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["probe"] or len(sys.argv) < 3:
        sys.exit("usage: python -m specllama.llama.ggml_rpc probe HOST:PORT [HOST:PORT...]")
    sys.exit(probe(sys.argv[2:]))
