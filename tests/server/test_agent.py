"""A real coding agent end to end: aider (from the package index, in its own virtual
environment, `.venv-aider/`) makes a requested edit in a temporary git repository through a
real `specllama serve` on the default pair (Qwen2.5-Coder 1.5B target, its 0.5B draft).

The task fits a 1.5B model: one small file, one rename, aider's "whole" edit format (the model
writes the whole file back, which small models do reliably; diff formats they often break).
Aider runs offline here: its update check, analytics and release notes are off, litellm reads
its bundled model cost map (LITELLM_LOCAL_MODEL_COST_MAP), and a model metadata file tells
aider the served model's context size, so that it never asks the network for it (checked once
under strace: its only connection is to the server); a proxy on a closed local port makes any
look-up that would still try fail at once rather than hang.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import KEY, Server, serve

from specllama.models import hub
from specllama.models.catalog import load_catalog

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
AIDER_VENV = ROOT / ".venv-aider"
AIDER_VERSION = "0.86.2"  # aider pins its dependencies exactly: one version, in its own venv
CTX = 8192  # aider's system prompt for the whole edit format is ~2k tokens
SOURCE = "def add(a, b):\n    return a + b\n\n\nprint(add(2, 3))\n"


def aider_executable() -> Path:
    """aider in `.venv-aider/`, installed there first if missing. .ci/run installs it beside
    the build, holding the same lock: taken here first, so a half-done install is waited for."""
    AIDER_VENV.mkdir(exist_ok=True)
    aider = AIDER_VENV / "bin" / "aider"
    with open(AIDER_VENV / ".install-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not aider.exists():
            subprocess.run([sys.executable, "-m", "venv", str(AIDER_VENV)], check=True)
            pip = [str(AIDER_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
            subprocess.run([*pip, f"aider-chat=={AIDER_VERSION}"], check=True, timeout=1200)
    return aider


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    target, draft, _ = hub.resolve_pair(load_catalog(), None)  # cached after the first fetch
    assert draft is not None
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    yield from serve(target, ["--draft", str(draft)], log, ctx=CTX)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "f.py").write_text(SOURCE)
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "f.py"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True, env=git_env(tmp_path))
    return repo


def git_env(home: Path) -> dict[str, str]:
    who = {"GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@example.com"}
    who |= {"GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@example.com"}
    return {**os.environ, "HOME": str(home), **who}


def offline_env(home: Path) -> dict[str, str]:
    """aider's environment: a home of its own (no user settings, a fresh cache), and nothing
    that reaches out of this machine."""
    env = git_env(home)
    env |= {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm's bundled cost map, not GitHub's
        "AIDER_CHECK_UPDATE": "false",
        "AIDER_ANALYTICS_DISABLE": "true",
        "NO_COLOR": "1",
        "TERM": "dumb",
    }
    # Any request that still tried to leave this machine fails at once (a closed local port)
    # instead of waiting on a network that is not there; the server is reached directly.
    closed = "http://127.0.0.1:9"
    env |= {"HTTP_PROXY": closed, "HTTPS_PROXY": closed, "ALL_PROXY": closed}
    env |= {"NO_PROXY": "127.0.0.1,localhost"}
    for lower in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        env.pop(lower, None)
    return env


def test_aider_renames_a_function_through_serve(server: Server, repository: Path, tmp_path):
    model = f"openai/{server.model}"
    metadata = tmp_path / "model-metadata.json"
    metadata.write_text(
        json.dumps(
            {
                model: {
                    "max_input_tokens": CTX,
                    "max_output_tokens": 1024,
                    "input_cost_per_token": 0,
                    "output_cost_per_token": 0,
                    "litellm_provider": "openai",
                    "mode": "chat",
                }
            }
        )
    )
    command = [
        str(aider_executable()),
        *["--model", model, "--openai-api-base", f"{server.url}/v1", "--openai-api-key", KEY],
        *["--model-metadata-file", str(metadata), "--edit-format", "whole", "--map-tokens", "0"],
        *["--yes-always", "--no-check-update", "--no-analytics", "--no-show-model-warnings"],
        *["--no-show-release-notes", "--no-gitignore", "--no-auto-commits", "--no-pretty"],
        *["--no-fancy-input", "--no-detect-urls", "--no-suggest-shell-commands"],
        *["--message", "Rename the function add to plus, and its call too.", "f.py"],
    ]
    done = subprocess.run(
        command,
        cwd=repository,
        env=offline_env(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = f"aider said:\n{done.stdout}\n{done.stderr}\nserver:\n{server.log.read_text()}"
    assert done.returncode == 0, said
    assert "Applied edit to f.py" in done.stdout, said  # aider read the answer as an edit
    # It never looked up model prices on the network (it would have cached what it found).
    assert not (tmp_path / ".aider" / "caches").exists(), said
    edited = (repository / "f.py").read_text()
    assert "def plus(a, b):" in edited and "def add" not in edited, said
    # The edit is a working program: the renamed function, called under its new name.
    ran = subprocess.run([sys.executable, "f.py"], cwd=repository, capture_output=True, text=True)
    assert ran.returncode == 0 and ran.stdout.strip() == "5", (edited, ran.stderr)
    # The server answered aider's requests with no error.
    assert " 400 " not in server.log.read_text() and "error" not in done.stderr.lower(), said
