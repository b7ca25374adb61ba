"""The server's memory, shared by its clients: a second client asking what a first was answered
gets it drafted from the first answer, and the same text the target alone writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import Server, reference, serve

pytestmark = pytest.mark.slow

ASK = "Write a short poem about the sea."


@pytest.fixture(scope="module")
def ngram_server(smol_f32: Path, tmp_path_factory) -> Iterator[Server]:
    extra = ["--drafter", "ngram", "--fixed", "--draft-max", "8"]
    yield from serve(smol_f32, extra, tmp_path_factory.mktemp("serve-memory") / "stderr.txt")


def ask(client, model: str, max_tokens: int = 48):
    messages = [{"role": "user", "content": ASK}]
    answer = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens)
    return answer.choices[0].message.content, answer.model_extra["specllama"]


def test_a_second_client_drafts_what_a_first_was_answered(ngram_server):
    first, first_stats = ask(ngram_server.client(), ngram_server.model)
    second, second_stats = ask(ngram_server.client(), ngram_server.model)  # another client
    expected, n_generated = reference(ASK, 48)
    assert first == second == expected
    # The first drafted little (a poem copies nothing of its prompt); the second, all of it.
    assert second_stats["n_accepted"] >= n_generated - 8 > first_stats["n_accepted"]
    assert second_stats["n_rounds"] <= n_generated // 6
