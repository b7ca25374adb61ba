"""LM Studio's models, read-only: which GGUF files it holds, and `lmstudio:PUBLISHER/REPO[/FILE]`.

Layout (LM Studio's docs, "Import Models", and how its SDK finds its home):
- its home is $LMSTUDIO_HOME, else the folder named in ~/.lmstudio-home-pointer, else
  ~/.cache/lm-studio when it exists, else ~/.lmstudio (the pointer file is LM Studio's to write,
  never ours);
- models live under models/PUBLISHER/REPO/*.gguf there, or under the `downloadsFolder` that its
  settings.json names when the user moved them.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

from specllama.errors import LocalModelError, UsageError
from specllama.models.local_files import Findings, collect, files_in

POINTER = ".lmstudio-home-pointer"


def home() -> Path | None:
    """LM Studio's home folder on this machine, or None."""
    if override := os.environ.get("LMSTUDIO_HOME"):
        path = Path(override).expanduser()
        return path if path.is_dir() else None
    user = Path.home()
    try:
        pointed = (user / POINTER).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        pointed = ""
    candidates = [Path(pointed).expanduser()] if pointed else []
    candidates += [user / ".cache" / "lm-studio", user / ".lmstudio"]
    return next((c for c in candidates if c.is_dir()), None)


def models_dir(home_dir: Path) -> Path:
    """Where the models are: settings.json's downloadsFolder, else HOME/models."""
    try:
        settings = json.loads((home_dir / "settings.json").read_text(encoding="utf-8"))
        folder = settings.get("downloadsFolder") if isinstance(settings, dict) else None
    except (OSError, ValueError):
        folder = None
    return Path(folder).expanduser() if isinstance(folder, str) and folder else home_dir / "models"


def _repos() -> list[tuple[str, Path]]:
    """("PUBLISHER/REPO", folder) for every repo folder in LM Studio's models."""
    home_dir = home()
    root = models_dir(home_dir) if home_dir else None
    if root is None or not root.is_dir():
        return []
    return [
        (f"{repo.parent.name}/{repo.name}", repo)
        for repo in sorted(root.glob("*/*"))
        if repo.is_dir()
    ]


def find_models() -> Findings:
    findings = Findings()
    for name, folder in _repos():
        files = list(files_in(folder, recursive=False))
        single = len(files) == 1  # then lmstudio:PUBLISHER/REPO names it without the file

        def ref_of(path: Path, name: str = name, single: bool = single) -> str:
            return f"lmstudio:{name}" if single else f"lmstudio:{name}/{path.name}"

        findings.extend(collect(files, "lmstudio", ref_of))
    return findings


def resolve(ref: str) -> Path:
    """`lmstudio:PUBLISHER/REPO[/FILE]` -> the GGUF file (FILE may be left out when the repo
    folder holds one model)."""
    body = ref.removeprefix("lmstudio:")
    parts = body.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise UsageError(
            f"bad LM Studio model reference {ref!r}",
            hint="write lmstudio:PUBLISHER/REPO or lmstudio:PUBLISHER/REPO/FILE.gguf",
        )
    repos = dict(_repos())
    wanted = "/".join(parts[:2])
    folder = repos.get(wanted) or next(
        (f for n, f in repos.items() if n.lower() == wanted.lower()), None
    )
    if folder is None:
        raise LocalModelError(
            f"no LM Studio model {wanted} on this machine", _suggest(wanted, repos)
        )
    files = {p.name: p for p in files_in(folder, recursive=False)}
    if len(parts) == 3:
        if parts[2] in files:
            return files[parts[2]]
        raise LocalModelError(
            f"no file {parts[2]} in LM Studio's {wanted}", _suggest(parts[2], files)
        )
    if len(files) == 1:
        return next(iter(files.values()))
    listed = ", ".join(sorted(files)) or "none"
    raise LocalModelError(
        f"LM Studio's {wanted} holds {len(files)} models: name the file",
        hint=f"lmstudio:{wanted}/FILE with FILE one of: {listed}",
    )


def _suggest(wanted: str, known: dict[str, Path]) -> str:
    if not known:
        return "no LM Studio models found (LM Studio keeps them in ~/.lmstudio/models)"
    close = difflib.get_close_matches(wanted, list(known), n=3, cutoff=0.4)
    return ("did you mean " if close else "found: ") + ", ".join(close or sorted(known)[:5])
