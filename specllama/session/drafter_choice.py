"""Which drafter a pair drafts with: the names `--drafter` takes, the drafter chosen when none is
asked for, and the checks on a draft file (a draft head, or a head written for a fork) made
from its header before anything loads."""

from __future__ import annotations

from pathlib import Path

from specllama.engine.assistant import AssistantDrafter
from specllama.engine.dflash import DFlashDrafter
from specllama.engine.eagle3 import Eagle3Drafter
from specllama.errors import ModelLoadError, UsageError
from specllama.llama import gguf_info
from specllama.llama.assistant import AssistantHead
from specllama.llama.dflash import DFlashHead
from specllama.llama.eagle3 import Eagle3Head
from specllama.llama.mtp import mtp_support
from specllama.models.catalog import DRAFTERS

# The draft heads that come in their own file (`control.HEADS`), and how each drafts.
HEAD_KINDS = {
    "eagle3": (Eagle3Head, Eagle3Drafter),
    "dflash": (DFlashHead, DFlashDrafter),
    "assistant": (AssistantHead, AssistantDrafter),
}


def check_drafter(name: str) -> None:
    if name not in DRAFTERS:
        raise UsageError(f"unknown drafter {name!r}: choose one of {', '.join(DRAFTERS)}")


def mtp_problem(target: Path) -> str | None:
    """Why `target` cannot draft with its own head here (None: it can): the file carries no
    MTP layers, or this llama-cpp-python cannot run them. Reads the header only."""
    try:
        header = gguf_info.read_header(target)
    except ModelLoadError:
        return None  # loading it says what is wrong, in its own words
    if not header.has_mtp:
        return f"{target.name} has no MTP layers (its own draft head: nextn_predict_layers)"
    return mtp_support()


def head_kind(draft: Path | None) -> str | None:
    """The drafter a draft file needs when it is a draft head ("eagle3", "dflash"), else
    None."""
    if draft is None:
        return None
    try:
        return gguf_info.read_header(draft).head_kind
    except ModelLoadError:
        return None  # loading it says what is wrong, in its own words


def refuse_fork_head(draft: Path) -> None:
    """A draft head written for a llama.cpp fork is one line, before anything loads."""
    try:
        header = gguf_info.read_header(draft)
    except ModelLoadError:
        return  # loading it says what is wrong, in its own words
    if kind := header.fork_head:
        raise UsageError(
            f"{draft.name} is a {kind} head written for a llama.cpp fork (architecture "
            f"{header.architecture}), which llama.cpp does not load",
            hint="convert the drafter with llama.cpp's convert_hf_to_gguf.py --target-model-dir",
        )


def default_drafter(target: Path, draft: Path | None, *, draft_named: bool) -> str:
    """The drafter when none is asked for: a draft the user named (as the head it is, for a
    draft head's file); else the target's own MTP head where it has one and it runs here; else
    a draft found, or n-gram lookup."""
    if draft is not None and draft_named:
        return head_kind(draft) or "model"
    if mtp_problem(target) is None:
        return "mtp"
    return "model" if draft is not None else "ngram"
