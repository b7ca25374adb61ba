"""The time left: estimated from the calibration before the first run, then corrected by the
runs done, on a fake clock; and the runner feeding it (with fake runs) to the progress display."""

from __future__ import annotations

from itertools import pairwise
from types import SimpleNamespace

import pytest

from specllama.bench import runner
from specllama.bench.configs import BenchConfig
from specllama.bench.prompts import BenchPrompt
from specllama.bench.report import TimeLeftColumn
from specllama.bench.runner import BenchResult, ExternalToolError
from specllama.bench.timing import Step, TimeLeft, describe_left, run_prior_s
from specllama.chat import Message
from specllama.policy.costs import Costs


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_shrinks_as_runs_take_what_was_expected():
    clock = FakeClock()
    timer = TimeLeft([Step(f"run {i}", 10.0) for i in range(4)], clock)
    assert timer.left_s() == 40.0  # before the first run: the calibration's word alone
    seen = []
    for i in range(4):
        timer.start(i)
        clock.now += 4.0
        seen.append(timer.left_s())  # part of the current run is done
        clock.now += 6.0
        timer.finish()
        seen.append(timer.left_s())
    assert seen == [36.0, 30.0, 26.0, 20.0, 16.0, 10.0, 6.0, 0.0]


def test_the_runs_done_correct_the_calibrations_estimate():
    clock = FakeClock()
    timer = TimeLeft([Step("a", 10.0), Step("b", 10.0), Step("c", 20.0)], clock)
    timer.start(0)
    clock.now += 15.0  # 1.5 times what the calibration said
    timer.finish()
    assert timer.left_s() == pytest.approx(1.5 * 30.0)
    timer.start(1)
    clock.now += 5.0  # now 20 s for 20 expected: back to the calibration's pace
    timer.finish()
    assert timer.left_s() == pytest.approx(20.0)


def test_each_tool_learns_its_own_pace():
    clock = FakeClock()
    steps = [Step("ours", 10.0), Step("theirs", 10.0, "llama.cpp"), Step("ours 2", 10.0),
             Step("theirs 2", 10.0, "llama.cpp")]  # fmt: skip
    timer = TimeLeft(steps, clock)
    timer.start(0)
    clock.now += 10.0
    timer.finish()
    timer.start(1)
    clock.now += 30.0  # llama.cpp loads its models every run: three times the estimate
    timer.finish()
    assert timer.left_s() == pytest.approx(10.0 + 30.0)


def test_without_a_calibration_the_estimate_waits_for_the_first_run():
    clock = FakeClock()
    timer = TimeLeft([Step("a", None), Step("b", None), Step("c", None)], clock)
    assert timer.left_s() is None
    assert describe_left(timer.left_s()) == "time left: estimating"
    timer.start(0)
    clock.now += 7.0
    timer.finish()
    assert timer.left_s() == pytest.approx(14.0)
    timer.skip(2)  # left out: neither waited for nor learnt from
    assert timer.left_s() == pytest.approx(7.0)


def test_the_progress_column_counts_the_time_left_down_during_a_run():
    clock = FakeClock()
    column = TimeLeftColumn(clock)
    task = SimpleNamespace(fields={"left_s": 130.4, "left_at": clock.now})
    assert column.render(task).plain == "about 2 min 10 s left"
    clock.now += 88.0
    assert column.render(task).plain == "about 42 s left"
    clock.now += 100.0  # a run longer than expected: no negative time
    assert column.render(task).plain == "about 0 s left"
    assert column.render(SimpleNamespace(fields={})).plain == "time left: estimating"


def test_a_runs_prior_is_its_tokens_at_the_targets_pace_plus_the_prefills():
    costs = Costs(((1, 0.1), (4, 0.2), (16, 0.4)), draft_step_s=0.05, draft_catchup_s=0.01)
    assert run_prior_s(costs, 10) == pytest.approx(1.0)
    # 32 prompt tokens at 0.4 s per 16 (the largest batch), the draft's at 0.01 s a token.
    assert run_prior_s(costs, 10, target_prefill=32, draft_prefill=32) == pytest.approx(2.12)
    assert run_prior_s(None, 10) is None


# -- the runner feeding the display -------------------------------------------------------------


class FailingTool:
    """Another tool's configuration whose second run crashes."""

    def __init__(self, clock: FakeClock) -> None:
        self.config = BenchConfig("other ngram", "ngram", None, False, tool="other")
        self.clock, self.calls = clock, 0

    def run(self, prompt, max_tokens):
        self.calls += 1
        self.clock.now += 10.0
        if self.calls == 2:
            raise ExternalToolError("killed by SIGSEGV")
        return {"n_generated": max_tokens, "tokens_per_s": 5.0, "n_drafted": 0, "n_accepted": 0}


def test_the_runner_reports_what_runs_and_the_time_left(monkeypatch):
    clock = FakeClock()
    prompts = [BenchPrompt(p, c, (Message("user", "x"),)) for p, c in (("p1", "qa"),
               ("p2", "chat"))]  # fmt: skip
    ours = [BenchConfig("target", "none", 0, False), BenchConfig("ngram:8", "ngram", 8, False)]
    tool = FailingTool(clock)

    def fake_run(self, config, tokens, max_tokens, constraint=None):
        clock.now += 10.0  # every run of ours takes what the calibration expects
        return [1, 2, 3], {"tokens_per_s": 10.0, "n_generated": max_tokens}

    monkeypatch.setattr(runner._Runner, "run", fake_run)
    slots = [*ours, tool.config]
    plan = runner.schedule(2, 2, 1, repeats=1, warmup=True, noise_check=True, tokens=[8, 8])
    costs = Costs(((1, 1.25), (16, 1.25)))  # 8 tokens: 10 s; a prompt's prefill: nothing much
    labelled = runner.plan_steps(plan, slots, prompts, [0, 0], costs, has_draft=False, repeats=1)
    assert [s.label for s in labelled[:4]] == [
        "warm-up · target",
        "warm-up · ngram:8",
        "qa · target · p1",
        "qa · ngram:8 · p1",
    ]
    assert labelled[5].label == "qa · target again, for the noise · p1"
    assert labelled[4].group == "other" and labelled[4].prior_s > labelled[3].prior_s
    steps = [runner.Step(s.label, 10.0, s.group) for s in labelled]
    result = BenchResult(settings={}, configs=slots, prompts=prompts)
    execution = runner._Execution(
        None, None, prompts, [[1], [2]], [None, None], slots, [tool], result
    )
    updates = []
    execution.go(plan, TimeLeft(steps, clock), updates.append)

    # warm-up (ours only: 2), then per prompt: 3 configurations and the noise check.
    assert [p.kind for p in plan] == ["warmup"] * 2 + ["run"] * 3 + ["noise"] + ["run"] * 3 + [
        "noise"
    ]
    assert [u.now for u in updates[:3]] == [s.label for s in labelled[:3]]
    lefts = [u.left_s for u in updates]
    assert lefts[0] == 100.0  # ten runs of 10 s, as the calibration says
    assert all(a > b for a, b in pairwise(lefts))
    assert updates[-1].done == updates[-1].total == len(plan) and lefts[-1] == 0.0
    # The other tool's second run failed: left out of the rest, in one line, the bench went on.
    assert result.notices == ["other ngram left out: killed by SIGSEGV"]
    assert tool.calls == 2
    assert [r.config for r in result.runs].count("target") == 4  # 2 prompts, noise check
    assert {(r.prompt_id, r.repeat) for r in result.runs if r.config == "target"} == {
        ("p1", 0),
        ("p1", 1),
        ("p2", 0),
        ("p2", 1),
    }
