"""`specllama bench`: the same prompts, several configurations, one process, side by side.

How a benchmark runs (see `run_bench`):

1. A warm-up: the first prompt once with every configuration of specllama's, a few tokens,
   not recorded.
2. For each prompt, `repeats` rounds; each round runs every configuration once, in an order
   rotated by one each round (A B C, B C A, ...), so a burst of load from other programs hits
   neighbours in time, and each configuration is paired with the target-alone run of the same
   round. Configurations of another tool (llama.cpp's own speculative decoding, see
   `specllama.bench.llamacpp`) run in the same rounds, in their own processes.
3. With `noise_check` (one round), the target alone runs each prompt once more after its round:
   two runs of the same decodes, so what parts them is the machine (`summary.target_noise`).
4. A prompt with a JSON Schema (the structured-output category) runs under it with every
   configuration, so speedups there are speculation's under the same rule; in each round the
   target alone also runs it without the schema (`free_runs`, not a configuration), so the
   report can say what the constraint costs per token (`summary.constraint_cost`). Another
   tool's configurations (which would run unconstrained) leave such prompts out.
5. Speedup is computed pair by pair: tokens/s of a configuration divided by tokens/s of the
   target alone in the same round on the same prompt (`specllama.bench.summary`).

tokens/s counts generated tokens over the time from the end of the target's prompt prefill
(identical for all configurations) to the last token. That time includes the draft model's own
prompt prefill: the draft context is emptied before every run, as for a new prompt.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from specllama.bench.configs import TARGET, BenchConfig
from specllama.bench.prompts import BenchPrompt
from specllama.bench.timing import Clock, ProgressUpdate, Step, TimeLeft, run_prior_s
from specllama.engine.constraint import ConstraintSpec, Grammar
from specllama.engine.control import HEADS, DraftController, FixedLength
from specllama.engine.drafters import CombinedDrafter, Drafter, NgramDrafter, NoDrafter
from specllama.engine.events import FinishEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.errors import ConstraintError, SpecllamaError, UsageError
from specllama.llama.backend import default_threads
from specllama.llama.evaluated import common_prefix_length
from specllama.llama.library import build_facts
from specllama.policy import calibration
from specllama.policy.controller import AdaptiveController
from specllama.policy.costs import Costs
from specllama.session import Engine

WARMUP_TOKENS = 32
RUN_KEYS = (
    "n_prompt",
    "n_generated",
    "time_s",
    "tokens_per_s",
    "n_drafted",
    "n_accepted",
    "acceptance_rate",
    "n_rounds",
    "n_draft_rounds",
    "mean_accepted_per_round",
    "accepted_histogram",
    "target_s",
    "draft_s",
    "overhead_ms_per_round",
    "finish_reason",
)


class ExternalToolError(SpecllamaError):
    """Another tool's run failed (it crashed, or its log says nothing the bench can read): the
    bench leaves that configuration out of the rest and goes on."""


class ExternalConfig(Protocol):
    """A configuration another program runs on the bench's prompts (`llamacpp.LlamaCppConfig`):
    its stats as specllama counts them, the keys of `RUN_KEYS` it knows (the others None)."""

    config: BenchConfig

    def run(self, prompt: BenchPrompt, max_tokens: int) -> dict[str, Any]: ...


# -- what a benchmark records ---------------------------------------------------------------


@dataclass
class Run:
    config: str
    prompt_id: str
    category: str
    repeat: int
    tokens: list[int] | None  # None: another tool's run, whose tokens the bench does not see
    stats: dict[str, Any]
    equals_target: bool | None = None
    agreement: float | None = None  # common prefix with the target alone / target's length

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "prompt_id": self.prompt_id,
            "category": self.category,
            "repeat": self.repeat,
            **{key: self.stats.get(key) for key in RUN_KEYS},
            "equals_target": self.equals_target,
            "agreement": self.agreement,
        }


@dataclass
class BenchResult:
    settings: dict[str, Any]
    configs: list[BenchConfig]
    prompts: list[BenchPrompt]
    runs: list[Run] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    models: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] | None = None
    plan: dict[str, Any] = field(default_factory=dict)  # how the configurations were chosen
    tools: dict[str, Any] = field(default_factory=dict)  # other tools run beside specllama
    notices: list[str] = field(default_factory=list)  # one line each: what was left out, why
    # The target alone on each schema prompt without its schema: what the constraint costs.
    free_runs: list[Run] = field(default_factory=list)


Progress = Callable[[ProgressUpdate], None]


# -- running specllama's configurations -------------------------------------------------------


class _Runner:
    """Builds each configuration's drafter and controller on one loaded Engine."""

    def __init__(self, engine: Engine, params: SamplingParams) -> None:
        self.engine = engine
        self.params = params

    def parts(self, config: BenchConfig) -> tuple[Drafter, DraftController]:
        drafter: Drafter
        if config.drafter == "none":
            return NoDrafter(), FixedLength(0)
        if config.drafter == "ngram":
            drafter = NgramDrafter()
        elif config.drafter == "combined":
            drafter = CombinedDrafter(self._model_drafter(config))
        else:
            drafter = self._model_drafter(config)
        if config.adaptive:
            return drafter, AdaptiveController(
                self.engine.calibrate(), draft_max=config.draft_max or 1
            )
        return drafter, FixedLength(config.draft_max or 0, pipelined=config.pipelined)

    def _model_drafter(self, config: BenchConfig) -> Drafter:
        """The draft model or a head, alone: the one the configuration names, or for the
        adaptive one whichever the engine loaded (it loads one of them)."""
        kind = config.drafter
        if kind == "combined":
            kind = self._loaded(config)
        drafter = self.engine.make_drafter(kind)
        # The engine's adaptive drafters come with n-gram lookup: a fixed length drafts alone.
        return drafter.model if isinstance(drafter, CombinedDrafter) else drafter

    def _loaded(self, config: BenchConfig) -> str:
        """The kind of model-made drafts the engine loaded: a draft model or a head."""
        made = [name for name in self.engine.drafter_choices() if name not in ("ngram", "none")]
        if not made:
            raise UsageError(f"configuration {config.name} needs a draft model or a head")
        return made[0]

    def run(
        self,
        config: BenchConfig,
        tokens: list[int],
        max_tokens: int,
        constraint: Grammar | None = None,
    ) -> tuple[list, dict]:
        drafter, controller = self.parts(config)
        if self.engine.draft_model is not None:
            self.engine.draft_model.rollback(0)  # a new prompt for the draft, every run
        out: list[int] = []
        finish: FinishEvent | None = None
        for event in generate(
            self.engine.target,
            drafter,
            tokens,
            self.params,
            max_tokens=max_tokens,
            controller=controller,
            constraint=constraint.start() if constraint is not None else None,
        ):
            if isinstance(event, TokenEvent):
                out.append(event.token)
            elif isinstance(event, FinishEvent):
                finish = event
        assert finish is not None
        stats = finish.stats.as_dict()
        stats["n_draft_rounds"] = finish.stats.n_draft_rounds
        stats["overhead_s"] = finish.stats.overhead_s
        return out, stats


def loaded_head(engine: Engine) -> str | None:
    """The kind of the head the engine loaded from its own file (`control.HEADS`), if any."""
    kind = engine.config.drafter
    return kind if kind in HEADS and kind in engine.drafter_choices() else None


# -- the schedule -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Planned:
    """One run of the schedule: a warm-up, a round's run, the noise check's second run of the
    target alone, or the target alone without the prompt's schema; `slot` indexes specllama's
    configurations, then the external ones."""

    kind: str  # "warmup", "run", "noise" or "free"
    prompt: int
    repeat: int
    slot: int
    tokens: int


def schedule(
    n_prompts: int,
    n_ours: int,
    n_external: int,
    *,
    repeats: int,
    warmup: bool,
    noise_check: bool,
    tokens: Sequence[int],
    warmup_tokens: int = WARMUP_TOKENS,
    constrained: Sequence[bool] = (),
) -> list[Planned]:
    """Every run in order: `tokens[p]` is prompt p's budget. Slot 0 is the target alone.
    A `constrained[p]` prompt runs specllama's configurations only, and in each round the
    target alone once more without the constraint."""
    plan = [Planned("warmup", 0, 0, s, warmup_tokens) for s in range(n_ours)] if warmup else []
    for p in range(n_prompts):
        ruled = p < len(constrained) and constrained[p]
        slots = n_ours if ruled else n_ours + n_external
        for repeat in range(repeats):
            shift = repeat % slots
            order = [*range(shift, slots), *range(shift)]
            plan += [Planned("run", p, repeat, s, tokens[p]) for s in order]
            if ruled:
                plan.append(Planned("free", p, repeat, 0, tokens[p]))
        if noise_check:
            plan.append(Planned("noise", p, repeats, 0, tokens[p]))
    return plan


def plan_steps(
    plan: Sequence[Planned],
    slots: Sequence[BenchConfig],
    prompts: Sequence[BenchPrompt],
    lengths: Sequence[int],
    costs: Costs | None,
    *,
    has_draft: bool,
    repeats: int,
) -> list[Step]:
    """What each planned run shows while it runs, and how long it should take."""
    steps: list[Step] = []
    seen: set[int] = set()
    for item in plan:
        config, prompt, n = slots[item.slot], prompts[item.prompt], lengths[item.prompt]
        external = config.tool != "specllama"
        drafts = has_draft and config.drafter in ("model", "combined")
        prior = run_prior_s(
            costs,
            item.tokens,
            target_prefill=n if external or item.prompt not in seen else 0,
            draft_prefill=n if drafts else 0,
            external=external,
        )
        seen.add(item.prompt)
        steps.append(Step(_label(item, config, prompt, repeats), prior, config.tool))
    return steps


def _label(item: Planned, config: BenchConfig, prompt: BenchPrompt, repeats: int) -> str:
    if item.kind == "warmup":
        return f"warm-up · {config.name}"
    if item.kind == "noise":
        return f"{prompt.category} · target again, for the noise · {prompt.id}"
    if item.kind == "free":
        return f"{prompt.category} · target without the schema · {prompt.id}"
    round_ = f" · round {item.repeat + 1}/{repeats}" if repeats > 1 else ""
    return f"{prompt.category} · {config.name} · {prompt.id}{round_}"


# -- the benchmark ----------------------------------------------------------------------------


def run_bench(
    engine: Engine,
    prompts: Sequence[BenchPrompt],
    configs: Sequence[BenchConfig],
    params: SamplingParams,
    *,
    max_tokens: int = 128,
    repeats: int = 2,
    warmup: bool = True,
    warmup_tokens: int = WARMUP_TOKENS,
    noise_check: bool = False,
    external: Sequence[ExternalConfig] = (),
    progress: Progress | None = None,
    clock: Clock = time.monotonic,
) -> BenchResult:
    if repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {repeats}")
    if not configs or configs[0].name != TARGET:
        raise UsageError("the bench needs the target alone as its first configuration")
    # One seed for every run: sampled runs then write the target alone's text too, and
    # `equals_target` checks that at any temperature (the seed is in the settings).
    params = params.with_seed()
    result = _new_result(engine, prompts, [*configs, *(e.config for e in external)], params)
    result.settings.update(
        max_tokens=max_tokens,
        repeats=repeats,
        warmup=warmup,
        warmup_tokens=warmup_tokens if warmup else 0,
        noise_check=noise_check,
    )
    if any(c.adaptive for c in configs):
        costs = engine.calibrate()
        result.calibration = {
            **costs.as_dict(),
            "summary": calibration.summary(costs),
            "status": engine.calibration.as_dict() if engine.calibration else None,
        }
    tokenized = [engine.prompt_tokens(list(p.messages)) for p in prompts]
    rules = compile_rules(engine, prompts)
    budgets = [p.max_tokens or max_tokens for p in prompts]
    warm = min(max_tokens, warmup_tokens)
    plan = schedule(
        len(prompts),
        len(configs),
        len(external),
        repeats=repeats,
        warmup=warmup,
        noise_check=noise_check,
        tokens=budgets,
        warmup_tokens=warm,
        constrained=[rule is not None for rule in rules],
    )
    slots = [*configs, *(e.config for e in external)]
    steps = plan_steps(
        plan,
        slots,
        prompts,
        [len(t) for t in tokenized],
        engine.costs,
        has_draft=engine.draft_model is not None,
        repeats=repeats,
    )
    _Execution(engine, params, prompts, tokenized, rules, slots, external, result).go(
        plan, TimeLeft(steps, clock), progress
    )
    _compare_with_target(result.runs)
    return result


def compile_rules(engine: Engine, prompts: Sequence[BenchPrompt]) -> list[Grammar | None]:
    """Each prompt's JSON Schema compiled for the target (None: free text); a schema that
    cannot be compiled names its prompt."""
    rules: list[Grammar | None] = []
    for prompt in prompts:
        if prompt.schema is None:
            rules.append(None)
            continue
        try:
            rules.append(engine.compile_constraint(ConstraintSpec("json_schema", prompt.schema)))
        except ConstraintError as exc:
            first = str(exc).splitlines()[0]
            raise ConstraintError(f"bench prompt {prompt.id}: {first}") from None
    return rules


class _Execution:
    """Runs a schedule: specllama's configurations on the engine, the others through their
    tool, reporting progress; another tool's failure leaves that configuration out."""

    def __init__(
        self,
        engine: Engine,
        params: SamplingParams,
        prompts: Sequence[BenchPrompt],
        tokenized: list[list[int]],
        rules: list[Grammar | None],
        slots: list[BenchConfig],
        external: Sequence[ExternalConfig],
        result: BenchResult,
    ) -> None:
        self.runner = _Runner(engine, params)
        self.prompts, self.tokenized, self.slots = prompts, tokenized, slots
        self.rules = rules
        self.external = {e.config.name: e for e in external}
        self.result = result
        self.dropped: set[str] = set()

    def go(self, plan: Sequence[Planned], timer: TimeLeft, progress: Progress | None) -> None:
        for index, item in enumerate(plan):
            config = self.slots[item.slot]
            if config.name in self.dropped:
                timer.skip(index)
                continue
            if progress:
                progress(ProgressUpdate(index, len(plan), timer.steps[index].label, timer.left_s()))
            timer.start(index)
            try:
                run = self._run(item, config)
            except ExternalToolError as exc:
                self.dropped.add(config.name)
                self.result.notices.append(f"{config.name} left out: {exc}")
                timer.skip(index)
                continue
            timer.finish()
            if run is not None:
                free = item.kind == "free"
                (self.result.free_runs if free else self.result.runs).append(run)
        if progress:
            progress(ProgressUpdate(len(plan), len(plan), "done", 0.0))

    def _run(self, item: Planned, config: BenchConfig) -> Run | None:
        prompt = self.prompts[item.prompt]
        if config.name in self.external:
            stats = self.external[config.name].run(prompt, item.tokens)
            out = None
        else:
            rule = None if item.kind == "free" else self.rules[item.prompt]
            out, stats = self.runner.run(config, self.tokenized[item.prompt], item.tokens, rule)
        if item.kind == "warmup":
            return None
        return Run(config.name, prompt.id, prompt.category, item.repeat, out, stats)


def _compare_with_target(runs: Sequence[Run]) -> None:
    """Each run of specllama's against the target alone's output of the same round (the
    prompt's first one for the noise check's extra run)."""
    reference: dict[tuple[str, int], list[int]] = {}
    first: dict[str, list[int]] = {}
    for run in runs:
        if run.config == TARGET and run.tokens is not None:
            reference.setdefault((run.prompt_id, run.repeat), run.tokens)
            first.setdefault(run.prompt_id, run.tokens)
    for run in runs:
        if run.tokens is None:
            continue
        found = reference.get((run.prompt_id, run.repeat))
        if found is None or found is run.tokens:
            found = first.get(run.prompt_id, found)
        target = found or []
        run.equals_target = run.tokens == target
        run.agreement = _agreement(run.tokens, target)


def _agreement(tokens: list[int], reference: list[int]) -> float:
    if not reference:
        return 1.0 if not tokens else 0.0
    return common_prefix_length(tokens, reference) / len(reference)


def _new_result(
    engine: Engine,
    prompts: Sequence[BenchPrompt],
    configs: list[BenchConfig],
    params: SamplingParams,
) -> BenchResult:
    return BenchResult(
        settings={
            "temperature": params.temperature,
            "top_k": params.top_k,
            "top_p": params.top_p,
            "min_p": params.min_p,
            "seed": params.seed,
            "draft_max": engine.draft_max,
            "n_ctx": engine.config.n_ctx,
            "n_threads": engine.config.n_threads or default_threads(),
            "n_gpu_layers": engine.config.n_gpu_layers,
            "n_gpu_layers_draft": engine.config.n_gpu_layers_draft,
            "extra_buffers": engine.target.extra_buffers,
            "exact": engine.config.exact,  # --exact: batch-invariant kernels, for the whole run
            "rpc": list(engine.config.rpc),  # the target's RPC workers
        },
        configs=configs,
        prompts=list(prompts),
        machine=machine_facts(),
        models=_models(engine),
    )


def machine_facts() -> dict[str, Any]:
    facts = build_facts()
    return {
        "platform": f"{platform.system()} {platform.release()} {platform.machine()}",
        "cpu": calibration._cpu_name(),
        "physical_cores": default_threads(),
        "python": platform.python_version(),
        "llama_cpp": facts.version,
        "gpu_offload": facts.gpu_offload,
    }


def _models(engine: Engine) -> dict[str, Any]:
    def describe(path: Path | None) -> dict[str, Any] | None:
        if path is None:
            return None
        return {"name": Path(path).name, "path": str(path), "size": Path(path).stat().st_size}

    # The draft model's file, or the head's (a head drafts for the target, as a draft model).
    loaded = engine.draft_model is not None or loaded_head(engine) is not None
    draft = describe(engine.config.draft if loaded else None)
    if draft is not None and engine.draft_model is not None:
        # A draft of another vocabulary drafts text, re-tokenised: the report says so.
        draft["across_tokenizers"] = engine.across_tokenizers is not None
    return {"target": describe(engine.config.target), "draft": draft}
