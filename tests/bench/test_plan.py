"""The quick default's plan (prompts, configurations, tokens) for the default pair on measured
machines, and --full's. No model is loaded: the plan reads the costs and the prompts' lengths."""

from __future__ import annotations

import pytest

from specllama.bench import plan as bench_plan
from specllama.bench.configs import parse_configs
from specllama.bench.plan import QuickRequest, expected_seconds, full_plan, quick_plan
from specllama.bench.prompts import load_prompts
from specllama.engine.control import HEADS
from specllama.policy.costs import Costs

# The default pair (Qwen2.5-Coder 1.5B Q4_K_M target, 0.5B draft), 2 threads, as measured on the
# reference machines (DESIGN.md): a 2-core Xeon with AMX, where a batch of 4 costs 1.66 tokens
# and the draft model pays a little; a 2-core EPYC, where it does not; an H200-shaped GPU.
XEON = Costs(((1, 0.080), (2, 0.100), (4, 0.133), (8, 0.180), (16, 0.253), (32, 0.45)),
             draft_step_s=0.030, draft_catchup_s=0.004)  # fmt: skip
EPYC = Costs(((1, 0.028), (2, 0.040), (4, 0.067), (8, 0.118), (16, 0.2)),
             draft_step_s=0.014, draft_catchup_s=0.002)  # fmt: skip
GPU = Costs(((1, 0.0072), (2, 0.009), (4, 0.0092), (8, 0.0098), (16, 0.0125)),
            draft_step_s=0.0017, draft_catchup_s=0.0002)  # fmt: skip
BUDGET = 170.0  # what is left of 3 minutes after loading the pair and a cached calibration


@pytest.fixture(scope="module")
def quick_prompts():
    return bench_plan.one_per_category(load_prompts())


@pytest.fixture(scope="module")
def lengths(quick_prompts):
    """Roughly the prompts' tokens (4 characters a token, and the template's)."""
    return [sum(len(m.content) for m in p.messages) // 4 + 20 for p in quick_prompts]


def plan_for(costs, prompts, lengths, budget=BUDGET, **given):
    return quick_plan(prompts, lengths, QuickRequest(costs, "model", True, budget, **given))


def seconds(plan, costs, lengths, tokens):
    configs = parse_configs(plan.configs, has_draft=True, draft_max=4)
    warmup = bench_plan.QUICK_WARMUP_TOKENS
    return expected_seconds(configs, plan.prompts, lengths, costs, tokens=tokens, repeats=1,
                            noise_check=True, warmup_tokens=warmup, has_draft=True)  # fmt: skip


def test_one_prompt_per_category_of_the_bundled_set(quick_prompts):
    assert [p.id for p in quick_prompts] == [
        "cw-fib", "ce-rename", "sum-council", "qa-tcp", "tr-fr", "chat-weekend", "ex-email",
        "so-contact",
    ]  # fmt: skip


def test_the_default_pair_on_the_two_core_xeon(quick_prompts, lengths):
    plan = plan_for(XEON, quick_prompts, lengths)
    # k=1 and 2 pay 1.11x here at 80% acceptance, k=3 1.06x: the shortest draft. n-gram lookup
    # alone would leave under 64 tokens a run: left out, and said so. Eight categories (the
    # structured one runs the target alone a third time, without its schema) fit 48 tokens.
    assert plan.configs == "target,model:1,adaptive"
    assert plan.max_tokens == 48 and plan.repeats == 1 and plan.noise_check
    assert plan.expected_s == pytest.approx(seconds(plan, XEON, lengths, 48))
    assert plan.expected_s <= BUDGET < seconds(plan, XEON, lengths, 64)
    assert any(n.startswith("ngram:8 left out") for n in plan.notes)
    assert any("1.11x expected at 80% acceptance" in n for n in plan.notes)


def test_where_the_draft_model_cannot_pay_lookup_comes_first(quick_prompts, lengths):
    plan = plan_for(EPYC, quick_prompts, lengths)
    assert plan.configs == "target,ngram:8,model:1,adaptive"
    assert plan.max_tokens == 128
    assert any("0.93x expected" in n for n in plan.notes)
    tight = plan_for(EPYC, quick_prompts, lengths, budget=40.0)
    assert tight.configs == "target,ngram:8,adaptive" and tight.max_tokens == 32


def test_on_a_gpu_the_longer_draft_and_every_token(quick_prompts, lengths):
    plan = plan_for(GPU, quick_prompts, lengths)
    assert plan.configs == "target,model:4,ngram:8,adaptive" and plan.max_tokens == 128
    assert plan.expected_s < 60


def test_a_budget_nothing_fits_takes_the_smallest_plan_and_says_so(quick_prompts, lengths):
    plan = plan_for(XEON, quick_prompts, lengths, budget=20.0)
    assert plan.configs == "target,model:1,adaptive" and plan.max_tokens == 32
    assert any("past the 20 s left of 3 minutes" in note for note in plan.notes)


def test_what_the_user_fixed_is_kept(quick_prompts, lengths):
    plan = plan_for(XEON, quick_prompts, lengths, configs="target,ngram:4", max_tokens=200,
                    repeats=2)  # fmt: skip
    assert (plan.configs, plan.max_tokens, plan.repeats) == ("target,ngram:4", 200, 2)
    assert not plan.noise_check  # two rounds say how far apart the machine puts them
    no_adaptive = quick_plan(quick_prompts, lengths, QuickRequest(GPU, "model", False, BUDGET))
    assert "adaptive" not in no_adaptive.configs


def test_without_a_draft_model_lookup_is_the_fixed_one(quick_prompts, lengths):
    plan = quick_plan(quick_prompts, lengths, QuickRequest(EPYC, "ngram", True, BUDGET))
    assert plan.configs == "target,ngram:8,adaptive"
    own_head = quick_plan(quick_prompts, lengths, QuickRequest(GPU, "mtp", True, BUDGET))
    assert own_head.configs.startswith("target,mtp:")


@pytest.mark.parametrize("kind", HEADS)
def test_a_head_in_its_own_file_is_planned_as_the_mtp_head_is(quick_prompts, lengths, kind):
    """A head from its own file drafts at the length its costs pay most at, as MTP's does, and
    the plan's configurations are ones --configs takes with that head loaded."""
    plan = quick_plan(quick_prompts, lengths, QuickRequest(GPU, kind, True, BUDGET))
    own = quick_plan(quick_prompts, lengths, QuickRequest(GPU, "mtp", True, BUDGET))
    assert plan.configs == own.configs.replace("mtp:", f"{kind}:")
    assert any(note.startswith(f"{kind}:") and f"the {kind} head" in note for note in plan.notes)
    parsed = parse_configs(plan.configs, has_draft=False, head=kind, draft_max=4)
    assert [c.drafter for c in parsed] == ["none", kind, "ngram", "combined"]
    full = full_plan(load_prompts(), configs=None, has_draft=False, mtp=False, head=kind,
                     max_tokens=None, repeats=None)  # fmt: skip
    assert full.configs == f"target,{kind}:2,{kind}:4,ngram:8,adaptive"


def test_full_is_todays_matrix():
    prompts = load_prompts()
    plan = full_plan(prompts, configs=None, has_draft=True, mtp=False, max_tokens=None,
                     repeats=None)  # fmt: skip
    assert len(plan.prompts) == len(prompts) == 40
    assert plan.configs == "target,model:2,model:4,ngram:8,adaptive"
    assert (plan.max_tokens, plan.repeats, plan.noise_check) == (128, 2, False)
    once = full_plan(prompts, configs="target,ngram:8", has_draft=False, mtp=False,
                     max_tokens=16, repeats=1)  # fmt: skip
    assert once.noise_check and once.configs == "target,ngram:8"
