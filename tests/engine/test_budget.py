"""A thinking budget: phases no longer than the budget left, the end marker forced once it is
spent, one FinishEvent with the phases' stats summed."""

from __future__ import annotations

from specllama.engine.budget import ThinkingWatch, bounded
from specllama.engine.detok import TextStream
from specllama.engine.events import FinishEvent, TokenEvent
from specllama.engine.stats import GenerationStats
from specllama.family.thinking import KNOWN, ThinkingSplit

THINK, CLOSE, ANSWER, BLANK = 0, 1, 2, 3
TEXT = {THINK: "hmm ", CLOSE: "</think>", ANSWER: "yes", BLANK: "\n\n"}
PROMPT = [9, 9, 9]


class Vocab:
    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return TEXT.get(token, "").encode()


def model(thinks_for: int | None):
    """A stub loop: thinks `thinks_for` tokens then closes (None: thinks until made to stop),
    then answers three tokens and stops; `calls` records each phase's max_tokens."""
    calls: list[int] = []

    def generate(context: list[int], max_tokens: int):
        calls.append(max_tokens)
        stats = GenerationStats(n_prompt=len(context))
        reason = "length"
        for _ in range(max_tokens):
            answer = context[len(PROMPT) :]
            if CLOSE in answer:
                if answer.count(ANSWER) == 3:
                    reason = "stop"
                    break
                token = ANSWER
            else:
                token = CLOSE if thinks_for is not None and len(answer) == thinks_for else THINK
            context = [*context, token]
            stats.n_generated += 1
            stats.record_round(0, 0)
            yield TokenEvent(token, from_draft=False)
        stats.finish_reason = reason
        yield FinishEvent(reason, stats)

    return generate, calls


def answer(generate, budget: int, max_tokens: int = 20):
    watch = ThinkingWatch(TextStream(Vocab()), ThinkingSplit(KNOWN[0], inside=True))
    events = list(
        bounded(
            generate,
            PROMPT,
            max_tokens=max_tokens,
            budget=budget,
            end=[CLOSE, BLANK],
            watch=watch,
        )
    )
    tokens = [e.token for e in events if isinstance(e, TokenEvent)]
    finishes = [e for e in events if isinstance(e, FinishEvent)]
    assert len(finishes) == 1 and events[-1] is finishes[0]
    return tokens, finishes[0]


def test_a_spent_budget_forces_the_end_and_the_answer_follows():
    generate, calls = model(thinks_for=None)
    tokens, finish = answer(generate, budget=3)
    assert tokens == [THINK] * 3 + [CLOSE, BLANK] + [ANSWER] * 3
    assert calls == [3, 15]  # a phase of the budget, then the rest after the forced marker
    assert finish.reason == "stop" and finish.stats.finish_reason == "stop"
    assert finish.stats.n_generated == len(tokens) and finish.stats.n_prompt == len(PROMPT)
    assert finish.stats.n_rounds == 6  # the phases' rounds summed (the marker took none)


def test_a_thinking_that_ends_within_the_budget_is_left_alone():
    generate, _ = model(thinks_for=2)
    alone, _ = model(thinks_for=2)
    tokens, finish = answer(generate, budget=5)
    assert tokens == [THINK, THINK, CLOSE] + [ANSWER] * 3
    unbounded = [e.token for e in alone(list(PROMPT), 20) if isinstance(e, TokenEvent)]
    assert tokens == unbounded and finish.stats.n_generated == 6


def test_max_tokens_bounds_the_whole_answer_marker_included():
    generate, _ = model(thinks_for=None)
    tokens, finish = answer(generate, budget=3, max_tokens=4)
    assert tokens == [THINK] * 3 + [CLOSE]
    assert finish.reason == "length" and finish.stats.n_generated == 4
