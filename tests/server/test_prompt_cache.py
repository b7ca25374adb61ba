"""The prompt cache: a conversation that comes back after another evaluates only what is new.

Its bookkeeping on a fake backend whose saved state is its token record (8 bytes a token), then
a real `specllama serve` on the F32 SmolLM2 with its Q4_1 file drafting: an agent-like trace
(a main conversation, a side request with another long prompt, the main conversation's next
turn) reuses the main prompt, and every answer is the target alone's.
"""

from __future__ import annotations

import ctypes
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from fakes import MarkovBackend
from serving import Server, run_target_alone, serve

from specllama.llama.evaluated import SavedState
from specllama.server.prompt_cache import MIN_TOKENS, PromptCache

BYTES_PER_TOKEN = 8


class StateBackend(MarkovBackend):
    """A fake whose state is its tokens; `refuse` makes llama.cpp's set_data fail."""

    recurrent = False
    refuse = False
    copies = 0  # states copied out

    def state_size(self) -> int:
        return BYTES_PER_TOKEN * self.n_past

    def save_state(self) -> SavedState:
        self.copies += 1
        size = self.state_size()
        return SavedState(tuple(self.tokens), (ctypes.c_uint8 * size)(), size)

    def load_state(self, saved: SavedState) -> bool:
        self.tokens = [] if self.refuse else list(saved.tokens)
        return not self.refuse


def engine(draft: bool = False) -> SimpleNamespace:
    def model() -> StateBackend:
        return StateBackend(np.full((50, 50), 1 / 50), n_ctx=4096)

    return SimpleNamespace(
        target=model(), draft_model=model() if draft else None, mtp_head=None, head=None
    )


def run(cache: PromptCache, prompt: list[int], answer: int = 10) -> int:
    """What the queue does with a request: restore, then evaluate the rest and answer;
    returns the prompt tokens that were reused."""
    cache.restore(prompt)
    target = cache._engine.target
    reused = target.common_prefix(prompt)
    target.sync(prompt)
    target.decode(list(range(answer)))
    if cache._engine.draft_model is not None:  # as the draft model's drafter catches up
        cache._engine.draft_model.sync(target.tokens)
    return reused


MAIN = list(range(10, 50)) * 4  # 160 tokens: a long system prompt and a question
SIDE = [7] * 120


def test_the_main_conversation_comes_back_after_a_side_request():
    cache = PromptCache(engine(draft=True), limit_bytes=1 << 20)
    run(cache, MAIN)
    assert run(cache, SIDE) == 0  # nothing in common: the main conversation was saved first
    follow_up = [*MAIN, *range(10), 3, 4, 5]
    cache.restore(follow_up)
    assert cache.loads == 1
    # Its prompt and answer came back, the draft model's state with the target's.
    assert cache._engine.target.tokens == cache._engine.draft_model.tokens == [*MAIN, *range(10)]
    assert run(cache, follow_up) == len(MAIN) + 10


def test_a_continued_conversation_saves_and_loads_nothing():
    cache = PromptCache(engine(), limit_bytes=1 << 20)
    run(cache, MAIN)
    assert run(cache, [*MAIN, *range(10), 1, 2]) == len(MAIN) + 10
    assert cache.facts()["entries"] == 0 and cache.loads == 0


def test_the_bound_holds_and_the_oldest_goes_first():
    limit = BYTES_PER_TOKEN * 400  # two conversations of 170 tokens, not three
    cache = PromptCache(engine(), limit_bytes=limit)
    prompts = [[k] * 160 for k in (1, 2, 3, 4)]
    for prompt in prompts:
        run(cache, prompt)
        assert cache.used <= limit
    assert [e.tokens[0] for e in cache._entries] == [2, 3]  # 1 went first; 4 is in the context
    assert run(cache, [*prompts[2], *range(10), 9]) == 170  # kept: loaded
    assert run(cache, [*prompts[0], 9]) == 0  # gone: evaluated again
    assert cache.used <= limit


def test_a_state_too_big_alone_is_not_kept_and_a_longer_one_replaces_its_prefix():
    cache = PromptCache(engine(), limit_bytes=BYTES_PER_TOKEN * 100)
    run(cache, MAIN)
    run(cache, SIDE)
    assert cache.facts()["entries"] == 0  # 170 tokens of main do not fit in 100
    roomy = PromptCache(engine(), limit_bytes=1 << 20)
    run(roomy, MAIN[:80])
    run(roomy, SIDE)  # saves MAIN[:80] + answer
    run(roomy, [*MAIN[:80], *range(10), *MAIN[:80]])  # loads it, goes on
    run(roomy, SIDE)  # saves the longer one, which holds the first, and loads SIDE's
    assert sorted(len(e.tokens) for e in roomy._entries) == [len(SIDE) + 10, 80 + 10 + 80 + 10]


def test_a_state_over_the_bound_is_never_copied_and_the_log_says_so_once(caplog):
    cache = PromptCache(engine(draft=True), limit_bytes=BYTES_PER_TOKEN * 200)
    run(cache, MAIN)  # 170 tokens in each model, 340 in all; SIDE's 130, 260
    with caplog.at_level(logging.WARNING, logger="specllama.server.app"):
        run(cache, SIDE)
        run(cache, MAIN)
        run(cache, SIDE)
    models = (cache._engine.target, cache._engine.draft_model)
    assert [model.copies for model in models] == [0, 0]
    assert cache.facts()["entries"] == 0
    said = [r.getMessage() for r in caplog.records if "keeps no state" in r.getMessage()]
    assert len(said) == 1 and "170 tokens" in said[0] and "--cache-ram" in said[0]
    small = PromptCache(engine(draft=True), limit_bytes=BYTES_PER_TOKEN * 400)
    run(small, MAIN)
    run(small, SIDE)  # fits: copied once from each model
    assert [m.copies for m in (small._engine.target, small._engine.draft_model)] == [1, 1]


def test_a_state_llama_cpp_refuses_costs_the_reuse_not_the_request():
    cache = PromptCache(engine(), limit_bytes=1 << 20)
    run(cache, MAIN)
    run(cache, SIDE)
    cache._engine.target.refuse = True
    assert run(cache, [*MAIN, *range(10), 1]) == 0  # evaluated from scratch
    assert cache._engine.target.tokens[: len(MAIN)] == MAIN
    assert cache.facts()["entries"] <= 1 and cache.loads == 0


def test_small_gains_are_not_worth_a_load():
    cache = PromptCache(engine(), limit_bytes=1 << 20)
    run(cache, MAIN)
    near = [*MAIN[: MIN_TOKENS - 1], 0, 0]
    run(cache, near)
    assert cache.loads == 0


def test_off_with_a_zero_bound_or_a_draft_head():
    assert PromptCache(engine(), 0).limit == 0
    headed = engine()
    headed.mtp_head = object()
    assert PromptCache(headed, 1 << 20).limit == 0


# -- a real server ------------------------------------------------------------------------------

SYSTEM_A = "You are a careful assistant who answers questions about fruit. " * 12
SYSTEM_B = "You write short titles for conversations, in five words at most. " * 12


@pytest.fixture(scope="module")
def server(smol_f32: Path, smol_q4: Path, tmp_path_factory) -> Iterator[Server]:
    extra = ["--draft", str(smol_q4), "--fixed", "--draft-max", "4"]
    yield from serve(smol_f32, extra, tmp_path_factory.mktemp("serve") / "stderr.txt", ctx=1024)


def ask(server: Server, system: str, turns: list[dict], max_tokens: int = 16):
    messages = [{"role": "system", "content": system}, *turns]
    return server.client().chat.completions.create(
        model="m", messages=messages, max_tokens=max_tokens
    )


@pytest.mark.slow
def test_an_agent_like_trace_reuses_the_main_conversation(server: Server, smol_f32: Path):
    first_turn = [{"role": "user", "content": "Name three fruits."}]
    main = ask(server, SYSTEM_A, first_turn)
    side = ask(server, SYSTEM_B, [{"role": "user", "content": "Title: fruit names"}])
    assert side.usage.prompt_tokens_details.cached_tokens < 10  # another prompt: its own
    said = main.choices[0].message.content
    second_turn = [*first_turn, {"role": "assistant", "content": said}]
    second_turn.append({"role": "user", "content": "And three vegetables?"})
    again = ask(server, SYSTEM_A, second_turn)
    # The whole first prompt came back from the cache, and the answer before it.
    assert again.usage.prompt_tokens_details.cached_tokens >= main.usage.prompt_tokens
    health = server.health()["prompt_cache"]
    assert health["loads"] >= 1 and 0 < health["bytes"] <= health["limit_bytes"]
    # Each answer is the target alone's: the first as `specllama run` writes it, the second
    # as the server writes it without drafts.
    first = run_target_alone("Name three fruits.", 16, "--system", SYSTEM_A, "--json")
    assert said == json.loads(first[-1])["text"]
    system_turn = {"role": "system", "content": SYSTEM_A}
    alone = server.client().chat.completions.create(
        model="m",
        messages=[system_turn, *second_turn],
        max_tokens=16,
        extra_body={"specllama": {"drafter": "none"}},
    )
    assert again.choices[0].message.content == alone.choices[0].message.content
