"""Measured costs on this machine: the target verifying batches of 1..K tokens, one draft step,
the draft catching up a backlog, and how a verify and draft steps share the machine when they
run at once (pipelined drafting). The adaptive controller and `specllama bench` use them.

Measured once per (model files, machine, threads, GPU layers) and cached as JSON under the
specllama cache folder (SPECLLAMA_CACHE, else XDG_CACHE_HOME/specllama) in `calibration/`.
The sizes are interleaved across repeats and the median kept, so a burst of load from other
programs skews one repeat of every size rather than all repeats of one size.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from specllama.paths import cache_dir
from specllama.policy.costs import Costs

VERIFY_SIZES = (1, 2, 3, 4, 5, 6, 8, 12, 17, 25, 33, 49)
CONTEXT_TOKENS = 64  # evaluated before timing, so the costs are those of a short conversation
DRAFT_STEPS = 8
CATCHUP_TOKENS = 32
OVERLAP_BATCH = 5  # a verify of the pending token and 4 drafts, beside 5 draft steps
FORMAT = 2


class _Model(Protocol):
    n_vocab: int
    n_ctx: int
    decode_seconds: float

    def decode(self, tokens: Sequence[int], logits_at: Sequence[int] = ()) -> Any: ...

    def rollback(self, n_past: int) -> None: ...


def calibration_dir() -> Path:
    return cache_dir() / "calibration"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _file_id(path: Path | None) -> dict[str, object] | None:
    if path is None:
        return None
    path = Path(path).resolve()
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def calibration_key(
    target: Path,
    draft: Path | None,
    *,
    n_threads: int,
    n_gpu_layers: int = 0,
    n_gpu_layers_draft: int = 0,
    llama_version: str = "",
    extra_buffers: bool = True,
    workers: list[tuple[str, int]] | None = None,
) -> dict[str, object]:
    """What the costs depend on: the model files, this machine, and how the models run.

    `workers`: (endpoint, total device memory) of the RPC workers that run the target; a verify
    then pays the network too. Only present with workers, so that keys measured without any
    stay what they were.
    """
    key: dict[str, object] = {
        "format": FORMAT,
        "target": _file_id(target),
        "draft": _file_id(draft),
        "machine": {
            "node": platform.node(),
            "system": f"{platform.system()} {platform.machine()}",
            "cpu": _cpu_name(),
            "logical_cpus": os.cpu_count(),
        },
        "n_threads": n_threads,
        "n_gpu_layers": n_gpu_layers,
        "n_gpu_layers_draft": n_gpu_layers_draft,
        "llama_cpp": llama_version,
        "extra_buffers": extra_buffers,  # off (the AMX fallback) makes batches slower
    }
    if workers:
        key["rpc"] = [{"endpoint": e, "memory_total": total} for e, total in workers]
    return key


def _key_path(key: dict[str, object]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return calibration_dir() / f"{digest}.json"


def load(key: dict[str, object]) -> Costs | None:
    path = _key_path(key)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("key") != key:
            return None
        return Costs.from_dict(data["costs"])
    except (OSError, ValueError, KeyError, TypeError, AssertionError):
        return None  # missing or damaged: measure again


def save(key: dict[str, object], costs: Costs) -> Path:
    path = _key_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"key": key, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "costs": costs.as_dict()}
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=2), encoding="utf-8")
    partial.replace(path)
    return path


def _tokens(model: _Model, n: int) -> list[int]:
    """Valid, varied token ids (the costs do not depend on which tokens they are)."""
    span = max(model.n_vocab - 300, 1)
    return [200 + (i * 7919) % span for i in range(n)]


def _timed(model: _Model, tokens: Sequence[int], logits_at: Sequence[int]) -> float:
    before = model.decode_seconds
    model.decode(tokens, logits_at)
    return model.decode_seconds - before


def measure(
    target: _Model,
    draft: _Model | None = None,
    *,
    sizes: Sequence[int] = VERIFY_SIZES,
    repeats: int = 3,
    side_by_side: bool = False,
) -> Costs:
    """Time the decodes the loop makes, and with `side_by_side` how a verify and draft steps
    overlap (`measure_overlap`; else the overlap is 1: no gain). Leaves both contexts empty."""
    sizes = sorted({1, *sizes})
    need = CONTEXT_TOKENS + max(sizes)
    tokens = _tokens(target, need)
    target.rollback(0)
    target.decode(tokens[:CONTEXT_TOKENS])
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    for repeat in range(repeats + 1):  # the first pass warms up and is not kept
        for n in sizes:
            seconds = _timed(target, tokens[CONTEXT_TOKENS : CONTEXT_TOKENS + n], range(n))
            target.rollback(CONTEXT_TOKENS)
            if repeat:
                samples[n].append(seconds)
    target.rollback(0)
    verify = tuple((n, statistics.median(samples[n])) for n in sizes)

    step = catchup = 0.0
    overlap = 1.0
    if draft is not None:
        tokens = _tokens(draft, CONTEXT_TOKENS + max(DRAFT_STEPS, CATCHUP_TOKENS))
        draft.rollback(0)
        draft.decode(tokens[:CONTEXT_TOKENS])
        steps: list[float] = []
        catchups: list[float] = []
        for repeat in range(repeats + 1):
            for i in range(DRAFT_STEPS):
                token = tokens[CONTEXT_TOKENS + i : CONTEXT_TOKENS + i + 1]
                seconds = _timed(draft, token, [0])
                if repeat:
                    steps.append(seconds)
            draft.rollback(CONTEXT_TOKENS)
            batch = tokens[CONTEXT_TOKENS : CONTEXT_TOKENS + CATCHUP_TOKENS]
            seconds = _timed(draft, batch, [len(batch) - 1])
            draft.rollback(CONTEXT_TOKENS)
            if repeat:
                catchups.append(seconds / len(batch))
        draft.rollback(0)
        step = statistics.median(steps)
        catchup = statistics.median(catchups)
        if side_by_side:
            overlap = measure_overlap(target, draft, repeats=repeats)
    return Costs(verify_s=verify, draft_step_s=step, draft_catchup_s=catchup, overlap=overlap)


def measure_overlap(target: _Model, draft: _Model, *, repeats: int = 3) -> float:
    """lambda of `specllama.policy.costs`: a verify of OVERLAP_BATCH tokens (V) and as many
    one-token draft steps (A), timed alone and then side by side (W; the draft on another thread, as
    pipelined drafting runs it): (W - max(V, A)) / min(V, A), the median of the repeats; 1
    (nothing to gain) when the decodes take no measurable time (under 0.1 ms). Leaves both
    contexts empty.

    Only for models on a GPU: on CPU cores, llama.cpp's threads are an OpenMP team per calling
    thread, and once a second thread has decoded, the first one's decodes run slower (measured
    on a 2-core Xeon with the Qwen2.5-Coder pair: draft steps +20%, the target's +8%)."""
    verify_tokens = _tokens(target, CONTEXT_TOKENS + OVERLAP_BATCH)
    step_tokens = _tokens(draft, CONTEXT_TOKENS + OVERLAP_BATCH)
    for model, tokens in ((target, verify_tokens), (draft, step_tokens)):
        model.rollback(0)
        model.decode(tokens[:CONTEXT_TOKENS])

    def verify() -> None:
        target.decode(verify_tokens[CONTEXT_TOKENS:], range(OVERLAP_BATCH))
        target.rollback(CONTEXT_TOKENS)

    def steps() -> None:
        for token in step_tokens[CONTEXT_TOKENS:]:
            draft.decode([token], [0])
        draft.rollback(CONTEXT_TOKENS)

    samples: list[float] = []
    with ThreadPoolExecutor(1, thread_name_prefix="specllama-calibration") as pool:
        for repeat in range(repeats + 1):  # the first pass warms up and is not kept
            v, a = _wall(verify), _wall(steps)
            side_by_side = _wall(lambda: (job := pool.submit(steps), verify(), job.result()))
            if repeat and min(v, a) > 1e-4:
                samples.append((side_by_side - max(v, a)) / min(v, a))
    target.rollback(0)
    draft.rollback(0)
    return min(max(statistics.median(samples), 0.0), 4.0) if samples else 1.0


def _wall(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def load_or_measure(
    key: dict[str, object],
    target: _Model,
    draft: _Model | None,
    *,
    refresh: bool = False,
    on_measure: Callable[[], None] | None = None,
    side_by_side: bool = False,
) -> Costs:
    """The cached costs for `key`, or measure them now (calling `on_measure` first) and cache."""
    if not refresh and (costs := load(key)) is not None:
        return costs
    if on_measure is not None:
        on_measure()
    costs = measure(target, draft, side_by_side=side_by_side)
    with contextlib.suppress(OSError):  # a read-only cache: measured again next time, no more
        save(key, costs)
    return costs


def cached_calibrations() -> list[dict[str, object]]:
    """Every cached calibration, for `specllama doctor`: the models, the machine, when it was
    measured, and the figures (seconds), with derived ratios to one target token."""
    found: list[dict[str, object]] = []
    folder = calibration_dir()
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            costs = Costs.from_dict(data["costs"])
        except (OSError, ValueError, KeyError, TypeError, AssertionError):
            continue
        key = data.get("key", {})
        found.append(
            {
                "file": str(path),
                "created": data.get("created"),
                "target": (key.get("target") or {}).get("path"),
                "draft": (key.get("draft") or {}).get("path"),
                "n_threads": key.get("n_threads"),
                "n_gpu_layers": key.get("n_gpu_layers"),
                "costs": costs.as_dict(),
                "summary": summary(costs),
            }
        )
    return found


def summary(costs: Costs) -> str:
    """One line: one target token, verify ratios, and the draft step."""
    one = costs.verify(1)
    ratios = ", ".join(f"{n}: {costs.verify(n) / one:.2f}x" for n in (2, 4, 8, 16))
    line = f"target 1 token {one * 1000:.1f} ms (verify {ratios})"
    if costs.draft_step_s:
        line += (
            f"; draft step {costs.draft_step_s * 1000:.1f} ms ({costs.draft_step_s / one:.2f}x), "
            f"catch-up {costs.draft_catchup_s * 1000:.2f} ms/token; "
            f"beside a verify: overlap {costs.overlap:.2f} (0: in parallel, 1: in turn)"
        )
    return line
