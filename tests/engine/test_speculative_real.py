"""The loop on real models: greedy speculative output equals the target alone, token for token,
on an F32 target; and after rejections each context equals a fresh evaluation."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from specllama.chat import Message
from specllama.engine.control import FixedLength
from specllama.engine.drafters import DraftModelDrafter, NgramDrafter, NoDrafter
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.llama.backend import LlamaBackend
from specllama.session import Engine, EngineConfig, prompt_tokens

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


def generate_tokens(target, drafter, prompt, k, pipelined=False):
    """The tokens, and a histogram of (accepted, drafted, drafted ahead last round, drafting
    ahead) of the rounds that drafted."""
    tokens, histogram = [], Counter()
    controller = FixedLength(k, pipelined=pipelined)
    for event in generate(
        target, drafter, prompt, GREEDY, max_tokens=MAX_TOKENS, controller=controller
    ):
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
        elif isinstance(event, RoundEvent) and event.n_drafted:
            histogram[(event.n_accepted, event.n_drafted, event.carried, event.n_ahead > 0)] += 1
    return tokens, histogram


@pytest.fixture(scope="module")
def target_alone(target, prompts):
    return [generate_tokens(target, NoDrafter(), p, 0)[0] for p in prompts]


@pytest.mark.parametrize("pipelined", [False, True], ids=["chain", "pipelined"])
@pytest.mark.parametrize(
    ("draft_fixture", "k"),
    [("smol_q4", 4), ("smol_draft", 2)],
    ids=["q4-draft-k4", "4-layer-draft-k2"],
)
def test_greedy_draft_model_output_equals_target_alone(
    request, target, prompts, target_alone, draft_fixture, k, pipelined
):
    histogram = Counter()
    with LlamaBackend(request.getfixturevalue(draft_fixture), n_ctx=1024) as draft_model:
        drafter = DraftModelDrafter(draft_model)
        for prompt, expected in zip(prompts, target_alone):
            tokens, rounds = generate_tokens(target, drafter, prompt, k, pipelined)
            assert tokens == expected
            histogram += rounds
    # Every path of the loop ran: a rejection at the first token, a partial accept, all accepted;
    # pipelined, drafts ahead dropped at rejections and (with the Q4 draft, right ~90% of the
    # time; the 4-layer one rarely gets 3 in a row) rounds whose draft was made ahead.
    assert any(accepted == 0 for accepted, *_ in histogram)
    assert any(0 < accepted < drafted for accepted, drafted, *_ in histogram)
    assert any(accepted == drafted for accepted, drafted, *_ in histogram)
    assert any(a < d and ahead for a, d, _, ahead in histogram) == pipelined
    carried = [(a, d) for a, d, made_ahead, _ in histogram if made_ahead]
    assert bool(carried) == (pipelined and draft_fixture == "smol_q4")
    if carried:
        assert any(a == d for a, d in carried) and any(a < d for a, d in carried)


def test_greedy_ngram_output_equals_target_alone(target, prompts, target_alone):
    n_drafted = 0
    for prompt, expected in zip(prompts, target_alone):
        tokens, rounds = generate_tokens(target, NgramDrafter(), prompt, 4)
        assert tokens == expected
        n_drafted += sum(drafted * count for (_, drafted, *_), count in rounds.items())
    assert n_drafted > 0


def assert_equals_a_fresh_evaluation(backend, path):
    """What `backend` predicts after one more token equals a fresh context fed everything it
    says it holds and that token (so its cache holds exactly its record)."""
    evaluated = list(backend.tokens)
    probe = evaluated[-1]
    continued = backend.decode([probe], [0])[0]
    backend.rollback(len(evaluated))
    with LlamaBackend(path, n_ctx=1024) as fresh:
        expected = fresh.decode([*evaluated, probe], [len(evaluated)])[0]
    np.testing.assert_allclose(continued, expected, atol=0.05)


@pytest.mark.parametrize("pipelined", [False, True], ids=["chain", "pipelined"])
def test_contexts_equal_a_fresh_evaluation_after_rejections(
    target, smol_f32, smol_draft, prompts, pipelined
):
    """Right after rejections (pipelined: with the draft model's context holding what it
    drafted past them, until its next sync), and once the generation ends, each context equals
    a fresh evaluation of its tokens; at the end they hold only what was kept."""
    with LlamaBackend(smol_draft, n_ctx=1024) as draft_model:
        drafter = DraftModelDrafter(draft_model)
        checked = dropped = 0
        context = list(prompts[3])
        controller = FixedLength(4, pipelined=pipelined)
        for event in generate(
            target, drafter, context, GREEDY, max_tokens=30, controller=controller
        ):
            if isinstance(event, TokenEvent):
                context.append(event.token)
            elif isinstance(event, RoundEvent) and event.n_accepted < event.n_drafted:
                dropped += event.n_ahead > 0
                if checked < 3:
                    assert_equals_a_fresh_evaluation(target, smol_f32)
                    assert_equals_a_fresh_evaluation(draft_model, smol_draft)
                    checked += 1
            elif isinstance(event, FinishEvent):
                break
        assert checked == 3
        assert (dropped > 0) == pipelined
        assert target.tokens == context[:-1]
        assert draft_model.tokens == context[: len(draft_model.tokens)]
        assert_equals_a_fresh_evaluation(target, smol_f32)
        assert_equals_a_fresh_evaluation(draft_model, smol_draft)


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


def test_pipelined_sampling_is_reproducible_with_a_seed(target, smol_q4, prompts):
    """A draft ahead stopped early draws less from its own generator, never from the loop's."""
    params = SamplingParams(temperature=0.8, top_k=40, top_p=0.95)
    with LlamaBackend(smol_q4, n_ctx=1024) as draft_model:
        drafter = DraftModelDrafter(draft_model)
        runs = []
        for _ in range(2):
            events = list(
                generate(
                    target,
                    drafter,
                    prompts[0],
                    params,
                    max_tokens=32,
                    controller=FixedLength(3, pipelined=True),
                    rng=np.random.default_rng(1234),
                )
            )
            runs.append([e.token for e in events if isinstance(e, TokenEvent)])
            assert any(e.carried for e in events if isinstance(e, RoundEvent))
    assert runs[0] == runs[1] and len(runs[0]) > 8
