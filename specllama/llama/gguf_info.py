"""What a GGUF file's header says about its tensors, read in pure Python (no llama.cpp).

Used to tell, before a model is loaded, whether it holds tensors of the types llama.cpp's AMX
kernels take (see `specllama.llama.amx`). Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
(version 2 and 3: little-endian, 64-bit counts and lengths).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from specllama.errors import ModelLoadError

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# Byte size of each fixed-size metadata value type (uint8, int8, uint16, int16, uint32, int32,
# float32, bool, -, -, uint64, int64, float64).
_VALUE_SIZE = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def tensor_types(path: Path) -> set[int]:
    """The ggml type ids (GGML_TYPE_*) of the tensors in a GGUF file."""
    try:
        with open(path, "rb") as f:
            return _read_tensor_types(f)
    except (OSError, struct.error, KeyError, ValueError) as exc:
        raise ModelLoadError(f"cannot read the GGUF header of {path}: {exc}") from None


def _read_tensor_types(f: BinaryIO) -> set[int]:
    if f.read(4) != _MAGIC:
        raise ValueError("not a GGUF file")
    (version,) = _unpack(f, "<I")
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old")
    n_tensors, n_kv = _unpack(f, "<QQ")
    for _ in range(n_kv):
        _skip_string(f)  # the key
        (value_type,) = _unpack(f, "<I")
        _skip_value(f, value_type)
    types = set()
    for _ in range(n_tensors):
        _skip_string(f)  # the name
        (n_dims,) = _unpack(f, "<I")
        f.seek(8 * n_dims, 1)  # the dimensions
        tensor_type, _offset = _unpack(f, "<IQ")
        types.add(tensor_type)
    return types


def _unpack(f: BinaryIO, fmt: str) -> tuple[int, ...]:
    size = struct.calcsize(fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("the file ends inside its header")
    return struct.unpack(fmt, data)


def _skip_string(f: BinaryIO) -> None:
    (length,) = _unpack(f, "<Q")
    f.seek(length, 1)


def _skip_value(f: BinaryIO, value_type: int) -> None:
    if value_type == _STRING:
        _skip_string(f)
    elif value_type == _ARRAY:
        item_type, count = _unpack(f, "<IQ")
        if item_type in _VALUE_SIZE:
            f.seek(_VALUE_SIZE[item_type] * count, 1)
        else:  # strings (token texts) and nested arrays: one by one
            for _ in range(count):
                _skip_value(f, item_type)
    else:
        f.seek(_VALUE_SIZE[value_type], 1)
