"""Thinking bounded to a number of tokens (`--reasoning-budget N`, as llama-server's).

The answer is generated in phases, none longer than the thinking budget left while the model
thinks; once the thinking has used it all, the family's end marker is written (forced tokens,
with the whitespace the template puts after it) and the answer goes on after it. A phase starts
from the prompt and the answer so far, whose prefix the target has evaluated already, so a new
phase costs no prefill; the sampling noise is keyed by position, so a seeded answer is the one
it would be in one phase up to where the marker is forced. The phases' stats are summed into
one FinishEvent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from specllama.engine.detok import TextStream
from specllama.engine.events import Event, FinishEvent, TokenEvent
from specllama.engine.stats import GenerationStats

Generate = Callable[[list[int], int], Iterator[Event]]  # (prompt, max_tokens) -> the events


class Split(Protocol):
    """Tells thinking from the answer as text streams (`family.thinking.ThinkingSplit`)."""

    @property
    def state(self) -> str: ...  # "start", "thinking" or "answer"
    def feed(self, text: str) -> object: ...


class ThinkingWatch:
    """Follows the answer token by token: is the model thinking now?"""

    def __init__(self, stream: TextStream, split: Split) -> None:
        self._stream = stream
        self._split = split

    @property
    def state(self) -> str:
        return self._split.state

    def feed(self, token: int) -> bool:
        """Take a token; True when it was written inside the thinking."""
        thinking = self._split.state == "thinking"
        self._split.feed(self._stream.feed(token))
        return thinking or self._split.state == "thinking"


def bounded(
    generate: Generate,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    budget: int,
    end: Sequence[int],
    watch: ThinkingWatch,
) -> Iterator[Event]:
    """The events of an answer whose thinking takes at most `budget` tokens, then `end` (the
    end marker's tokens) if it has not ended by then."""
    context, made, thought, forced = list(prompt), 0, 0, False
    total: GenerationStats | None = None  # the phases' stats, summed
    reason = "length"
    while made < max_tokens:
        room = max_tokens - made
        if watch.state != "answer" and not forced:
            room = min(room, budget - thought)
        if room <= 0:  # the budget is spent inside the thinking: close it
            closing = list(end[: max_tokens - made])
            for token in closing:
                watch.feed(token)
                yield TokenEvent(token, from_draft=False)
            context += closing
            made += len(closing)
            forced = True
            continue
        finish: FinishEvent | None = None
        for event in generate(context, room):
            if isinstance(event, TokenEvent):
                context.append(event.token)
                made += 1
                thought += watch.feed(event.token)
                yield event
            elif isinstance(event, FinishEvent):
                finish = event
            else:
                yield event
        assert finish is not None  # generate always ends with a FinishEvent
        total = _summed(total, finish.stats)
        reason = finish.reason
        if reason != "length":  # the end of the answer, or of the context
            break
    total = total or GenerationStats(n_prompt=len(prompt))  # only the marker was written
    total.n_generated = made  # the forced marker too
    total.finish_reason = reason
    yield FinishEvent(reason, total)


def _summed(total: GenerationStats | None, phase: GenerationStats) -> GenerationStats:
    """The phases' stats as one generation's: counts and times summed, the prompt the first's."""
    if total is None:
        return phase
    n_prompt = total.n_prompt
    total.merge(phase)
    total.n_prompt = n_prompt
    return total
