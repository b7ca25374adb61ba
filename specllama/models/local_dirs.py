"""Folders of GGUF files the user asked specllama to look in, every time (`specllama models
--add-dir DIR`): a JSON list in the config folder, specllama's own file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from specllama.errors import LocalModelError, UsageError
from specllama.paths import config_dir

SETTINGS_NAME = "model-dirs.json"


def settings_path() -> Path:
    return config_dir() / SETTINGS_NAME


def saved_dirs() -> list[Path]:
    """The folders saved so far ([] when none); a damaged file is an error that names it."""
    path = settings_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise LocalModelError(
            f"{path}: cannot read the saved model folders ({exc})",
            hint="fix or delete that file",
        ) from None
    if not (isinstance(data, list) and all(isinstance(d, str) for d in data)):
        raise LocalModelError(f"{path}: expected a JSON list of folders", "fix or delete it")
    return [Path(d) for d in data]


def add_dir(folder: Path) -> list[Path]:
    """Remember `folder` (made absolute); the folders saved afterwards."""
    folder = folder.expanduser().resolve()
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder")
    dirs = saved_dirs()
    if folder not in dirs:
        dirs.append(folder)
        _save(dirs)
    return dirs


def remove_dir(folder: Path) -> list[Path]:
    """Forget `folder`; the folders saved afterwards."""
    dirs = saved_dirs()
    wanted = {folder.expanduser(), folder.expanduser().resolve()}
    kept = [d for d in dirs if d not in wanted]
    if len(kept) == len(dirs):
        listed = ", ".join(str(d) for d in dirs) or "none"
        raise UsageError(f"{folder} is not a saved model folder", hint=f"saved: {listed}")
    _save(kept)
    return kept


def _save(dirs: list[Path]) -> None:
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps([str(d) for d in dirs], indent=1) + "\n", encoding="utf-8")
    os.replace(partial, path)
