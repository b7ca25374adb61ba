"""The models already on this machine, with their header facts: what `specllama models --local`
lists, what `--draft auto` chooses from.

`scan` looks in every store (`specllama.models.stores`) and the saved folders, and reads each
model's GGUF header once (`header_cache`); a file that is no model is a `Problem` line, never
an error. A draft head in its own file (EAGLE-3, DFlash, Gemma 4's assistant: known by its
architecture) is kept apart, in `heads`: it never runs alone, and drafts for the models it fits
(`local_pairs.head_pairs`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from specllama.errors import ModelLoadError
from specllama.llama.gguf_info import GgufHeader
from specllama.models import local_dirs, stores
from specllama.models.catalog import Catalog
from specllama.models.header_cache import HeaderCache
from specllama.models.local_files import Found, Problem, found_file


@dataclass(frozen=True)
class LocalModel:
    found: Found
    header: GgufHeader  # of a split model: the parameters and tensor types of every part
    size: int  # bytes on disk, every part

    @property
    def path(self) -> Path:
        return self.found.path

    @property
    def ref(self) -> str:
        return self.found.ref

    @property
    def label(self) -> str:
        """What the model calls itself (general.name), else its file name."""
        return self.header.name or self.found.path.name

    @property
    def has_mtp(self) -> bool:
        """Carries its own draft head (MTP layers) and runs on its own: --drafter mtp."""
        return self.header.has_mtp and self.head_kind is None

    @property
    def head_kind(self) -> str | None:
        """The drafter a draft head in its own file needs ("eagle3", ...), None for a model."""
        return self.header.head_kind

    @property
    def width(self) -> int | None:
        """The width of its rows ({arch}.embedding_length), None where unknown."""
        return self.header.embedding_length

    @property
    def reads_width(self) -> int | None:
        """A draft head's: the width of the target rows it reads (EAGLE-3 names it,
        `eagle3.target_hidden_size`, a Gemma 4 assistant `embedding_length_out`; a DFlash
        head's rows are its target's own width)."""
        header = self.header
        return header.target_hidden_size or header.embedding_length_out or self.width

    @property
    def family(self) -> str | None:
        """general.basename (e.g. "Qwen2.5-Coder"), else the architecture, lower case."""
        name = self.header.basename or self.header.architecture
        return name.lower() if name else None


@dataclass
class LocalScan:
    models: list[LocalModel]
    problems: list[Problem]
    cache: HeaderCache = field(repr=False)
    heads: list[LocalModel] = field(default_factory=list)  # draft heads in their own file

    def detailed(self, model: LocalModel) -> LocalModel:
        """The model with the detail of its vocabulary print (to compare it with vocabularies
        of other sizes), read now if the cache has none."""
        printed = model.header.vocab_print
        if printed is None or printed.detail is not None:
            return model
        header = self.cache.header(model.path, detail=True)  # saved with the cache's next save
        return replace(model, header=replace(model.header, vocab_print=header.vocab_print))


def scan(
    folders: Iterable[Path] = (),
    *,
    saved_folders: bool = True,
    catalog: Catalog | None = None,
    cache: HeaderCache | None = None,
) -> LocalScan:
    """Every model in every store, plus `folders` and (with `saved_folders`) those saved."""
    folders = [Path(f) for f in folders] + (local_dirs.saved_dirs() if saved_folders else [])
    findings = stores.find_all(folders, catalog=catalog)
    cache = cache or HeaderCache()
    models, heads, problems = [], [], list(findings.problems)
    for found in findings.found:
        item = _model_or_problem(found, cache)
        if isinstance(item, Problem):
            problems.append(item)
        else:
            (heads if item.head_kind else models).append(item)
    cache.save()
    return LocalScan(models, problems, cache, heads)


def _model_or_problem(found: Found, cache: HeaderCache) -> LocalModel | Problem:
    try:
        return read_model(found, cache)
    except ModelLoadError as exc:
        return Problem(found.ref, _without_path(str(exc), found.path))


def read_model(found: Found, cache: HeaderCache) -> LocalModel:
    header = cache.header(found.path)
    size = os.stat(found.path).st_size
    if found.parts:  # the first part holds the vocabulary; count every part's tensors
        others = [cache.header(part) for part in found.parts[1:]]
        header = replace(
            header,
            n_params=header.n_params + sum(h.n_params for h in others),
            tensor_types=header.tensor_types.union(*(h.tensor_types for h in others)),
        )
        size = sum(os.stat(part).st_size for part in found.parts)
    return LocalModel(found, header, size)


def _without_path(message: str, path: Path) -> str:
    """'cannot read the GGUF header of PATH: why' -> 'cannot read the GGUF header: why', and
    other mentions of the path -> its file name: the problem line names the model already."""
    for shown in (os.path.realpath(path), str(path)):
        message = message.replace(f" of {shown}:", ":").replace(shown, Path(shown).name)
    return message


def model_at(path: Path, cache: HeaderCache | None = None) -> LocalModel:
    """A model given by its path (a --target not found in any store)."""
    item = found_file(path, "path")
    if isinstance(item, Problem):
        raise ModelLoadError(f"{item.where}: {item.reason}")
    cache = cache or HeaderCache()
    model = read_model(item, cache)
    cache.save()
    return model
