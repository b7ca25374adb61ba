"""How many slots (sequences at once) a server runs when `--parallel` is not given: sized from
the pair's KV cache per token and the memory free now."""

from __future__ import annotations

from pathlib import Path

import psutil

from specllama.llama import gguf_info
from specllama.llama.library import build_facts
from specllama.session.config import EngineConfig

# Slots a server runs by default on a CPU: as many answers at once cost no throughput there
# (a step's tokens cost what they would one request after another) and spare the short ones
# the wait behind a long one (research/RESULTS.md, issue 42).
DEFAULT_SLOTS = 4


def auto_slots(config: EngineConfig) -> int:
    """The slots `serve` runs when --parallel is not given: DEFAULT_SLOTS on a CPU, fewer where
    their KV caches would take more than a quarter of the memory free now; one where a draft
    head follows one sequence, or on a GPU, where pipelined drafting (which a slot gives up) is
    what pays for one user."""
    on_gpu = build_facts().gpu_offload and config.n_gpu_layers != 0
    if on_gpu or config.follows_one_sequence:
        return 1
    models = (config.target, config.draft)
    per_slot = config.n_ctx * sum(_kv_bytes_per_token(path) for path in models)
    room = psutil.virtual_memory().available // 4
    return max(1, min(DEFAULT_SLOTS, room // per_slot)) if per_slot else DEFAULT_SLOTS


def _kv_bytes_per_token(path: Path | None) -> int:
    if path is None:
        return 0
    try:
        return gguf_info.read_header(path).kv_bytes_per_token or 0
    except (OSError, ValueError):
        return 0  # loading it says what is wrong
