"""The session's calibration, end to end on real models: a cached calibration that the rounds of
a run contradict is marked stale, and the next run measures again and says why."""

from __future__ import annotations

import pytest

from specllama.chat import Message
from specllama.engine.events import FinishEvent
from specllama.engine.sampling import SamplingParams
from specllama.policy import calibration
from specllama.policy.controller import CROSS_MODEL_PRIOR, MODEL, PRIORS
from specllama.policy.costs import Costs
from specllama.session import Engine, EngineConfig

pytestmark = [pytest.mark.slow, pytest.mark.own_calibrations]  # what is cached is checked


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


def test_a_run_starts_from_what_the_last_run_learnt_of_its_rounds(smol_f32, tmp_path, monkeypatch):
    """What a run's rounds cost beyond the decodes (Python time a round) is kept with the
    cached calibration, and the next run's controller starts from it."""
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    config = EngineConfig(target=smol_f32, drafter="ngram", n_ctx=512, n_threads=2)
    with Engine(config) as engine:
        answer(engine, "Count from one to forty in words, one per line.", 48)
        learnt = engine.controller.live.learnt()
        assert learnt is not None
        plain = engine.controller.live.overhead["plain"]
        assert plain.weight >= 4 and plain.base > 0  # it measured something: Python is not free
    with Engine(config) as engine:
        costs = engine.calibrate()
        assert engine.calibration.source == "cache"
        assert costs.learnt is not None
        start = engine.new_controller().live.overhead["plain"]
        assert start.base == pytest.approx(plain.base, rel=1e-3, abs=1e-7)


# -- memory and prediction: drafts change, the text never does ---------------------------------

POEM = "Write a short poem about the sea."


def tokens_of(engine: Engine, prompt: list[int], n: int, **options) -> tuple[list[int], object]:
    from specllama.engine.control import FixedLength
    from specllama.engine.events import TokenEvent

    events = list(
        engine.generate(
            prompt, SamplingParams(), max_tokens=n, controller=FixedLength(8), **options
        )
    )
    return [e.token for e in events if isinstance(e, TokenEvent)], events[-1].stats


def test_an_answer_given_before_is_drafted_from_memory_and_is_the_same(smol_f32):
    config = EngineConfig(target=smol_f32, drafter="ngram", n_ctx=512, n_threads=2)
    with Engine(config) as engine:
        prompt = engine.prompt_tokens([Message("user", POEM)])
        cold, cold_stats = tokens_of(engine, prompt, 48)
        warm, warm_stats = tokens_of(engine, prompt, 48)
        assert warm == cold
        # Remembered: nearly all of it drafted and kept, in a few rounds.
        assert warm_stats.n_accepted >= len(warm) - 8 > cold_stats.n_accepted
        assert warm_stats.n_rounds <= len(warm) // 6


def test_a_prediction_right_or_wrong_leaves_the_answer_as_it_was(smol_f32):
    config = EngineConfig(target=smol_f32, drafter="ngram", n_ctx=512, n_threads=2)
    with Engine(config) as engine:
        prompt = engine.prompt_tokens([Message("user", POEM)])
        expected, _ = tokens_of(engine, prompt, 48)
        engine.memory.load([])  # forget it: only the prediction may draft it now
        wrong = engine.target.tokenize(" completely unrelated words here", add_bos=False)
        edited = [*expected[:20], *wrong, *expected[24:]]
        for prediction, kept_most in ((expected, True), (edited, True), (wrong * 8, False)):
            engine.memory.load([])
            answer, stats = tokens_of(engine, prompt, 48, prediction=prediction)
            assert answer == expected
            accepted, rejected = stats.prediction_accepted, stats.prediction_rejected
            assert (accepted > 30) == kept_most and accepted <= len(expected)
            assert accepted + rejected > 0


def test_remembered_answers_survive_the_process_and_draft_the_next_one(smol_f32, tmp_path):
    config = EngineConfig(
        target=smol_f32, drafter="ngram", n_ctx=512, n_threads=2, remember=tmp_path / "mem"
    )
    with Engine(config) as engine:
        prompt = engine.prompt_tokens([Message("user", POEM)])
        first, _ = tokens_of(engine, prompt, 48)
    assert len(list((tmp_path / "mem").glob("memory-*.npy"))) == 1
    with Engine(config) as engine:
        again, stats = tokens_of(engine, prompt, 48)
        assert again == first and stats.n_accepted >= len(again) - 8
        assert not engine.notices


def test_a_seed_gives_the_same_text_with_the_memory_warm_and_any_prediction(smol_f32, smol_q4):
    from specllama.engine.events import TokenEvent

    config = EngineConfig(target=smol_f32, draft=smol_q4, drafter="model", n_ctx=512, n_threads=2)
    params = SamplingParams(temperature=0.8, seed=2024)
    with Engine(config) as engine:
        prompt = engine.prompt_tokens([Message("user", POEM)])

        def sampled(**options) -> list[int]:
            events = engine.generate(prompt, params, max_tokens=40, **options)
            return [e.token for e in events if isinstance(e, TokenEvent)]

        alone = sampled(drafter=engine.make_drafter("none"))
        assert len(engine.memory) > len(prompt)  # remembered: the rest draft from it too
        assert sampled() == alone  # the adaptive default, recalling the answer
        other = engine.target.tokenize(" the waves are made of glass", add_bos=False)
        assert sampled(prediction=other * 6) == alone
        assert sampled(prediction=alone) == alone


# -- how many slots a server runs by default -----------------------------------------------------


def test_a_server_runs_four_slots_on_a_cpu_fewer_where_memory_is_short(smol_f32, monkeypatch):
    from types import SimpleNamespace

    from specllama.session import DEFAULT_SLOTS, auto_slots

    config = EngineConfig(target=smol_f32, drafter="ngram", n_ctx=4096, n_seq=None)
    per_slot = 4096 * 23040  # SmolLM2's 30 layers x 3 KV heads x (64 + 64) x 2 bytes a token
    for free, slots in [(1 << 40, DEFAULT_SLOTS), (4 * 2 * per_slot, 2), (0, 1)]:
        memory = SimpleNamespace(available=free)
        monkeypatch.setattr("psutil.virtual_memory", lambda memory=memory: memory)
        assert auto_slots(config) == slots
    mtp = EngineConfig(target=smol_f32, drafter="mtp", n_ctx=4096, n_seq=None)
    assert auto_slots(mtp) == 1  # a draft head follows one sequence


def test_a_recurrent_target_serves_one_slot_unless_more_are_asked_for(qwen35_mtp):
    from specllama.errors import UsageError

    config = EngineConfig(target=qwen35_mtp, drafter="ngram", n_ctx=512, n_seq=None)
    with Engine(config) as engine:
        assert engine.n_seq == 1 and engine.target.n_ctx == 512
    with pytest.raises(UsageError, match="recurrent layers"):
        Engine(EngineConfig(target=qwen35_mtp, drafter="ngram", n_ctx=512, n_seq=2))


@pytest.mark.slow
def test_preserved_markers_that_are_control_tokens_are_written_as_text(smol_q4):
    """SmolLM2's `<|im_start|>` is a control token: written as nothing, unless preserved."""
    config = EngineConfig(target=smol_q4, drafter="none", n_ctx=256, n_threads=2)
    with Engine(config) as engine:
        tokens = engine.target.tokenize("<|im_start|>hi<|im_end|>", add_bos=False, special=True)
        assert len(tokens) == 3  # the two markers are one token each

        def written(stream) -> str:
            return "".join(stream.feed(t) for t in tokens) + stream.flush()

        assert written(engine.target_text_stream()) == "hi"
        preserved = engine.target_text_stream(["<|im_start|>", "<think>", "two words"])
        assert written(preserved) == "<|im_start|>hi"  # only what was asked, one token each
        assert engine.marker_tokens(["<|im_start|>", "<think>"]) == {tokens[0]}


@pytest.mark.parametrize("draft, prior", [("smol_q4", PRIORS[MODEL]), ("smol_bad_vocab", None)])
def test_a_draft_across_tokenizers_starts_from_its_own_prior(
    smol_f32, draft, prior, request, tmp_path, monkeypatch
):
    """The adaptive controller of a pair whose draft drafts across tokenizers starts from the
    lower prior measured for such drafts; a same-vocabulary pair from the draft model's."""
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    config = EngineConfig(
        target=smol_f32, draft=request.getfixturevalue(draft), n_ctx=512, n_threads=2
    )
    with Engine(config) as engine:
        assert bool(engine.across_tokenizers) == (prior is None)
        costs = Costs(verify_s=((1, 0.01), (2, 0.012), (4, 0.015)), draft_step_s=0.002)
        calibration.save(engine._calibration_key(), costs)  # nothing to measure
        controller = engine.new_controller(adaptive=True)
        assert controller.acceptance("model") == pytest.approx(prior or CROSS_MODEL_PRIOR)
