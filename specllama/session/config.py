"""What a pair is loaded with (`EngineConfig`): the files, the drafter, the draft lengths, the
context, where the layers run, the slots; each value checked once, as one usage error."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specllama.errors import UsageError
from specllama.llama.rpc import DEFAULT_TIMEOUT_S
from specllama.session.drafter_choice import HEAD_KINDS, check_drafter

ADAPTIVE_DRAFT_MAX = 16


def check_draft_max(draft_max: int) -> None:
    if draft_max < 1:
        raise UsageError(f"--draft-max must be at least 1, got {draft_max}")


@dataclass(frozen=True)
class EngineConfig:
    target: Path
    draft: Path | None = None
    drafter: str = "model"  # one of DRAFTERS
    draft_max: int = 4  # --fixed drafts this many tokens a round
    # The adaptive controller's cap on the draft model: it chooses shorter drafts itself.
    adaptive_draft_max: int = ADAPTIVE_DRAFT_MAX
    n_ctx: int = 4096
    n_gpu_layers: int = 0
    n_gpu_layers_draft: int = 0
    n_threads: int | None = None
    extra_buffers: bool | None = None  # llama.cpp's extra buffer types; None: safe automatic
    # Adaptive: draft length, source (n-gram first, then the draft model) and on/off chosen
    # each round from measured costs and acceptance. Fixed: always draft_max from one drafter.
    adaptive: bool = True
    # RPC workers (HOST:PORT) for the target's offloaded layers; the draft stays here.
    rpc: tuple[str, ...] = ()
    rpc_timeout_s: float = DEFAULT_TIMEOUT_S
    # Keep the memory of prompts and answers in this folder between runs (None: in RAM only).
    remember: Path | None = None
    # Sequences each context holds, n_ctx tokens each: a server's slots (`--parallel`). None:
    # as many as the pair affords here (`auto_slots`).
    n_seq: int | None = 1
    # Exact mode (`specllama.llama.exact`): kernels that give a verified token the logits it
    # gets alone, at some speed; chosen once per process, before its first model loads.
    exact: bool = False

    def __post_init__(self) -> None:
        check_drafter(self.drafter)
        check_draft_max(self.draft_max)
        check_draft_max(self.adaptive_draft_max)
        if self.n_ctx < 16:
            raise UsageError(f"--ctx must be at least 16, got {self.n_ctx}")
        if self.drafter == "model" and self.draft is None:
            raise UsageError("--drafter model needs a draft model (--draft or --pair)")
        if self.drafter in HEAD_KINDS and self.draft is None:
            raise UsageError(f"--drafter {self.drafter} needs the head's file (--draft FILE.gguf)")
        if self.n_seq is not None and self.n_seq < 1:
            raise UsageError(f"--parallel must be at least 1, got {self.n_seq}")
        if (self.n_seq or 1) > 1 and self.follows_one_sequence:
            raise UsageError(
                f"--parallel {self.n_seq} cannot run --drafter {self.drafter}: a draft head "
                "reads the target's hidden rows of one sequence",
                hint="--parallel 1, or --drafter model / ngram",
            )

    @property
    def follows_one_sequence(self) -> bool:
        """A draft head reads the target's hidden rows as one sequence decodes them."""
        return self.drafter in HEAD_KINDS or self.drafter == "mtp"

    @property
    def mtp(self) -> bool:
        """Draft with the target's own head: its MTP layers are loaded, and a context made."""
        return self.drafter == "mtp"
