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


def predicted(server: Server, ask: str, prediction: str, max_tokens: int = 40):
    answer = server.client().chat.completions.create(
        model=server.model,
        messages=[{"role": "user", "content": ask}],
        max_tokens=max_tokens,
        prediction={"type": "content", "content": prediction},
    )
    return answer.choices[0].message.content, answer.usage.completion_tokens_details


def test_a_right_prediction_is_drafted_and_counted_as_openai_does(ngram_server):
    ask = "Name the planets of the solar system."
    expected, n_generated = reference(ask, 40)
    text, details = predicted(ngram_server, ask, expected)
    assert text == expected
    assert details.accepted_prediction_tokens >= n_generated - 8
    assert details.rejected_prediction_tokens <= 8


def test_a_wrong_prediction_costs_drafts_never_the_answer(ngram_server):
    ask = "Give three tips for a good night's sleep."
    expected, _ = reference(ask, 40)
    text, details = predicted(ngram_server, ask, "Bananas are yellow. " * 20)
    assert text == expected
    assert details.rejected_prediction_tokens > 0
    assert details.accepted_prediction_tokens < 10


def test_a_prediction_drafted_by_the_memory_first_still_counts_as_openai_does(ngram_server):
    """The same request again, with its answer as the prediction: the memory drafts the answer
    before the prediction can, and every token of the prediction is in the answer all the
    same (OpenAI counts what appears, not who drafted it)."""
    ask = "Name three colours of the rainbow."
    expected, n_generated = reference(ask, 24)
    predicted(ngram_server, ask, "", max_tokens=24)  # into the memory
    text, details = predicted(ngram_server, ask, expected, max_tokens=24)
    assert text == expected
    assert details.accepted_prediction_tokens >= n_generated - 1  # a token may split at its end
    assert details.rejected_prediction_tokens <= 1


def test_a_prediction_of_another_type_is_refused_by_name(ngram_server):
    status, _, body = ngram_server.request(
        "POST",
        "/v1/chat/completions",
        {
            "model": ngram_server.model,
            "messages": [{"role": "user", "content": "Hi"}],
            "prediction": {"type": "image", "content": "x"},
        },
    )
    assert status == 400 and body["error"]["param"] == "prediction.type"
