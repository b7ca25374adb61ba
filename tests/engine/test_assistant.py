"""Speculation with Gemma 4's assistant drafter (its own GGUF, architecture gemma4-assistant), on
synthetic models whose behaviour is known by construction (tests/gemma4_models.py): a gemma4
target whose greedy text follows a fixed permutation of the vocabulary, and assistants that read
its last row and its KV cache, right where their own map agrees with the target's."""

from __future__ import annotations

import gemma4_models
import head_models
import numpy as np
import pytest

from specllama.engine.assistant import AssistantDrafter
from specllama.engine.control import FixedLength
from specllama.engine.drafters import CombinedDrafter, NoDrafter
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.errors import UsageError
from specllama.llama.assistant import AssistantHead
from specllama.llama.backend import LlamaBackend
from specllama.policy.controller import AdaptiveController
from specllama.policy.costs import Costs

pytestmark = pytest.mark.slow

GREEDY = SamplingParams()
PROMPT = [1000, 2000, 3000]


def run(target, drafter, k, params=GREEDY, prompt=PROMPT, n=64, controller=None):
    """(tokens, rounds as (drafted, accepted), stats)."""
    tokens, rounds, stats = [], [], None
    controller = controller or FixedLength(k)
    for event in generate(target, drafter, prompt, params, max_tokens=n, controller=controller):
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
        elif isinstance(event, RoundEvent) and event.n_drafted:
            rounds.append((event.n_drafted, event.n_accepted))
        elif isinstance(event, FinishEvent):
            stats = event.stats
    return tokens, rounds, stats


def _maps(acceptance: float) -> tuple[np.ndarray, np.ndarray]:
    import model_factory

    mapping = head_models.next_token_map(model_factory.smollm2_q4())
    return mapping, head_models.partly_right(mapping, acceptance)


@pytest.fixture(scope="module")
def target():
    with LlamaBackend(gemma4_models.tiny_target(), n_ctx=1024) as backend:
        head = AssistantHead(backend, gemma4_models.tiny_assistant(0.8))
        yield backend, head
        head.close()


@pytest.fixture(scope="module")
def alone(target):
    return run(target[0], NoDrafter(), 0)[0]


def test_the_target_follows_its_map(alone):
    mapping, _ = _maps(0.8)
    expected, token = [], PROMPT[-1]
    for _ in range(len(alone)):
        token = int(mapping[token])
        expected.append(token)
    assert alone == expected


def test_a_draft_is_one_decode_a_token_and_nothing_to_catch_up(target):
    """The guess after x is head_next(x), then head_next of that...: the construction, read
    from the assistant's logits; a long text the target has evaluated costs the assistant
    nothing (it reads the target's cache)."""
    backend, head = target
    _, head_map = _maps(0.8)
    context = [*PROMPT, *range(6000, 6100), 4000]
    backend.sync(context[:-1])
    decoded = head.n_decoded
    tokens = AssistantDrafter(head).propose(context, 4, GREEDY).tokens
    assert head.n_decoded - decoded == len(tokens) == 4
    expected, token = [], context[-1]
    for _ in range(4):
        token = int(head_map[token])
        expected.append(token)
    assert tokens == expected
    assert backend.n_past == len(context) - 1, "the target holds the text before the draft"


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_assistant_greedy_is_the_target_alone(target, alone, k):
    backend, head = target
    tokens, rounds, _ = run(backend, AssistantDrafter(head), k)
    assert tokens == alone
    assert any(a < d for d, a in rounds), "some drafts were rejected: rollback ran"
    assert any(a == d for d, a in rounds), "some were accepted in full"


def test_the_default_policy_with_the_assistant_is_the_target_alone(target, alone):
    backend, head = target
    controller = AdaptiveController(Costs.guess(), draft_max=8)
    drafter = CombinedDrafter(AssistantDrafter(head))
    tokens, _, _ = run(backend, drafter, 0, controller=controller)
    assert tokens == alone
    assert "assistant" in controller.sources, "the assistant was weighed"


@pytest.mark.parametrize("seed", [1, 2])
def test_a_seed_gives_the_target_alone_text(target, seed):
    backend, head = target
    params = SamplingParams(temperature=1.5, seed=seed)
    alone = run(backend, NoDrafter(), 0, params)[0]
    assert alone != run(backend, NoDrafter(), 0, GREEDY)[0], "the sampling chose something"
    for k in (1, 4):
        assert run(backend, AssistantDrafter(head), k, params)[0] == alone


@pytest.mark.parametrize("a", [1.0, 0.8, 0.5])
def test_assistant_acceptance_is_the_constructed_one(a):
    """Drafts of 3: each round keeps the guesses up to the first token where the assistant's
    map and the target's part. Measured = counted from the maps, and the first token's rate
    near a."""
    mapping, head_map = _maps(a)
    with LlamaBackend(gemma4_models.tiny_target(), n_ctx=2048) as backend:
        head = AssistantHead(backend, gemma4_models.tiny_assistant(a))
        tokens, rounds, _ = run(backend, AssistantDrafter(head), 3, n=400)
        head.close()
    text = [PROMPT[-1], *tokens]
    position, expected = 0, []
    while len(expected) < len(rounds):
        k = min(3, len(text) - 1 - position - 1)  # the loop drafts no further than the budget
        accepted = 0
        while (
            accepted < k
            and head_map[text[position + accepted]] == mapping[text[position + accepted]]
        ):
            accepted += 1
        expected.append((k, accepted))
        position += accepted + 1
    assert rounds == expected
    first = sum(acc > 0 for _, acc in rounds) / len(rounds)
    assert abs(first - a) < 0.06


@pytest.mark.parametrize("construction", ["hidden", "kv"])
def test_the_assistant_reads_the_target_row_and_cache_of_the_token_before(construction):
    """An assistant that drafts from the target's row ("hidden") or from the target's KV cache
    ("kv": a window that sees the position before the draft's alone) is right on the first
    token of every draft but the first one (the prompt's tokens do not follow the map) exactly
    when the row or cache cell it read is the target's of the token before: one position off
    would lose them all. Its further tokens are wrong by construction."""
    with LlamaBackend(gemma4_models.tiny_target(), n_ctx=1024) as backend:
        head = AssistantHead(backend, gemma4_models.tiny_assistant(1.0, construction=construction))
        alone = run(backend, NoDrafter(), 0)[0]
        tokens, rounds, _ = run(backend, AssistantDrafter(head), 3)
        assert tokens == alone
        assert rounds[0][1] == 0 and all(acc == 1 for _, acc in rounds[1:]), rounds
        if construction == "kv":
            # A cell the target kept past the text (a rejected draft, here a stray token) would
            # be read too: the assistant drafts after the text the target holds exactly.
            context = [*PROMPT, *alone[:10]]
            backend.sync([*context[:-1], 7777])
            first = AssistantDrafter(head).propose(context, 1, GREEDY).tokens
            assert first == alone[10:11]
            assert backend.tokens == context[:-1]
        head.close()


def test_chat_turns_and_a_cancelled_answer_leave_the_caches_right(target, alone):
    backend, head = target
    long_prompt = [*PROMPT, *range(6000, 6200)]
    first, _, _ = run(backend, AssistantDrafter(head), 4, prompt=long_prompt, n=20)
    second_prompt = [*long_prompt, *first, 4000, 5000]
    expected = run(backend, NoDrafter(), 0, prompt=second_prompt, n=30)[0]
    run(backend, AssistantDrafter(head), 4, prompt=long_prompt, n=20)  # the first turn again
    decoded = head.n_decoded
    tokens, rounds, _ = run(backend, AssistantDrafter(head), 4, prompt=second_prompt, n=30)
    assert tokens == expected
    # The assistant evaluates its drafts and nothing else: not the long prompt, nor the turn.
    assert head.n_decoded - decoded == sum(d for d, _ in rounds)
    events = generate(backend, AssistantDrafter(head), PROMPT, GREEDY, max_tokens=64,
                      controller=FixedLength(4))  # fmt: skip
    got = []
    for event in events:
        if isinstance(event, TokenEvent):
            got.append(event.token)
            if len(got) == 7:
                break
    events.close()  # the consumer went away mid-answer
    assert got == alone[:7]
    assert backend.tokens == [*PROMPT, *got][:-1], "the target holds only what was emitted"
    assert run(backend, AssistantDrafter(head), 3)[0] == alone


def test_an_assistant_made_after_the_target_ran_drafts_right():
    """llama.cpp resets the cache the two share when the assistant's context is made: the
    target starts over instead of keeping positions it no longer has."""
    with LlamaBackend(gemma4_models.tiny_target(), n_ctx=1024) as backend:
        alone = run(backend, NoDrafter(), 0, n=32)[0]
        head = AssistantHead(backend, gemma4_models.tiny_assistant(1.0, construction="kv"))
        assert backend.n_past == 0
        tokens, rounds, _ = run(backend, AssistantDrafter(head), 1, n=32)
        head.close()
    assert tokens == alone
    assert all(acc == 1 for _, acc in rounds[1:]), rounds


# -- through the session: --draft ASSISTANT.gguf ------------------------------------------------


def test_an_assistant_file_named_as_draft_drafts_as_the_assistant_it_is(alone):
    from specllama.session import Engine, EngineConfig, default_drafter

    target, head = gemma4_models.tiny_target(), gemma4_models.tiny_assistant(0.8)
    drafter = default_drafter(target, head, draft_named=True)
    assert drafter == "assistant"
    # The default calibrates with the assistant's draft steps (whether they pay on this tiny
    # target is the controller's call); fixed drafts of 3 draft every round.
    for adaptive in (True, False):
        config = EngineConfig(target=target, draft=head, drafter=drafter, adaptive=adaptive,
                              draft_max=3, n_ctx=1024)  # fmt: skip
        with Engine(config) as engine:
            assert "assistant" in engine.drafter_choices()
            events = list(engine.generate(PROMPT, GREEDY, max_tokens=64))
            if adaptive:
                assert engine.costs is not None and engine.costs.draft_step_s > 0
        tokens = [e.token for e in events if isinstance(e, TokenEvent)]
        assert tokens == alone
    (finish,) = [e for e in events if isinstance(e, FinishEvent)]
    assert finish.stats.n_accepted > 0


@pytest.mark.parametrize(
    ("target_path", "head_path", "message"),
    [
        (gemma4_models.tiny_target, lambda: gemma4_models.tiny_assistant(0.8, backbone=96),
         "drafts for a model 96 wide; gemma4-tiny.target.F32.gguf is 64"),
        (head_models.tiny_target, lambda: gemma4_models.tiny_assistant(0.8),
         "drafts for Gemma 4 models; llama-tiny.target.F32.gguf is a llama model"),
        (gemma4_models.tiny_target, lambda: head_models.tiny_eagle3(0.8),
         "is not a Gemma 4 assistant (architecture eagle3)"),
    ],
)  # fmt: skip
def test_a_mismatched_file_is_one_line(target_path, head_path, message):
    from specllama.session import Engine, EngineConfig

    config = EngineConfig(target=target_path(), draft=head_path(), drafter="assistant",
                          n_ctx=256)  # fmt: skip
    with pytest.raises(UsageError) as caught:
        Engine(config)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
