"""`specllama models --local --measure`: what a draft/target pair found on this machine would
give here, measured, and cached like the calibration. The draft is a draft model or a draft
head in its own file (EAGLE-3, DFlash), measured the same way; or one of the target's own ways
to draft without a second file (`OWN_DRAFTERS`): its MTP head (measured as a draft model is)
and n-gram lookup alone (below).

For each pair: the calibration (`Engine.calibrate`: verify costs of the target, one draft step;
cached), then a short probe of acceptance, greedy, with a fixed draft length PROBE_K, on a few
of the bundled prompts. With each draft token accepted with probability a (fitted to the mean
accepted per round), a round of k drafts yields E(a, k) = (1 - a^(k+1)) / (1 - a) tokens and
costs k * draft_step + V(k + 1), against E * V(1) for the target alone:

    speedup(k) = E(a, k) * V(1) / (k * draft_step + V(k + 1)),

maximised over k (see `specllama.policy.costs`). That is what the listing ranks by: the speedup
this machine can expect from the pair, not one it has seen on a given prompt.

N-gram lookup has no acceptance of its own to fit: it drafts only where the text repeats. It
runs as `--drafter ngram` does (the adaptive controller choosing each round from the measured
costs), each prompt with nothing remembered from the others (as one `run`), and its speedup is
what its rounds cost on the calibration's verify costs against the target alone's:
sum(accepted + 1) * V(1) / sum(V(drafted + 1)), its lookups counted free.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from specllama.bench.prompts import BenchPrompt, load_prompts
from specllama.engine.drafters import NgramDrafter
from specllama.engine.events import FinishEvent, RoundEvent
from specllama.engine.sampling import SamplingParams
from specllama.errors import IncompatibleVocabError, UsageError
from specllama.llama.backend import default_threads
from specllama.llama.library import build_facts
from specllama.paths import cache_dir
from specllama.policy.costs import Costs
from specllama.session import Engine, EngineConfig, head_kind

PROBE_K = 4
PROBE_TOKENS = 48
PROBE_CATEGORIES = ("code-writing", "code-editing", "chat")  # one prompt of each
K_MAX = 16
FORMAT = 1
MTP, NGRAM = "mtp", "ngram"
OWN_DRAFTERS = (MTP, NGRAM)  # drafters with no file of their own: --drafter NAME
# A draft: its file (a draft model or head), or the name of one of the target's own drafters.
Draft = Path | str


@dataclass(frozen=True)
class Measurement:
    speedup: float  # expected, at the best draft length
    best_k: int
    acceptance: float  # a, per draft token
    target_tok_s: float  # the target alone, one token at a time (from the calibration)
    draft_step_ratio: float  # one draft step / one target token
    # N-gram lookup: the share of rounds it found something to draft (None for the others).
    rounds_drafted: float | None = None
    # The costs passed the calibration's checks (False: measured on a busy machine, a rough
    # figure; cached all the same, as a run uses such a calibration when none passes).
    trusted: bool = True
    # Why the pair cannot run at all (a head made for another target): then speedup is 0.
    problem: str | None = None

    def as_json(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class ProbeSettings:
    n_threads: int | None = None
    n_gpu_layers: int = 0
    n_gpu_layers_draft: int = 0
    n_ctx: int = 1024
    tokens: int = PROBE_TOKENS
    prompts: tuple[str, ...] = PROBE_CATEGORIES


def cached(target: Path, draft: Draft, settings: ProbeSettings) -> Measurement | None:
    """The measurement of this pair on this machine, if one was made (no model is loaded)."""
    try:
        data = json.loads(_path(target, draft, settings).read_text(encoding="utf-8"))
        if data["key"] != json.loads(json.dumps(_key(target, draft, settings))):
            return None
        return Measurement(**data["measurement"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def measure(
    target: Path,
    draft: Draft,
    settings: ProbeSettings,
    *,
    refresh: bool = False,
    on_measure: Callable[[], None] | None = None,
) -> Measurement:
    """The measurement of this pair (cached), made now if there is none: loads the models.
    A pair that cannot run (UsageError: a head made for another target) raises, and is
    remembered as such (speedup 0), so that --draft auto never takes it."""
    if not refresh and (found := cached(target, draft, settings)) is not None:
        if found.problem is not None:
            raise UsageError(found.problem)
        return found
    if on_measure is not None:
        on_measure()
    prompts = _prompts(settings.prompts)
    try:
        engine = Engine(_config(target, draft, settings))
    except (UsageError, IncompatibleVocabError) as exc:  # what the files are: remembered
        save(target, draft, settings, Measurement(0.0, 0, 0.0, 0.0, 0.0, problem=str(exc)))
        raise
    with engine:
        costs = engine.calibrate()
        if draft == NGRAM:
            result = _ngram_measurement(costs, _rounds(engine, prompts, settings.tokens))
        else:
            accepted, rounds = _probe(engine, prompts, settings.tokens)
            result = expected(costs, accepted / max(rounds, 1), PROBE_K)
        trusted = engine.calibration is None or engine.calibration.trusted
    result = replace(result, trusted=trusted)
    save(target, draft, settings, result)
    return result


def _config(target: Path, draft: Draft, settings: ProbeSettings) -> EngineConfig:
    """A draft file drafts as what it is (a draft head in its own file as that head); the
    target's own drafters have none. N-gram lookup runs adaptive, as --drafter ngram does."""
    if isinstance(draft, str):
        _check_own(draft)
        drafter, file = draft, None
    else:
        drafter, file = head_kind(draft) or "model", draft
    return EngineConfig(
        target=target,
        draft=file,
        drafter=drafter,
        draft_max=PROBE_K,
        adaptive=drafter == NGRAM,
        n_ctx=settings.n_ctx,
        n_gpu_layers=settings.n_gpu_layers,
        n_gpu_layers_draft=settings.n_gpu_layers_draft,
        n_threads=settings.n_threads,
    )


def _check_own(drafter: str) -> None:
    if drafter not in OWN_DRAFTERS:
        raise ValueError(f"a draft is a file or one of {OWN_DRAFTERS}, not {drafter!r}")


def expected(costs: Costs, mean_accepted: float, k: int) -> Measurement:
    """The measurement from the costs and the mean accepted per round of k drafts."""
    a = acceptance_from(mean_accepted, k)
    one = costs.verify(1)
    best_k, best = best_length(costs, a)
    return Measurement(
        speedup=round(best, 4),
        best_k=best_k,
        acceptance=round(a, 4),
        target_tok_s=round(1 / one, 2) if one > 0 else 0.0,
        draft_step_ratio=round(costs.draft_step_s / one, 4) if one > 0 else 0.0,
    )


def _ngram_measurement(costs: Costs, rounds: list[RoundEvent]) -> Measurement:
    """N-gram lookup alone, from its rounds priced at the measured verify costs (module
    docstring)."""
    one = costs.verify(1)
    spent = sum(costs.verify(r.n_drafted + 1) for r in rounds)
    tokens = sum(r.n_accepted + 1 for r in rounds)
    drafted = sum(r.n_drafted for r in rounds)
    return Measurement(
        speedup=round(tokens * one / spent, 4) if spent > 0 else 1.0,
        best_k=0,  # the controller chooses each round's length
        acceptance=round(sum(r.n_accepted for r in rounds) / drafted, 4) if drafted else 0.0,
        target_tok_s=round(1 / one, 2) if one > 0 else 0.0,
        draft_step_ratio=0.0,
        rounds_drafted=round(sum(r.n_drafted > 0 for r in rounds) / max(len(rounds), 1), 4),
    )


def best_length(costs: Costs, acceptance: float, k_max: int = K_MAX) -> tuple[int, float]:
    """The draft length in 1..k_max that a draft model (or MTP head) accepted with probability
    `acceptance` per token pays most at on these costs, and the speedup expected there."""
    a, one = acceptance, costs.verify(1)
    best_k, best = 1, 0.0
    for n in range(1, k_max + 1):
        tokens = (1 - a ** (n + 1)) / (1 - a) if a < 1 else n + 1.0
        speedup = tokens * one / (n * costs.draft_step_s + costs.verify(n + 1))
        if speedup > best:
            best_k, best = n, speedup
    return best_k, best


def acceptance_from(mean_accepted: float, k: int) -> float:
    """a such that a + a^2 + ... + a^k == mean_accepted (accepted drafts per round of k)."""
    if mean_accepted <= 0:
        return 0.0
    if mean_accepted >= k:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        a = (low + high) / 2
        if sum(a**i for i in range(1, k + 1)) < mean_accepted:
            low = a
        else:
            high = a
    return (low + high) / 2


def _probe(engine: Engine, prompts: list[BenchPrompt], tokens: int) -> tuple[int, int]:
    """(accepted drafts, rounds) over the prompts, greedy."""
    accepted = rounds = 0
    for prompt in prompts:
        prompt_tokens = engine.prompt_tokens(list(prompt.messages))
        for event in engine.generate(prompt_tokens, SamplingParams(), max_tokens=tokens):
            if isinstance(event, FinishEvent):
                stats = event.stats.as_dict()
                accepted += int(stats["n_accepted"])  # type: ignore[call-overload]
                rounds += int(stats["n_rounds"])  # type: ignore[call-overload]
    return accepted, rounds


def _rounds(engine: Engine, prompts: list[BenchPrompt], tokens: int) -> list[RoundEvent]:
    """Every round of n-gram lookup over the prompts, greedy, each prompt as one `run` would
    see it: a fresh lookup (nothing remembered from the others) and a fresh controller."""
    rounds = []
    for prompt in prompts:
        prompt_tokens = engine.prompt_tokens(list(prompt.messages))
        events = engine.generate(
            prompt_tokens, SamplingParams(), max_tokens=tokens,
            drafter=NgramDrafter(), controller=engine.new_controller(),
        )  # fmt: skip
        rounds += [event for event in events if isinstance(event, RoundEvent)]
    return rounds


def _prompts(categories: tuple[str, ...]) -> list[BenchPrompt]:
    # The probe runs unconstrained: a prompt written for a JSON Schema would measure text
    # no client asks for.
    everything = [p for p in load_prompts() if p.schema is None]
    chosen = [next(p for p in everything if p.category == c) for c in categories
              if any(p.category == c for p in everything)]  # fmt: skip
    return chosen or everything[:1]


def _key(target: Path, draft: Draft, settings: ProbeSettings) -> dict[str, object]:
    """What a measurement depends on: both files (or the target's own drafter's name), this
    machine and llama.cpp, the settings."""

    def file_id(path: Path) -> list[object]:
        st = os.stat(path)
        return [str(Path(path).resolve()), st.st_size, st.st_mtime_ns]

    if isinstance(draft, str):
        _check_own(draft)
    return {
        "format": FORMAT,
        "target": file_id(target),
        "draft": draft if isinstance(draft, str) else file_id(draft),
        "machine": [platform.node(), platform.machine(), os.cpu_count()],
        "llama_cpp": build_facts().version,
        "settings": {**asdict(settings), "n_threads": settings.n_threads or default_threads()},
        "probe_k": PROBE_K,
    }


def _path(target: Path, draft: Draft, settings: ProbeSettings) -> Path:
    key = json.dumps(_key(target, draft, settings), sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return cache_dir() / "local" / "measured" / f"{digest}.json"


def save(target: Path, draft: Draft, settings: ProbeSettings, result: Measurement) -> None:
    """Cache `result` as the measurement of this pair (what `cached` reads back)."""
    path = _path(target, draft, settings)
    data = {
        "key": _key(target, draft, settings),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "measurement": result.as_json(),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        pass  # a read-only cache: measured again next time
