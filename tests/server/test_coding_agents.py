"""The coding agents people run, each from its own npm package, against a real `specllama
serve`: Claude Code (Anthropic's Messages API), Codex CLI (OpenAI's Responses API) and opencode
(Chat Completions), each sending its own model name, its long system prompt and its tools.

What is checked is the protocol, as a user would meet it: the agent starts, its requests are
answered through its own API (the server's log line for each, no refusal, no error, no request
cancelled and sent again), and it exits 0. The agents are served a tiny synthetic model with
Qwen2.5's tokenizer and template that answers "Hello" (`vocab_models.qwen_saying_hello`), at
32K of context, as the agents' users are told to give a local model: their 6-12K-token prompts
go through the same templating, tools and prefill as a real model's, in seconds. What a real
model's minutes of prefill do to a client (issue 52: Claude Code gave up after ~5 minutes and
started over) is checked with clients whose idle timeout is shorter than the prefill
(tests/server/test_long_prompts.py), and measured with Claude Code itself in
research/agent_first_turn.py: on 2 cores the 0.5B took ~290 s of this test's time, its first
turn answered without a retry.

The packages are installed once into `.agents/` (npm, pinned versions), by .ci/run beside the
build, under the lock the fixture takes too. Every agent runs with a home of its own and its
non-essential traffic off.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import KEY, Server, serve
from vocab_models import qwen_saying_hello

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ROOT / ".agents"
PACKAGES = {  # npm package -> the version its test was written against
    "@anthropic-ai/claude-code": "2.1.332",
    "@openai/codex": "0.171.0",
    "opencode-ai": "1.18.33",
}
CTX = 32768
TASK = "Create a file named hello.txt containing exactly the word: hi"
MODEL = "local-coder"  # what the agents are told the model is called
# One agent's whole run: each sends one to three requests of 6-12K tokens.
RUN_S = 300


def agent(name: str) -> Path:
    """The agent's executable in `.agents/`, installed there first if missing."""
    AGENTS.mkdir(exist_ok=True)
    executable = AGENTS / "node_modules" / ".bin" / name
    with open(AGENTS / ".install-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not executable.exists():
            pinned = [f"{package}@{version}" for package, version in PACKAGES.items()]
            npm = ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(AGENTS)]
            subprocess.run([*npm, *pinned], check=True, capture_output=True, timeout=900)
    return executable


@pytest.fixture(scope="module")
def hello_server(tmp_path_factory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    yield from serve(qwen_saying_hello(), ["--alias", MODEL], log, ctx=CTX, threads=2)


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return repo


def environment(home: Path, **more: str) -> dict[str, str]:
    """A home of the agent's own (no user settings), nothing that would leave this machine
    but npm's registry (opencode fetches its provider package), and no colours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_"))}
    home.mkdir(exist_ok=True)
    env |= {"HOME": str(home), "NO_COLOR": "1", "TERM": "dumb", "CI": "1"}
    env["npm_config_cache"] = str(AGENTS / "npm-cache")  # what opencode fetches, once
    return {**env, **more}


def run_agent(server: Server, command: list[str], repo: Path, env: dict[str, str]):
    """Run the agent in `repo`; (its output, what the server logged meanwhile)."""
    logged = len(server.log.read_text())
    done = subprocess.run(
        command,
        cwd=repo,
        env={**env, "PWD": str(repo)},  # opencode finds its project from $PWD, not its cwd
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_S,
    )
    said = f"{done.stdout}\n{done.stderr}"
    served = server.log.read_text()[logged:]
    assert done.returncode == 0, f"exit {done.returncode}:\n{said}\nserver:\n{served}"
    return said, served


def assert_answered(said: str, served: str, api: str, repo: Path) -> None:
    """Each request was answered through the agent's API, nothing was refused, failed or
    cancelled (an agent that gives up on a long prefill and retries leaves a cancelled request:
    issue 52), and a file the model wrote says what was asked."""
    context = f"agent:\n{said}\nserver:\n{served}"
    answered = re.findall(rf"^{api}: \d+ tokens in .* finish (\w+)$", served, re.MULTILINE)
    assert answered and all(f in ("stop", "stop_string", "length") for f in answered), context
    assert not re.search(r"refused|failed|error|cancelled|: 4\d\d$", served, re.MULTILINE), context
    made = repo / "hello.txt"
    if made.exists():
        assert made.read_text().strip() == "hi", context


def test_claude_code_through_the_messages_api(
    hello_server: Server, repository: Path, tmp_path: Path
):
    env = environment(
        tmp_path / "home",
        ANTHROPIC_BASE_URL=hello_server.url,
        ANTHROPIC_AUTH_TOKEN=KEY,  # sent as Authorization: Bearer
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        CLAUDE_CODE_AUTO_COMPACT_WINDOW=str(CTX),
    )
    # As root Claude Code refuses to skip its permission prompts: the tools it may use, named.
    command = [str(agent("claude")), "-p", TASK, "--model", MODEL]
    command += ["--allowedTools", "Write", "--max-turns", "3"]
    said, served = run_agent(hello_server, command, repository, env)
    assert_answered(said, served, "messages", repository)
    assert "Hello" in said, said  # the model's answer, as the agent shows it


def test_codex_through_the_responses_api(hello_server: Server, repository: Path, tmp_path: Path):
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "specllama"\n'
        "[model_providers.specllama]\n"
        'name = "specllama"\n'
        f'base_url = "{hello_server.url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "SPECLLAMA_API_KEY"\n'
    )
    env = environment(tmp_path / "home", CODEX_HOME=str(codex_home), SPECLLAMA_API_KEY=KEY)
    command = [str(agent("codex")), "exec", "--skip-git-repo-check"]
    command += ["--sandbox", "workspace-write", TASK]
    said, served = run_agent(hello_server, command, repository, env)
    assert_answered(said, served, "responses", repository)
    assert "Hello" in said, said  # the model's answer, as the agent shows it


def test_opencode_through_chat_completions(hello_server: Server, repository: Path, tmp_path: Path):
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "specllama",
        "options": {"baseURL": f"{hello_server.url}/v1", "apiKey": "{env:SPECLLAMA_API_KEY}"},
        "models": {MODEL: {"name": "specllama"}},
    }
    config = {"provider": {"specllama": provider}, "model": f"specllama/{MODEL}"}
    (repository / "opencode.json").write_text(json.dumps(config))
    env = environment(tmp_path / "home", SPECLLAMA_API_KEY=KEY)
    opencode = [str(agent("opencode")), "run", TASK]
    said, served = run_agent(hello_server, opencode, repository, env)
    assert_answered(said, served, "chat", repository)
    assert "Hello" in said, said  # the model's answer, as the agent shows it
