"""Ollama's model store, read-only: which models it holds, and `ollama:NAME[:TAG]` -> the GGUF.

Layout (ollama's envconfig.Models, manifest/paths.go, types/model/name.go):
- the store is $OLLAMA_MODELS, else ~/.ollama/models (and, for the Linux service, which runs as
  the user `ollama`, /usr/share/ollama/.ollama/models);
- a model NAME[:TAG] is [host/][namespace/]model, host registry.ollama.ai, namespace library and
  tag latest by default, matched without regard to case;
- its manifest is manifests/HOST/NAMESPACE/MODEL/TAG: JSON whose `layers[]` each have a
  mediaType and a digest `sha256:<hex>`, stored as blobs/sha256-<hex>; the layer of type
  application/vnd.ollama.image.model holds the weights (GGUF for llama.cpp models). A manifest
  list (application/vnd.ollama.manifest.list.v2+json) holds `manifests[]` for several runners,
  each inline or a digest whose blob is the manifest.
Other layers (template, params, license, projector, and the draft heads that Ollama's own
runner attaches as application/vnd.ollama.image.draft) are not models of their own.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specllama.errors import LocalModelError, UsageError
from specllama.models.local_files import Findings, Found, Problem

SERVICE_STORE = Path("/usr/share/ollama/.ollama/models")
DEFAULT_HOST, DEFAULT_NAMESPACE, DEFAULT_TAG = "registry.ollama.ai", "library", "latest"
MODEL_LAYER = "application/vnd.ollama.image.model"
MANIFEST_LIST = "application/vnd.ollama.manifest.list.v2+json"
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(:[0-9]+)?")
_DIGEST = re.compile(r"sha256[:-]([0-9a-fA-F]{64})")


def stores() -> list[Path]:
    """The Ollama stores on this machine (those that exist)."""
    if override := os.environ.get("OLLAMA_MODELS", "").strip().strip("\"'"):
        candidates = [Path(override).expanduser()]
    else:
        candidates = [Path.home() / ".ollama" / "models", SERVICE_STORE]
    return [c for c in candidates if (c / "manifests").is_dir()]


@dataclass(frozen=True)
class OllamaName:
    host: str
    namespace: str
    model: str
    tag: str

    @classmethod
    def parse(cls, text: str) -> OllamaName:
        """NAME[:TAG] as Ollama reads it; UsageError for what it would refuse."""
        body, tag = text, DEFAULT_TAG
        if ":" in text.rsplit("/", 1)[-1]:  # a colon after the last slash starts the tag
            body, tag = text.rsplit(":", 1)
        parts = body.split("/")
        if len(parts) > 3 or not all(parts):
            raise _bad_name(text)
        host, namespace = DEFAULT_HOST, DEFAULT_NAMESPACE
        if len(parts) == 3:
            host, namespace, model = parts
        elif len(parts) == 2:
            namespace, model = parts
        else:
            (model,) = parts
        if not (_HOST.fullmatch(host) and all(_PART.fullmatch(p) for p in (namespace, model, tag))):
            raise _bad_name(text)
        return cls(host, namespace, model, tag)

    @property
    def key(self) -> tuple[str, ...]:
        return (self.host.lower(), self.namespace.lower(), self.model.lower(), self.tag.lower())

    def __str__(self) -> str:
        """The shortest form, as `ollama list` shows it."""
        prefix = ""
        if self.host.lower() != DEFAULT_HOST:
            prefix = f"{self.host}/{self.namespace}/"
        elif self.namespace.lower() != DEFAULT_NAMESPACE:
            prefix = f"{self.namespace}/"
        return f"{prefix}{self.model}:{self.tag}"


def _bad_name(text: str) -> UsageError:
    return UsageError(
        f"bad Ollama model name {text!r}",
        hint="write ollama:NAME or ollama:NAME:TAG, e.g. ollama:qwen2.5-coder:1.5b",
    )


def find_models() -> Findings:
    """Every model in the Ollama stores: one Found per manifest whose weights are here."""
    findings = Findings()
    for store in stores():
        for name, manifest in _manifests(store):
            item = _model_of(store, name, manifest)
            (findings.problems if isinstance(item, Problem) else findings.found).append(item)
    return findings


def resolve(ref: str) -> Path:
    """`ollama:NAME[:TAG]` -> the GGUF blob; LocalModelError naming what is there instead."""
    wanted = OllamaName.parse(ref.removeprefix("ollama:"))
    known: list[str] = []
    for store in stores():
        for name, manifest in _manifests(store):
            if name.key != wanted.key:
                known.append(str(name))
                continue
            item = _model_of(store, name, manifest)
            if isinstance(item, Problem):
                raise LocalModelError(f"{ref}: {item.reason}", hint=f"see {item.where}")
            return item.path
    raise LocalModelError(f"no Ollama model {wanted} on this machine", hint=_suggest(wanted, known))


def _suggest(wanted: OllamaName, known: list[str]) -> str:
    if not known:
        where = ", ".join(str(s) for s in stores()) or "~/.ollama/models (or $OLLAMA_MODELS)"
        return f"no Ollama models found in {where}"
    close = difflib.get_close_matches(str(wanted), known, n=3, cutoff=0.4)
    names = close or sorted(known)[:5]
    return ("did you mean " if close else "found: ") + ", ".join(f"ollama:{n}" for n in names)


def _manifests(store: Path) -> list[tuple[OllamaName, Path]]:
    """manifests/HOST/NAMESPACE/MODEL/TAG files, with the name each stands for."""
    root = store / "manifests"
    found = []
    for path in sorted(root.glob("*/*/*/*")):
        if not path.is_file():
            continue
        host, namespace, model, tag = path.relative_to(root).parts
        found.append((OllamaName(host, namespace, model, tag), path))
    return found


def _model_of(store: Path, name: OllamaName, manifest: Path) -> Found | Problem:
    """The weights blob a manifest names, or why there is none to run."""
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        layer = _model_layer(store, data)
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        return Problem(str(manifest), f"unreadable Ollama manifest ({exc})")
    if layer is None:
        return Problem(str(manifest), "the manifest has no model layer")
    blob = _blob_path(store, layer.get("digest"))
    if blob is None:
        return Problem(str(manifest), f"bad layer digest {layer.get('digest')!r}")
    if not blob.is_file():
        return Problem(str(manifest), f"ollama:{name}: blob {blob.name} is missing")
    return Found(blob, "ollama", f"ollama:{name}")


def _model_layer(store: Path, manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The model layer of a manifest, or of the first manifest of a list that has one."""
    if manifest.get("mediaType") == MANIFEST_LIST:
        for child in manifest.get("manifests", []):
            if not child.get("layers") and (blob := _blob_path(store, child.get("digest"))):
                child = json.loads(blob.read_text(encoding="utf-8"))  # a reference
            if (layer := _model_layer(store, child)) is not None:
                return layer
        return None
    for layer in manifest.get("layers", []):
        if str(layer.get("mediaType", "")).split(";")[0].strip() == MODEL_LAYER:
            return layer
    return None


def _blob_path(store: Path, digest: object) -> Path | None:
    match = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    return store / "blobs" / f"sha256-{match.group(1).lower()}" if match else None
