"""Calibration: what it measures (on a fake model with scripted costs) and how it is cached."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from specllama.policy import calibration
from specllama.policy.costs import Costs, Learnt

pytestmark = pytest.mark.own_calibrations  # what is cached is the subject


class TimedFake:
    """Decoding n tokens 'takes' base + per_token * n seconds (added to decode_seconds)."""

    def __init__(self, base: float, per_token: float, n_vocab: int = 1000) -> None:
        self.base = base
        self.per_token = per_token
        self.n_vocab = n_vocab
        self.n_ctx = 4096
        self.decode_seconds = 0.0
        self.tokens: list[int] = []
        self.batches: list[int] = []

    def decode(self, tokens, logits_at=()):
        assert all(0 <= t < self.n_vocab for t in tokens)
        self.tokens.extend(tokens)
        self.batches.append(len(tokens))
        self.decode_seconds += self.base + self.per_token * len(tokens)

    def rollback(self, n_past: int) -> None:
        del self.tokens[n_past:]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_measure_times_every_verify_size_and_the_draft():
    target = TimedFake(0.010, 0.005)
    draft = TimedFake(0.002, 0.001)
    measured = calibration.measure(target, draft, sizes=(1, 2, 4, 8), repeats=2)
    assert measured.trusted, measured.problems
    costs = measured.costs
    assert [n for n, _ in costs.verify_s] == [1, 2, 4, 8]
    for n, seconds in costs.verify_s:
        assert seconds == pytest.approx(0.010 + 0.005 * n)
    assert costs.draft_step_s == pytest.approx(0.003)
    assert costs.draft_catchup_s == pytest.approx((0.002 + 0.001 * 32) / 32)
    assert target.tokens == [] and draft.tokens == []  # both contexts left empty
    assert max(target.batches) == calibration.CONTEXT_TOKENS
    assert costs.overlap == 1.0  # not measured side by side: no gain assumed


def test_measure_without_a_draft_model():
    costs = calibration.measure(TimedFake(0.01, 0.001), None, sizes=(2, 4), repeats=1).costs
    assert costs.verify_s[0][0] == 1  # batch 1 is always measured
    assert costs.draft_step_s == 0.0


def models(tmp_path: Path) -> tuple[Path, Path]:
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.write_bytes(b"GGUF target")
    draft.write_bytes(b"GGUF draft")
    return target, draft


def test_costs_are_cached_per_model_file_and_settings(tmp_path, cache):
    target, draft = models(tmp_path)
    key = calibration.calibration_key(target, draft, n_threads=2)
    measured = []

    def measure_once():
        return calibration.load_or_measure(
            key,
            TimedFake(0.01, 0.002),
            TimedFake(0.002, 0.001),
            on_measure=measured.append,
        ).costs

    first = measure_once()
    second = measure_once()
    assert measured == ["none cached"]  # the second call read the cache
    assert [s for _, s in second.verify_s] == pytest.approx([s for _, s in first.verify_s])
    assert len(list((cache / "calibration").glob("*.json"))) == 1

    # Other threads, or a changed model file, are another calibration.
    other = calibration.calibration_key(target, draft, n_threads=4)
    assert calibration.load(other) is None
    target.write_bytes(b"GGUF target, changed")
    os.utime(target, ns=(1, 1))
    assert calibration.load(calibration.calibration_key(target, draft, n_threads=2)) is None


def test_a_damaged_cache_file_is_measured_again(tmp_path, cache):
    target, _ = models(tmp_path)
    key = calibration.calibration_key(target, None, n_threads=2)
    path = calibration.save(key, Costs(verify_s=((1, 0.02),)))
    path.write_text("{not json", encoding="utf-8")
    assert calibration.load(key) is None
    assert calibration.cached_calibrations() == []


def test_cached_calibrations_report_for_doctor(tmp_path):
    target, draft = models(tmp_path)
    key = calibration.calibration_key(target, draft, n_threads=2)
    calibration.save(
        key,
        Costs(verify_s=((1, 0.04), (2, 0.06), (17, 0.3)), draft_step_s=0.02, draft_catchup_s=0.005),
    )
    [entry] = calibration.cached_calibrations()
    assert entry["target"] == str(target.resolve())
    assert entry["draft"] == str(draft.resolve())
    assert entry["n_threads"] == 2
    assert "target 1 token 40.0 ms" in entry["summary"]
    assert "draft step 20.0 ms" in entry["summary"]
    json.dumps(entry)  # JSON-ready for `doctor --json`


def test_the_key_names_the_rpc_workers_and_stays_unchanged_without_them(tmp_path) -> None:
    target = tmp_path / "t.gguf"
    target.write_bytes(b"GGUF")
    plain = calibration.calibration_key(target, None, n_threads=2)
    assert "rpc" not in plain  # keys measured before --rpc existed still match
    remote = calibration.calibration_key(
        target, None, n_threads=2, workers=[("10.0.0.2:50052", 24 * 10**9)]
    )
    assert remote["rpc"] == [{"endpoint": "10.0.0.2:50052", "memory_total": 24 * 10**9}]
    assert calibration._key_path(remote) != calibration._key_path(plain)


class SleepingFake(TimedFake):
    """Decoding really takes its time (a sleep, which lets other threads run, as llama_decode
    does); `lock`, when shared, makes two models take turns, as CPU cores full of one decode."""

    def __init__(self, base: float, per_token: float, lock=None) -> None:
        super().__init__(base, per_token)
        self.lock = lock or threading.Lock()

    def decode(self, tokens, logits_at=()):
        with self.lock:
            time.sleep(self.base + self.per_token * len(tokens))
        super().decode(tokens, logits_at)


@pytest.mark.parametrize(("shared", "expected"), [(False, 0.0), (True, 1.0)])
def test_overlap_is_measured_side_by_side(shared, expected):
    lock = threading.Lock() if shared else None
    target, draft = SleepingFake(0.010, 0.002, lock), SleepingFake(0.002, 0.0005, lock)
    costs = calibration.measure(target, draft, sizes=(1, 5), repeats=2, side_by_side=True).costs
    assert costs.overlap == pytest.approx(expected, abs=0.35)
    assert target.tokens == [] and draft.tokens == []


def test_overlap_of_decodes_that_take_no_time_is_taken_as_no_gain():
    assert calibration.measure_overlap(TimedFake(0.01, 0.0), TimedFake(0.01, 0.0)) == 1.0


# -- trusted or not -------------------------------------------------------------------------


class BusyFake(TimedFake):
    """A machine another program keeps busy for its first `busy_decodes` decodes: each takes
    1x to 4x as long, at random."""

    def __init__(self, base, per_token, busy_decodes, seed=0):
        super().__init__(base, per_token)
        self.busy_decodes = busy_decodes
        self.rng = np.random.default_rng(seed)

    def decode(self, tokens, logits_at=()):
        before = self.decode_seconds
        super().decode(tokens, logits_at)
        if len(self.batches) <= self.busy_decodes:
            self.decode_seconds = before + (self.decode_seconds - before) * self.rng.uniform(1, 4)


def test_a_measurement_on_a_busy_machine_fails_the_checks():
    measured = calibration.measure(BusyFake(0.01, 0.005, busy_decodes=10**6), None)
    assert not measured.trusted
    assert any("spread" in p for p in measured.problems)


@pytest.mark.parametrize(
    ("verify", "run", "expected"),
    [
        ({1: [0.03] * 3, 2: [0.05] * 3, 4: [0.07] * 3}, [0.03] * 16, []),
        (
            {1: [0.03] * 3, 4: [0.10] * 3, 8: [0.06] * 3},
            [0.03] * 16,
            ["verify(8) 60.0 ms < verify(4)"],
        ),
        ({1: [0.03] * 3, 2: [0.09] * 3}, [0.03] * 16, ["verify(2) costs 3.0 one-token decodes"]),
        ({1: [0.03] * 3, 2: [0.05] * 3}, [0.05] * 16, ["one-token decodes in a row take 50.0 ms"]),
        ({1: [0.03, 0.03, 0.05], 2: [0.05] * 3}, [0.03] * 16, ["verify(1) repeats spread 67%"]),
    ],
)
def test_each_check_names_what_is_wrong(verify, run, expected):
    found = calibration.trust.problems(verify, run)
    assert len(found) == len(expected)
    for problem, start in zip(found, expected):
        assert problem.startswith(start)


def test_a_failed_measurement_is_measured_again_and_only_a_good_one_is_cached(tmp_path, cache):
    target, _ = models(tmp_path)
    key = calibration.calibration_key(target, None, n_threads=2)
    # Busy for the first measurement only (it decodes 49 times).
    used = calibration.load_or_measure(key, BusyFake(0.01, 0.005, busy_decodes=49), None)
    assert used.source == "measured" and used.trusted and used.attempts == 2
    assert used.history and "spread" in used.history[0]
    assert calibration.load(key) is not None
    assert calibration.load_or_measure(key, TimedFake(0.01, 0.005), None).source == "cache"


def test_a_measurement_that_never_passes_is_used_but_not_cached(tmp_path, cache):
    target, _ = models(tmp_path)
    key = calibration.calibration_key(target, None, n_threads=2)
    used = calibration.load_or_measure(key, BusyFake(0.01, 0.005, busy_decodes=10**6), None)
    assert not used.trusted and used.attempts == calibration.ATTEMPTS
    assert "checks failed, not cached" in used.describe()
    assert calibration.load(key) is None


def test_one_cached_despite_failed_checks_says_so(tmp_path, cache):
    """research/busy_calibration.py caches a lying calibration on purpose; a benchmark that starts
    from it reports the checks it failed, not "checks passed"."""
    target, _ = models(tmp_path)
    key = calibration.calibration_key(target, None, n_threads=2)
    problems = ("verify(1) repeats spread 1547%", "verify(4) 512.4 ms < verify(3) 1353.8 ms")
    calibration.save(key, Costs(verify_s=((1, 0.18), (3, 1.35), (4, 0.51))), problems=problems)
    used = calibration.load_or_measure(key, TimedFake(0.01, 0.005), None)
    assert used.source == "cache" and not used.trusted and used.problems == problems
    assert used.describe().endswith("checks failed: " + "; ".join(problems))
    assert [c["problems"] for c in calibration.cached_calibrations()] == [list(problems)]
    # doctor says it as bench does
    assert [c["checks"] for c in calibration.cached_calibrations()] == [
        "checks failed: " + "; ".join(problems)
    ]
    calibration.save(key, Costs(verify_s=((1, 0.03),)))
    assert (
        calibration.load_or_measure(key, TimedFake(0.01, 0.005), None)
        .describe()
        .endswith("checks passed")
    )


def test_a_calibration_the_rounds_contradict_is_stale_and_measured_again(tmp_path, cache):
    target, _ = models(tmp_path)
    key = calibration.calibration_key(target, None, n_threads=2)
    costs = Costs(verify_s=((1, 0.079), (2, 0.183), (8, 0.177)))  # taken on a busy machine
    calibration.save(key, costs)
    rounds = {1: (0.028, 40), 2: (0.05, 3)}  # what the run's verifies took, and how many
    reason = calibration.trust.disagreement(costs, lambda n: rounds.get(n, (0.0, 0)))
    assert reason == "40 rounds took 28.0 ms to verify 1 token(s), the calibration says 79.0 ms"
    calibration.mark_stale(key, reason)
    assert calibration.load(key) is None
    [entry] = calibration.cached_calibrations()
    assert entry["stale"] == reason
    notices = []
    used = calibration.load_or_measure(
        key, TimedFake(0.028, 0.004), None, on_measure=notices.append
    )
    assert used.source == "measured" and notices == [f"the cached one was stale: {reason}"]
    assert calibration.load(key).verify(1) == pytest.approx(used.costs.verify(1))


def test_what_runs_learnt_is_kept_with_the_cached_costs_and_nowhere_else(tmp_path, cache):
    target, _ = models(tmp_path)
    key = calibration.calibration_key(target, None, n_threads=2)
    learnt = Learnt((("model", 0.006, 0.0),), draft_scale=1.5)
    calibration.save_learnt(key, learnt)  # nothing cached: nothing to keep it with
    assert calibration.cached_calibrations() == []
    costs = Costs(verify_s=((1, 0.03), (8, 0.12)))
    calibration.save(key, costs)
    calibration.save_learnt(key, learnt)
    assert calibration.load(key) == Costs(verify_s=costs.verify_s, learnt=learnt)
    assert "learnt by earlier runs: Python a round (model 6.00 ms), draft steps 1.50x" in (
        calibration.summary(calibration.load(key))
    )
    calibration.mark_stale(key, "the rounds said otherwise")
    calibration.save_learnt(key, Learnt((("model", 0.001, 0.0),)))
    [entry] = calibration.cached_calibrations()
    assert entry["stale"] == "the rounds said otherwise"
    saved = json.loads(next((cache / "calibration").glob("*.json")).read_text())
    assert saved["costs"]["learnt"]["overheads"] == {"model": [0.006, 0.0]}


def test_rounds_that_agree_or_are_too_few_contradict_nothing():
    costs = Costs(verify_s=((1, 0.03), (8, 0.12)))
    assert (
        calibration.trust.disagreement(costs, lambda n: (0.032, 100) if n == 1 else (0, 0)) is None
    )
    assert calibration.trust.disagreement(costs, lambda n: (0.09, 5) if n == 1 else (0, 0)) is None
