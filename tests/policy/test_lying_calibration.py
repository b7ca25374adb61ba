"""A calibration that lies: flat, measured under load or beside busy loops, off by 3x either
way, dear at one size. The policy must recover within a few rounds and lose at most 3% over a
128-token answer against the same policy given the true costs, in the simulator and in the loop
on the fake backend."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fakes import MarkovBackend, random_table

from specllama.engine.drafters import CombinedDrafter, DraftModelDrafter
from specllama.engine.events import FinishEvent, RoundEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.policy.controller import AdaptiveController
from specllama.policy.costs import Costs
from specllama.policy.simulator import MachineCosts, Trace, simulate, synthetic_trace

# The truth on three machines (DESIGN.md, issue 17): a 2-core AMD EPYC where verifying is dear
# and the draft model cannot pay, a 2-core Xeon with AMX where it can, an H200.
EPYC = Costs(
    verify_s=((1, 0.029), (2, 0.045), (4, 0.070), (8, 0.121), (16, 0.215), (32, 0.40), (49, 0.6)),
    draft_step_s=0.0145,
    draft_catchup_s=0.004,
)
AMX = Costs(
    verify_s=((1, 0.080), (2, 0.095), (4, 0.133), (8, 0.180), (16, 0.253), (32, 0.45), (49, 0.7)),
    draft_step_s=0.018,
    draft_catchup_s=0.003,
)
T1 = 0.0072
GPU = Costs(
    verify_s=((1, T1), (2, 1.25 * T1), (4, 1.28 * T1), (8, 1.36 * T1), (16, 1.74 * T1)),
    draft_step_s=0.23 * T1,
    draft_catchup_s=0.003 * T1,
)
MACHINES = {"epyc": EPYC, "amx": AMX, "gpu": GPU}
# Verify costs the EPYC calibration recorded while a build kept both cores busy, over the truth
# of one token (issue 17: 79 ms for a 29 ms token, 183 ms for two, 434 ms for four...).
UNDER_LOAD = ((1, 79), (2, 183), (4, 434), (5, 257), (8, 177), (16, 300), (49, 800))
# One the same CPU recorded beside two busy loops (research/busy_calibration.py), over the truth of
# one token (35 ms): the target 92x too slow for one token and in no order after, the draft's
# step 2x and its catch-up 6.6x.
BESIDE_BUSY_LOOPS = ((1, 92), (2, 92), (3, 34), (4, 8), (6, 25), (8, 32), (12, 87), (49, 87))


def lies(true: Costs) -> dict[str, Costs]:
    one = true.verify(1)

    def scaled(factor: float, verify) -> Costs:
        return replace(
            true,
            verify_s=tuple(verify),
            draft_step_s=true.draft_step_s * factor,
            draft_catchup_s=true.draft_catchup_s * factor,
        )

    return {
        "flat": scaled(1.0, ((n, one) for n, _ in true.verify_s)),
        "under load": scaled(2.2, ((n, one * ms / 29) for n, ms in UNDER_LOAD)),
        "3x dear": scaled(3.0, ((n, 3 * s) for n, s in true.verify_s)),
        "3x cheap": scaled(1 / 3, ((n, s / 3) for n, s in true.verify_s)),
        "beside busy loops": replace(
            true,
            verify_s=tuple((n, one * times) for n, times in BESIDE_BUSY_LOOPS),
            draft_step_s=true.draft_step_s * 2,
            draft_catchup_s=true.draft_catchup_s * 6.6,
        ),
    }


def copying(n: int, rng: np.random.Generator) -> Trace:
    """An answer that copies its prompt in stretches of 40 tokens, between 12 of its own: the
    match grows along a copy, and what follows is right to the stretch's end."""
    match, offer, run = [0] * n, [0] * n, [0] * n
    for i in range(n):
        within = i % 52 - 12
        if within >= 0:
            match[i], offer[i], run[i] = min(2 + within, 64), 64, 40 - within
        elif rng.random() < 0.5:  # a coincidence, right a fifth of the time
            match[i], offer[i], run[i] = int(rng.integers(1, 3)), 64, int(rng.random() < 0.2)
    agrees = tuple(bool(x) for x in rng.random(n) < 0.6)
    return Trace(agrees, (0.9,) * n, tuple(match), tuple(offer), tuple(run), 64, "copying")


def prose(n: int, rng: np.random.Generator) -> Trace:
    """An answer that copies nothing: short matches, right a fifth of the time; a draft model
    right 70% of the time."""
    short = rng.random(n) < 0.5
    match = tuple(int(m) for m in np.where(short, rng.integers(1, 3, n), 0))
    run = tuple(int(r) for r in short & (rng.random(n) < 0.2))
    agrees = tuple(bool(x) for x in rng.random(n) < 0.7)
    return Trace(agrees, (0.9,) * n, match, (64,) * n, run, 64, "prose")


TRACES = {
    "draft model a=0.9": lambda rng: synthetic_trace(128, 0.9, rng, n_prompt=64),
    "copying": lambda rng: copying(128, rng),
    "prose": lambda rng: prose(128, rng),
    # A few tokens after a long prompt: a draft model taken for cheap catches up on all of it.
    "short answer": lambda rng: synthetic_trace(8, 0.8, rng, n_prompt=300),
}
SEEDS = range(6)


def time_of(trace: Trace, prior: Costs, true: Costs, seed: int) -> tuple[float, object]:
    controller = AdaptiveController(prior)
    result = simulate(trace, controller, MachineCosts(true, noise=0.05), seed=seed)
    return result.time_s, controller


LIES = ["flat", "under load", "3x dear", "3x cheap", "beside busy loops"]


@pytest.mark.parametrize("machine", MACHINES)
@pytest.mark.parametrize("lie", LIES)
def test_a_lying_calibration_costs_at_most_3_percent(machine, lie):
    """Over answers of every kind (6 of each), at most 3% more time than with the true costs;
    no kind more than 7% (the dearest case: a flat or busy calibration on the dear CPU, in an
    answer that copies in stretches of 40 tokens, where the verify costs are learnt during the
    first copy's ramp)."""
    true = MACHINES[machine]
    prior = lies(true)[lie]
    told = truth = 0.0
    for kind, make in TRACES.items():
        kind_told = kind_truth = 0.0
        for seed in SEEDS:
            trace = make(np.random.default_rng(seed))
            lied, controller = time_of(trace, prior, true, seed)
            kind_told += lied
            kind_truth += time_of(trace, true, true, seed)[0]
            # Recovered: what the target alone costs is known, whatever the calibration said.
            assert controller.live.plain() == pytest.approx(true.verify(1), rel=0.15)
        assert kind_told <= 1.07 * kind_truth, f"{kind}: {kind_told / kind_truth:.3f}x"
        told, truth = told + kind_told, truth + kind_truth
    assert told <= 1.03 * truth, f"{told / truth:.3f}x the time with the true costs"


@pytest.mark.parametrize("machine", ["epyc", "amx"])
def test_a_noisy_machine_does_not_stop_a_copy(machine):
    """The calibration is right, but each round's time varies by 12% (the sd of its log, as on
    the shared 2-core EPYC): one slow verify of a new size must not read as the curve's shape.
    Every copying answer keeps 95% of its speedup on a quiet machine. n-gram lookup alone: the
    copies are what is judged (the trace's draft model agrees 60% of the time, and how soon it
    is tried first is another matter)."""
    true = MACHINES[machine]

    def speedup(trace: Trace, machine: MachineCosts, seed: int) -> float:
        controller = AdaptiveController(true)
        return simulate(trace, controller, machine, seed=seed, draft_model=False).speedup

    for seed in range(12):
        trace = copying(128, np.random.default_rng(seed))
        quiet = speedup(trace, MachineCosts(true), seed)
        noisy = speedup(trace, MachineCosts(true, noise=0.12), seed)
        assert noisy >= 0.95 * quiet, seed


@pytest.mark.parametrize("lie", ["flat", "under load", "3x dear", "3x cheap"])
def test_the_verify_costs_are_right_within_a_few_rounds(lie):
    """Where rounds have been, the costs are the machine's after 12 rounds of copying."""
    trace = copying(128, np.random.default_rng(0))
    controller = AdaptiveController(lies(EPYC)[lie])
    result = simulate(trace, controller, MachineCosts(EPYC), max_tokens=60)
    assert len(result.rounds) >= 12
    sizes = {r.n_drafted + 1 for r in result.rounds}
    for n in sizes:
        assert controller.live.verify(n) == pytest.approx(EPYC.verify(n), rel=0.1), n


# What the default pair answered on the bundled prompts, recorded on the 2-core EPYC with the
# costs measured there (`research/policies.py record`): its batches step up to 6.8 tokens at 8 and
# stay near 9 up to 17, so a straight line through the small sizes makes long drafts look dear.
RECORDED = Path(__file__).resolve().parents[2] / "research/results/traces-q4km-epyc.json"


def test_a_calibration_whose_shape_is_not_trusted_still_finds_what_long_drafts_cost():
    """The recorded code edits, with the calibration measured beside two busy loops (doubtful,
    so the rounds' own line is the shape): probes of twice the largest batch seen, while a copy
    is accepted in full, keep 97% of the speedup the true costs give (the median over the edits
    and three seeds; 98.3% when written, 95.4% when the probe's odds were 1/2, the line alone
    78%: drafts of 1-3 through whole copies). Both ramp: a long copy drafts past the ramp only
    on a calibration whose shape holds (`test_controller`), which this one's does not."""
    recorded = json.loads(RECORDED.read_text())
    true = Costs.from_dict(recorded["costs"])
    prior = lies(true)["beside busy loops"]
    kept = []
    for data in recorded["traces"]:
        if data["category"] != "code-editing":
            continue
        trace = Trace.from_dict(data)
        for seed in range(3):
            machine = MachineCosts(true, noise=0.05)
            told = AdaptiveController(prior, long_copy=None)
            truth = AdaptiveController(true, long_copy=None)
            told_speedup = simulate(trace, told, machine, seed=seed).speedup
            kept.append(told_speedup / simulate(trace, truth, machine, seed=seed).speedup)
    assert len(kept) == 18
    assert statistics.median(kept) >= 0.97, f"{statistics.median(kept):.3f}"


# -- in the loop, on the fake backend -------------------------------------------------------

BASE, PER_TOKEN = 0.029, 0.0125  # the fake target: a batch of n books 29 + 12.5 (n - 1) ms
DRAFT_BASE = 0.012


def fake_costs() -> Costs:
    """What the fake backends book, as a calibration would measure it."""
    sizes = (1, 2, 4, 8, 16, 32, 49)
    return Costs(
        verify_s=tuple((n, BASE + PER_TOKEN * (n - 1)) for n in sizes),
        draft_step_s=DRAFT_BASE,
        draft_catchup_s=0.0004,
    )


def booked_time(prior: Costs, table: np.ndarray) -> tuple[float, list[int]]:
    """Generate 128 tokens greedily after a prompt that repeats itself, with the draft model and
    n-gram lookup; the time is what the fake decodes booked."""
    target = MarkovBackend(table, n_ctx=1024, costs=(BASE, PER_TOKEN))
    draft = MarkovBackend(np.roll(table, 1, axis=1) * 0.3 + table * 0.7, costs=(DRAFT_BASE, 0.0004))
    drafter = CombinedDrafter(DraftModelDrafter(draft))
    prompt = [3, 1, 4, 1, 5, 9, 2, 6] * 6
    events = list(
        generate(
            target,
            drafter,
            prompt,
            SamplingParams(),
            max_tokens=128,
            controller=AdaptiveController(prior),
        )
    )
    tokens = [e.token for e in events if not isinstance(e, (RoundEvent, FinishEvent))]
    return target.decode_seconds + draft.decode_seconds, tokens


@pytest.mark.parametrize("lie", ["flat", "under load", "3x dear", "3x cheap"])
def test_in_the_loop_a_lying_calibration_costs_at_most_3_percent(lie):
    total_lied = total_true = 0.0
    for seed in range(3):
        table = random_table(12, np.random.default_rng(seed), 0.1)
        truth, expected = booked_time(fake_costs(), table)
        lied, tokens = booked_time(lies(fake_costs())[lie], table)
        assert tokens == expected  # greedy: the same answer, whatever the costs
        total_true += truth
        total_lied += lied
    assert total_lied <= 1.03 * total_true, f"{total_lied / total_true:.3f}x"


# The same EPYC on another day (llama-bench: a batch of 16 for 6.5 tokens), and the calibration
# it recorded: right but for a batch of 8 timed at a dear moment (216 ms, llama-bench 176).
DEAR_BATCHES = Costs(
    verify_s=(
        (1, 0.035),
        (2, 0.059),
        (4, 0.103),
        (8, 0.176),
        (16, 0.257),
        (25, 0.412),
        (49, 0.652),
    ),
    draft_step_s=0.020,
    draft_catchup_s=0.005,
)
DEAR_AT_8 = replace(
    DEAR_BATCHES,
    verify_s=((1, 0.035), (2, 0.062), (4, 0.098), (6, 0.136), (8, 0.216), (12, 0.284), (49, 0.652)),
)


def test_a_calibration_dear_at_one_size_does_not_keep_a_copy_at_short_drafts():
    """Drafts grow past the size the calibration made look dear, to the long ones a copy pays
    best with: within 5% of the time with the true costs (by doubling from the sizes seen, the
    copy stayed at drafts of 4: 20% slower)."""
    told = truth = 0.0
    longest = 0
    for seed in SEEDS:
        trace = copying(128, np.random.default_rng(seed))
        controller = AdaptiveController(DEAR_AT_8)
        result = simulate(trace, controller, MachineCosts(DEAR_BATCHES, noise=0.05), seed=seed)
        told += result.time_s
        truth += time_of(trace, DEAR_BATCHES, DEAR_BATCHES, seed)[0]
        longest = max(longest, controller.live.verify_curve.largest)
    assert longest > 16
    assert told <= 1.05 * truth, f"{told / truth:.3f}x the time with the true costs"
