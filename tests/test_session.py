"""The session's calibration, end to end on real models: a cached calibration that the rounds of
a run contradict is marked stale, and the next run measures again and says why."""

from __future__ import annotations

import pytest

from specllama.chat import Message
from specllama.engine.events import FinishEvent
from specllama.engine.sampling import SamplingParams
from specllama.policy import calibration
from specllama.policy.costs import Costs
from specllama.session import Engine, EngineConfig

pytestmark = pytest.mark.slow


def answer(engine: Engine, text: str, n: int) -> FinishEvent:
    prompt = engine.prompt_tokens([Message("user", text)])
    events = list(engine.generate(prompt, SamplingParams(), max_tokens=n))
    return events[-1]


def test_a_calibration_the_rounds_contradict_is_measured_again(smol_f32, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    config = EngineConfig(target=smol_f32, drafter="ngram", n_ctx=512, n_threads=2)
    with Engine(config) as engine:
        key = engine._calibration_key()
        # Cached as if measured on a machine ten times slower than this one.
        slow = Costs(verify_s=tuple((n, 10.0 * n) for n in (1, 2, 4, 8, 16)))
        calibration.save(key, slow)
        engine.calibrate()
        assert engine.calibration.source == "cache"
        finish = answer(engine, "Count from one to forty in words, one per line.", 64)
        assert finish.stats.n_rounds >= calibration.trust.ROUNDS_FOR_EVIDENCE
        [entry] = calibration.cached_calibrations()
        assert entry["stale"] and "the calibration says 10000.0 ms" in entry["stale"]
    notices: list[str] = []
    with Engine(config) as engine:
        engine.calibrate(on_measure=notices.append)
        assert engine.calibration.source == "measured"
        assert notices and notices[0].startswith("the cached one was stale: ")
        assert engine.costs.verify(1) < 5.0  # this machine's, not the ten-second one's
