"""The loop on real models: greedy speculative output equals the target alone, token for token,
on an F32 target; and after rejections each context equals a fresh evaluation."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from specllama.backend import LlamaBackend
from specllama.chat import Message
from specllama.controller import FixedLength
from specllama.drafters import DraftModelDrafter, NgramDrafter, NoDrafter
from specllama.sampling import SamplingParams
from specllama.session import Engine, EngineConfig, prompt_tokens
from specllama.speculative import FinishEvent, RoundEvent, TokenEvent, generate

pytestmark = pytest.mark.slow

GREEDY = SamplingParams()
PROMPTS = [
    "Write a haiku about speed.",
    "What is the capital of France?",
    "List three colours of the rainbow.",
    "Write a Python function that reverses a string.",
    "Explain recursion in one sentence.",
    "Translate 'good morning' into Spanish.",
    "Repeat after me: the quick brown fox jumps over the lazy dog.",
    "Give me a short tip for writing clean code.",
]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def target(smol_f32):
    with LlamaBackend(smol_f32, n_ctx=1024) as backend:
        yield backend


@pytest.fixture(scope="module")
def prompts(target):
    return [prompt_tokens(target, [Message("user", p)]) for p in PROMPTS]


def generate_tokens(target, drafter, prompt, k):
    tokens, histogram = [], Counter()
    for event in generate(
        target, drafter, prompt, GREEDY, max_tokens=MAX_TOKENS, controller=FixedLength(k)
    ):
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
        elif isinstance(event, RoundEvent) and event.n_drafted:
            histogram[(event.n_accepted, event.n_drafted)] += 1
    return tokens, histogram


@pytest.fixture(scope="module")
def target_alone(target, prompts):
    return [generate_tokens(target, NoDrafter(), p, 0)[0] for p in prompts]


@pytest.mark.parametrize(
    ("draft_fixture", "k"),
    [("smol_q4", 4), ("smol_draft", 2)],
    ids=["q4-draft-k4", "4-layer-draft-k2"],
)
def test_greedy_draft_model_output_equals_target_alone(
    request, target, prompts, target_alone, draft_fixture, k
):
    histogram = Counter()
    with LlamaBackend(request.getfixturevalue(draft_fixture), n_ctx=1024) as draft_model:
        drafter = DraftModelDrafter(draft_model)
        for prompt, expected in zip(prompts, target_alone):
            tokens, rounds = generate_tokens(target, drafter, prompt, k)
            assert tokens == expected
            histogram += rounds
    # Every path of the loop ran: a rejection at the first token, a partial accept, all accepted.
    assert any(accepted == 0 for accepted, _ in histogram)
    assert any(0 < accepted < drafted for accepted, drafted in histogram)
    assert any(accepted == drafted for accepted, drafted in histogram)


def test_greedy_ngram_output_equals_target_alone(target, prompts, target_alone):
    n_drafted = 0
    for prompt, expected in zip(prompts, target_alone):
        tokens, rounds = generate_tokens(target, NgramDrafter(), prompt, 4)
        assert tokens == expected
        n_drafted += sum(drafted * count for (_, drafted), count in rounds.items())
    assert n_drafted > 0


def test_contexts_equal_a_fresh_evaluation_after_rejections(target, smol_f32, smol_draft, prompts):
    """Compare what each context predicts next with a fresh context fed the same tokens."""
    with LlamaBackend(smol_draft, n_ctx=1024) as draft_model:
        drafter = DraftModelDrafter(draft_model)
        rejections = 0
        for event in generate(
            target, drafter, prompts[3], GREEDY, max_tokens=30, controller=FixedLength(4)
        ):
            if isinstance(event, RoundEvent):
                rejections += event.n_accepted < event.n_drafted
            if isinstance(event, FinishEvent):
                break
        assert rejections > 0
        for backend, path in ((target, smol_f32), (draft_model, smol_draft)):
            evaluated = list(backend.tokens)
            probe = evaluated[-1]
            continued = backend.decode([probe], [0])[0]
            with LlamaBackend(path, n_ctx=1024) as fresh:
                expected = fresh.decode([*evaluated, probe], [len(evaluated)])[0]
            backend.rollback(len(evaluated))
            np.testing.assert_allclose(continued, expected, atol=0.05)


def test_sampled_generation_is_reproducible_with_a_seed(smol_f32, smol_q4):
    # A fixed draft length: the adaptive controller's choices follow measured timings, and
    # which tokens get drafted changes how the random stream is consumed.
    config = EngineConfig(
        target=smol_f32, draft=smol_q4, drafter="model", n_ctx=512, adaptive=False
    )
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, seed=1234)
    with Engine(config) as engine:
        prompt = engine.prompt_tokens([Message("user", "Tell me a story about a robot.")])
        runs = [
            [
                e.token
                for e in engine.generate(prompt, params, max_tokens=24)
                if isinstance(e, TokenEvent)
            ]
            for _ in range(2)
        ]
    assert runs[0] == runs[1] and len(runs[0]) > 0
