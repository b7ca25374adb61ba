"""The folders specllama keeps files in, for every part: cache, config and state.

The platforms' conventions (XDG on Linux, ~/Library on macOS, %LOCALAPPDATA% on Windows),
computed here so that no part needs a dependency for them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def cache_dir() -> Path:
    """What specllama can make again (downloads it assembles, calibrations, probe verdicts):
    SPECLLAMA_CACHE, else the platform's user cache directory."""
    if override := os.environ.get("SPECLLAMA_CACHE"):
        return Path(override).expanduser()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(base) / "specllama" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "specllama"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "specllama"


def config_dir() -> Path:
    """What the user writes (the catalogue, settings)."""
    if sys.platform == "win32":
        base = os.environ.get("APPDATA") or str(Path.home() / "AppData" / "Roaming")
        return Path(base) / "specllama"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / "specllama"
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "specllama"


def state_dir() -> Path:
    """What specllama remembers between runs that is neither cache nor config (chat history)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "specllama"
