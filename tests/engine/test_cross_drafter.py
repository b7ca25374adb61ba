"""Drafting across tokenizers on real models: the F32 SmolLM2 target, drafts whose token 1000
spells "<specllama-test>" instead of "()" (another vocabulary). Whatever they draft, the text is
the target alone's, greedy and seeded; the good one (the Q4_1 weights) is accepted."""

from __future__ import annotations

import pytest

from specllama.engine.control import FixedLength
from specllama.engine.cross_drafter import CrossTokenizerDrafter
from specllama.engine.drafters import NoDrafter
from specllama.engine.events import FinishEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.speculative import generate
from specllama.llama.backend import LlamaBackend

pytestmark = pytest.mark.slow

PROMPTS = [
    "Name three fruits.",
    "Write a Python function that calls print() twice.",
    # The changed token's text, in the prompt: the drafts read "()" as "(" and ")".
    "What does f() return when f is `def f(): return 1`?",
]
N = 16


def chat(target: LlamaBackend, question: str) -> list[int]:
    text = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    return target.tokenize(text, add_bos=False)


def spelled(model: LlamaBackend, tokens: list[int]) -> bytes:
    return b"".join(model.token_bytes(t, special=True) for t in tokens)


def run(target, drafter, prompt, params):
    tokens, stats = [], None
    for event in generate(target, drafter, prompt, params, max_tokens=N, controller=FixedLength(4)):
        if isinstance(event, TokenEvent):
            tokens.append(event.token)
        elif isinstance(event, FinishEvent):
            stats = event.stats
    return tokens, stats


@pytest.fixture(scope="module")
def target(smol_f32):
    with LlamaBackend(smol_f32, n_ctx=512) as model:
        yield model


@pytest.fixture(scope="module")
def drafts(smol_bad_vocab, smol_q4_bad_vocab):
    """The 2-layer F32 draft ("weak": rarely right) and the Q4_1 weights ("good")."""
    with (
        LlamaBackend(smol_bad_vocab, n_ctx=512) as weak,
        LlamaBackend(smol_q4_bad_vocab, n_ctx=512) as good,
    ):
        yield {"weak": weak, "good": good}


def alone_of(target: LlamaBackend, question: str, params: SamplingParams) -> list[int]:
    return run(target, NoDrafter(), chat(target, question), params)[0]


@pytest.fixture(scope="module")
def alone(target):
    """The target alone's tokens for (question, params), each generated once."""
    done: dict[tuple[str, SamplingParams], list[int]] = {}

    def tokens(question: str, params: SamplingParams) -> list[int]:
        if (question, params) not in done:
            done[question, params] = alone_of(target, question, params)
        return done[question, params]

    return tokens


@pytest.mark.parametrize("name", ["weak", "good"])
def test_the_pair_does_not_share_a_vocabulary(target, drafts, name):
    model = drafts[name]
    assert target.token_bytes(1000) == b"()" != model.token_bytes(1000)
    prompt = chat(target, PROMPTS[2])
    assert 1000 in prompt
    drafter = CrossTokenizerDrafter(model, target)
    drafter.sources(prompt)
    assert 1000 not in drafter._read.tokens  # the draft spells "()" with its own tokens


@pytest.mark.parametrize(
    ("name", "question"), [("good", q) for q in PROMPTS] + [("weak", PROMPTS[2])]
)
def test_greedy_text_is_the_target_alone_token_for_token(target, drafts, alone, name, question):
    drafter = CrossTokenizerDrafter(drafts[name], target)
    crossed, stats = run(target, drafter, chat(target, question), SamplingParams())
    assert crossed == alone(question, SamplingParams())
    assert stats.n_drafted > 0 and drafter.n_unreadable == 0
    # Its costs include the time between text and tokens.
    assert drafter.text_seconds > 0
    assert drafter.decode_seconds > drafts[name].decode_seconds


def test_a_good_draft_of_another_vocabulary_is_accepted(target, drafts):
    drafter = CrossTokenizerDrafter(drafts["good"], target)
    _, stats = run(target, drafter, chat(target, PROMPTS[1]), SamplingParams())
    assert stats.n_accepted / stats.n_drafted > 0.3, stats


@pytest.mark.parametrize("name", ["weak", "good"])
def test_seeded_sampling_gives_the_target_alone_text(target, drafts, alone, name):
    params = SamplingParams(temperature=0.9, seed=3)
    drafter = CrossTokenizerDrafter(drafts[name], target)
    crossed, _ = run(target, drafter, chat(target, PROMPTS[1]), params)
    assert crossed == alone(PROMPTS[1], params)


def test_after_a_generation_the_draft_holds_only_the_text_the_target_wrote(target, drafts):
    model = drafts["weak"]
    prompt = chat(target, PROMPTS[1])
    drafter = CrossTokenizerDrafter(model, target)
    written, _ = run(target, drafter, prompt, SamplingParams())
    text = spelled(target, [*prompt, *written])
    evaluated = spelled(model, model.tokens)
    assert text.startswith(evaluated) and len(evaluated) > len(text) // 2


def test_another_real_tokenizer_drafts_and_is_drafted_for_exactly(target, drafts, qwen2_vocab_tiny):
    """Qwen2's tokenizer under a tiny model writing gibberish in every script (bytes that are
    no UTF-8 included): drafting for SmolLM2 and drafted for by it, the text is the target
    alone's, greedy and seeded."""
    with LlamaBackend(qwen2_vocab_tiny, n_ctx=512) as qwen:
        question, greedy = PROMPTS[0], SamplingParams()
        crossed, stats = run(
            target, CrossTokenizerDrafter(qwen, target), chat(target, question), greedy
        )
        assert crossed == alone_of(target, question, greedy) and stats.n_drafted > 0
        prompt = chat(qwen, question)
        for params in (greedy, SamplingParams(temperature=0.9, seed=5)):
            crossed, stats = run(qwen, CrossTokenizerDrafter(drafts["good"], qwen), prompt, params)
            assert crossed == run(qwen, NoDrafter(), prompt, params)[0]
            assert stats.n_drafted > 0
