"""Speculation with a DFlash head in its own GGUF, on synthetic models whose behaviour is known
by construction (tests/head_models.py): the target's greedy text follows a fixed permutation of
the vocabulary, and the head guesses a whole block at once, each token right where its own map
agrees with the target's."""

from __future__ import annotations

import head_models
import numpy as np
import pytest

from specllama.engine.control import FixedLength
from specllama.engine.dflash import DFlashDrafter
from specllama.engine.drafters import CombinedDrafter, NoDrafter
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.llama.backend import LlamaBackend
from specllama.llama.dflash import DFlashHead
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
    with LlamaBackend(head_models.tiny_target(), n_ctx=1024) as backend:
        head = DFlashHead(backend, head_models.tiny_dflash(0.8))
        yield backend, head
        head.close()


@pytest.fixture(scope="module")
def alone(target):
    return run(target[0], NoDrafter(), 0)[0]


def test_the_head_guesses_its_whole_block_in_one_decode(target):
    """Greedy, the block after x is head_next(x), head_next(head_next(x)), ...: the
    construction, read straight from the head's logits."""
    backend, head = target
    _, head_map = _maps(0.8)
    context = [*PROMPT, 4000]
    backend.sync(context[:-1])
    head.catch_up(context)
    decoded = head.n_decoded
    block = head.guess_block(context[-1], head.max_draft)
    assert head.n_decoded - decoded == head.block_size, "one decode of the block"
    expected, token = [], context[-1]
    for _ in range(head.max_draft):
        token = int(head_map[token])
        expected.append(token)
    assert [int(np.argmax(row)) for row in block] == expected
    assert head.max_draft == head.block_size - 1 >= 6


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_dflash_greedy_is_the_target_alone(target, alone, k):
    backend, head = target
    tokens, rounds, _ = run(backend, DFlashDrafter(head), k)
    assert tokens == alone
    assert any(a < d for d, a in rounds), "some drafts were rejected: rollback ran"
    assert any(a == d for d, a in rounds), "some were accepted in full"


def test_the_default_policy_with_dflash_is_the_target_alone(target, alone):
    backend, head = target
    controller = AdaptiveController(Costs.guess(), draft_max=8)
    drafter = CombinedDrafter(DFlashDrafter(head))
    tokens, _, _ = run(backend, drafter, 0, controller=controller)
    assert tokens == alone
    assert "dflash" in controller.sources, "the head was weighed"


@pytest.mark.parametrize("seed", [1, 2])
def test_a_seed_gives_the_target_alone_text(target, seed):
    backend, head = target
    params = SamplingParams(temperature=1.5, seed=seed)
    alone = run(backend, NoDrafter(), 0, params)[0]
    assert alone != run(backend, NoDrafter(), 0, GREEDY)[0], "the sampling chose something"
    for k in (1, 4):
        assert run(backend, DFlashDrafter(head), k, params)[0] == alone


@pytest.mark.parametrize("a", [1.0, 0.8, 0.5])
def test_dflash_acceptance_is_the_constructed_one(a):
    """Drafts of 3: each round keeps the head's guesses up to the first token where its map
    and the target's part. Measured = counted from the maps, and the first token's rate near a."""
    mapping, head_map = _maps(a)
    with LlamaBackend(head_models.tiny_target(), n_ctx=2048) as backend:
        head = DFlashHead(backend, head_models.tiny_dflash(a))
        tokens, rounds, _ = run(backend, DFlashDrafter(head), 3, n=400)
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


def test_the_head_is_fed_the_target_rows_of_the_tokens_it_kept(target):
    """The features the head reads at position p are the target's inputs of its named layers
    at p (this trunk adds nothing, so each is the embedding of the token at p), and its cache
    ends where the target's verified text does."""
    backend, head = target
    tokens, _, _ = run(backend, DFlashDrafter(head), 4, n=40)
    text = [*PROMPT, *tokens]
    assert head.tokens == text[: len(head.tokens)] and len(head.tokens) >= len(text) - 6
    rows = head.inputs.rows.read(0, len(head.tokens))
    embeddings = head_models.embeddings(head_models.TINY, backend.n_vocab)[head.tokens]
    for k in range(len(head.layer_ids)):
        assert np.allclose(rows[:, k * 64 : (k + 1) * 64], embeddings, atol=1e-5)
    lib = head._lib
    assert lib.llama_memory_seq_pos_max(head._memory, 0) == len(head.tokens) - 1


def test_chat_turns_reuse_the_cache_and_a_cancelled_answer_leaves_it_right(target, alone):
    backend, head = target
    long_prompt = [*PROMPT, *range(6000, 6200)]
    first, _, _ = run(backend, DFlashDrafter(head), 4, prompt=long_prompt, n=20)
    second_prompt = [*long_prompt, *first, 4000, 5000]
    expected = run(backend, NoDrafter(), 0, prompt=second_prompt, n=30)[0]
    run(backend, DFlashDrafter(head), 4, prompt=long_prompt, n=20)  # the first turn again
    decoded = head.n_decoded
    tokens, rounds, _ = run(backend, DFlashDrafter(head), 4, prompt=second_prompt, n=30)
    assert tokens == expected
    # The second turn writes the features of its new tokens only (not the long prompt's again)
    # and one block a round.
    new_tokens = len(second_prompt) - len(long_prompt) + len(tokens)
    assert head.n_decoded - decoded <= new_tokens + len(rounds) * 5 < len(long_prompt)
    events = generate(backend, DFlashDrafter(head), PROMPT, GREEDY, max_tokens=64,
                      controller=FixedLength(5))  # fmt: skip
    got = []
    for event in events:
        if isinstance(event, TokenEvent):
            got.append(event.token)
            if len(got) == 7:
                break
    events.close()  # the consumer went away mid-answer
    assert got == alone[:7]
    assert run(backend, DFlashDrafter(head), 3)[0] == alone


# -- through the session: --draft HEAD.gguf -------------------------------------------------


def test_a_dflash_file_named_as_draft_drafts_as_the_head_it_is(alone):
    from specllama.session import Engine, EngineConfig, default_drafter

    target, head = head_models.tiny_target(), head_models.tiny_dflash(0.8)
    drafter = default_drafter(target, head, draft_named=True)
    assert drafter == "dflash"
    config = EngineConfig(target=target, draft=head, drafter=drafter, adaptive=False,
                          draft_max=3, n_ctx=1024)  # fmt: skip
    with Engine(config) as engine:
        assert "dflash" in engine.drafter_choices()
        tokens = [e.token for e in engine.generate(PROMPT, GREEDY, max_tokens=64)
                  if isinstance(e, TokenEvent)]  # fmt: skip
    assert tokens == alone


def test_a_head_of_another_kind_is_one_line():
    from specllama.errors import UsageError
    from specllama.session import Engine, EngineConfig

    config = EngineConfig(target=head_models.tiny_target(), draft=head_models.tiny_eagle3(0.8),
                          drafter="dflash", n_ctx=256)  # fmt: skip
    with pytest.raises(UsageError) as caught:
        Engine(config)
    assert "is not a DFlash head (architecture eagle3)" in str(caught.value)
    assert "\n" not in str(caught.value)
