"""The configurations `specllama bench` compares: what `--configs` names, and the defaults."""

from __future__ import annotations

from dataclasses import dataclass

from specllama.engine.control import HEADS
from specllama.errors import UsageError
from specllama.session import ADAPTIVE_DRAFT_MAX

TARGET = "target"
SPECLLAMA = "specllama"
DEFAULT_CONFIGS = "target,model:2,model:4,ngram:8,adaptive"


def default_configs(*, has_draft: bool, mtp: bool, head: str | None = None) -> str:
    """What `specllama bench --full` compares when not told: the draft model's lengths, or the
    head's that drafts (the target's own, `mtp`, or one in its own file, `head`: a kind in
    `control.HEADS`), or n-gram lookup alone."""
    own = "mtp" if mtp else head
    if has_draft or not own:
        return DEFAULT_CONFIGS if has_draft else "target,ngram:8,adaptive"
    return f"target,{own}:2,{own}:4,ngram:8,adaptive"


@dataclass(frozen=True)
class BenchConfig:
    """One way of generating: `drafter` is none, model, mtp, a head kind (`control.HEADS`: a
    head in its own file), ngram or combined (n-gram first, then the draft model or the head
    loaded); `adaptive` uses AdaptiveController, else FixedLength(draft_max); `pipelined`
    (fixed) drafts the next round while the target verifies (pipe:K). `tool` is the program
    that runs it: specllama, or another one run on the same prompts beside it (llama.cpp:
    `specllama.bench.llamacpp`), whose `draft_max` is None where that tool's own default
    decides."""

    name: str
    drafter: str
    draft_max: int | None
    adaptive: bool
    pipelined: bool = False
    tool: str = SPECLLAMA

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "drafter": self.drafter,
            "draft_max": self.draft_max,
            "controller": "adaptive" if self.adaptive else "fixed",
            "pipelined": self.pipelined,
            "tool": self.tool,
        }


def parse_configs(
    spec: str,
    *,
    has_draft: bool,
    draft_max: int,
    adaptive: bool = True,
    adaptive_draft_max: int = ADAPTIVE_DRAFT_MAX,
    has_mtp: bool = False,
    head: str | None = None,
) -> list[BenchConfig]:
    """`target`, `model:K`, `pipe:K` (the draft model, pipelined), `mtp:K` (the target's own
    head), `eagle3:K`, `dflash:K` or `assistant:K` (the head loaded from its own file, of that
    kind: `head`), `ngram:K`,
    `adaptive` (comma-separated). The target alone is always included (speedups are relative
    to it) and comes first. `adaptive=False` (--fixed) drops the adaptive configuration."""
    configs = [BenchConfig(TARGET, "none", 0, False)]
    for item in (part.strip() for part in spec.split(",")):
        if not item or item == TARGET:
            continue
        name, _, k = item.partition(":")
        if name == "adaptive":
            if k:
                raise UsageError(f"bench configuration {item!r}: adaptive takes no length")
            if adaptive:
                drafter = "combined" if has_draft or has_mtp or head else "ngram"
                configs.append(BenchConfig("adaptive", drafter, adaptive_draft_max, True))
            continue
        configs.append(
            _fixed(item, name, k, draft_max, has_draft=has_draft, has_mtp=has_mtp, head=head)
        )
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise UsageError("a bench configuration is listed twice")
    return configs


def _fixed(
    item: str,
    name: str,
    k: str,
    draft_max: int,
    *,
    has_draft: bool,
    has_mtp: bool,
    head: str | None,
) -> BenchConfig:
    if name not in ("model", "pipe", "mtp", *HEADS, "ngram"):
        heads = "".join(f", {kind}:K" for kind in HEADS)
        raise UsageError(
            f"unknown bench configuration {item!r}",
            hint=f"use target, model:K, pipe:K, mtp:K{heads}, ngram:K or adaptive, separated "
            "by commas",
        )
    try:
        length = int(k) if k else draft_max
    except ValueError:
        raise UsageError(f"bench configuration {item!r}: K must be a number") from None
    if length < 1:
        raise UsageError(f"bench configuration {item!r}: K must be at least 1")
    if name == "mtp" and not has_mtp:
        raise UsageError(
            f"bench configuration {item!r} needs a target drafting with its own head",
            hint="pass --drafter mtp with a target that has MTP layers",
        )
    if name in HEADS and name != head:
        raise UsageError(
            f"bench configuration {item!r} needs a {name} head",
            hint=f"pass its file as --draft HEAD.gguf (--drafter {name})",
        )
    if name in ("model", "pipe") and not has_draft:
        raise UsageError(
            f"bench configuration {item!r} needs a draft model",
            hint=f"pass --draft or --pair, or leave {name}:K out of --configs",
        )
    pipelined = name == "pipe"
    drafter = "model" if pipelined else name
    return BenchConfig(f"{name}:{length}", drafter, length, False, pipelined)
