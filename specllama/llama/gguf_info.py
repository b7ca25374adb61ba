"""What a GGUF file's header says, read in pure Python (no llama.cpp, no weights).

`read_header` gives what the local model listing needs: architecture, name, size label,
parameters (the tensors' element counts), quantisation, context length, the multi-token
prediction ("nextn") layers the file carries, and the vocabulary facts llama.cpp compares (with a
`VocabPrint` of the token texts). `tensor_types` tells whether a model holds tensors of the types
llama.cpp's AMX kernels take (see `specllama.llama.amx`).

Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md (version 2 and 3:
little-endian, 64-bit counts and lengths). Only the header is read, in growing chunks: a 150k-token
vocabulary makes it ~6 MB (the token texts and as many BPE merges), which dominates the time.
"""

from __future__ import annotations

import math
import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from specllama.errors import ModelLoadError
from specllama.llama.vocab import (
    FIRST_CHECKED_TOKEN,
    VOCAB_DEFAULTS,
    VOCAB_TYPES,
    VocabInfo,
    VocabPrint,
    tail_start,
)

_MAGIC = b"GGUF"
_STRING, _ARRAY = 8, 9
# Fixed-size metadata value types: struct format (uint8, int8, uint16, int16, uint32, int32,
# float32, bool, -, -, uint64, int64, float64).
_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_SIZES = {t: struct.calcsize(f) for t, f in _FORMATS.items()}
_U64 = struct.Struct("<Q").unpack_from
_MAX_DIMS = 8  # ggml has 4; more means a damaged header
_ALIGNMENT = 32  # GGUF_DEFAULT_ALIGNMENT
_NEXT_KEY = b"\x00" * 7 + b"tokenizer."
_KEY = re.compile(rb"[!-~]+")
_MAX_KEY_BYTES = 256
_MAX_STRING_BYTES = 1024  # per string, to bound the search for the key after an array

# llama.h's llama_ftype -> the name llama.cpp's tools print ("general.file_type").
FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S",
    29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
    38: "MXFP4_MOE",
}  # fmt: skip


# The architectures of draft heads that public GGUFs use for llama.cpp forks (buun-llama-cpp,
# Lucebox), not llama.cpp's own `dflash` (convert_hf_to_gguf.py --target-model-dir writes that).
_FORK_HEADS = {"dflash-draft": "dflash", "gemma4-dflash-draft": "dflash"}
# The drafter each draft head's architecture needs.
_HEAD_KINDS = {"eagle3": "eagle3", "dflash": "dflash", "gemma4-assistant": "assistant"}


@dataclass(frozen=True)
class GgufHeader:
    architecture: str | None
    name: str | None
    basename: str | None
    size_label: str | None  # "1.5B", as the converter wrote it
    file_type: int | None  # general.file_type (llama_ftype)
    context_length: int | None  # the training context, {arch}.context_length
    n_params: int  # the tensors' element counts, in this file (one part of a split model)
    tensor_types: frozenset[int]
    split_count: int  # split.count: this file is part split.no of that many (1: not split)
    vocab: VocabInfo | None  # None: no vocabulary (or a tokenizer llama.cpp does not know)
    vocab_print: VocabPrint | None
    tokenizer: str | None  # tokenizer.ggml.model ("gpt2", "llama", ...)
    tokenizer_pre: str | None
    # {arch}.nextn_predict_layers: multi-token prediction (MTP) layers in this file, 0 when the
    # key is absent. Qwen3.5/3.6, GLM, DeepSeek V3 files carry them beside the trunk (many
    # converters strip them); a Gemma 4 assistant file is nothing but them.
    n_nextn: int = 0
    embedding_length: int | None = None  # {arch}.embedding_length: the width of its rows
    # {arch}.target_hidden_size: a draft head's (EAGLE-3): the width of the target rows it reads
    target_hidden_size: int | None = None
    # {arch}.embedding_length_out: a Gemma 4 assistant's: the width of the target rows it reads
    embedding_length_out: int | None = None
    # What one token's keys and values take in an F16 KV cache, every layer; None where the
    # header does not say (per-layer head counts, no attention)
    kv_bytes_per_token: int | None = None

    @property
    def has_mtp(self) -> bool:
        """The file carries its own multi-token prediction layers (a draft head)."""
        return self.n_nextn > 0

    @property
    def drafts_for(self) -> str | None:
        """The architecture of the only models this draft head drafts for (a Gemma 4
        assistant's: gemma4), None where any model may fit."""
        if self.head_kind != "assistant":
            return None
        return (self.architecture or "").removesuffix("-assistant")

    @property
    def head_kind(self) -> str | None:
        """The drafter a draft-head file needs ("eagle3", "dflash", "assistant" for a Gemma 4
        assistant), None for a model that runs alone."""
        return _HEAD_KINDS.get(self.architecture or "")

    @property
    def fork_head(self) -> str | None:
        """A draft head written for a llama.cpp fork, which llama.cpp does not load: the kind it
        would be ("dflash"), None for anything else."""
        return _FORK_HEADS.get(self.architecture or "")

    @property
    def quant(self) -> str | None:
        if self.file_type is None:
            return None
        return FILE_TYPES.get(self.file_type, f"type {self.file_type}")


def read_header(path: Path, *, detail: bool = False) -> GgufHeader:
    """The facts of a GGUF file's header; ModelLoadError (one line) if it is not one.
    `detail`: a vocabulary print that can be compared with vocabularies of other sizes (a walk
    of every token text: ~15 ms more for 150k tokens)."""
    try:
        with open(path, "rb") as f, _Reader(f) as reader:
            parser = _HeaderParser(reader, skim=True, detail=detail)
            try:
                return parser.parse()
            except (struct.error, ValueError):
                if not parser.skimmed:
                    raise
            # Some strings were skipped by a search (see `_skim`); walk them instead.
            reader.pos = 0
            return _HeaderParser(reader, skim=False, detail=detail).parse()
    except (OSError, struct.error, ValueError, OverflowError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        if isinstance(exc, struct.error):
            reason = "the file ends inside its header"
        raise ModelLoadError(f"cannot read the GGUF header of {path}: {reason}") from None


def tensor_types(path: Path) -> set[int]:
    """The ggml type ids (GGML_TYPE_*) of the tensors in a GGUF file."""
    return set(read_header(path).tensor_types)


class _Reader:
    """The file, mapped read-only (only the pages of the header are ever touched: no copies,
    no reading ahead); `pos` is where parsing is."""

    def __init__(self, f: BinaryIO) -> None:
        self.size = os.fstat(f.fileno()).st_size
        if self.size < len(_MAGIC):
            raise ValueError("not a GGUF file")
        self.data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.pos = 0

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.data.close()

    def need(self, n: int) -> None:
        """Bytes [pos, pos + n) must be in the file."""
        if self.pos + n > self.size:
            raise ValueError("the file ends inside its header")

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def string(self) -> str:
        (length,) = self.unpack("<Q")
        self.need(length)
        text = self.data[self.pos : self.pos + length].decode("utf-8", "replace")
        self.pos += length
        return text

    def skip_strings(self, count: int) -> None:
        """Skip `count` strings: one length at a time, the only way to find where they end
        (the loop is as lean as it can be: it runs 150k times on a 150k-token vocabulary)."""
        data, pos = self.data, self.pos
        for _ in range(count):
            pos += 8 + _U64(data, pos)[0]
        self.pos = pos
        self.need(0)

    def string_offsets(self, count: int) -> list[int]:
        """Skip `count` strings, returning where each begins and where the last one ends."""
        offsets = [self.pos]
        for _ in range(count):
            self.skip_strings(1)
            offsets.append(self.pos)
        return offsets


class _HeaderParser:
    def __init__(self, reader: _Reader, *, skim: bool, detail: bool) -> None:
        self.r = reader
        self.skim = skim  # may skip string arrays by a search (`_skim`)
        self.detail = detail  # the vocabulary print with its detail (walks the tokens)
        self.skimmed = False  # some strings were skipped by a search
        self.meta: dict[str, Any] = {}
        self.n_vocab: int | None = None
        self.vocab_print: VocabPrint | None = None

    def parse(self) -> GgufHeader:
        r = self.r
        if r.data[:4] != _MAGIC:
            raise ValueError("not a GGUF file")
        r.pos = 4
        (version,) = r.unpack("<I")
        if version < 2:
            raise ValueError(f"GGUF version {version} is too old")
        n_tensors, n_kv = r.unpack("<QQ")
        for index in range(n_kv):
            self._key_value(left_after=n_kv - index - 1)
        n_params, types = self._tensor_infos(n_tensors)
        return self._header(n_params, types)

    def _key_value(self, left_after: int) -> None:
        r = self.r
        key = r.string()
        (value_type,) = r.unpack("<I")
        if value_type == _ARRAY:
            self._array(key, left_after)
        elif value_type == _STRING:
            self.meta[key] = r.string()
        elif value_type in _FORMATS:
            self.meta[key] = r.unpack(_FORMATS[value_type])[0]
        else:
            raise ValueError(f"unknown metadata type {value_type} for {key!r}")

    def _array(self, key: str, left_after: int) -> None:
        r = self.r
        item_type, count = r.unpack("<IQ")
        if key == "tokenizer.ggml.tokens" and item_type == _STRING:
            self._tokens(count, left_after)
        elif key == "tokenizer.ggml.merges" and item_type == _STRING:
            if not self._skim(count, left_after):
                r.skip_strings(count)
        elif item_type == _STRING:
            r.skip_strings(count)
        elif item_type in _SIZES:
            r.need(_SIZES[item_type] * count)
            r.pos += _SIZES[item_type] * count
        else:  # arrays of arrays: no model key uses them
            raise ValueError(f"unsupported metadata array in {key!r}")

    def _tokens(self, count: int, left_after: int) -> None:
        """The token texts, for the vocabulary print: skimmed (a search for the key after
        them) unless the print needs its detail, which needs where each of the last texts
        begins, and so a walk."""
        r = self.r
        below_first = min(count, FIRST_CHECKED_TOKEN)
        r.skip_strings(below_first)
        start = r.pos
        self.n_vocab = count
        if not self.detail and self._skim(count, left_after, array_next=True):
            self.vocab_print = VocabPrint.of_serialized(r.data, count, start, r.pos)
            return
        first = tail_start(count)
        r.skip_strings(first - below_first)
        offsets = r.string_offsets(count - first)
        self.vocab_print = VocabPrint.of_serialized(r.data, count, start, offsets[-1], offsets)

    def _skim(self, count: int, left_after: int, *, array_next: bool = False) -> bool:
        """Skip `count` strings without walking them, to the next key, when it is a
        `tokenizer.` key (converters write the tokens, their types or scores, the merges, then
        the special ids: all `tokenizer.` keys). Its serialized form, a length then 7 zero bytes
        then the name, is found by a search at C speed. The first such match is the key, not a
        string of the array: a match inside it would be a text that reads as a key (printable
        ASCII without a space, which BPE merges "left right" never are) followed by a valid
        value type, and after the tokens (`array_next`: their types, scores or merges) by an
        array count under 2**32, whose four high bytes would be NULs inside a text. If anything
        after the skip fails to parse, `read_header` walks instead."""
        r = self.r
        if not (self.skim and left_after):
            return False
        start = r.pos
        limit = min(r.size, start + 8 + count * _MAX_STRING_BYTES)
        found = r.data.find(_NEXT_KEY, start, limit)
        while found > start:
            if self._is_key_at(found - 1, array_next):
                r.pos = found - 1
                self.skimmed = True
                return True
            found = r.data.find(_NEXT_KEY, found + 1, limit)
        return False

    def _is_key_at(self, begin: int, array: bool) -> bool:
        """A key (printable ASCII without spaces) and a value type start at `begin` (with
        `array`: the value is an array)."""
        data = self.r.data
        (length,) = _U64(data, begin)
        end = begin + 8 + length
        if length > _MAX_KEY_BYTES or end + 16 > self.r.size:
            return False
        if _KEY.fullmatch(data, begin + 8, end) is None:
            return False
        value_type, item_type, items = struct.unpack_from("<IIQ", data, end)
        if array:
            return value_type == _ARRAY and item_type <= 12 and items < 2**32
        return value_type <= 12

    def _tensor_infos(self, n_tensors: int) -> tuple[int, frozenset[int]]:
        """Parameters and tensor types; the offsets are checked as llama.cpp checks them
        (aligned, inside the file), which also catches a header parsed from a wrong place."""
        r = self.r
        n_params, types, offsets = 0, set(), []
        for _ in range(n_tensors):
            r.string()  # the name
            (n_dims,) = r.unpack("<I")
            if not 0 < n_dims <= _MAX_DIMS:
                raise ValueError(f"a tensor with {n_dims} dimensions")
            dims = r.unpack(f"<{n_dims}Q")
            tensor_type, offset = r.unpack("<IQ")
            n_params += math.prod(dims)
            types.add(tensor_type)
            offsets.append(offset)
        alignment = _int(self.meta.get("general.alignment")) or _ALIGNMENT
        data_start = -(-r.pos // alignment) * alignment
        for offset in offsets:
            if offset % alignment or data_start + offset > r.size:
                raise ValueError("a tensor's data offset is misaligned or beyond the file")
        return n_params, frozenset(types)

    def _header(self, n_params: int, types: frozenset[int]) -> GgufHeader:
        meta = self.meta
        arch = _str(meta.get("general.architecture"))
        tokenizer = _str(meta.get("tokenizer.ggml.model"))
        return GgufHeader(
            architecture=arch,
            name=_str(meta.get("general.name")),
            basename=_str(meta.get("general.basename")),
            size_label=_str(meta.get("general.size_label")),
            file_type=_int(meta.get("general.file_type")),
            context_length=_int(meta.get(f"{arch}.context_length")),
            n_params=n_params,
            tensor_types=types,
            split_count=_int(meta.get("split.count")) or 1,
            vocab=self._vocab(tokenizer),
            vocab_print=self.vocab_print,
            tokenizer=tokenizer,
            tokenizer_pre=_str(meta.get("tokenizer.ggml.pre")),
            n_nextn=_int(meta.get(f"{arch}.nextn_predict_layers"), 0) or 0,
            embedding_length=_int(meta.get(f"{arch}.embedding_length")),
            target_hidden_size=_int(meta.get(f"{arch}.target_hidden_size")),
            embedding_length_out=_int(meta.get(f"{arch}.embedding_length_out")),
            kv_bytes_per_token=self._kv_bytes_per_token(arch),
        )

    def _kv_bytes_per_token(self, arch: str | None) -> int | None:
        meta = self.meta
        layers = _int(meta.get(f"{arch}.block_count"))
        heads_kv = _int(meta.get(f"{arch}.attention.head_count_kv"))
        heads = _int(meta.get(f"{arch}.attention.head_count"))
        width = _int(meta.get(f"{arch}.embedding_length"))
        if not (layers and heads_kv and heads and width):
            return None
        key = _int(meta.get(f"{arch}.attention.key_length")) or width // heads
        value = _int(meta.get(f"{arch}.attention.value_length")) or key
        return layers * heads_kv * (key + value) * 2

    def _vocab(self, tokenizer: str | None) -> VocabInfo | None:
        vocab_type = VOCAB_TYPES.get(tokenizer or "")
        if self.n_vocab is None or vocab_type is None:
            return None
        bos, eos, add_bos = VOCAB_DEFAULTS.get(vocab_type, (-1, -1, False))
        meta = self.meta
        return VocabInfo(
            vocab_type=vocab_type,
            n_vocab=self.n_vocab,
            bos=_int(meta.get("tokenizer.ggml.bos_token_id"), bos),
            eos=_int(meta.get("tokenizer.ggml.eos_token_id"), eos),
            add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", add_bos)),
        )


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object, default: int | None = None) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value
