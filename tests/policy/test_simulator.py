"""The simulator replays the loop faithfully: a trace recorded from (fake) models and replayed
with a fixed controller gives the rounds the real loop gives on the same models."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from fakes import MarkovBackend, random_table

from specllama.engine.control import FixedLength
from specllama.engine.drafters import DraftModelDrafter, NgramDrafter
from specllama.engine.events import RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.policy.controller import AdaptiveController
from specllama.policy.costs import Costs
from specllama.policy.simulator import (
    MachineCosts,
    Trace,
    oracle_speedup,
    record_trace,
    simulate,
    synthetic_trace,
)

COSTS = Costs(verify_s=((1, 0.01), (8, 0.02)), draft_step_s=0.002, draft_catchup_s=0.001)


def real_rounds(target, drafter, prompt, k, max_tokens, pipelined=False):
    events = list(
        generate(
            target,
            drafter,
            prompt,
            SamplingParams(temperature=0.0),
            max_tokens=max_tokens,
            controller=FixedLength(k, pipelined=pipelined),
        )
    )
    rounds = [shape(e) for e in events if isinstance(e, RoundEvent)]
    return rounds, [e.token for e in events if isinstance(e, TokenEvent)]


def shape(event: RoundEvent) -> tuple[int, int, bool, bool]:
    """What the round did: drafted, accepted, drafted ahead last round, drafting ahead."""
    return event.n_drafted, event.n_accepted, event.carried, event.n_ahead > 0


@pytest.fixture
def models():
    rng = np.random.default_rng(11)
    table = random_table(12, rng, 0.1)
    draft = 0.5 * table + 0.5 * random_table(12, rng, 0.1)  # right some of the time
    return MarkovBackend(table), MarkovBackend(draft)


@pytest.mark.parametrize("pipelined", [False, True])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_draft_model_rounds_match_the_real_loop(models, k, pipelined):
    target, draft = models
    prompt = [0, 1, 2]
    trace, answer = record_trace(target, draft, prompt, max_tokens=80)
    assert len(trace) == len(answer) == 80
    expected, tokens = real_rounds(target, DraftModelDrafter(draft), prompt, k, 80, pipelined)
    assert tokens == answer
    replayed = simulate(
        trace, FixedLength(k, pipelined=pipelined), MachineCosts(COSTS), ngram=False
    )
    assert [shape(r) for r in replayed.rounds] == expected
    assert 0 < replayed.n_accepted < replayed.n_drafted  # both outcomes were exercised
    assert any(carried for *_, carried, _ in expected) == pipelined


def test_ngram_rounds_match_the_real_loop(models):
    target, _ = models
    prompt = [3, 4, 5, 6, 3, 4, 5, 6, 3]
    trace, _ = record_trace(target, None, prompt, max_tokens=60)
    expected, _ = real_rounds(target, NgramDrafter(), prompt, 4, 60)
    replayed = simulate(trace, FixedLength(4), MachineCosts(COSTS), draft_model=False)
    assert [shape(r) for r in replayed.rounds] == expected
    assert any(n for n, *_ in expected)


def test_the_clock_charges_what_each_round_costs():
    n = 10
    agrees = Trace((True,) * n, (0.9,) * n, (0,) * n, (0,) * n, (0,) * n, n_prompt=1)
    machine = MachineCosts(COSTS, overhead_plain_s=0.001, overhead_round_s=0.002)
    result = simulate(agrees, FixedLength(4), machine, ngram=False)
    # Two rounds of 4 accepted drafts and the target's own token.
    assert [(r.n_drafted, r.n_accepted) for r in result.rounds] == [(4, 4), (4, 4)]
    first = COSTS.draft_step_s + 3 * COSTS.draft_step_s + COSTS.verify(5) + 0.003
    assert result.rounds[0].wall_s == pytest.approx(first)
    assert result.target_alone_s == pytest.approx(n * (COSTS.verify(1) + 0.001))


def test_synthetic_traces_agree_at_the_rate_asked():
    trace = synthetic_trace(4000, 0.8, np.random.default_rng(0))
    assert np.mean(trace.model_agrees) == pytest.approx(0.8, abs=0.02)
    assert Trace.from_dict(trace.as_dict()) == trace


def test_the_clock_runs_a_draft_ahead_beside_the_verify():
    n = 15
    agrees = Trace((True,) * n, (0.9,) * n, (0,) * n, (0,) * n, (0,) * n, n_prompt=1)
    for overlap in (0.0, 0.5):
        machine = MachineCosts(replace(COSTS, overlap=overlap), overlap=overlap)
        result = simulate(agrees, FixedLength(4, pipelined=True), machine, ngram=False)
        first, second, third = result.rounds
        assert [r.carried for r in result.rounds] == [False, True, True]
        verify, ahead = COSTS.verify(5), 5 * COSTS.draft_step_s
        side_by_side = max(verify, ahead) + overlap * min(verify, ahead)
        assert first.wall_s == pytest.approx(4 * COSTS.draft_step_s + side_by_side)
        assert second.wall_s == pytest.approx(side_by_side)  # its draft was made ahead
        assert third.n_ahead == 0 and third.wall_s == pytest.approx(verify)


def copying(n: int, run: list[int]) -> Trace:
    """A trace where only n-gram lookup is ever right: `run[i]` tokens of its offer at i."""
    return Trace((False,) * n, (0.9,) * n, (3,) * n, tuple(run), tuple(run), n_prompt=1)


def test_the_oracle_drafts_shorter_than_the_copy_where_a_long_batch_is_dear():
    # A batch of 2 costs 1.1 tokens, of 3 costs 3: of a copy of 2 at the start, the best is one
    # draft (1.1), then the target alone (1), not both drafts at once (3).
    costs = Costs(verify_s=((1, 1.0), (2, 1.1), (3, 3.0)))
    trace = copying(3, [2, 0, 0])
    assert oracle_speedup(trace, MachineCosts(costs)) == pytest.approx(3 / 2.1)


def test_the_oracle_drafts_nothing_where_no_batch_is_cheaper_than_its_tokens():
    costs = Costs(verify_s=((1, 1.0), (8, 8.0)))
    trace = copying(8, [7, 6, 5, 4, 3, 2, 1, 0])
    assert oracle_speedup(trace, MachineCosts(costs, overhead_round_s=0.01)) == pytest.approx(1.0)


RECORDED = Path(__file__).resolve().parents[2] / "research/results/traces-q4km-epyc.json"


def test_no_policy_beats_the_oracle_on_recorded_answers():
    recorded = json.loads(RECORDED.read_text())
    true = Costs.from_dict(recorded["costs"])
    machine = MachineCosts(true, overhead_plain_s=0.0002, overhead_round_s=0.0004)
    gaps = []
    for data in recorded["traces"]:
        trace = Trace.from_dict(data)
        best = oracle_speedup(trace, machine)
        for controller in (AdaptiveController(true), FixedLength(2), FixedLength(8)):
            assert simulate(trace, controller, machine).speedup <= best + 1e-9, trace.name
        gaps.append(best / simulate(trace, AdaptiveController(true), machine).speedup)
    # It is a bound that some answers come close to, not one far above every policy.
    assert min(gaps) < 1.02
