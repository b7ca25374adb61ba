"""The cost model: measured costs, and their correction by what rounds really cost."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specllama.engine.control import MODEL, NGRAM, PLAIN, kind_of
from specllama.policy.costs import PIPELINED, Costs, Learnt, LiveCosts, expected_tokens

COSTS = Costs(
    verify_s=((1, 0.020), (2, 0.021), (4, 0.023), (8, 0.026), (16, 0.032)),
    draft_step_s=0.003,
    draft_catchup_s=0.0005,
)


def test_expected_tokens_is_the_geometric_sum():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_verify_cost_interpolates_and_extrapolates():
    assert COSTS.verify(1) == 0.020
    assert COSTS.verify(3) == pytest.approx(0.022)
    assert COSTS.verify(24) == pytest.approx(0.032 + (0.032 - 0.026) / 8 * 8)


def test_costs_round_trip_through_a_dict():
    assert Costs.from_dict(COSTS.as_dict()) == COSTS


def test_what_runs_learnt_round_trips_with_the_costs():
    learnt = Learnt(((MODEL, 0.006, 0.0001), (PLAIN, 0.0002, 0.0)), draft_scale=1.55)
    costs = replace(COSTS, learnt=learnt)
    assert Costs.from_dict(costs.as_dict()) == costs


def test_a_run_starts_from_what_the_last_run_learnt_and_moves_off_it():
    """Python time a round and the draft step's scale, as a run on this machine found them
    (`Learnt`), are where the next run starts; its own rounds take over within a dozen."""
    learnt = Learnt(((MODEL, 0.006, 0.0), (NGRAM, 0.004, 0.0)), draft_scale=1.5)
    live = LiveCosts(replace(COSTS, learnt=learnt))
    assert live.round(MODEL, 3) == pytest.approx(3 * 0.0045 + COSTS.verify(4) + 0.006, rel=1e-3)
    assert live.round(NGRAM, 3) == pytest.approx(COSTS.verify(4) + 0.004, rel=1e-3)
    assert live.plain() == pytest.approx(COSTS.verify(1))  # nothing learnt of plain rounds
    for _ in range(24):  # this machine now: no Python to speak of, draft steps as timed
        live.learn(MODEL, 3, 3, 3 * 0.003, COSTS.verify(4), 3 * 0.003 + COSTS.verify(4))
    assert live.overhead[MODEL](4) < 0.0005
    assert live.draft_scale == pytest.approx(1.0, rel=0.1)


def test_what_a_run_learnt_is_given_once_it_has_seen_enough_rounds():
    live = LiveCosts(COSTS)
    assert live.learnt() is None
    for _ in range(2):
        live.learn(NGRAM, 3, 0, 0.0, COSTS.verify(4), COSTS.verify(4) + 0.002)
    assert live.learnt() is None  # two rounds say too little
    for _ in range(10):
        live.learn(NGRAM, 3, 0, 0.0, COSTS.verify(4), COSTS.verify(4) + 0.002)
        live.learn(MODEL, 2, 2, 2 * 0.0045, COSTS.verify(3), 2 * 0.0045 + COSTS.verify(3))
    learnt = live.learnt()
    assert learnt is not None
    [(_, base, per_row)] = [o for o in learnt.overheads if o[0] == NGRAM]
    assert base + 4 * per_row == pytest.approx(0.002, rel=0.05)
    assert learnt.draft_scale == pytest.approx(1.5, rel=0.02)


def test_kind_of_a_source():
    assert [kind_of(s) for s in ("", MODEL, "ngram7")] == [PLAIN, MODEL, NGRAM]


def test_a_round_costs_its_drafts_its_verify_and_its_python():
    live = LiveCosts(COSTS)
    assert live.round(MODEL, 3) == pytest.approx(3 * 0.003 + COSTS.verify(4))
    assert live.round(NGRAM, 3) == pytest.approx(COSTS.verify(4))
    assert live.round(MODEL, 0) == live.plain() == pytest.approx(0.020)


@pytest.mark.parametrize("price", [None, (0.030, 0.028), (0.030, float("inf"))])
def test_a_tables_round_costs_at_once_are_each_rounds_own(price):
    live = LiveCosts(COSTS)
    for k in (1, 8, 2, 16, 4) * 5:  # learnt overheads and a draft scale, not the defaults
        python = 0.001 + 0.0002 * (k + 1)
        live.learn(MODEL, k, k, k * 0.004, 1.2 * COSTS.verify(k + 1), 0.1 + python)
        live.learn(NGRAM, k, 0, 0.0, COSTS.verify(k + 1), COSTS.verify(k + 1) + 2 * python)
    live.in_batch(price)
    for kind in (MODEL, NGRAM, PLAIN):
        assert live.rounds(kind, 0).tolist() == [live.round(kind, 0)]
        each = [live.round(kind, k) for k in range(40)]  # past the curve's largest batch too
        assert live.rounds(kind, 39).tolist() == each


def test_learns_that_the_machine_got_slower():
    live = LiveCosts(COSTS)
    for _ in range(60):
        live.learn(PLAIN, 0, 0, 0.0, 2 * COSTS.verify(1), 2 * COSTS.verify(1))
    assert live.plain() == pytest.approx(0.040, rel=0.02)
    # Only one-token rounds were seen: every size takes their ratio.
    assert live.verify(8) == pytest.approx(2 * COSTS.verify(8), rel=0.02)


def test_learns_a_slower_draft_step_only_from_routine_rounds():
    live = LiveCosts(COSTS)
    for _ in range(60):
        live.learn(MODEL, 4, 0, 1.0, COSTS.verify(5), 1.1)  # a catch-up round: not a step
    assert live.draft_scale == 1.0
    for _ in range(60):
        live.learn(MODEL, 4, 4, 4 * 0.006, COSTS.verify(5), 4 * 0.006 + COSTS.verify(5))
    assert live.draft_step() == pytest.approx(0.006, rel=0.02)


def test_python_time_per_round_and_per_row_is_fitted():
    live = LiveCosts(COSTS)
    for k in (1, 8, 2, 16, 4) * 20:  # 1 ms a round plus 0.2 ms per verified row
        python = 0.001 + 0.0002 * (k + 1)
        live.learn(NGRAM, k, 0, 0.0, COSTS.verify(k + 1), COSTS.verify(k + 1) + python)
    assert live.overhead[NGRAM].base == pytest.approx(0.001, rel=0.05)
    assert live.overhead[NGRAM].per_row == pytest.approx(0.0002, rel=0.05)
    assert live.round(NGRAM, 8) == pytest.approx(COSTS.verify(9) + 0.001 + 0.0018, rel=0.01)


def test_one_draft_length_alone_is_read_as_a_cost_per_round():
    live = LiveCosts(COSTS)
    for _ in range(40):  # always k = 4, 5 ms of Python: no way to tell rows from rounds
        live.learn(MODEL, 4, 4, 4 * 0.003, COSTS.verify(5), 4 * 0.003 + COSTS.verify(5) + 0.005)
    assert live.overhead[MODEL](5) == pytest.approx(0.005, rel=0.05)
    assert live.overhead[MODEL].per_row < 0.2 * live.overhead[MODEL].base


def test_tables_are_redone_only_when_the_costs_move():
    live = LiveCosts(COSTS)
    live.learn(PLAIN, 0, 0, 0.0, COSTS.verify(1), COSTS.verify(1))
    assert live.version == 0
    for _ in range(10):
        live.learn(PLAIN, 0, 0, 0.0, 1.5 * COSTS.verify(1), 1.5 * COSTS.verify(1))
    assert live.version > 0


# -- pipelined drafting -----------------------------------------------------------------------


def test_a_pipelined_round_costs_the_slower_of_verify_and_draft_ahead_when_it_survives():
    parallel = LiveCosts(replace(COSTS, overlap=0.0))
    v5, ahead = COSTS.verify(5), 5 * 0.003
    # Always surviving: the next draft is made beside the verify, none on the clock.
    assert parallel.pipelined(4, 1.0) == pytest.approx(max(v5, ahead))
    # Never surviving: a fresh draft every round, and the verify (the draft ahead is stopped).
    assert parallel.pipelined(4, 0.0) == pytest.approx(v5 + 4 * 0.003)
    in_turn = LiveCosts(COSTS)  # overlap 1, as measured nowhere: no gain, ever
    assert in_turn.pipelined(4, 1.0) == pytest.approx(v5 + ahead)
    assert in_turn.pipelined(4, 1.0) > in_turn.round(MODEL, 4)


def test_learns_how_the_verify_and_the_draft_ahead_share_the_machine():
    live = LiveCosts(COSTS)  # starts at overlap 1
    v5, ahead = COSTS.verify(5), 5 * 0.003
    for _ in range(60):  # they ran side by side in max + 0.2 min
        span = max(v5, ahead) + 0.2 * min(v5, ahead)
        live.learn_pipelined(4, 5, 0.0, span, span + 0.0005)
    assert live.overlap == pytest.approx(0.2, abs=0.01)
    assert live.overhead[PIPELINED](5) == pytest.approx(0.0005, rel=0.05)
    assert live.version > 0  # the controller's tables are redone
