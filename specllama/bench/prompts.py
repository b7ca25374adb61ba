"""The prompts `specllama bench` runs: the bundled set (specllama/data/bench_prompts.jsonl) or a
JSONL file of the user's, checked line by line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specllama.chat import Message
from specllama.errors import UsageError

ROLES = ("system", "user", "assistant")


def _data(name: str) -> Any:
    return resources.files("specllama").joinpath("data", name)


def default_prompts_path() -> Path:
    return Path(str(_data("bench_prompts.jsonl")))


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    category: str
    messages: tuple[Message, ...]
    max_tokens: int | None = None  # overrides the bench's --max-tokens for this prompt
    # A JSON Schema (as JSON text) every configuration's answer follows, enforced token by
    # token; the structured-output category has one on each prompt.
    schema: str | None = None


def load_prompts(path: Path | None = None) -> list[BenchPrompt]:
    """A JSONL prompt file: one object a line with `category` and either `prompt` (one user
    turn, with an optional `system`) or `messages` (a list of {role, content}, ending with a
    user turn: a multi-turn conversation); optional `id`, `max_tokens` and `schema` (a JSON
    Schema every answer must satisfy: a structured-output prompt). Blank lines and
    lines starting with # are skipped. Errors name the file and line."""
    path = path or default_prompts_path()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read the prompt file {path}: {exc.strerror}") from None
    prompts: list[BenchPrompt] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not valid JSON ({exc.msg})") from None
        prompt = _parse_prompt(entry, where, default_id=f"{len(prompts) + 1:02d}")
        if prompt.id in seen:
            raise UsageError(f"{where}: the id {prompt.id!r} is used twice")
        seen.add(prompt.id)
        prompts.append(prompt)
    if not prompts:
        raise UsageError(f"{path} holds no prompts")
    return prompts


def _parse_prompt(entry: object, where: str, default_id: str) -> BenchPrompt:
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: each line must be a JSON object")
    known = {"id", "category", "prompt", "system", "messages", "max_tokens", "schema"}
    unknown = set(entry) - known
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    category = entry.get("category")
    if not isinstance(category, str) or not category.strip():
        raise UsageError(f"{where}: `category` must be a non-empty string")
    if ("prompt" in entry) == ("messages" in entry):
        raise UsageError(f"{where}: give either `prompt` or `messages`")
    messages: list[Message] = []
    if "prompt" in entry:
        if not isinstance(entry["prompt"], str) or not entry["prompt"].strip():
            raise UsageError(f"{where}: `prompt` must be a non-empty string")
        if isinstance(entry.get("system"), str):
            messages.append(Message("system", entry["system"]))
        messages.append(Message("user", entry["prompt"]))
    else:
        raw = entry["messages"]
        if not isinstance(raw, list) or not raw:
            raise UsageError(f"{where}: `messages` must be a non-empty list")
        for m in raw:
            if (
                not isinstance(m, dict)
                or m.get("role") not in ROLES
                or not isinstance(m.get("content"), str)
            ):
                raise UsageError(
                    f"{where}: each message needs a `role` ({', '.join(ROLES)}) and `content`"
                )
            messages.append(Message(m["role"], m["content"]))
        if messages[-1].role != "user":
            raise UsageError(f"{where}: the last message must be the user's")
    max_tokens = entry.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise UsageError(f"{where}: `max_tokens` must be a positive integer")
    prompt_id = entry.get("id", default_id)
    if not isinstance(prompt_id, str):
        raise UsageError(f"{where}: `id` must be a string")
    schema = entry.get("schema")
    if schema is not None and not isinstance(schema, dict):
        raise UsageError(f"{where}: `schema` must be a JSON Schema (a JSON object)")
    schema_text = None if schema is None else json.dumps(schema)
    return BenchPrompt(prompt_id, category.strip(), tuple(messages), max_tokens, schema_text)


def select_prompts(
    prompts: list[BenchPrompt], categories: list[str] | None, limit: int | None
) -> list[BenchPrompt]:
    """The prompts of these categories (all when None), the first `limit` of them."""
    if categories:
        known = {p.category for p in prompts}
        missing = [c for c in categories if c not in known]
        if missing:
            raise UsageError(
                f"no prompts in category {', '.join(missing)}",
                hint=f"categories: {', '.join(sorted(known))}",
            )
        prompts = [p for p in prompts if p.category in categories]
    return prompts if limit is None else prompts[: max(limit, 1)]
