"""Measured costs on this machine: the target verifying batches of 1..K tokens, one draft step,
the draft catching up a backlog, and how a verify and draft steps share the machine when they
run at once (pipelined drafting). The adaptive controller and `specllama bench` use them.

Measured once per (model files, machine, threads, GPU layers) and cached as JSON under the
specllama cache folder (SPECLLAMA_CACHE, else XDG_CACHE_HOME/specllama) in `calibration/`.
The sizes are interleaved across repeats and the median kept, so a burst of load from other
programs skews one repeat of every size rather than all repeats of one size.

A measurement is kept only when it can be trusted (`specllama.policy.trust`): repeats agree,
the curve rises with the batch size, no batch costs more than its tokens decoded one by one, and
a run of one-token decodes, as generation makes them, takes what verify(1) says. One that fails
is measured again (up to `ATTEMPTS` times, within `RETRY_WITHIN_S`); if none passes, the run uses
the last one (its rounds correct it, `specllama.policy.verify_curve`) and nothing is cached. A
cached calibration that the rounds of a run contradict (`trust.disagreement`) is marked stale,
and the next run measures again.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from specllama.paths import cache_dir
from specllama.policy import trust
from specllama.policy.costs import Costs, Learnt

VERIFY_SIZES = (1, 2, 3, 4, 6, 8, 12, 17, 25, 49)
LARGE_BATCH = 8  # larger verify sizes are timed twice, not three times (`_time_verifies`)
CONTEXT_TOKENS = 64  # evaluated before timing, so the costs are those of a short conversation
DRAFT_STEPS = 8
CATCHUP_TOKENS = 32
RUN_TOKENS = 16  # one-token decodes in a row, as generation makes them
OVERLAP_BATCH = 5  # a verify of the pending token and 4 drafts, beside 5 draft steps
FORMAT = 2
ATTEMPTS = 3  # measurements before giving up on one that passes the checks
RETRY_WITHIN_S = 15.0  # no new attempt once measuring has taken this long


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
    exact: bool = False,
    workers: list[tuple[str, int]] | None = None,
) -> dict[str, object]:
    """What the costs depend on: the model files, this machine, and how the models run.

    `workers`: (endpoint, total device memory) of the RPC workers that run the target; a verify
    then pays the network too. Only present with workers, so that keys measured without any
    stay what they were. `exact`: batch-invariant kernels (slower batches), present only when on.
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
    if exact:
        key["exact"] = True
    if workers:
        key["rpc"] = [{"endpoint": e, "memory_total": total} for e, total in workers]
    return key


def _key_path(key: dict[str, object]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return calibration_dir() / f"{digest}.json"


def _read(key: dict[str, object]) -> dict[str, Any] | None:
    try:
        data = json.loads(_key_path(key).read_text(encoding="utf-8"))
        if data.get("key") != key:
            return None
        Costs.from_dict(data["costs"])
        return data
    except (OSError, ValueError, KeyError, TypeError, AssertionError, AttributeError):
        return None  # missing or damaged: measure again


def load(key: dict[str, object]) -> Costs | None:
    """The cached costs for `key`; None when none are cached, or they were found stale."""
    data = _read(key)
    if data is None or data.get("stale"):
        return None
    return Costs.from_dict(data["costs"])


def save(
    key: dict[str, object],
    costs: Costs,
    *,
    seconds: float = 0.0,
    problems: Sequence[str] = (),
) -> Path:
    """Cache `costs` for `key`. specllama caches only costs that passed the checks; `problems`
    records the failed checks of one cached anyway (a benchmark of a lying calibration), so
    that whoever reads it is told."""
    path = _key_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "key": key,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "measure_s": round(seconds, 2),
        "costs": costs.as_dict(),
    }
    if problems:
        data["problems"] = list(problems)
    _write(path, data)
    return path


def save_learnt(key: dict[str, object], learnt: Learnt) -> None:
    """Keep what a run's rounds showed beyond the decodes (`Learnt`) with the cached costs for
    `key`, where the next run starts from them. Nothing where none is cached or it is stale (the
    next run measures again); a read-only cache stays as it is."""
    data = _read(key)
    if data is None or data.get("stale"):
        return
    data["costs"]["learnt"] = learnt.as_dict()
    with contextlib.suppress(OSError):
        _write(_key_path(key), data)


def mark_stale(key: dict[str, object], reason: str) -> None:
    """The rounds of a run contradicted the cached costs: measure again next time, and say
    why. A read-only cache stays as it is."""
    data = _read(key)
    if data is not None and not data.get("stale"):
        data["stale"] = reason
        with contextlib.suppress(OSError):
            _write(_key_path(key), data)


def _write(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data, indent=2), encoding="utf-8")
    partial.replace(path)


def _tokens(model: _Model, n: int) -> list[int]:
    """Valid, varied token ids (the costs do not depend on which tokens they are)."""
    span = max(model.n_vocab - 300, 1)
    return [200 + (i * 7919) % span for i in range(n)]


def _start_context(model: _Model, tokens: list[int]) -> None:
    """Evaluate the context every timing goes back to. A model with recurrent layers goes back
    there from a checkpoint, not by evaluating it all again after each batch."""
    model.rollback(0)
    model.decode(tokens)
    checkpoint = getattr(model, "checkpoint", None)  # the tests' timing fakes have none
    if checkpoint is not None:
        checkpoint()


def _timed(model: _Model, tokens: Sequence[int], logits_at: Sequence[int]) -> float:
    before = model.decode_seconds
    model.decode(tokens, logits_at)
    return model.decode_seconds - before


@dataclass(frozen=True)
class Measurement:
    """Measured costs, and what the checks found wrong with them (nothing: trusted)."""

    costs: Costs
    problems: tuple[str, ...] = ()
    seconds: float = 0.0  # how long measuring took

    @property
    def trusted(self) -> bool:
        return not self.problems


def measure(
    target: _Model,
    draft: _Model | None = None,
    *,
    sizes: Sequence[int] = VERIFY_SIZES,
    repeats: int = 3,
    side_by_side: bool = False,
) -> Measurement:
    """Time the decodes the loop makes, and with `side_by_side` how a verify and draft steps
    overlap (`measure_overlap`; else the overlap is 1: no gain), then check them. Leaves both
    contexts empty."""
    started = time.perf_counter()
    sizes = sorted({1, *sizes})
    # One short conversation for both the verifies and the one-token run after them.
    tokens = _tokens(target, CONTEXT_TOKENS + max(*sizes, RUN_TOKENS))
    _start_context(target, tokens[:CONTEXT_TOKENS])
    samples = _time_verifies(target, tokens, sizes, repeats)
    run = _time_one_token_run(target, tokens)
    target.rollback(0)
    verify = tuple((n, statistics.median(s)) for n, s in samples.items())
    steps: list[float] = []
    catchup = 0.0
    overlap = 1.0
    if draft is not None:
        steps, catchup = _time_draft(draft, min(repeats, 2))  # 8 steps a pass: plenty
        if side_by_side:
            overlap = measure_overlap(target, draft, repeats=repeats)
    costs = Costs(
        verify_s=verify,
        draft_step_s=statistics.median(steps) if steps else 0.0,
        draft_catchup_s=catchup,
        overlap=overlap,
    )
    found = trust.problems(samples, run, steps)
    return Measurement(costs, tuple(found), time.perf_counter() - started)


def _time_verifies(
    target: _Model, tokens: list[int], sizes: list[int], repeats: int
) -> dict[int, list[float]]:
    """`repeats` timings of each size after the CONTEXT_TOKENS already evaluated, after a pass
    that warms up and is not kept. Sizes past LARGE_BATCH are timed twice without a warm-up of
    their own: they take most of the time (49 tokens cost 25 one-token decodes on a 2-core CPU)
    and vary the least."""
    samples: dict[int, list[float]] = {n: [] for n in sizes}
    for repeat in range(repeats + 1):
        for n in sizes:
            large = n > LARGE_BATCH
            if large and not 0 < repeat <= min(repeats, 2):
                continue
            seconds = _timed(target, tokens[CONTEXT_TOKENS : CONTEXT_TOKENS + n], range(n))
            target.rollback(CONTEXT_TOKENS)
            if repeat:
                samples[n].append(seconds)
    return samples


def _time_one_token_run(target: _Model, tokens: list[int]) -> list[float]:
    """RUN_TOKENS one-token decodes after the context, each after the last, as the target
    alone generates."""
    run = [_timed(target, [t], [0]) for t in tokens[CONTEXT_TOKENS : CONTEXT_TOKENS + RUN_TOKENS]]
    target.rollback(CONTEXT_TOKENS)
    return run


def _time_draft(draft: _Model, repeats: int) -> tuple[list[float], float]:
    """One-token draft steps (all repeats), and the catch-up's cost per token (median)."""
    tokens = _tokens(draft, CONTEXT_TOKENS + max(DRAFT_STEPS, CATCHUP_TOKENS))
    _start_context(draft, tokens[:CONTEXT_TOKENS])
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
    return steps, statistics.median(catchups)


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
        _start_context(model, tokens[:CONTEXT_TOKENS])

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


def checks_verdict(problems: Sequence[str]) -> str:
    """How a cached calibration fared in the checks, as bench and doctor say it."""
    return "checks failed: " + "; ".join(problems) if problems else "checks passed"


@dataclass(frozen=True)
class Calibration:
    """The costs a run starts from, and where they come from (for doctor, bench, --json)."""

    costs: Costs
    source: str  # "cache" or "measured" (now)
    trusted: bool = True  # passed the checks (what specllama caches always did)
    reason: str = ""  # why it was measured now
    attempts: int = 0  # measurements made now
    problems: tuple[str, ...] = ()  # what the checks found in the last attempt
    seconds: float = 0.0  # time spent measuring now
    created: str = ""  # when the cached one was measured
    history: list[str] = field(default_factory=list)  # each failed attempt's problems

    def describe(self) -> str:
        """One line: which calibration is in use, and whether it was re-measured."""
        if self.source == "cache":  # trusted exactly when it was cached with no problems
            return f"cached, measured {self.created}, {checks_verdict(self.problems)}"
        line = f"measured now ({self.reason}): {self.attempts} attempt(s), {self.seconds:.1f} s"
        if not self.trusted:
            return f"{line}; checks failed, not cached: {'; '.join(self.problems)}"
        return line + (f"; retried after: {self.history[0]}" if self.history else "")

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "trusted": self.trusted,
            "reason": self.reason,
            "attempts": self.attempts,
            "problems": list(self.problems),
            "seconds": round(self.seconds, 2),
            "created": self.created,
            "describe": self.describe(),
        }


def load_or_measure(
    key: dict[str, object],
    target: _Model,
    draft: _Model | None,
    *,
    refresh: bool = False,
    on_measure: Callable[[str], None] | None = None,
    side_by_side: bool = False,
    attempts: int = ATTEMPTS,
) -> Calibration:
    """The cached costs for `key`, or measure them now (calling `on_measure` first with the
    reason), up to `attempts` times until a measurement passes the checks, and cache that one."""
    cached = None if refresh else _read(key)
    if cached is not None and not cached.get("stale"):
        costs = Costs.from_dict(cached["costs"])
        problems = tuple(str(p) for p in cached.get("problems", ()))
        created = str(cached.get("created", ""))
        return Calibration(costs, "cache", not problems, problems=problems, created=created)
    reason = "asked to" if refresh else "none cached"
    if cached is not None:
        reason = f"the cached one was stale: {cached['stale']}"
    if on_measure is not None:
        on_measure(reason)
    history: list[str] = []
    spent = 0.0
    for _ in range(max(attempts, 1)):
        measured = measure(target, draft, side_by_side=side_by_side)
        spent += measured.seconds
        if measured.trusted:
            with contextlib.suppress(OSError):  # a read-only cache: measured again next time
                save(key, measured.costs, seconds=spent)
            break
        history.append("; ".join(measured.problems))
        if spent > RETRY_WITHIN_S:  # a machine that busy stays busy: the rounds will correct
            break
    return Calibration(
        measured.costs,
        "measured",
        trusted=measured.trusted,
        reason=reason,
        attempts=len(history) + measured.trusted,
        problems=measured.problems,
        seconds=spent,
        history=history,
    )


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
                "measure_s": data.get("measure_s"),
                "stale": data.get("stale"),
                "problems": data.get("problems", []),  # cached despite failed checks
                "checks": checks_verdict(data.get("problems", [])),
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
    learnt = costs.learnt
    if learnt is not None:
        rounds = ", ".join(f"{kind} {base * 1000:.2f} ms" for kind, base, _ in learnt.overheads)
        line += f"; learnt by earlier runs: Python a round ({rounds})"
        if learnt.draft_scale is not None:
            line += f", draft steps {learnt.draft_scale:.2f}x as timed"
    return line
