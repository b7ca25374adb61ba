"""models.toml -> frozen dataclasses: the models we know how to fetch and the pairs that work.

The built-in catalogue ships inside the package (specllama/models.toml); a user catalogue (in the
config directory, or wherever SPECLLAMA_CATALOG points) is read after it and extends or replaces
entries by name. Errors name the file and, for TOML syntax errors, the line.

A model reference (REF) is one of: a catalogue model name, a local `.gguf` path,
`hf:owner/repo/file.gguf`, or a model another tool keeps on this machine: `ollama:NAME[:TAG]`,
`lmstudio:PUBLISHER/REPO[/FILE]`. `parse_ref` turns one into a `ModelRef` or a `Path`.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specllama.errors import CatalogError, ModelLoadError, UsageError
from specllama.models import lmstudio, ollama
from specllama.paths import config_dir

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

CATALOG_ENV = "SPECLLAMA_CATALOG"
# eagle3, dflash, assistant: a draft head in its own GGUF (`engine.control.HEADS`)
DRAFTERS = ("model", "mtp", "eagle3", "dflash", "assistant", "ngram", "none")
# A pair that drafts with multi-token prediction layers: the target's own (no `draft`: the
# pair's draft is the target itself) or an MTP assistant file (`draft`, e.g. Gemma 4's).
MTP = "mtp"
# The lookup in the text so far: drafts for any target, so a pair may name no draft either
# (gpt-oss has no small model with its vocabulary).
NGRAM = "ngram"
# Drafters that need no second file: a pair with one of them may leave out `draft`.
SELF_DRAFTERS = (MTP, NGRAM)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}")

# Rough bits per weight of llama.cpp quantisations (file size / parameter count), used only to
# estimate the size of a model whose exact size the catalogue does not know.
_BITS_PER_WEIGHT = {
    "F32": 32.0,
    "F16": 16.0,
    "BF16": 16.0,
    "Q8_0": 8.5,
    "Q6_K": 6.6,
    "Q5_K_M": 5.7,
    "Q5_0": 5.5,
    "Q4_K_M": 4.9,
    "UD-Q4_K_XL": 4.9,  # unsloth's dynamic 4-bit: Q4_K with some tensors kept wider
    "Q4_K_S": 4.6,
    "Q4_1": 5.0,
    "Q4_0": 4.5,
    "Q3_K_M": 3.9,
    "Q2_K": 3.4,
}


@dataclass(frozen=True)
class PipMirror:
    """A GGUF file carried by wheels: member `members[i]` of the wheel for `requirements[i]`,
    concatenated in order."""

    requirements: tuple[str, ...]
    members: tuple[str, ...]


@dataclass(frozen=True)
class ModelRef:
    """One model file as the catalogue knows it (or as an `hf:` reference names it)."""

    name: str
    repo: str
    file: str
    revision: str | None = None
    size: int | None = None
    sha256: str | None = None
    params: str | None = None
    quant: str | None = None
    license: str | None = None
    tokenizer: str | None = None
    verified: bool = False
    mirrors: tuple[PipMirror, ...] = ()
    notes: str | None = None

    @property
    def param_count(self) -> float | None:
        """Parameters as a number, from the display string ("1.5B", "270M")."""
        match = re.fullmatch(r"\s*([0-9.]+)\s*([KMB])\s*", self.params or "")
        if not match:
            return None
        scale = {"K": 1e3, "M": 1e6, "B": 1e9}[match.group(2)]
        return float(match.group(1)) * scale

    @property
    def approx_size(self) -> int | None:
        """The exact size when known, else an estimate from parameters and quantisation."""
        if self.size is not None:
            return self.size
        bits = _BITS_PER_WEIGHT.get((self.quant or "").upper())
        count = self.param_count
        if bits is None or count is None:
            return None
        return int(count * bits / 8)


@dataclass(frozen=True)
class Pair:
    """A draft model that works for a target model, with the settings that suit them."""

    name: str
    target: str
    draft: str  # the target itself when it drafts alone (`own_heads`)
    draft_max: int = 5
    drafter: str = "model"
    description: str = ""
    # The draft's tokenizer is not the target's: it drafts text, re-tokenised
    # (`specllama.engine.cross_drafter`); said in the file, checked against the models'.
    across_tokenizers: bool = False
    # Whether its speedup was measured on a real machine (None: the file does not say; False:
    # `description` says what is expected and why).
    measured: bool | None = None

    @property
    def own_heads(self) -> bool:
        """The target drafts alone, with its own MTP layers or by looking up its own text
        (`SELF_DRAFTERS`): there is no second file to fetch, load or count."""
        return self.drafter in SELF_DRAFTERS and self.draft == self.target


@dataclass(frozen=True)
class Catalog:
    models: Mapping[str, ModelRef]
    pairs: Mapping[str, Pair]
    default_pair: str
    sources: tuple[Path, ...] = field(default=())

    def pair(self, name: str | None = None) -> Pair:
        """The pair called `name` (the default pair when None); unknown names get suggestions."""
        name = name or self.default_pair
        if name in self.pairs:
            return self.pairs[name]
        raise CatalogError(
            f"no pair named {name!r} in the catalogue", hint=_suggest(name, self.pairs)
        )

    def model(self, name: str) -> ModelRef:
        if name in self.models:
            return self.models[name]
        raise CatalogError(
            f"no model named {name!r} in the catalogue", hint=_suggest(name, self.models)
        )

    def pair_models(self, name: str | None = None) -> tuple[Pair, ModelRef, ModelRef]:
        """(pair, target model, draft model) for a pair name (None: the default pair)."""
        pair = self.pair(name)
        return pair, self.model(pair.target), self.model(pair.draft)


def _suggest(name: str, known: Mapping[str, object]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    if close:
        return "did you mean " + ", ".join(close) + "? (`specllama models` lists them)"
    return "`specllama models` lists the known names"


# ---------------------------------------------------------------- locations


def user_catalog_path() -> Path:
    """Where the user's catalogue is read from (it need not exist)."""
    override = os.environ.get(CATALOG_ENV)
    return Path(override).expanduser() if override else config_dir() / "models.toml"


def builtin_catalog_path() -> Path:
    """The shipped catalogue: inside the package when installed, at the repo root when editable."""
    here = Path(__file__).resolve().parent.parent  # specllama/
    for candidate in (here / "models.toml", here.parent / "models.toml"):
        if candidate.is_file():
            return candidate
    raise CatalogError(
        "the built-in catalogue models.toml is missing from the installation",
        hint="reinstall specllama",
    )


# ---------------------------------------------------------------- loading


def load_catalog(
    builtin: Path | None = None, user: Path | None = None, *, use_user: bool = True
) -> Catalog:
    """Read the built-in catalogue, then the user catalogue (when present) on top of it."""
    paths = [builtin or builtin_catalog_path()]
    user = user or (user_catalog_path() if use_user else None)
    if user is not None and user.is_file():
        paths.append(user)
    elif user is not None and os.environ.get(CATALOG_ENV) and user == user_catalog_path():
        # An explicit SPECLLAMA_CATALOG that does not exist is a mistake worth naming.
        raise CatalogError(f"{user}: {CATALOG_ENV} names a file that does not exist")

    models: dict[str, ModelRef] = {}
    pairs: dict[str, Pair] = {}
    where: dict[str, str] = {}  # pair name -> "file:line: pairs.name", for link errors
    default_pair: str | None = None
    for path in paths:
        text, data = _read_toml(path)
        if isinstance(data.get("pairs"), dict):
            where.update({name: _locate(path, text, "pairs", name) for name in data["pairs"]})
        models.update(_parse_models(path, text, data.get("models", {})))
        pairs.update(_parse_pairs(path, text, data.get("pairs", {})))
        default_pair = _opt_str(path, "default_pair", data.get("default_pair")) or default_pair
    catalog = Catalog(models, pairs, default_pair or "", tuple(paths))
    _check_links(catalog, where)
    return catalog


def _read_toml(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # The message ends "(at line L, column C)"; keep it, it is what the user needs.
        raise CatalogError(f"{path}: {exc}", hint="fix the TOML syntax at that line") from None


def _locate(path: Path, text: str, section: str, name: str) -> str:
    """`file:line: section.name`, for messages: the line of the entry's table header.

    tomllib reports lines only for syntax errors; for a well-formed entry with a bad value, the
    header line is the place the user has to look at.
    """
    key = re.escape(name)
    key_forms = rf"(\"{key}\"|'{key}'|{key})"
    header = re.compile(rf"^[ \t]*\[\[?[ \t]*{section}[ \t]*\.[ \t]*{key_forms}[ \t]*[\].]", re.M)
    match = header.search(text)
    line = text.count("\n", 0, match.start()) + 1 if match else None
    return f"{path}:{line}: {section}.{name}" if line else f"{path}: {section}.{name}"


def _parse_models(path: Path, text: str, table: object) -> dict[str, ModelRef]:
    if not isinstance(table, dict):
        raise CatalogError(f"{path}: [models] must be a table of models")
    return {
        name: _parse_model(_locate(path, text, "models", name), name, entry)
        for name, entry in table.items()
    }


_MODEL_KEYS = {
    "repo", "file", "revision", "size", "sha256", "params", "quant", "license",
    "tokenizer", "verified", "mirrors", "notes",
}  # fmt: skip


def _parse_model(where: str, name: str, entry: object) -> ModelRef:
    if not isinstance(entry, dict):
        raise CatalogError(f"{where} must be a table")
    _no_unknown_keys(where, entry, _MODEL_KEYS)
    for key in ("repo", "file", "tokenizer"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise CatalogError(f'{where} needs {key} = "..."')
    size = entry.get("size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size <= 0):
        raise CatalogError(f"{where}: size must be a positive number of bytes")
    sha256 = entry.get("sha256")
    if sha256 is not None and not (isinstance(sha256, str) and _SHA256.fullmatch(sha256)):
        raise CatalogError(f"{where}: sha256 must be 64 lowercase hex digits")
    revision = entry.get("revision")
    if revision is not None and not (isinstance(revision, str) and _COMMIT.fullmatch(revision)):
        raise CatalogError(f"{where}: revision must be a 40-hex-digit commit hash")
    verified = entry.get("verified", False)
    if not isinstance(verified, bool):
        raise CatalogError(f"{where}: verified must be true or false")
    if verified and (size is None or sha256 is None):
        raise CatalogError(f"{where}: a verified model needs both size and sha256")
    mirrors = entry.get("mirrors", [])
    if not isinstance(mirrors, list):
        raise CatalogError(f"{where}: mirrors must be a list of tables ([[models.{name}.mirrors]])")
    return ModelRef(
        name=name,
        repo=entry["repo"],
        file=entry["file"],
        revision=revision,
        size=size,
        sha256=sha256,
        params=_opt_str(where, "params", entry.get("params")),
        quant=_opt_str(where, "quant", entry.get("quant")),
        license=_opt_str(where, "license", entry.get("license")),
        tokenizer=entry["tokenizer"],
        verified=verified,
        mirrors=tuple(_parse_mirror(f"{where}.mirrors[{i}]", m) for i, m in enumerate(mirrors)),
        notes=_opt_str(where, "notes", entry.get("notes")),
    )


def _parse_mirror(where: str, entry: object) -> PipMirror:
    """A pip mirror, as explicit lists or as templates with `{i}` for parts 1..parts."""
    if not isinstance(entry, dict):
        raise CatalogError(f"{where} must be a table")
    _no_unknown_keys(where, entry, {"kind", "requirements", "members", "parts"})
    if entry.get("kind", "pip") != "pip":
        raise CatalogError(f"{where}: unknown mirror kind {entry.get('kind')!r} (known: pip)")
    requirements, members = entry.get("requirements"), entry.get("members")
    parts = entry.get("parts")
    if parts is not None:
        if not (isinstance(parts, int) and parts > 0):
            raise CatalogError(f"{where}: parts must be a positive integer")
        if not (isinstance(requirements, str) and isinstance(members, str)):
            raise CatalogError(f"{where}: with parts, requirements and members are templates")
        try:
            requirements = [requirements.format(i=i) for i in range(1, parts + 1)]
            members = [members.format(i=i) for i in range(1, parts + 1)]
        except (KeyError, IndexError, ValueError) as exc:
            raise CatalogError(f"{where}: bad template ({exc}); use {{i}} or {{i:02d}}") from None
    if isinstance(requirements, str):
        requirements = [requirements]
    if isinstance(members, str):
        members = [members]
    if not (_str_list(requirements) and _str_list(members)) or len(requirements) != len(members):
        raise CatalogError(f"{where}: needs as many requirements as members (one per wheel)")
    return PipMirror(tuple(requirements), tuple(members))


def _parse_pairs(path: Path, text: str, table: object) -> dict[str, Pair]:
    if not isinstance(table, dict):
        raise CatalogError(f"{path}: [pairs] must be a table of pairs")
    return {
        name: _parse_pair(_locate(path, text, "pairs", name), name, entry)
        for name, entry in table.items()
    }


def _parse_pair(where: str, name: str, entry: object) -> Pair:
    if not isinstance(entry, dict):
        raise CatalogError(f"{where} must be a table")
    known = {"target", "draft", "draft_max", "drafter", "description", "across_tokenizers"}
    _no_unknown_keys(where, entry, known | {"measured"})
    drafter = entry.get("drafter", "model")
    if drafter not in DRAFTERS:
        raise CatalogError(f"{where}: drafter must be one of {', '.join(DRAFTERS)}")
    if not isinstance(entry.get("target"), str):
        raise CatalogError(f'{where} needs target = "<model name>"')
    # With MTP the target's own heads draft unless an assistant file is named; the lookup
    # needs no file at all.
    draft = entry.get("draft", entry["target"] if drafter in SELF_DRAFTERS else None)
    if not isinstance(draft, str):
        hint = (
            f'or drafter = "{MTP}" for a target with its own draft head, '
            f'"{NGRAM}" for the lookup in the text so far'
        )
        raise CatalogError(f'{where} needs draft = "<model name>"', hint=hint)
    draft_max = entry.get("draft_max", 5)
    if not isinstance(draft_max, int) or isinstance(draft_max, bool) or not 1 <= draft_max <= 64:
        raise CatalogError(f"{where}: draft_max must be an integer from 1 to 64")
    description = _opt_str(where, "description", entry.get("description")) or ""
    across = entry.get("across_tokenizers", False)
    measured = entry.get("measured")
    for key, value in (("across_tokenizers", across), ("measured", measured)):
        if value is not None and not isinstance(value, bool):
            raise CatalogError(f"{where}: {key} must be true or false")
    return Pair(name, entry["target"], draft, draft_max, drafter, description, across, measured)


def _check_links(catalog: Catalog, where: Mapping[str, str]) -> None:
    """Every pair names known models; the default pair exists."""
    for pair in catalog.pairs.values():
        for role in ("target", "draft"):
            model = getattr(pair, role)
            if model not in catalog.models:
                hint = _suggest(model, catalog.models)
                raise CatalogError(f"{where[pair.name]} names unknown {role} {model!r}", hint)
        _check_tokenizers(catalog, pair, where[pair.name])
    if catalog.default_pair not in catalog.pairs:
        files = " / ".join(str(p) for p in catalog.sources)
        hint = _suggest(catalog.default_pair, catalog.pairs)
        raise CatalogError(f"{files}: default_pair {catalog.default_pair!r} is not a pair", hint)


def _check_tokenizers(catalog: Catalog, pair: Pair, where: str) -> None:
    """A draft model of another tokenizer drafts across tokenizers: the pair must say so, and
    only such a pair may."""
    if pair.own_heads:
        return
    target, draft = catalog.models[pair.target], catalog.models[pair.draft]
    differ = target.tokenizer != draft.tokenizer
    if differ and not pair.across_tokenizers:
        raise CatalogError(
            f"{where}: the draft's tokenizer ({draft.tokenizer}) is not the target's "
            f"({target.tokenizer})",
            hint="pick a draft of the same tokenizer, or say across_tokenizers = true",
        )
    if pair.across_tokenizers and (not differ or pair.drafter != "model"):
        raise CatalogError(
            f'{where}: across_tokenizers = true needs a draft model (drafter = "model") '
            "whose tokenizer differs from the target's"
        )


def _no_unknown_keys(where: str, entry: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(entry) - known)
    if unknown:
        raise CatalogError(
            f"{where}: unknown key {unknown[0]!r}", hint="known: " + ", ".join(sorted(known))
        )


def _opt_str(where: object, key: str, value: object) -> str | None:
    if value is not None and not isinstance(value, str):
        raise CatalogError(f"{where}: {key} must be a string")
    return value


def _str_list(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


# ---------------------------------------------------------------- references


def parse_ref(ref: str, catalog: Catalog) -> ModelRef | Path:
    """A REF -> a catalogue model, an ad-hoc hub model (`hf:owner/repo/file.gguf`), or a path
    (given, or the file of an Ollama or LM Studio model).

    A local path must exist; catalogue names take precedence over same-named relative paths
    only when no such file exists.
    """
    if ref.startswith("hf:"):
        return hf_ref(ref)
    if ref.startswith("ollama:"):
        return ollama.resolve(ref)
    if ref.startswith("lmstudio:"):
        return lmstudio.resolve(ref)
    if ref in catalog.models:
        return catalog.models[ref]
    path = Path(ref).expanduser()
    looks_like_path = ref.endswith(".gguf") or os.sep in ref or "/" in ref
    if path.is_file():
        return path
    if looks_like_path:
        raise ModelLoadError(f"model file {ref} does not exist", hint="check the path")
    hint = _suggest(ref, {**catalog.models, **catalog.pairs})
    raise CatalogError(f"{ref!r} is neither a catalogue model nor a .gguf file", hint=hint)


def hf_ref(ref: str) -> ModelRef:
    """`hf:owner/repo/path/in/repo.gguf` (optionally `@revision` after the repo) -> ModelRef."""
    body = ref.removeprefix("hf:")
    parts = body.split("/")
    if len(parts) < 3 or not all(parts) or not body.endswith(".gguf"):
        raise UsageError(
            f"bad hub reference {ref!r}",
            hint="write hf:owner/repo/file.gguf (the file in that repo)",
        )
    repo, revision = "/".join(parts[:2]), None
    if "@" in repo:
        repo, revision = repo.split("@", 1)
    model = ModelRef(name=ref, repo=repo, file="/".join(parts[2:]), tokenizer="unknown")
    return replace(model, revision=revision) if revision else model
