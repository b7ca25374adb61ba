"""Speculation on a hybrid (recurrent + attention) qwen35 target, with every drafter: its own MTP
head, n-gram lookup and a hybrid draft model. The models are synthetic (tests/qwen35_models.py)
with behaviour known by construction: the target's greedy text follows a fixed permutation of
the vocabulary, and the head is right on a chosen fraction of the tokens."""

from __future__ import annotations

import model_factory
import numpy as np
import pytest

from specllama.engine.control import FixedLength
from specllama.engine.drafters import DraftModelDrafter, NgramDrafter, NoDrafter
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.mtp import MtpDrafter
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.llama.backend import LlamaBackend
from specllama.llama.mtp import MtpHead
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
def target(qwen35_mtp):
    with LlamaBackend(qwen35_mtp, n_ctx=1024, load_mtp=True) as backend:
        head = MtpHead(backend)
        yield backend, head
        head.close()


@pytest.fixture(scope="module")
def alone(target):
    backend, _ = target
    return run(backend, NoDrafter(), 0)[0]


def test_the_synthetic_target_follows_its_permutation(target, alone):
    """What the other tests rest on: greedy, the target writes next(next(...)) of the prompt."""
    mapping = model_factory.qwen35_next_token()
    expected = [int(mapping[PROMPT[-1]])]
    while len(expected) < len(alone):
        expected.append(int(mapping[expected[-1]]))
    assert alone == expected
    assert target[0].recurrent and target[0].max_rollback >= 8


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6, 7, 8])
def test_mtp_greedy_is_the_target_alone(target, alone, k):
    backend, head = target
    tokens, rounds, _ = run(backend, MtpDrafter(head), k)
    assert tokens == alone
    assert any(a < d for d, a in rounds), "some drafts were rejected: rollback ran"
    assert any(a == d for d, a in rounds), "some were accepted in full"


def test_ngram_on_a_hybrid_target_rolls_back_exactly(target):
    """The prompt quotes the start of the answer, then a false continuation: lookup drafts it,
    the target rejects it and rolls its recurrent state back, every time."""
    backend, _ = target
    truth = run(backend, NoDrafter(), 0, n=12)[0]
    false = [7, 8, 9, 10, 11, 12]
    prompt = [*PROMPT, *truth[:4], *false, 5000, *PROMPT]
    alone = run(backend, NoDrafter(), 0, prompt=prompt, n=40)[0]
    for k in (1, 3, 8):
        tokens, rounds, _ = run(backend, NgramDrafter(), k, prompt=prompt, n=40)
        assert tokens == alone
        assert any(a < d for d, a in rounds)


@pytest.mark.parametrize("k", [1, 4, 8])
def test_a_hybrid_draft_model_that_is_mostly_wrong(target, alone, qwen35_bad_draft, k):
    """Both contexts recurrent: the draft's token-by-token drafts go back to its checkpoint."""
    backend, _ = target
    with LlamaBackend(qwen35_bad_draft, n_ctx=1024) as draft:
        tokens, _, stats = run(backend, DraftModelDrafter(draft), k)
        assert tokens == alone
        assert stats.n_accepted < stats.n_drafted / 2
        # The draft's context holds exactly the text, as a fresh evaluation would.
        reference = LlamaBackend(qwen35_bad_draft, n_ctx=1024)
        text = [*PROMPT, *tokens]
        assert np.allclose(
            draft.sync(text, logits_at_last=True), reference.sync(text, logits_at_last=True),
            atol=1e-4,
        )  # fmt: skip
        reference.close()


def test_the_default_policy_with_mtp_is_the_target_alone(target, alone):
    backend, head = target
    from specllama.engine.drafters import CombinedDrafter

    controller = AdaptiveController(Costs.guess(), draft_max=8)
    tokens, _, _ = run(backend, CombinedDrafter(MtpDrafter(head)), 0, controller=controller)
    assert tokens == alone
    # The head was weighed (on this tiny model a head step costs most of a target token, so
    # whether it drafts is the costs' call).
    assert "mtp" in controller.sources


@pytest.mark.parametrize("seed", [1, 2])
def test_a_seed_gives_the_target_alone_text_with_every_drafter(target, qwen35_bad_draft, seed):
    backend, head = target
    params = SamplingParams(temperature=1.5, seed=seed)
    alone = run(backend, NoDrafter(), 0, params)[0]
    assert alone != run(backend, NoDrafter(), 0, GREEDY)[0], "the sampling chose something"
    with LlamaBackend(qwen35_bad_draft, n_ctx=1024) as draft:
        for drafter in (MtpDrafter(head), NgramDrafter(), DraftModelDrafter(draft)):
            for k in (1, 4):
                assert run(backend, drafter, k, params)[0] == alone


@pytest.mark.parametrize("a", [1.0, 0.8, 0.5])
def test_mtp_acceptance_is_the_constructed_one(a):
    """One draft a round: each is the head's guess after the last token, right exactly where
    the head's map agrees with the target's. Measured = counted from the maps, and near a."""
    mapping = model_factory.qwen35_next_token()
    import qwen35_models

    head_map = qwen35_models.partly_right(mapping, a)
    with LlamaBackend(model_factory.qwen35(a), n_ctx=2048, load_mtp=True) as backend:
        head = MtpHead(backend)
        tokens, rounds, _ = run(backend, MtpDrafter(head), 1, n=600)
        head.close()
    text = [PROMPT[-1], *tokens]
    # Round after round the text grows by one or two tokens; the draft follows its last token.
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
    after the prompt (whose tokens do not follow the permutation) proves the pairing."""
    with LlamaBackend(model_factory.qwen35(1.0, uses_hidden=True), load_mtp=True) as backend:
        head = MtpHead(backend)
        _, rounds, _ = run(backend, MtpDrafter(head), 1, n=80)
        head.close()
    assert rounds[0] == (1, 0), "the first draft reads the prompt's row: wrong by construction"
    assert all(acc == 1 for _, acc in rounds[1:])


def test_chat_turns_reuse_both_caches(target):
    """A second turn after the first answer: the head catches up on the new tokens only, and
    the answer is still the target alone's."""
    backend, head = target
    long_prompt = [*PROMPT, *range(6000, 6200)]
    first, _, _ = run(backend, MtpDrafter(head), 4, prompt=long_prompt, n=20)
    second_prompt = [*long_prompt, *first, 4000, 5000]
    alone = run(backend, NoDrafter(), 0, prompt=second_prompt, n=30)[0]
    run(backend, MtpDrafter(head), 4, prompt=long_prompt, n=20)  # the first turn again
    decoded = head.n_decoded
    tokens, rounds, _ = run(backend, MtpDrafter(head), 4, prompt=second_prompt, n=30)
    assert tokens == alone
    # The new tokens and the drafts, not the 200-token prompt again.
    assert head.n_decoded - decoded < 30 + sum(d for d, _ in rounds) + 10
