"""Output constraints on real models: the constrained target's text with every drafter, every
draft length and the target alone; forced tokens drafted for free; drafts cut at a forbidden
token; constrained sampling that follows the masked distribution; clear errors."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from specllama.chat import Message
from specllama.engine.constraint import ConstraintSpec, compile_constraint
from specllama.engine.control import GRAMMAR, FixedLength
from specllama.engine.drafters import (
    CombinedDrafter,
    Draft,
    DraftModelDrafter,
    NgramDrafter,
    NoDrafter,
)
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams, probabilities
from specllama.engine.speculative import generate
from specllama.errors import ConstraintError
from specllama.llama.backend import LlamaBackend
from specllama.llama.grammar import tokenizer_for
from specllama.session import prompt_tokens

pytestmark = pytest.mark.slow

GREEDY = SamplingParams()
SAMPLED = SamplingParams(temperature=0.8, top_k=40, seed=1234)
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "likes": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "mood": {"enum": ["happy", "sad", "calm"]},
    },
    "required": ["name", "age", "likes", "mood"],
    "additionalProperties": False,
}
ASKS = [
    "Describe Alice, 31, who likes chess and tea, as JSON.",
    "Bob is 45 and enjoys hiking. Give his record as JSON.",
]
YES_NO = 'root ::= ("yes" | "no") ", because " [a-z ]+ "."'
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def target(smol_f32):
    with LlamaBackend(smol_f32, n_ctx=1024) as backend:
        yield backend


@pytest.fixture(scope="module")
def person(target):
    return compile_constraint(
        ConstraintSpec.json_schema(PERSON), tokenizer_for(target), target.n_vocab
    )


def ask(target, text):
    return prompt_tokens(target, [Message("user", text)])


def run(target, drafter, prompt, grammar, k=0, params=GREEDY, controller=None):
    """(tokens, rounds as (source, drafted, accepted), stats)."""
    tokens, rounds, stats = [], [], None
    events = generate(
        target,
        drafter,
        prompt,
        params,
        max_tokens=MAX_TOKENS,
        controller=controller or FixedLength(k),
        constraint=grammar.start(),
    )
    for event in events:
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
        elif isinstance(event, RoundEvent):
            rounds.append((event.source, event.n_drafted, event.n_accepted))
        elif isinstance(event, FinishEvent):
            stats = event.stats
    return tokens, rounds, stats


def check_person(text: str) -> None:
    record = json.loads(text)
    assert set(record) == set(PERSON["required"])
    assert isinstance(record["name"], str) and type(record["age"]) is int
    assert all(isinstance(x, str) for x in record["likes"]) and len(record["likes"]) <= 3
    assert record["mood"] in PERSON["properties"]["mood"]["enum"]


@pytest.fixture(scope="module")
def alone(target, person):
    """The constrained target alone on each ask: tokens and stats."""
    return [run(target, NoDrafter(), ask(target, a), person) for a in ASKS]


def test_the_target_alone_writes_what_the_schema_allows_and_ends(target, alone):
    for tokens, rounds, stats in alone:
        check_person(target.detokenize(tokens))
        assert stats.finish_reason == "stop"  # the grammar ended it, well before the limit
        assert all(source == "" for source, _, _ in rounds)  # nothing drafted, not even forced


@pytest.mark.parametrize("k", [1, 3, 6])
def test_ngram_drafts_give_the_constrained_target_alone_text(target, person, alone, k):
    forced = 0
    for a, (expected, _, _) in zip(ASKS, alone):
        tokens, _, stats = run(target, NgramDrafter(), ask(target, a), person, k)
        assert tokens == expected
        forced += stats.n_forced
        assert stats.n_rounds < len(expected) + 1  # forced rounds verify several at once
    assert forced > 0  # the keys and braces were drafted without a model


@pytest.mark.parametrize(("draft_fixture", "k"), [("smol_q4", 4), ("smol_draft", 2)])
def test_draft_models_give_the_constrained_target_alone_text(
    request, target, person, alone, draft_fixture, k
):
    with LlamaBackend(request.getfixturevalue(draft_fixture), n_ctx=1024) as model:
        drafter = DraftModelDrafter(model)
        accepted = 0
        for a, (expected, _, _) in zip(ASKS, alone):
            tokens, rounds, _ = run(target, drafter, ask(target, a), person, k)
            assert tokens == expected
            accepted += sum(n for source, _, n in rounds if source == "model")
    assert accepted > 0


def test_the_draft_model_drafts_within_the_rule(target, person, smol_q4):
    """Every token a model drafts under the constraint is one the constraint allows there:
    no draft is cut, so what was drafted is what was verified."""
    with LlamaBackend(smol_q4, n_ctx=1024) as model:
        drafter = DraftModelDrafter(model)
        prompt = ask(target, ASKS[0])
        constraint = person.start()
        for _ in range(6):
            draft = drafter.propose(prompt, 6, GREEDY, constraint=constraint)
            assert constraint.valid_prefix(draft.tokens) == len(draft) > 0
            # the lookahead left the matcher where it was: the draft is valid from here again
            assert constraint.valid_prefix(draft.tokens) == len(draft)
            constraint.consume(draft.tokens[:1])
            prompt = [*prompt, draft.tokens[0]]


def test_a_draft_is_cut_before_a_forbidden_token(target, person, alone):
    """A drafter that proposes what JSON never allows (raw control characters) costs no
    verify for it."""
    control = target.tokenize("\x01\x02\x03", add_bos=False)

    class Garbage(NgramDrafter):
        name = "garbage"

        def sources(self, context):
            return [("garbage", 0)]

        def propose(self, context, n_max, params, **_):
            return Draft(control[:n_max])

    tokens, rounds, _ = run(target, Garbage(), ask(target, ASKS[0]), person, 4)
    assert tokens == alone[0][0]
    asked = [drafted for source, drafted, _ in rounds if source == "garbage"]
    assert asked and not any(asked)


def test_the_adaptive_default_under_a_constraint(target, person, alone, smol_q4):
    from specllama.policy.controller import AdaptiveController
    from specllama.policy.costs import Costs

    drafted = Counter()
    with LlamaBackend(smol_q4, n_ctx=1024) as model:
        drafter = CombinedDrafter(DraftModelDrafter(model))
        for a, (expected, _, _) in zip(ASKS, alone):
            controller = AdaptiveController(Costs.guess(), draft_max=8)
            tokens, rounds, _ = run(target, drafter, ask(target, a), person, controller=controller)
            assert tokens == expected
            drafted.update(source for source, n, _ in rounds if n)
    assert drafted[GRAMMAR] and sum(drafted.values()) > drafted[GRAMMAR]


def test_a_seed_gives_the_constrained_target_alone_text_with_every_drafter(target, person, smol_q4):
    prompt = ask(target, ASKS[1])
    expected, _, _ = run(target, NoDrafter(), prompt, person, params=SAMPLED)
    check_person(target.detokenize(expected))
    with LlamaBackend(smol_q4, n_ctx=1024) as model:
        for drafter, k in [(NgramDrafter(), 4), (DraftModelDrafter(model), 3)]:
            tokens, _, _ = run(target, drafter, prompt, person, k, params=SAMPLED)
            assert tokens == expected


def test_a_gbnf_grammar_and_its_forced_rounds(target):
    spec = ConstraintSpec("gbnf", YES_NO)
    grammar = compile_constraint(spec, tokenizer_for(target), target.n_vocab)
    prompt = ask(target, "Is the sky blue? Answer yes or no with a reason.")
    expected, _, _ = run(target, NoDrafter(), prompt, grammar)
    text = target.detokenize(expected)
    assert text.split(",")[0] in ("yes", "no") and ", because " in text
    tokens, rounds, stats = run(target, NgramDrafter(), prompt, grammar, 4)
    assert tokens == expected
    assert any(source == GRAMMAR for source, _, _ in rounds) and stats.n_forced >= 2


def test_constrained_sampling_follows_the_masked_distribution(target):
    """The token drawn under the rule is distributed as the target's transformed distribution
    over the allowed tokens alone: a chi-square test over 3,000 seeds on one real row."""
    grammar = compile_constraint(
        ConstraintSpec("regex", "[a-z]+"), tokenizer_for(target), target.n_vocab
    )
    prompt = ask(target, "Say one word.")
    target.sync(prompt)
    logits = np.array(target.decode([prompt[-1]], [0])[0])
    params = SamplingParams(temperature=1.5, top_k=0)
    allowed = grammar.start().allowed()
    expected = probabilities(np.where(allowed, logits, -np.inf), params)
    assert 5 < len(expected.ids) < 40_000  # a real choice, and a real mask
    n = 3000
    counts = Counter()
    for seed in range(n):
        constraint = grammar.start()
        counts[constraint.draw(logits, SamplingParams(1.5, top_k=0, seed=seed), 7)] += 1
    assert all(allowed[t] for t in counts)
    likely = expected.probs >= 5 / n  # cells with enough expected draws
    observed = np.array([counts[t] for t in expected.ids[likely]] + [0])
    observed[-1] = n - observed[:-1].sum()
    mass = np.append(expected.probs[likely], 1 - expected.probs[likely].sum())
    chi2 = (((observed - n * mass) ** 2) / np.maximum(n * mass, 1e-9)).sum()
    dof = len(mass) - 1
    assert chi2 < dof + 5 * np.sqrt(2 * dof)  # far beyond the 99.9th percentile otherwise
    target.rollback(0)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (ConstraintSpec("json_schema", '{"type": "nonsense"}'), "cannot be compiled"),
        (ConstraintSpec("json_schema", "{not json"), "cannot be read"),
        (ConstraintSpec("json_schema", '{"type": "integer", "minimum": 5, "maximum": 1}'), "5"),
        (ConstraintSpec("gbnf", "root ::= [^\\x00-\\xFF] &"), "cannot be read"),
        (ConstraintSpec("gbnf", "root ::= undefined-rule"), "cannot be read"),
        (ConstraintSpec("regex", "[^\\s\\S]"), "admits no text"),
    ],
)
def test_a_constraint_that_cannot_be_used_is_one_clear_error(target, spec, says):
    with pytest.raises(ConstraintError, match=says) as caught:
        compile_constraint(spec, tokenizer_for(target), target.n_vocab)
    assert "\n" not in str(caught.value)  # one line, not llguidance's parser dump
