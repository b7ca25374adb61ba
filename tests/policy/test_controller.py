"""The adaptive controller's decisions, replayed with the simulator on the costs of real machines
(no models), and in the loop on the Markov-chain fake backend."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fakes import MarkovBackend, random_table

from specllama.engine.control import FixedLength
from specllama.engine.drafters import CombinedDrafter, DraftModelDrafter, NgramDrafter, NoDrafter
from specllama.engine.events import RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.policy.controller import (
    CROSS_MODEL_PRIOR,
    LONG_COPY,
    MODEL,
    NGRAM,
    PRIORS,
    AdaptiveController,
    lane_of,
)
from specllama.policy.costs import Costs
from specllama.policy.simulator import MachineCosts, Trace, simulate, synthetic_trace

# Measured costs of three machines (research/RESULTS.md, DESIGN.md).
T1 = 0.0072  # NVIDIA H200, 7B-shaped F16 target, 0.5B-shaped draft: verification nearly free
GPU = Costs(
    verify_s=((1, T1), (2, 1.25 * T1), (4, 1.28 * T1), (8, 1.36 * T1), (16, 1.74 * T1)),
    draft_step_s=0.23 * T1,
    draft_catchup_s=0.003 * T1,
)
# A 2-core Xeon without AMX (this one), Qwen2.5-Coder 1.5B Q4_K_M target: verification is dear.
CPU_Q4 = Costs(
    verify_s=((1, 0.085), (2, 0.130), (4, 0.145), (8, 0.269), (16, 0.400)),
    draft_step_s=0.040,
    draft_catchup_s=0.010,
)
# A 2-core AMD EPYC, same pair: the draft model cannot pay even when always right.
CPU_EPYC = Costs(
    verify_s=((1, 0.0295), (2, 0.0558), (4, 0.0976), (8, 0.222), (16, 0.305)),
    draft_step_s=0.0202,
    draft_catchup_s=0.0051,
)
# A 2-core Xeon with AMX, same pair: batches are cheap enough for the draft model to pay.
CPU_AMX = Costs(
    verify_s=((1, 0.080), (2, 0.095), (4, 0.133), (8, 0.180), (16, 0.253)),
    draft_step_s=0.018,
    draft_catchup_s=0.003,
)


def replay(costs, trace, controller=None, machine=None, **kw):
    kw.setdefault("max_tokens", max(len(trace), 128))  # a budget, not where it ends
    controller = controller or AdaptiveController(costs)
    return simulate(trace, controller, machine or MachineCosts(costs), **kw), controller


def trace_of(agrees, n_prompt=32):
    n = len(agrees)
    zeros = (0,) * n
    return Trace(tuple(agrees), (0.95,) * n, zeros, zeros, zeros, n_prompt)


def model_rounds(result):
    return [r for r in result.rounds if r.source == MODEL]


# -- decisions --------------------------------------------------------------------------------


def test_drafts_long_when_verification_is_cheap_and_drafts_are_good():
    rng = np.random.default_rng(1)
    result, _ = replay(GPU, synthetic_trace(256, 0.95, rng), ngram=False)
    assert statistics.median(r.n_drafted for r in model_rounds(result)) >= 7
    assert result.speedup > 1.8


def test_a_run_of_bad_luck_does_not_switch_off_a_source_that_pays():
    rng = np.random.default_rng(2)
    agrees = list(rng.random(256) < 0.85)
    agrees[40:52] = [False] * 12  # twelve misses in a row: a few rounds of bad luck
    result, controller = replay(GPU, trace_of(agrees), ngram=False)
    assert controller.sources[MODEL].history == []  # never rested
    drafted = [bool(r.n_drafted) for r in result.rounds]
    assert not drafted[0] and all(drafted[1:])  # the first round sees what the target costs
    assert result.speedup > 1.3


def test_a_source_that_does_not_pay_is_off_within_a_few_rounds():
    rng = np.random.default_rng(3)
    result, controller = replay(GPU, synthetic_trace(256, 0.1, rng), ngram=False)
    drafted = [i for i, r in enumerate(result.rounds) if r.source == MODEL]
    # Round 0 is the target alone: what it costs is seen before anything is weighed against it.
    # Then a few rounds find out (the draft model's prior is worth 3 tokens), and it rests.
    assert drafted[:3] == [1, 2, 3] and len([i for i in drafted if i < 16]) <= 8
    # Then only probes after rests of 16, 32, 64... rounds (a probe that hits gets another).
    assert len(drafted) <= 12
    pauses = controller.sources[MODEL].history
    assert pauses == sorted(pauses) and pauses[-1] >= 4 * pauses[0]
    assert result.speedup > 0.97


def test_a_short_answer_costs_nothing_extra():
    """Where the draft model pays, a long prompt's catch-up is still not worth it for a short
    answer: the target answers alone, at the target's speed."""
    rng = np.random.default_rng(4)
    short = synthetic_trace(24, 0.9, rng, n_prompt=400)
    result, _ = replay(CPU_AMX, short, ngram=False)
    assert model_rounds(result) == []
    assert result.speedup == pytest.approx(1.0)


def test_a_long_answer_pays_for_the_catch_up_once_it_has_run_long_enough():
    """Ski rental: the catch-up of a long prompt (1.2 s here, 15 target tokens) is paid once
    the answer has run long enough that what the draft model would have saved covers it; a
    short prompt is caught up at once."""

    def first_model_round(n_prompt):
        trace = synthetic_trace(256, 0.9, np.random.default_rng(4), n_prompt=n_prompt)
        result, _ = replay(CPU_AMX, trace, ngram=False)
        first = next(i for i, r in enumerate(result.rounds) if r.source == MODEL)
        return first, result.speedup

    assert first_model_round(40)[0] == 1  # after the round that sees the target alone
    first, speedup = first_model_round(400)
    assert 15 < first < 100 and speedup > 1.1


# Recorded answers of the reference pair with the costs measured beside them (a few of
# research/results' traces): the F16 target on a 2-core Intel Xeon, where verifying up to 6 tokens
# costs about one (as on a GPU), and the Q4_K_M target on a 2-core AMD EPYC, where 2 cost 1.7.
RECORDED = json.loads((Path(__file__).parent / "recorded_traces.json").read_text())


def recorded(machine: str) -> tuple[Costs, list[Trace]]:
    data = RECORDED[machine]
    return Costs.from_dict(data["costs"]), [Trace.from_dict(t) for t in data["traces"]]


def test_where_verifying_is_nearly_free_a_good_draft_starts_at_once_after_a_long_prompt():
    """The catch-up of an 80-token prompt is spread over at least 16 tokens: where the draft
    model pays 1.6x, it starts after the round that sees the target alone. Spread over 8, it
    waited 11 tokens and the answer ran at 0.8 of a fixed k = 4; now at 0.95-1.04."""
    costs, _ = recorded("f16-xeon")
    for seed in range(3):
        trace = synthetic_trace(40, 0.9, np.random.default_rng(seed), n_prompt=80)
        result, _ = replay(costs, trace)
        first = next(i for i, r in enumerate(result.rounds) if r.source)
        assert sum(r.n_accepted + 1 for r in result.rounds[:first]) == 1
        fixed, _ = replay(costs, trace, FixedLength(4), ngram=False)
        assert result.speedup >= 0.93 * fixed.speedup


def test_recorded_answers_where_verifying_is_nearly_free_draft_long():
    """Cheap verification and a draft that is mostly right: drafts of 3-8 tokens, within 5% of
    the best fixed length for each answer (code written, a translation after a long prompt)."""
    costs, traces = recorded("f16-xeon")
    for trace in traces:
        result, _ = replay(costs, trace)
        lengths = [r.n_drafted for r in model_rounds(result)]
        assert statistics.mean(lengths) >= 3.0, trace.name
        best = max(replay(costs, trace, FixedLength(k), ngram=False)[0].speedup for k in (2, 4, 8))
        assert result.speedup >= 0.95 * best, trace.name


def test_recorded_retrieval_answers_after_long_prompts_stay_with_the_target_where_it_is_dear():
    """Short answers after 700-token prompts on the EPYC's costs: the draft model's catch-up
    could never pay (fixed k: 0.09-0.23x), so it never runs; n-gram lookup drafts a few tokens
    where a match shows; no answer runs below 0.97x of the target alone."""
    costs, traces = recorded("q4km-epyc")
    for trace in traces:
        result, _ = replay(costs, trace)
        assert model_rounds(result) == [], trace.name
        assert sum(r.n_drafted for r in result.rounds) <= 8, trace.name
        assert result.speedup >= 0.97, trace.name


def test_where_the_draft_model_cannot_pay_it_never_runs():
    rng = np.random.default_rng(5)
    result, _ = replay(CPU_EPYC, synthetic_trace(128, 0.95, rng, n_prompt=8), ngram=False)
    assert model_rounds(result) == []
    assert result.speedup == pytest.approx(1.0)


@pytest.mark.parametrize("a", [0.95, 0.8])
def test_learns_what_rounds_really_cost(a):
    """On a machine where rounds cost more than the calibration says (a GPU: the draft steps
    1.5x, 6 ms of Python a round), the controller learns it and keeps up with the best fixed
    length chosen with hindsight. Over 25 answers: their speedups spread over 1.1-1.65x, so the
    median of fewer moves by more than the margin with any change to the policy."""
    machine = MachineCosts(GPU, draft_step_factor=1.5, overhead_round_s=0.84 * T1, noise=0.05)
    traces = [synthetic_trace(256, a, np.random.default_rng(seed)) for seed in range(25)]

    def median_speedup(make):
        return statistics.median(
            simulate(t, make(), machine, ngram=False, seed=i).speedup for i, t in enumerate(traces)
        )

    best_fixed = max(median_speedup(lambda k=k: FixedLength(k)) for k in (2, 3, 4, 6, 8, 12))
    adaptive = median_speedup(lambda: AdaptiveController(GPU))
    assert adaptive >= max(best_fixed, 1.0) - 0.05


def test_a_draft_stopped_on_confidence_is_counted_with_the_step_that_stopped_it():
    """A draft that stops at an unconfident token decoded that token too. Counted as the
    tokens kept, draft steps looked up to twice what they cost, and a draft model that was
    timed right looked 1.2-2x dearer."""
    rng = np.random.default_rng(9)
    n = 256
    confidence = tuple(float(x) for x in np.where(rng.random(n) < 0.3, 0.2, 0.95))
    trace = replace(synthetic_trace(n, 0.9, rng), model_confidence=confidence)
    result, controller = replay(GPU, trace, ngram=False)
    stopped = [r for r in model_rounds(result) if 0 < r.n_drafted < r.k]
    assert len(stopped) > 10
    assert controller.live.draft_scale == pytest.approx(1.0, abs=0.02)


def test_where_rounds_cost_more_than_the_decodes_a_run_starts_from_the_last_runs_figures():
    """Retrieval answers of 11-41 tokens after 700-token prompts, on a GPU's costs where a
    drafting round takes 6 ms of Python (0.84 of a target token) and draft steps 1.55x the
    calibration's (as an H200 did; simulated). Starting from the calibration alone, the first
    rounds cannot know it, and the answers run at 0.78-0.99x; starting from what one earlier
    run learnt of its rounds (another answer), each is at least 0.97x of the target alone."""
    _, traces = recorded("q4km-epyc")
    machine = MachineCosts(GPU, draft_step_factor=1.55, overhead_round_s=0.84 * T1)
    earlier = AdaptiveController(GPU)
    simulate(synthetic_trace(256, 0.95, np.random.default_rng(10)), earlier, machine)
    learnt = earlier.live.learnt()
    assert learnt is not None and learnt.draft_scale == pytest.approx(1.55, rel=0.01)
    cold = [replay(GPU, t, machine=machine)[0].speedup for t in traces]
    warm = [replay(replace(GPU, learnt=learnt), t, machine=machine)[0].speedup for t in traces]
    assert min(cold) < 0.9
    assert min(warm) >= 0.97


# -- pipelined drafting -------------------------------------------------------------------------


def pipelined_rounds(result):
    return [r for r in result.rounds if r.n_ahead]


def test_pipelines_where_the_draft_ahead_runs_beside_the_verify():
    """On the GPU's costs, with the verify and the draft ahead in parallel (overlap 0), the
    draft model's rounds are pipelined, and beat the best chain chosen with hindsight."""
    costs = replace(GPU, overlap=0.0)
    machine = MachineCosts(costs, overlap=0.0)
    for a in (0.95, 0.8):
        trace = synthetic_trace(256, a, np.random.default_rng(6))
        result, _ = replay(costs, trace, machine=machine, ngram=False)
        assert len(pipelined_rounds(result)) > 0.8 * len(model_rounds(result))
        chains = [simulate(trace, FixedLength(k), machine, ngram=False) for k in (2, 4, 8, 12)]
        assert result.speedup > 1.1 * max(c.speedup for c in chains)


@pytest.mark.parametrize(
    "costs", [CPU_AMX, replace(CPU_AMX, overlap=1.3), GPU], ids=["unmeasured", "cpu", "gpu-1"]
)
def test_never_pipelines_where_the_models_take_turns(costs):
    """Where the draft model pays but the two models cannot run at once (a CPU's cores: overlap
    measured >= 1, or not measured), drafting ahead never pays and never runs."""
    trace = synthetic_trace(256, 0.95, np.random.default_rng(7))
    result, _ = replay(costs, trace, machine=MachineCosts(costs, overlap=costs.overlap))
    assert len(model_rounds(result)) > 10
    assert pipelined_rounds(result) == []


def test_stops_pipelining_when_the_machine_does_not_overlap_as_calibrated():
    """Told that the models run in parallel, on a machine where they get in each other's way:
    the controller learns the overlap from the pipelined rounds and goes back to the chain."""
    told = replace(GPU, overlap=0.0)
    machine = MachineCosts(replace(GPU, overlap=1.5), overlap=1.5)
    trace = synthetic_trace(512, 0.95, np.random.default_rng(8))
    result, controller = replay(told, trace, machine=machine, ngram=False)
    pipelined = [bool(r.n_ahead) for r in model_rounds(result)]
    later = pipelined[len(pipelined) // 4 :]
    assert pipelined[0] and sum(later) <= 0.1 * len(later)
    # It stops where the pipeline no longer pays on what it has seen, not at the truth.
    assert controller.live.overlap > 0.5
    chain = simulate(trace, FixedLength(8), machine, ngram=False)
    assert result.speedup > 0.95 * chain.speedup


def test_ngram_matches_are_judged_by_their_length():
    assert lane_of("ngram1") == "ngram1"
    assert lane_of("ngram5") == "ngram4"
    assert lane_of("ngram9") == "ngram6"
    assert lane_of(MODEL) == MODEL
    assert lane_of("ngram30") == "ngram24" and lane_of("ngram2-mixed") == "ngram2-mixed"
    assert lane_of("ngram7-mixed") == "ngram6"  # a long match copies, however it went before
    c = AdaptiveController(CPU_Q4)
    assert c.choose([("ngram7", 0)], remaining=1000) == ("", 0)  # first: the target alone
    c.observe(RoundEvent(0, 0, 0.0, CPU_Q4.verify(1), ""))
    # On the dear CPU, a 1-token match that went on differently before is not worth even a
    # probe; a 7-token one is.
    assert c.choose([("ngram1-mixed", 0)], remaining=1000) == ("", 0)
    source, k = c.choose([("ngram7", 0)], remaining=1000)
    assert source == "ngram7" and k > 0
    c.observe(RoundEvent(k, k, 0.0, CPU_Q4.verify(k + 1), "ngram7"))
    assert c.acceptance("ngram6") > c.acceptance("ngram1")


def test_ngram_drafts_grow_long_while_the_text_is_being_copied():
    n = 200
    copying = Trace((False,) * n, (0.5,) * n, (8,) * n, (48,) * n, (48,) * n, 32)
    result, _ = replay(CPU_Q4, copying, draft_model=False)
    assert result.rounds[1].n_drafted > 0
    assert max(r.n_drafted for r in result.rounds) >= 16
    assert result.speedup > 2.0


# The 2-core EPYC as recorded with the bundled prompts: batches step up to 6.8 tokens at 8, then
# stay near 9 up to 17. A line through the small sizes makes long drafts look twice as dear.
CPU_STEPPED = Costs(
    verify_s=((1, 0.034), (2, 0.059), (4, 0.100), (8, 0.231), (12, 0.308), (17, 0.321), (49, 0.652))
)
# A calibration in no order (measured beside busy loops): its shape is not used.
DOUBTFUL = Costs(verify_s=((1, 0.9), (2, 0.3), (4, 0.5), (8, 0.9), (16, 2.0)))


def copy_rounds(controller, rounds, match=30):
    """Drafts from a match of `match` tokens, all accepted, timed as the stepped EPYC would; the
    lengths drafted."""
    name = f"ngram{match}"
    controller.choose([(name, 0)], remaining=500)
    controller.observe(RoundEvent(0, 0, 0.0, CPU_STEPPED.verify(1), ""))
    drafted, generated = [], 1
    for _ in range(rounds):
        source, k = controller.choose([(name, 0)], remaining=500, generated=generated)
        controller.observe(RoundEvent(k, k, 0.0, CPU_STEPPED.verify(k + 1), source))
        drafted.append(k)
        generated += k + 1
    return drafted


def test_an_untrusted_shape_is_probed_by_doubling_drafts_while_a_copy_holds():
    """The line through the sizes seen says a draft of 4 pays best; probes of twice the largest
    batch, at most twice the tokens copied in a row, find that 48 does."""
    drafted = copy_rounds(AdaptiveController(DOUBTFUL), 6)
    assert drafted[0] == 4 and max(drafted) == 48
    for i in range(1, 4):
        assert drafted[i] > drafted[i - 1] and drafted[i] <= 2 * sum(drafted[:i])
    unprobed = AdaptiveController(DOUBTFUL)
    unprobed._length_probe = lambda k, *_: k
    assert max(copy_rounds(unprobed, 6)[2:]) <= 8


def test_a_long_copy_drafts_as_far_as_the_measured_costs_pay_at_once():
    """A match of LONG_COPY tokens (a file copied, an answer remembered or predicted) drafts
    long from its first round, where the ramp would start at 4; a shorter match (a quote)
    ramps."""
    first = copy_rounds(AdaptiveController(CPU_STEPPED), 1, match=LONG_COPY)[0]
    ramped = copy_rounds(AdaptiveController(CPU_STEPPED, long_copy=None), 1, match=LONG_COPY)
    quote = copy_rounds(AdaptiveController(CPU_STEPPED), 1, match=LONG_COPY - 1)
    assert ramped[0] <= 4 and quote[0] <= 4
    assert 16 < first <= 48


def test_a_long_copy_trusts_the_calibration_only_as_far_as_it_measured():
    """Past the largest batch measured (16 on the H200), or on a calibration that was guessed
    or is in no order, a long copy ramps as any draft does."""
    controller = AdaptiveController(GPU)
    controller.choose([("ngram64", 0)], remaining=500)
    controller.observe(RoundEvent(0, 0, 0.0, GPU.verify(1), ""))
    _, k = controller.choose([("ngram64", 0)], remaining=500, generated=1)
    assert 4 < k <= 15
    for prior in (DOUBTFUL, Costs.guess(0.034, has_draft=False)):
        assert copy_rounds(AdaptiveController(prior), 1, match=64)[0] <= 4


def batched_copy_rounds(price, rounds=12, match=LONG_COPY):
    """A copy accepted in full, drafted by a slot beside others in steps priced `price`
    (share, seconds a drafted token adds), on the stepped EPYC's calibration (alone, its
    batches pay); each round charged as the stepper charges it. The lengths drafted."""
    controller, name = AdaptiveController(CPU_STEPPED), f"ngram{match}"
    share, per_token = price
    drafted, generated = [], 0
    for _ in range(rounds):
        controller.in_batch(price)
        source, k = controller.choose([(name, 0)], remaining=500, generated=generated)
        controller.observe(RoundEvent(k, k, 0.0, share + per_token * k if k else share, source))
        assert math.isfinite(controller.live.plain())
        drafted.append(k)
        generated += k + 1
    return drafted


def test_beside_other_slots_a_copy_drafts_only_where_the_batch_has_slack():
    """The stepper's prices as recorded on the 2-core EPYC (tests/llama/recorded_steps.json):
    four slots, 29 ms a slot and 31 ms a drafted token (no slack: a copy's drafts would lower
    the batch's tokens per second), eight slots, 37 ms and 20 ms (slack), and a GPU's batch
    (7 ms a step, 0.3 ms a token). Alone, the same copy drafts long at once."""
    assert copy_rounds(AdaptiveController(CPU_STEPPED), 1, match=LONG_COPY)[0] > 16
    assert batched_copy_rounds((0.029, 0.031)) == [0] * 12
    assert max(batched_copy_rounds((0.037, 0.020))) >= 4
    assert max(batched_copy_rounds((0.0009, 0.0003))) >= 16
    assert batched_copy_rounds((0.5, math.inf)) == [0] * 12  # another slot's prompt goes in


def test_beside_other_slots_a_copy_does_not_draft_for_a_few_percent():
    """Four slots on the 2-core EPYC, as the stepper priced them in a traced phase: 42 ms a
    slot, 39 ms a drafted token. A copy's drafts at ~99% make its own tokens ~4% cheaper, but
    it then leaves the batch early and the other slots' tokens cost ~15% more in the narrower
    steps (research/batch_bound.py: no schedule beats plain batching there): it drafts only
    for a clear gain."""
    assert batched_copy_rounds((0.042, 0.039)) == [0] * 12
    assert max(batched_copy_rounds((0.042, 0.025))) >= 4


def test_an_answer_given_again_is_drafted_at_once():
    """The same 48-token answer again, with the memory of the first (a match as long as any):
    a long draft from the first drafting round instead of the ramp's 4, 16, ..., on the
    recorded EPYC's costs."""
    n = 48
    rest = tuple(min(n - i, 64) for i in range(n))
    again = Trace((False,) * n, (0.5,) * n, (64,) * n, rest, rest, 32)
    shipped, _ = replay(CPU_STEPPED, again, draft_model=False)
    ramp_only = AdaptiveController(CPU_STEPPED, long_copy=None)
    ramped, _ = replay(CPU_STEPPED, again, ramp_only, draft_model=False)
    assert next(r.n_drafted for r in shipped.rounds if r.n_drafted) > 16
    assert len(shipped.rounds) < len(ramped.rounds)
    assert shipped.speedup > 1.03 * ramped.speedup


def test_confidence_threshold_is_the_cost_break_even():
    cheap, dear = AdaptiveController(GPU), AdaptiveController(CPU_AMX)
    assert cheap.min_confidence == pytest.approx(0.3)  # clipped: almost any guess is worth it
    assert dear.min_confidence > cheap.min_confidence


def test_fixed_length_offers_the_first_source_or_nothing():
    fixed = FixedLength(3)
    assert fixed.choose([(NGRAM, 0), (MODEL, 0)], remaining=100) == (NGRAM, 3)
    assert fixed.choose([], remaining=100) == ("", 0)
    assert FixedLength(0).choose([(MODEL, 0)], remaining=100) == ("", 0)


# -- in the loop, on the fake backend -------------------------------------------------------

CHEAP_VERIFY = Costs(
    verify_s=((1, 0.020), (2, 0.021), (4, 0.023), (8, 0.026), (16, 0.032), (32, 0.045)),
    draft_step_s=0.003,
    draft_catchup_s=0.0005,
)


def run_loop(target, drafter, controller, prompt=(0, 1), max_tokens=60):
    events = list(
        generate(
            target,
            drafter,
            list(prompt),
            SamplingParams(temperature=0.0),
            max_tokens=max_tokens,
            controller=controller,
        )
    )
    tokens = [e.token for e in events if isinstance(e, TokenEvent)]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    return tokens, rounds


def test_adaptive_greedy_output_equals_the_target_alone():
    rng = np.random.default_rng(5)
    table = random_table(16, rng, 0.2)
    target = MarkovBackend(table)
    alone, _ = run_loop(target, NoDrafter(), FixedLength(0))
    for draft_table in (table, random_table(16, rng, 0.2)):
        drafter = CombinedDrafter(DraftModelDrafter(MarkovBackend(draft_table)))
        tokens, _ = run_loop(target, drafter, AdaptiveController(CHEAP_VERIFY))
        assert tokens == alone


def test_adaptive_in_the_loop_drafts_long_from_a_perfect_draft_and_stops_for_a_bad_one():
    rng = np.random.default_rng(6)
    table = random_table(16, rng, 0.05)
    target = MarkovBackend(table)
    _, good = run_loop(
        target, DraftModelDrafter(MarkovBackend(table)), AdaptiveController(CHEAP_VERIFY)
    )
    assert max(r.n_drafted for r in good) >= 8
    assert all(r.n_accepted == r.n_drafted for r in good)

    # Decodes that take the time CHEAP_VERIFY says they do, and a draft that always guesses
    # the token next to the target's choice.
    target = MarkovBackend(table, costs=(0.020, 0.00075))
    wrong = MarkovBackend(np.roll(table, 1, axis=1), costs=(0.003, 0.0005))
    controller = AdaptiveController(CHEAP_VERIFY)
    _, bad = run_loop(target, DraftModelDrafter(wrong), controller, max_tokens=120)
    assert sum(r.n_accepted for r in bad) == 0
    # Mostly the target alone: after the rounds that find out, only a probe now and then. A
    # wrong draft of one costs a fifth of a token here, and the draft model's prior (0.8, worth
    # 3 tokens) takes about 19 of them to overturn: with the draft model's prefill and the
    # probes, at most 6.5% slower.
    assert sum(1 for r in bad[40:] if r.n_drafted) <= 6
    booked = target.decode_seconds + wrong.decode_seconds
    assert booked <= 1.065 * 120 * 0.020


def test_round_events_name_their_source_and_time_the_round():
    table = random_table(8, np.random.default_rng(7), 0.3)
    target = MarkovBackend(table)
    drafter = CombinedDrafter(DraftModelDrafter(MarkovBackend(table)), NgramDrafter())
    _, rounds = run_loop(target, drafter, AdaptiveController(CHEAP_VERIFY), prompt=(0, 1, 2, 0, 1))
    lanes = {f"ngram{n}" for n in (1, 2, 3, 4, 6, 12, 24)} | {"ngram1-mixed", "ngram2-mixed"}
    assert {lane_of(r.source) for r in rounds} <= {MODEL, "", *lanes}
    assert any(r.source for r in rounds)
    assert all(r.wall_s > 0 for r in rounds)


def test_ngram_drafter_offers_its_match_length():
    drafter = NgramDrafter()
    assert drafter.sources([1, 2, 3]) == []
    assert drafter.sources([1, 2, 3, 9, 1, 2, 3]) == [("ngram3", 0)]
    assert drafter.propose([1, 2, 3, 9, 1, 2, 3], 2, SamplingParams(0.0)).tokens == [9, 1]


def plain_round(hindsight="", right=0, seen=0):
    """A round of the target alone on the EPYC, with what an n-gram source passed over would
    have got right of its one token."""
    t = CPU_EPYC.verify(1)
    return RoundEvent(
        0, 0, 0.0, t, wall_s=t, hindsight=hindsight, hindsight_right=right, hindsight_seen=seen
    )


def test_what_a_passed_over_ngram_source_would_have_drafted_is_evidence():
    # On the EPYC, a 4-token match's prior (0.75) does not pay a verify batch: it gets a round
    # to learn from. Lookups seen right while the target ran alone make it pay; seen wrong,
    # not even that round is spent.
    lane = "ngram4"
    told = {}
    for right in (None, 0, 1):
        c = AdaptiveController(CPU_EPYC)
        c.choose([(lane, 0)], remaining=1000)
        for _ in range(6):
            c.observe(plain_round() if right is None else plain_round(lane, right, 1))
        told[right] = c.choose([(lane, 0)], remaining=1000, generated=6)
    assert told[None] == (lane, 1)
    assert told[0] == ("", 0)
    assert told[1][0] == lane and told[1][1] >= 2


def test_a_resting_ngram_lane_comes_back_when_its_lookups_turn_right():
    back = {}
    for right in (None, 1):
        c = AdaptiveController(CPU_EPYC)
        c.choose([("ngram4", 0)], remaining=1000)
        c.observe(plain_round())
        lane = c.source("ngram4")
        lane.hits, lane.misses, lane.pause = 0.0, 4.0, 64  # wrong so far, and a long rest next
        assert c.choose([("ngram4", 0)], remaining=1000, generated=1) == ("", 0)
        for generated in range(2, 100):
            if c.choose([("ngram4", 0)], remaining=1000, generated=generated)[1]:
                back[right] = c.round
                break
            c.observe(plain_round() if right is None else plain_round("ngram4", 1, 1))
    assert back.get(None, 100) >= 64  # not before its rest is over
    assert back[1] <= 20


def test_the_replay_checks_the_passed_over_lookup_against_the_answer():
    # Never drafting: every round says how the lookup offered there would have done.
    n = 12
    run = (0, 1, 0, 2, 1, 0, 3, 2, 1, 0, 0, 0)
    trace = Trace((False,) * n, (0.5,) * n, (5,) * n, (3,) * n, run, 32)
    result, _ = replay(CPU_EPYC, trace, controller=FixedLength(0), draft_model=False)
    assert [(r.hindsight, r.hindsight_right, r.hindsight_seen) for r in result.rounds] == [
        ("ngram5", min(x, 1), 1) for x in run
    ]


@pytest.mark.parametrize("costs", [GPU, CPU_AMX], ids=["gpu", "amx"])
def test_a_draft_across_tokenizers_that_is_seldom_right_costs_under_3_percent(costs):
    """A draft of another tokenizer starts from its lower prior: where it is right 30% of the
    time its trial rounds cost under 3% (the same-vocabulary prior's cost more), and where it is
    right 90% of the time it still drafts and pays. Medians over 20 answers of 128 tokens."""

    def median_speedup(acceptance: float, prior: float) -> float:
        speedups = []
        for seed in range(20):
            trace = synthetic_trace(128, acceptance, np.random.default_rng(seed))
            controller = AdaptiveController(costs, priors={MODEL: prior})
            speedups.append(replay(costs, trace, controller=controller, ngram=False)[0].speedup)
        return statistics.median(speedups)

    seldom = median_speedup(0.3, CROSS_MODEL_PRIOR)
    assert seldom >= 0.97
    assert seldom > median_speedup(0.3, PRIORS[MODEL])
    assert median_speedup(0.9, CROSS_MODEL_PRIOR) > 1.25
