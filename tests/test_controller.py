"""The adaptive controller's logic, on scripted acceptance and costs (no models), and in the
loop on the Markov-chain fake backend."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from fakes import MarkovBackend, random_table

from specllama.controller import (
    MODEL,
    NGRAM,
    AdaptiveController,
    Costs,
    FixedLength,
    expected_tokens,
    lane_of,
)
from specllama.drafters import CombinedDrafter, DraftModelDrafter, NgramDrafter, NoDrafter
from specllama.sampling import SamplingParams
from specllama.speculative import RoundEvent, TokenEvent, generate

# A GPU-like machine: verifying 8 tokens costs little more than one; the draft is cheap.
CHEAP_VERIFY = Costs(
    verify_s=((1, 0.020), (2, 0.021), (4, 0.023), (8, 0.026), (16, 0.032), (32, 0.045)),
    draft_step_s=0.003,
    draft_catchup_s=0.0005,
)
# This CPU with a quantised target: a batch of 5 costs ~3.8x one token, the draft ~0.6x.
EXPENSIVE_VERIFY = Costs(
    verify_s=((1, 0.032), (2, 0.059), (3, 0.084), (5, 0.123), (8, 0.218), (17, 0.308)),
    draft_step_s=0.019,
    draft_catchup_s=0.005,
)


def play(controller, accept, rounds, options=((MODEL, 0),), remaining=10_000, costs=None):
    """Run `rounds` rounds; `accept(k, i)` says how many of k drafted tokens round i keeps.
    Returns the (source, k) chosen each round."""
    costs = costs or controller.costs
    chosen = []
    for i in range(rounds):
        source, k = controller.choose(list(options), remaining)
        chosen.append((source, k))
        n_accepted = accept(k, i) if k else 0
        controller.observe(
            RoundEvent(
                n_drafted=k,
                n_accepted=min(n_accepted, k),
                draft_s=k * costs.draft_step_s if source == MODEL else 0.0,
                target_s=costs.verify(k + 1),
                source=source if k else "",
            )
        )
    return chosen


def all_accepted(k, i):
    return k


def none_accepted(k, i):
    return 0


# -- the model --------------------------------------------------------------------------------


def test_expected_tokens_is_the_geometric_sum():
    assert expected_tokens(0.0, 5) == pytest.approx(1.0)
    assert expected_tokens(1.0, 4) == pytest.approx(5.0)
    a = 0.7
    assert expected_tokens(a, 3) == pytest.approx(1 + a + a**2 + a**3)


def test_verify_cost_interpolates_and_extrapolates():
    costs = Costs(verify_s=((1, 1.0), (3, 2.0), (5, 4.0)))
    assert costs.verify(1) == 1.0
    assert costs.verify(2) == pytest.approx(1.5)
    assert costs.verify(4) == pytest.approx(3.0)
    assert costs.verify(7) == pytest.approx(6.0)  # the last slope continues
    with pytest.raises(ValueError):
        Costs(verify_s=((2, 1.0),))


def test_costs_round_trip_through_a_dict():
    again = Costs.from_dict(EXPENSIVE_VERIFY.as_dict())
    assert again.verify_s == EXPENSIVE_VERIFY.verify_s
    assert again.draft_step_s == EXPENSIVE_VERIFY.draft_step_s


def test_speedup_follows_the_documented_formula():
    c = AdaptiveController(CHEAP_VERIFY)
    a, k = 0.8, 4
    cost = k * CHEAP_VERIFY.draft_step_s + CHEAP_VERIFY.verify(k + 1)
    assert c.speedup(MODEL, a, k) == pytest.approx(
        expected_tokens(a, k) / cost * CHEAP_VERIFY.verify(1)
    )


# -- lengthen, shorten, switch off, probe again ------------------------------------------------


def test_lengthens_drafts_while_they_are_accepted():
    c = AdaptiveController(CHEAP_VERIFY, draft_max=8)
    chosen = play(c, all_accepted, 12)
    lengths = [k for _, k in chosen]
    assert all(source == MODEL for source, _ in chosen)
    assert lengths[-1] == 8  # the cap
    assert lengths == sorted(lengths)  # never shorter while everything is accepted
    assert c.acceptance(MODEL) > 0.9


def test_shortens_then_switches_off_when_drafts_are_rejected():
    c = AdaptiveController(CHEAP_VERIFY, draft_max=8, probe_after=16)
    play(c, all_accepted, 10)
    chosen = play(c, none_accepted, 30)
    lengths = [k for _, k in chosen]
    assert lengths[0] == 8
    first_off = lengths.index(0)
    assert 0 < first_off < 16
    assert lengths[:first_off] == sorted(lengths[:first_off], reverse=True)
    assert min(lengths[:first_off]) < 8  # it shortened before giving up
    assert all(k == 0 for k in lengths[first_off : first_off + 16])  # off during the pause


def test_probes_again_after_a_pause_and_backs_off_when_the_probe_fails():
    c = AdaptiveController(CHEAP_VERIFY, draft_max=8, probe_after=16)
    chosen = play(c, none_accepted, 200)
    drafted_rounds = [i for i, (_, k) in enumerate(chosen) if k]
    assert drafted_rounds[0] == 0  # it tries at first
    probes = [i for i in drafted_rounds if i > 0]
    assert len(probes) >= 3  # probes again, more than once
    gaps = np.diff(probes)
    assert all(g2 > g1 for g1, g2 in itertools.pairwise(gaps))  # pauses grow after each failure
    assert sum(k for _, k in chosen) < 40  # most rounds: the target alone


def test_a_successful_probe_turns_drafting_back_on():
    c = AdaptiveController(CHEAP_VERIFY, draft_max=8, probe_after=8)
    play(c, none_accepted, 30)  # off now
    chosen = play(c, all_accepted, 60)
    lengths = [k for _, k in chosen]
    first_on = next(i for i, k in enumerate(lengths) if k)
    assert first_on < 40
    assert all(k > 0 for k in lengths[first_on:])
    assert lengths[-1] == 8


def test_draft_model_that_cannot_pay_even_when_always_right_is_never_used():
    # Each draft step costs as much as a target token and verifying is not cheaper per token.
    hopeless = Costs(verify_s=((1, 0.03), (2, 0.06), (9, 0.27)), draft_step_s=0.03)
    c = AdaptiveController(hopeless, draft_max=8)
    chosen = play(c, all_accepted, 50)
    assert all(k == 0 for _, k in chosen)


def test_expensive_verification_needs_high_acceptance():
    c = AdaptiveController(EXPENSIVE_VERIFY, draft_max=4)
    # On the quantised CPU target, the draft model cannot pay even at 100% acceptance.
    assert c.best_length(MODEL, 1.0)[1] < 1.03
    # Free n-gram drafts pay only when nearly always right, and then long ones pay most.
    _, s_low = c.best_length("ngram6", 0.6)
    k_high, s_high = c.best_length("ngram6", 0.97)
    assert s_low < 1.0 < s_high
    assert k_high >= 8


def test_a_large_backlog_keeps_the_draft_model_off_near_the_end():
    c = AdaptiveController(CHEAP_VERIFY, draft_max=8)
    # 2000 tokens to catch up on the draft model, 5 tokens left: not worth it.
    assert c.choose([(MODEL, 2000)], remaining=5) == ("", 0)
    # The same backlog with a long answer ahead: worth a probe.
    source, k = c.choose([(MODEL, 2000)], remaining=5000)
    assert source == MODEL and k > 0


def test_confidence_threshold_is_the_cost_break_even():
    cheap = AdaptiveController(CHEAP_VERIFY).min_confidence
    dear = AdaptiveController(EXPENSIVE_VERIFY).min_confidence
    assert cheap is not None and dear is not None
    assert 0.3 <= cheap < 0.5 < dear <= 0.9


def test_prefers_the_source_with_the_better_expected_speedup():
    c = AdaptiveController(CHEAP_VERIFY, draft_max=4)
    options = [("ngram3", 0), (MODEL, 0)]
    # n-gram drafts always rejected, the model's always accepted: the model wins.
    chosen = []
    for _ in range(30):
        source, k = c.choose(options, 10_000)
        chosen.append(source)
        accepted = k if source == MODEL else 0
        c.observe(RoundEvent(k, accepted, 0.0, CHEAP_VERIFY.verify(k + 1), source if k else ""))
    assert chosen[-10:] == [MODEL] * 10


def test_ngram_drafts_grow_long_while_the_text_is_being_copied():
    c = AdaptiveController(EXPENSIVE_VERIFY, draft_max=4, ngram_max=48)
    chosen = play(c, all_accepted, 12, options=(("ngram8", 0),))
    lengths = [k for _, k in chosen]
    assert lengths[0] > 0
    assert lengths[-1] >= 16  # copying: long drafts


def test_learns_that_the_machine_got_slower():
    c = AdaptiveController(CHEAP_VERIFY)
    for _ in range(50):
        c.observe(RoundEvent(0, 0, 0.0, 2 * CHEAP_VERIFY.verify(1)))
    assert c.target_scale == pytest.approx(2.0, rel=0.05)


def test_fixed_length_offers_the_first_source_or_nothing():
    fixed = FixedLength(3)
    assert fixed.choose([(NGRAM, 0), (MODEL, 0)], 100) == (NGRAM, 3)
    assert fixed.choose([], 100) == ("", 0)
    assert FixedLength(0).choose([(MODEL, 0)], 100) == ("", 0)


# -- in the loop, on the fake backend -------------------------------------------------------


def run_loop(target, drafter, controller, prompt=(0, 1), max_tokens=60):
    events = list(
        generate(
            target,
            drafter,
            list(prompt),
            SamplingParams(temperature=0.0),
            max_tokens=max_tokens,
            controller=controller,
            rng=np.random.default_rng(0),
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
    assert max(r.n_drafted for r in good) == 8
    assert all(r.n_accepted == r.n_drafted for r in good)

    wrong = np.roll(table, 1, axis=1)  # always guesses the token next to the target's choice
    controller = AdaptiveController(CHEAP_VERIFY, probe_after=16)
    _, bad = run_loop(target, DraftModelDrafter(MarkovBackend(wrong)), controller, max_tokens=120)
    assert sum(r.n_accepted for r in bad) == 0
    drafted_rounds = sum(1 for r in bad if r.n_drafted)
    assert drafted_rounds < len(bad) / 4  # mostly the target alone


def test_round_events_name_their_source():
    table = random_table(8, np.random.default_rng(7), 0.3)
    target = MarkovBackend(table)
    drafter = CombinedDrafter(DraftModelDrafter(MarkovBackend(table)), NgramDrafter())
    _, rounds = run_loop(target, drafter, AdaptiveController(CHEAP_VERIFY), prompt=(0, 1, 2, 0, 1))
    assert {lane_of(r.source) for r in rounds} <= {MODEL, "ngram1", "ngram2", "ngram3", ""}
    assert any(r.source for r in rounds)


def test_ngram_matches_are_judged_by_their_length():
    assert lane_of("ngram1") == "ngram1"
    assert lane_of("ngram5") == "ngram4"
    assert lane_of("ngram9") == "ngram6"
    assert lane_of(MODEL) == MODEL
    c = AdaptiveController(EXPENSIVE_VERIFY)
    # On the expensive CPU, a 1-token match is not worth even a probe; a 6-token one is.
    assert c.choose([("ngram1", 0)], 1000) == ("", 0)
    source, k = c.choose([("ngram7", 0)], 1000)
    assert source == "ngram7" and k > 0
    # Each length learns on its own.
    c.observe(RoundEvent(k, k, 0.0, EXPENSIVE_VERIFY.verify(k + 1), "ngram7"))
    assert c.acceptance("ngram6") > c.acceptance("ngram1")


def test_ngram_drafter_offers_its_match_length():
    drafter = NgramDrafter(ngram_max=4)
    assert drafter.sources([1, 2, 3]) == []
    assert drafter.sources([1, 2, 3, 9, 1, 2, 3]) == [("ngram3", 0)]
    assert drafter.propose([1, 2, 3, 9, 1, 2, 3], 2, SamplingParams(0.0), None).tokens == [9, 1]
