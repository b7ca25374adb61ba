"""GET /metrics on a real `specllama serve` (the strict pair: F32 SmolLM2 target, its Q4_1 file
drafting): Prometheus' parser reads it, it needs the key, and its counters move by what each
answer reports of itself (usage and the specllama extension), whatever the API."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from serving import AUTH, CTX, JSON_POST, Server, chat, metric_samples, serve, start_stream

pytestmark = pytest.mark.slow

Samples = dict[tuple[str, tuple], float]
LONG = (
    "Here is a list of the planets of the solar system, from the sun outwards: Mercury, Venus, "
    "Earth, Mars, Jupiter, Saturn, Uranus and Neptune. Which of them is the largest one?"
)
OTHER = "Name three colours of the rainbow, one per line, and nothing else at all please."


@pytest.fixture(scope="module")
def server(smol_f32: Path, smol_q4: Path, tmp_path_factory) -> Iterator[Server]:
    """The draft model drafts every round (--fixed); a prompt cache in RAM."""
    extra = ["--draft", str(smol_q4), "--fixed", "--draft-max", "4", "--cache-ram", "64"]
    yield from serve(smol_f32, extra, tmp_path_factory.mktemp("metrics") / "stderr.txt")


def scrape(server: Server, headers: dict | None = None) -> tuple[int, str, str]:
    """GET /metrics: (status, content type, body)."""
    connection = http.client.HTTPConnection(*server.address, timeout=60)
    connection.request("GET", "/metrics", headers=AUTH if headers is None else headers)
    response = connection.getresponse()
    body = response.read().decode()
    connection.close()
    return response.status, response.getheader("content-type", ""), body


def get(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return get(after, name, **labels) - get(before, name, **labels)


def total(found: Samples, name: str, **labels: str) -> float:
    """The sum over a metric's samples that carry `labels` (and any others)."""
    wanted = set(labels.items())
    return sum(v for (n, keys), v in found.items() if n == name and wanted <= set(keys))


def test_metrics_need_the_key_and_parse_as_prometheus_text(server: Server):
    for headers in ({}, {"Authorization": "Bearer wrong-key"}):
        status, content_type, body = scrape(server, headers)
        assert status == 401 and content_type.startswith("application/json")
        assert json.loads(body)["error"]["code"] == "invalid_api_key"
    status, content_type, text = scrape(server)
    assert status == 200
    assert content_type.startswith("text/plain; version=0.0.4")
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families["llamacpp:prompt_tokens"] == "counter"  # the parser drops the _total
    assert families["llamacpp:requests_processing"] == "gauge"
    assert families["specllama:draft_position_accepted"] == "counter"


def test_the_counters_move_by_what_each_answer_reports(server: Server):
    before = metric_samples(server)
    answer = chat(server, max_tokens=24)
    after = metric_samples(server)
    usage, figures = answer.usage, answer.model_extra["specllama"]
    cached = usage.prompt_tokens_details.cached_tokens
    assert moved(before, after, "llamacpp:tokens_predicted_total") == usage.completion_tokens
    assert moved(before, after, "llamacpp:prompt_tokens_cached_total") == cached
    evaluated = moved(before, after, "llamacpp:prompt_tokens_total")
    assert evaluated == usage.prompt_tokens - cached > 0
    for name, figure in [
        ("llamacpp:prompt_seconds_total", "prefill_s"),
        ("llamacpp:tokens_predicted_seconds_total", "time_s"),
    ]:
        assert moved(before, after, name) == pytest.approx(figures[figure], abs=1e-3)
    rate = get(after, "llamacpp:predicted_tokens_seconds")  # this answer alone since `before`
    assert rate == pytest.approx(figures["tokens_per_s"], rel=1e-2)
    reason = figures["finish_reason"]  # the loop's own: stop, stop_string, length, context
    assert moved(before, after, "specllama:answers_total", finish_reason=reason) == 1
    assert total(after, "specllama:answers_total") - total(before, "specllama:answers_total") == 1
    assert get(after, "llamacpp:requests_processing") == 0
    assert get(after, "llamacpp:requests_deferred") == 0
    held = get(after, "llamacpp:kv_cache_tokens")
    assert held >= usage.prompt_tokens
    assert get(after, "llamacpp:kv_cache_usage_ratio") == pytest.approx(held / CTX)


def test_drafts_are_counted_by_drafter_and_by_position(server: Server):
    before = metric_samples(server)
    answer = chat(server, "Count from one to twenty.", max_tokens=40)
    after = metric_samples(server)
    figures = answer.model_extra["specllama"]
    drafted, accepted = figures["n_drafted"], figures["n_accepted"]
    assert drafted > 0  # --fixed: the draft model drafts every round
    assert moved(before, after, "specllama:drafted_tokens_total", drafter="model") == drafted
    assert moved(before, after, "specllama:accepted_tokens_total", drafter="model") == accepted
    drafts = moved(before, after, "specllama:drafts_total", drafter="model")
    assert moved(before, after, "llamacpp:spec_decode_num_draft_tokens_total") == drafted
    assert moved(before, after, "llamacpp:spec_decode_num_accepted_tokens_total") == accepted
    assert moved(before, after, "llamacpp:spec_decode_num_drafts_total") == drafts

    def by_position(name: str) -> list[float]:
        return [moved(before, after, name, drafter="model", position=str(i)) for i in range(4)]

    reached = by_position("specllama:draft_position_drafted_total")
    kept = by_position("specllama:draft_position_accepted_total")
    assert reached[0] == drafts and sum(reached) == drafted
    assert sum(kept) == accepted
    # Position i is accepted only where every earlier one was: fewer at each step.
    assert all(k <= r for k, r in zip(kept, reached, strict=True))
    assert kept == sorted(kept, reverse=True)


def test_a_streamed_answer_is_counted_too(server: Server):
    before = metric_samples(server)
    chunks = list(chat(server, max_tokens=16, stream=True, stream_options={"include_usage": True}))
    after = metric_samples(server)
    usage = chunks[-1].usage
    assert moved(before, after, "llamacpp:tokens_predicted_total") == usage.completion_tokens
    assert total(after, "specllama:answers_total") - total(before, "specllama:answers_total") == 1


def test_busy_and_waiting_requests_are_gauges(server: Server):
    busy = start_stream(server, max_tokens=400)
    waiting = http.client.HTTPConnection(*server.address, timeout=60)
    try:
        body = {"model": server.model, "prompt": "1, 2,", "max_tokens": 4}
        waiting.request("POST", "/v1/completions", json.dumps(body), JSON_POST)
        deadline = time.monotonic() + 30
        while server.health()["waiting"] != 1:  # until the server has read it and queued it
            assert time.monotonic() < deadline, "the second request was never queued"
            time.sleep(0.05)
        found = metric_samples(server)
        assert get(found, "llamacpp:requests_processing") == 1
        assert get(found, "llamacpp:requests_deferred") == 1
        assert get(found, "llamacpp:kv_cache_tokens") > 0
    finally:
        busy.close()
        waiting.close()
    server.wait_idle()
    found = metric_samples(server)
    assert get(found, "llamacpp:requests_processing") == 0
    assert get(found, "llamacpp:requests_deferred") == 0


def test_a_prompt_brought_back_from_the_ram_cache_is_a_hit(server: Server):
    chat(server, LONG, max_tokens=4)  # the slot holds it
    chat(server, OTHER, max_tokens=4)  # its state goes to the cache, the slot holds this one
    before = metric_samples(server)
    again = chat(server, LONG, max_tokens=4)
    after = metric_samples(server)
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert moved(before, after, "specllama:prompt_cache_loads_total") == 1
    assert moved(before, after, "llamacpp:prompt_tokens_cached_total") == cached
    assert cached == again.usage.prompt_tokens - 1  # all of it but the last token
    assert get(after, "specllama:prompt_cache_entries") >= 1
    assert 0 < get(after, "specllama:prompt_cache_bytes") <= 64 * 2**20


def test_decode_calls_and_tokens_are_those_the_answer_made(server: Server):
    """One slot: the target evaluated the prompt (less its last token, which the first round
    carries) in batches of up to 512, then one call a round of the pending token and its
    drafts; every call carried this one sequence."""
    before = metric_samples(server)
    answer = chat(server, "Count from one to twelve.", max_tokens=20)
    after = metric_samples(server)
    figures, usage = answer.model_extra["specllama"], answer.usage
    evaluated = usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens
    rounds, drafted = figures["n_rounds"], figures["n_drafted"]
    assert drafted > 0
    tokens = moved(before, after, "specllama:decode_tokens_total", model="target")
    assert tokens == evaluated - 1 + rounds + drafted
    calls = moved(before, after, "specllama:decode_calls_total", model="target")
    assert calls == -(-(evaluated - 1) // 512) + rounds
    assert moved(before, after, "llamacpp:n_decode_total") == calls
    assert moved(before, after, "specllama:decode_sequences_total", model="target") == calls
    assert moved(before, after, "specllama:decode_calls_total", model="draft") > 0
    assert moved(before, after, "specllama:decode_seconds_total", model="target") > 0
