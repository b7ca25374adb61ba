"""What `specllama bench` runs: the quick default, or the full matrix (`--full`).

The quick default answers "is it faster here, and for what?" in about three minutes on a
2-core CPU: one prompt per category, the target alone, the default (adaptive), and the fixed
configurations that matter for this pair on this machine, read from its calibration:

- the draft model (or the head that drafts: the target's own MTP head, or one in its own
  file such as an EAGLE-3 head) at the draft length these costs pay most at
  for a typical acceptance (`PRIOR_ACCEPTANCE`; `pair_probe.best_length`): what a fixed
  `--draft-max` could do at best here;
- n-gram lookup alone (`ngram:8`): what drafting that costs nothing pays, on prompts that copy.
  Where the draft model is not expected to pay on these costs, this one comes first.

Every prompt runs once and the target alone runs it a second time (the noise check), so the
report says how far two runs of the same decodes were apart. The token budget is the largest
of `TOKEN_LADDER` whose expected time (from the calibration, `timing.run_prior_s`) fits what is
left of the three minutes after loading and calibrating; the second fixed configuration only
where it still leaves `ROOMY_TOKENS` a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specllama.bench.configs import BenchConfig, default_configs, parse_configs
from specllama.bench.pair_probe import best_length
from specllama.bench.prompts import BenchPrompt
from specllama.bench.runner import WARMUP_TOKENS, loaded_head, plan_steps, schedule
from specllama.engine.control import HEADS
from specllama.policy.costs import Costs
from specllama.session import Engine

QUICK_BUDGET_S = 180.0
TOKEN_LADDER = (128, 96, 64, 48, 32)
ROOMY_TOKENS = 64
PRIOR_ACCEPTANCE = 0.8  # between a chat prompt's (~0.5) and a code prompt's (~0.9)
QUICK_K_MAX = 8
QUICK_WARMUP_TOKENS = 8
NGRAM = "ngram:8"
FULL_TOKENS = 128
FULL_REPEATS = 2


@dataclass(frozen=True)
class Plan:
    """What one benchmark runs, and why (`notes`, shown with the results)."""

    mode: str  # "quick" or "full"
    prompts: list[BenchPrompt]
    configs: str  # as --configs takes them
    max_tokens: int
    repeats: int
    warmup_tokens: int
    noise_check: bool
    expected_s: float | None = None  # the runs, from the calibration
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "configs": self.configs,
            "max_tokens": self.max_tokens,
            "repeats": self.repeats,
            "noise_check": self.noise_check,
            "expected_s": None if self.expected_s is None else round(self.expected_s, 1),
            "notes": list(self.notes),
        }


def one_per_category(prompts: Sequence[BenchPrompt]) -> list[BenchPrompt]:
    """The first prompt of each category, in the file's order."""
    seen: dict[str, BenchPrompt] = {}
    for prompt in prompts:
        seen.setdefault(prompt.category, prompt)
    return list(seen.values())


def fixed_choices(costs: Costs, drafter: str) -> list[tuple[str, str]]:
    """The fixed configurations that matter for this pair on this machine, most telling
    first, each with why. `drafter`: model, mtp, a head kind (`control.HEADS`), or anything
    else (n-gram lookup only)."""
    lookup = (NGRAM, "n-gram lookup alone, fixed: drafting that costs nothing, for copying")
    if drafter not in ("model", "mtp", *HEADS):
        return [lookup]
    k, speedup = best_length(costs, PRIOR_ACCEPTANCE, QUICK_K_MAX)
    source = {"model": "the draft model", "mtp": "the target's own head"}.get(
        drafter, f"the {drafter} head"
    )
    why = (
        f"{source}, fixed at the length this machine's costs pay most at: "
        f"{speedup:.2f}x expected at {PRIOR_ACCEPTANCE:.0%} acceptance"
    )
    model = (f"{drafter}:{k}", why)
    return [model, lookup] if speedup >= 1.0 else [lookup, model]


def expected_seconds(
    configs: Sequence[BenchConfig],
    prompts: Sequence[BenchPrompt],
    lengths: Sequence[int],
    costs: Costs,
    *,
    tokens: int,
    repeats: int,
    noise_check: bool,
    warmup_tokens: int,
    has_draft: bool,
) -> float:
    """What the runs of a plan should take, from the calibration: the runner's own schedule and
    its expectations (`runner.plan_steps`)."""
    planned = schedule(len(prompts), len(configs), 0, repeats=repeats, warmup=warmup_tokens > 0,
                       noise_check=noise_check, tokens=[tokens] * len(prompts),
                       warmup_tokens=min(warmup_tokens, tokens),
                       constrained=[p.schema is not None for p in prompts])  # fmt: skip
    steps = plan_steps(planned, configs, prompts, lengths, costs, has_draft=has_draft,
                       repeats=repeats)  # fmt: skip
    return sum(step.prior_s or 0.0 for step in steps)


@dataclass(frozen=True)
class QuickRequest:
    """The quick plan's inputs: the machine's costs, what drafts, the seconds left of the
    budget, and what the user fixed (None: the plan chooses)."""

    costs: Costs
    drafter: str  # model, mtp, a head kind (control.HEADS), ngram or none
    adaptive: bool
    budget_s: float
    configs: str | None = None
    max_tokens: int | None = None
    repeats: int | None = None


def quick_plan(
    prompts: Sequence[BenchPrompt], lengths: Sequence[int], request: QuickRequest
) -> Plan:
    """One prompt per category (`prompts` and their token `lengths` are those already), sized
    to the budget; see the module docstring."""
    repeats = request.repeats or 1
    noise_check = repeats == 1
    options = _config_options(request)
    notes = [f"{len(prompts)} prompts: one per category (--full runs every prompt)"]
    chosen, tokens, seconds = _fit(options, prompts, lengths, request, repeats, noise_check)
    configs, fixed = chosen
    notes += [f"{spec}: {why}" for spec, why in fixed]
    if len(options) > 1 and chosen is not options[0]:
        left_out = options[0][1][-1][0]
        notes.append(f"{left_out} left out: with it, 3 minutes leave under {ROOMY_TOKENS} tokens")
    fits = seconds <= request.budget_s
    why = "" if request.max_tokens or not fits else " (what 3 minutes allow here)"
    past = "" if fits else f", past the {request.budget_s:.0f} s left of 3 minutes"
    notes.append(f"{tokens} tokens a run{why}; the runs should take about {seconds:.0f} s{past}")
    if noise_check:
        notes.append("one round; the target alone runs each prompt twice, for the noise")
    notes += schema_notes(prompts)
    return Plan(
        "quick",
        list(prompts),
        configs,
        tokens,
        repeats,
        QUICK_WARMUP_TOKENS,
        noise_check,
        seconds,
        notes,
    )


Option = tuple[str, list[tuple[str, str]]]  # (--configs, the fixed ones with why)


def _config_options(request: QuickRequest) -> list[Option]:
    """The configuration sets to try, richest first."""
    if request.configs:
        return [(request.configs, [])]
    fixed = fixed_choices(request.costs, request.drafter)
    base = ["target", *(["adaptive"] if request.adaptive else [])]
    options = []
    for n in range(len(fixed), 0, -1):
        options.append((",".join([*base[:1], *(s for s, _ in fixed[:n]), *base[1:]]), fixed[:n]))
    return options


def _fit(
    options: list[Option],
    prompts: Sequence[BenchPrompt],
    lengths: Sequence[int],
    request: QuickRequest,
    repeats: int,
    noise_check: bool,
) -> tuple[Option, int, float]:
    """The richest option whose runs fit the budget at ROOMY_TOKENS or more (the last option
    at any token count), at the largest token count that fits (the smallest if none)."""
    ladder = (request.max_tokens,) if request.max_tokens else TOKEN_LADDER
    for index, option in enumerate(options):
        configs = _parse(option[0], request)
        last = index == len(options) - 1
        for tokens in ladder:
            if not last and tokens < ROOMY_TOKENS and not request.max_tokens:
                break
            seconds = _seconds(configs, prompts, lengths, request, tokens, repeats, noise_check)
            if seconds <= request.budget_s or (last and tokens == ladder[-1]):
                return option, tokens, seconds
    raise AssertionError("the last option always fits")  # pragma: no cover


def _seconds(
    configs: list[BenchConfig],
    prompts: Sequence[BenchPrompt],
    lengths: Sequence[int],
    request: QuickRequest,
    tokens: int,
    repeats: int,
    noise_check: bool,
) -> float:
    return expected_seconds(
        configs,
        prompts,
        lengths,
        request.costs,
        tokens=tokens,
        repeats=repeats,
        noise_check=noise_check,
        warmup_tokens=QUICK_WARMUP_TOKENS,
        has_draft=request.drafter == "model",
    )


def _parse(spec: str, request: QuickRequest) -> list[BenchConfig]:
    return parse_configs(
        spec,
        has_draft=request.drafter == "model",
        has_mtp=request.drafter == "mtp",
        head=request.drafter if request.drafter in HEADS else None,
        draft_max=4,
        adaptive=request.adaptive,
    )


def schema_notes(prompts: Sequence[BenchPrompt]) -> list[str]:
    """What the structured-output prompts run, when there are any."""
    ruled = sorted({p.category for p in prompts if p.schema is not None})
    if not ruled:
        return []
    return [
        f"{', '.join(ruled)}: every configuration answers under the prompt's JSON Schema; the "
        "target alone also runs it without the schema, for what the schema costs a token"
    ]


def full_plan(
    prompts: Sequence[BenchPrompt],
    *,
    configs: str | None,
    has_draft: bool,
    mtp: bool,
    max_tokens: int | None,
    repeats: int | None,
    head: str | None = None,
) -> Plan:
    """Every prompt, today's matrix of configurations, 128 tokens, two rounds (or as told);
    `head`: the kind of the head loaded from its own file, if one drafts."""
    repeats = repeats or FULL_REPEATS
    spec = configs or default_configs(has_draft=has_draft, mtp=mtp, head=head)
    notes = [f"{len(prompts)} prompts, every configuration: {spec}", *schema_notes(prompts)]
    return Plan(
        "full",
        list(prompts),
        spec,
        max_tokens or FULL_TOKENS,
        repeats,
        WARMUP_TOKENS,
        repeats == 1,
        None,
        notes,
    )


def plan_for(
    engine: Engine,
    prompts: Sequence[BenchPrompt],
    *,
    full: bool,
    configs: str | None,
    max_tokens: int | None,
    repeats: int | None,
    budget_s: float,
) -> Plan:
    """The plan for this engine: `--full`'s, or the quick one sized on its calibration."""
    has_draft, mtp = engine.draft_model is not None, engine.mtp_head is not None
    head = loaded_head(engine)
    if full:
        return full_plan(
            prompts,
            configs=configs,
            has_draft=has_draft,
            mtp=mtp,
            max_tokens=max_tokens,
            repeats=repeats,
            head=head,
        )
    chosen = one_per_category(prompts)
    lengths = [len(engine.prompt_tokens(list(p.messages))) for p in chosen]
    drafter = "model" if has_draft else "mtp" if mtp else head or "ngram"
    request = QuickRequest(
        engine.calibrate(), drafter, engine.config.adaptive, budget_s, configs, max_tokens, repeats
    )
    return quick_plan(chosen, lengths, request)
