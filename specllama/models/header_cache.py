"""GGUF header facts, cached by (real path, size, mtime_ns) in specllama's cache folder, so a
second listing of the same models reads no header at all.

One JSON file (`paths.cache_dir()/local/headers.json`); a damaged or older file is ignored and
written anew, a read-only cache folder only means reading again next time. An entry that lacks
a field the header has now (written before the field existed) is read again: taken as it is,
it would get the field's default (no MTP layers, no width) for a file that has it. A file that
is not a GGUF (or a truncated one) is remembered as such; one that cannot be read now
(permissions) is not, since that can change without its time changing.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from specllama.errors import ModelLoadError
from specllama.llama.gguf_info import GgufHeader, read_header
from specllama.llama.vocab import VocabInfo, VocabPrint
from specllama.paths import cache_dir

# 2: headers carry n_nextn (MTP layers). A cache of an older format is dropped whole and read
# again: its entries would otherwise load with the field's default, 0, and hide a model's heads.
FORMAT = 2


def cache_path() -> Path:
    return cache_dir() / "local" / "headers.json"


class HeaderCache:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()
        self.entries = self._load()
        self.changed = False
        self.reads = 0  # headers actually read (not from the cache), for the benchmark

    def header(self, path: Path, *, detail: bool = False) -> GgufHeader:
        """The header facts of `path` (with the vocabulary print's detail if asked)."""
        real = os.path.realpath(path)
        try:
            st = os.stat(real)
        except OSError as exc:
            raise ModelLoadError(f"cannot read {path}: {exc.strerror or exc}") from None
        entry = self.entries.get(real)
        if entry and (entry["size"], entry["mtime_ns"]) == (st.st_size, st.st_mtime_ns):
            if "error" in entry:
                raise ModelLoadError(entry["error"])
            if (entry.get("detail") or not detail) and (cached := _from_entry(entry)):
                return cached
        if not os.access(real, os.R_OK):
            raise ModelLoadError(f"cannot read {path}: permission denied")
        stamp = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        self.changed = True
        self.reads += 1
        try:
            header = read_header(Path(real), detail=detail)
        except ModelLoadError as exc:
            self.entries[real] = {**stamp, "error": str(exc)}
            raise
        self.entries[real] = {**stamp, "detail": detail, "header": header_to_json(header)}
        return header

    def save(self) -> None:
        """Write what changed; entries of files that are gone are dropped."""
        if not self.changed:
            return
        kept = {p: e for p, e in self.entries.items() if os.path.exists(p)}
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = self.path.with_name(self.path.name + ".partial")
            partial.write_text(json.dumps({"format": FORMAT, "entries": kept}), encoding="utf-8")
            os.replace(partial, self.path)
        self.changed = False

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return {}
        entries = data.get("entries")
        return entries if isinstance(entries, dict) else {}


def header_to_json(header: GgufHeader) -> dict[str, Any]:
    data = asdict(header)
    data["tensor_types"] = sorted(header.tensor_types)
    data["vocab_print"] = header.vocab_print.as_json() if header.vocab_print else None
    return data


_HEADER_FIELDS = frozenset(f.name for f in fields(GgufHeader))


def header_from_json(data: dict[str, Any]) -> GgufHeader:
    """The header an entry keeps; KeyError when the entry lacks one of its fields."""
    if missing := _HEADER_FIELDS - data.keys():
        raise KeyError(f"no {', '.join(sorted(missing))}")
    values = dict(data)
    values["tensor_types"] = frozenset(values["tensor_types"])
    values["vocab"] = VocabInfo(**values["vocab"]) if values["vocab"] else None
    printed = values["vocab_print"]
    values["vocab_print"] = VocabPrint.from_json(printed) if printed else None
    return GgufHeader(**values)


def _from_entry(entry: dict[str, Any]) -> GgufHeader | None:
    """The cached header, or None for an entry this version cannot read (read it again)."""
    try:
        return header_from_json(entry["header"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
