"""Live figures while an answer streams, and the target-alone estimate behind "est." speedups."""

from __future__ import annotations

from specllama.engine.stats import LiveCounter, TargetRate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_live_counter_starts_its_clock_at_the_first_round():
    clock = Clock()
    live = LiveCounter("model", clock=clock)
    clock.now = 101.0  # the first round ends; it took 0.5 s of decodes
    live.on_round(4, 3, draft_s=0.2, target_s=0.3)
    for _ in range(4):
        live.on_token()
    clock.now = 101.5
    live.on_round(4, 4, draft_s=0.2, target_s=0.2)
    for _ in range(5):
        live.on_token()
    stats = live.snapshot("interrupted")
    assert stats.n_generated == 9
    assert stats.time_s == 1.0  # from 100.5 (101.0 - 0.5) to 101.5
    assert stats.tokens_per_s == 9.0
    assert (stats.n_drafted, stats.n_accepted, stats.n_rounds) == (8, 7, 2)
    assert stats.accepted_histogram == {3: 1, 4: 1}
    assert round(stats.target_s, 6) == 0.5 and round(stats.draft_s, 6) == 0.4
    assert stats.finish_reason == "interrupted"
    assert live.last_draft_length == 4


def test_target_rate_uses_only_one_token_rounds():
    rate = TargetRate()
    assert not rate.known and rate.speedup(10.0) is None
    rate.observe_round(4, 0.5)  # a batch of 5: not the target-alone cost
    assert not rate.known
    for seconds in (0.1, 0.3, 0.125):
        rate.observe_round(0, seconds)
    assert rate.tokens_per_s == 8.0  # the typical decode, not the luckiest one
    assert rate.speedup(12.0) == 1.5
