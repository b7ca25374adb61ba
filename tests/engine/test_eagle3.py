"""Speculation with an EAGLE-3 head in its own GGUF, on synthetic models whose behaviour is known
by construction (tests/head_models.py): the target's greedy text follows a fixed permutation of
the vocabulary, and the head is right on a chosen fraction of the tokens."""

from __future__ import annotations

import head_models
import numpy as np
import pytest

from specllama.engine.control import FixedLength
from specllama.engine.drafters import CombinedDrafter, NoDrafter
from specllama.engine.eagle3 import Eagle3Drafter
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.llama.backend import LlamaBackend
from specllama.llama.eagle3 import Eagle3Head
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


@pytest.fixture(scope="module")
def target():
    with LlamaBackend(head_models.tiny_target(), n_ctx=1024) as backend:
        head = Eagle3Head(backend, head_models.tiny_eagle3(0.8))
        yield backend, head
        head.close()


@pytest.fixture(scope="module")
def alone(target):
    return run(target[0], NoDrafter(), 0)[0]


def permutation_text(first: int, n: int) -> list[int]:
    mapping = head_models.next_token_map(_vocab())
    out = [int(mapping[first])]
    while len(out) < n:
        out.append(int(mapping[out[-1]]))
    return out


def _vocab():
    import model_factory

    return model_factory.smollm2_q4()


def head_logits_after(head: Eagle3Head, context: list[int]) -> np.ndarray:
    return np.array(head.catch_up(context)[0])


def test_the_synthetic_target_follows_its_permutation(alone):
    """What the other tests rest on: greedy, the target writes next(next(...)) of the prompt."""
    assert alone == permutation_text(PROMPT[-1], len(alone))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_eagle3_greedy_is_the_target_alone(target, alone, k):
    backend, head = target
    tokens, rounds, _ = run(backend, Eagle3Drafter(head), k)
    assert tokens == alone
    assert any(a < d for d, a in rounds), "some drafts were rejected: rollback ran"
    assert any(a == d for d, a in rounds), "some were accepted in full"


def test_the_default_policy_with_eagle3_is_the_target_alone(target, alone):
    backend, head = target
    controller = AdaptiveController(Costs.guess(), draft_max=8)
    drafter = CombinedDrafter(Eagle3Drafter(head))
    tokens, _, _ = run(backend, drafter, 0, controller=controller)
    assert tokens == alone
    assert "eagle3" in controller.sources, "the head was weighed"


@pytest.mark.parametrize("seed", [1, 2])
def test_a_seed_gives_the_target_alone_text(target, seed):
    backend, head = target
    params = SamplingParams(temperature=1.5, seed=seed)
    alone = run(backend, NoDrafter(), 0, params)[0]
    assert alone != run(backend, NoDrafter(), 0, GREEDY)[0], "the sampling chose something"
    for k in (1, 4):
        assert run(backend, Eagle3Drafter(head), k, params)[0] == alone


@pytest.mark.parametrize("a", [1.0, 0.8, 0.5])
def test_eagle3_acceptance_is_the_constructed_one(a):
    """One draft a round: the head's guess after the last token, right exactly where its map
    agrees with the target's. Measured = counted from the maps, and near a."""
    mapping = head_models.next_token_map(_vocab())
    head_map = head_models.partly_right(mapping, a)
    with LlamaBackend(head_models.tiny_target(), n_ctx=2048) as backend:
        head = Eagle3Head(backend, head_models.tiny_eagle3(a))
        tokens, rounds, _ = run(backend, Eagle3Drafter(head), 1, n=600)
        head.close()
    text = [PROMPT[-1], *tokens]
    position, expected = 0, []
    while position < len(text) - 1 and len(expected) < len(rounds):
        right = head_map[text[position]] == mapping[text[position]]
        expected.append((1, int(right)))
        position += 1 + right
    assert rounds == expected
    rate = sum(acc for _, acc in rounds) / len(rounds)
    assert abs(rate - a) < 0.06


def test_a_head_that_needs_the_hidden_state_is_paired_right():
    """Its guess is right only with the target's row of the token before: full acceptance
    of each round's first token after the prompt (whose tokens do not follow the permutation)
    proves the pairing; its later tokens are wrong by construction."""
    with LlamaBackend(head_models.tiny_target(), n_ctx=1024) as backend:
        head = Eagle3Head(backend, head_models.tiny_eagle3(1.0, uses_hidden=True))
        _, rounds, _ = run(backend, Eagle3Drafter(head), 1, n=80)
        _, longer, _ = run(backend, Eagle3Drafter(head), 3, n=80)
        head.close()
    assert rounds[0] == (1, 0), "the first draft reads the prompt's row: wrong by construction"
    assert all(acc == 1 for _, acc in rounds[1:])
    assert all(acc == 1 for _, acc in longer[1:])


def test_chat_turns_reuse_both_caches_and_leave_them_right(target):
    """A second turn after the first answer: the head catches up on the new tokens only, the
    answer is still the target alone's, and the head's cache then holds what a fresh head
    computes for the same text."""
    backend, head = target
    long_prompt = [*PROMPT, *range(6000, 6200)]
    first, _, _ = run(backend, Eagle3Drafter(head), 4, prompt=long_prompt, n=20)
    second_prompt = [*long_prompt, *first, 4000, 5000]
    alone = run(backend, NoDrafter(), 0, prompt=second_prompt, n=30)[0]
    run(backend, Eagle3Drafter(head), 4, prompt=long_prompt, n=20)  # the first turn again
    decoded = head.n_decoded
    tokens, rounds, _ = run(backend, Eagle3Drafter(head), 4, prompt=second_prompt, n=30)
    assert tokens == alone
    assert head.n_decoded - decoded < 30 + sum(d for d, _ in rounds) + 10
    assert_head_cache_right(backend, head, [*second_prompt, *tokens])


def test_a_cancelled_answer_leaves_both_caches_right(target, alone):
    backend, head = target
    events = generate(backend, Eagle3Drafter(head), PROMPT, GREEDY, max_tokens=64,
                      controller=FixedLength(5))  # fmt: skip
    got = [e.token for e in _first_tokens(events, 7)]
    events.close()  # the consumer went away mid-answer
    assert got == alone[:7]
    tokens, _, _ = run(backend, Eagle3Drafter(head), 3)
    assert tokens == alone
    assert_head_cache_right(backend, head, [*PROMPT, *tokens])


def _first_tokens(events, n):
    out = []
    for event in events:
        if isinstance(event, TokenEvent):
            out.append(event)
            if len(out) == n:
                break
    return out


def assert_head_cache_right(backend, head, text):
    """After a catch-up on `text`, the head's cache holds exactly its pairs (the text shifted
    by one, nothing past it), and its logits equal a fresh head's."""
    backend.sync(text[:-1])
    cached = head_logits_after(head, text)
    assert head.tokens == text[1:]
    lib = head._lib
    assert lib.llama_memory_seq_pos_max(head._memory, 0) == len(text) - 2
    with LlamaBackend(head_models.tiny_target(), n_ctx=1024) as fresh_target:
        fresh = Eagle3Head(fresh_target, head_models.tiny_eagle3(0.8))
        fresh_target.sync(text[:-1])
        expected = head_logits_after(fresh, text)
        fresh.close()
    assert np.allclose(cached, expected, atol=1e-4)


# -- through the session: --draft HEAD.gguf -------------------------------------------------


def test_a_head_named_as_draft_drafts_as_the_head_it_is(alone):
    from specllama.session import Engine, EngineConfig, default_drafter

    target, head = head_models.tiny_target(), head_models.tiny_eagle3(0.8)
    drafter = default_drafter(target, head, draft_named=True)
    assert drafter == "eagle3"
    config = EngineConfig(target=target, draft=head, drafter=drafter, adaptive=False,
                          draft_max=3, n_ctx=1024)  # fmt: skip
    with Engine(config) as engine:
        assert "eagle3" in engine.drafter_choices()
        tokens = [e.token for e in engine.generate(PROMPT, GREEDY, max_tokens=64)
                  if isinstance(e, TokenEvent)]  # fmt: skip
    assert tokens == alone


@pytest.mark.parametrize("swap", [False, True])
def test_a_head_where_a_model_belongs_is_one_line(swap):
    from specllama.errors import UsageError
    from specllama.session import Engine, EngineConfig

    target, head = head_models.tiny_target(), head_models.tiny_eagle3(0.8)
    config = (
        EngineConfig(target=head, draft=target, drafter="model")
        if swap
        else EngineConfig(target=target, draft=head, drafter="model")
    )
    with pytest.raises(UsageError) as caught:
        Engine(config)
    assert "is a draft head" in str(caught.value) and "\n" not in str(caught.value)


def test_a_head_for_a_hybrid_target_is_paired_right_through_its_rollbacks():
    """EAGLE-3 heads exist for Qwen3.5/3.6: a hybrid (recurrent + attention) qwen35 target,
    whose rejected drafts are rolled back from snapshots, still hands the head the rows of the
    tokens it kept. The pairing head is right on every round's first token but the first."""
    import model_factory

    def build(dst):
        vocab = model_factory.smollm2_q4()
        mapping = model_factory.qwen35_next_token()
        head_models.write_eagle3_head(
            dst, head_models.TINY, vocab, next_token=mapping, head_next=mapping,
            uses_hidden=True, logit=model_factory.QWEN35_LOGIT, target_layers=(0, 1, 1),
        )  # fmt: skip

    head_path = model_factory._derived("qwen35-tiny.eagle3-hidden-a1.F32.gguf", build)
    with LlamaBackend(model_factory.qwen35(None), n_ctx=1024) as backend:
        assert backend.recurrent
        alone = run(backend, NoDrafter(), 0, n=40)[0]
        head = Eagle3Head(backend, head_path)
        tokens, rounds, _ = run(backend, Eagle3Drafter(head), 3, n=40)
        head.close()
    assert tokens == alone
    assert rounds[0][1] == 0 and all(acc == 1 for _, acc in rounds[1:])
    assert any(d > acc for d, acc in rounds[1:]), "the rest of each draft was rolled back"
