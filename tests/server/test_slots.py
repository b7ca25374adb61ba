"""`serve --parallel N`: several requests answered at once, their decodes batched, and each
answer what the same request gets alone (the F32 SmolLM2 target, its Q4_1 file drafting).

Under load: more clients than slots and waiting room get 503 + Retry-After, the rest their
own answers; a client that goes away mid-stream leaves the others right; SIGTERM ends the
streams and the server; the prompt cache stays within its bound.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import (
    COUNTING,
    JSON_POST,
    KEY,
    Server,
    chat,
    metric_samples,
    reference,
    run_target_alone,
    serve,
    start_stream,
)
from typer.testing import CliRunner

from specllama.cli.app import app

pytestmark = pytest.mark.slow

PROMPTS = [
    "Name three fruits.",
    "Write a haiku about rain.",
    "Count from 1 to 20.",
    "What is the capital of France?",
]
SIDE_TALK = "Tell me, in a few plain words, what a lighthouse keeper did all day and all night"
CACHE_MB = 8  # a few of these prompts' states (~70 KB a token, target and draft): it fills


@pytest.fixture(scope="module")
def server(smol_f32: Path, smol_q4: Path, tmp_path_factory) -> Iterator[Server]:
    extra = ["--draft", str(smol_q4), "--parallel", "4", "--queue", "4"]
    extra += ["--cache-ram", str(CACHE_MB)]
    yield from serve(smol_f32, extra, tmp_path_factory.mktemp("slots") / "stderr.txt", threads=2)


def at_once(server: Server, prompts: list[str], max_tokens: int, **kwargs) -> list:
    """Each prompt from its own client, all sent together; the answers in order."""
    answers: list = [None] * len(prompts)

    def ask(i: int) -> None:
        answers[i] = chat(server, prompts[i], max_tokens, **kwargs)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return answers


class BusyWatch:
    """The most slots /slots showed busy at once, polled while a test runs."""

    def __init__(self, server: Server) -> None:
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, args=(server,))

    def _watch(self, server: Server) -> None:
        while not self._stop.is_set():
            slots = server.request("GET", "/slots")[2]["slots"]
            self.most = max(self.most, sum(slot["busy"] for slot in slots))
            time.sleep(0.01)

    def __enter__(self) -> BusyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_health_and_slots_say_how_many_run_at_once(server: Server):
    assert server.health()["slots"] == 4
    slots = server.request("GET", "/slots")[2]["slots"]
    assert [slot["id"] for slot in slots] == [0, 1, 2, 3]
    assert all(slot["n_ctx"] == 512 for slot in slots)  # --ctx is each slot's
    assert "ctx 512 per slot · 4 generations at once (--parallel 4)" in server.log.read_text()


@pytest.mark.parametrize("drafter", ["none", "ngram", "model", "auto"])
def test_greedy_answers_at_once_equal_each_alone(server: Server, drafter: str):
    with BusyWatch(server) as watch:
        answers = at_once(server, PROMPTS, 32, extra_body={"specllama": {"drafter": drafter}})
    assert watch.most >= 2  # they ran together, not one after another
    for prompt, answer in zip(PROMPTS, answers):
        assert answer.choices[0].message.content == reference(prompt, 32)[0], prompt
        assert answer.model_extra["specllama"]["drafter"] != "none" or drafter == "none"


def test_answers_at_once_share_the_targets_decodes(server: Server):
    """Four answers together, none drafting: /metrics says the target's calls carried several
    sequences each (one step of every slot), and evaluated what the answers account for."""

    target = (("model", "target"),)
    before = metric_samples(server)
    answers = at_once(server, PROMPTS, 24, extra_body={"specllama": {"drafter": "none"}})
    after = metric_samples(server)
    calls, sequences, tokens = (
        after[name, target] - before[name, target]
        for name in (
            "specllama:decode_calls_total",
            "specllama:decode_sequences_total",
            "specllama:decode_tokens_total",
        )
    )
    assert sequences / calls >= 2  # alone, every call would carry one sequence
    expected = 0
    for answer in answers:
        usage, figures = answer.usage, answer.model_extra["specllama"]
        evaluated = usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens
        expected += evaluated - 1 + figures["n_rounds"]  # the pending token, every round
    assert tokens == expected


def test_seeded_answers_at_once_equal_each_alone(server: Server):
    sampling = {"temperature": 0.8, "top_p": 0.95, "seed": 5}
    answers = at_once(server, PROMPTS, 24, **sampling)
    options = ["--temperature", "0.8", "--top-p", "0.95", "--seed", "5", "--json"]
    for prompt, answer in zip(PROMPTS, answers):
        alone = json.loads(run_target_alone(prompt, 24, *options)[-1])
        assert answer.choices[0].message.content == alone["text"], prompt


def test_24_clients_are_answered_right_or_told_to_retry(server: Server):
    """4 slots and 4 waiting: the rest are refused with 503 + Retry-After at once. Every slot
    first holds a conversation none of the 24 begins with, so the burst throws each away: the
    cache saves them (more than its bound holds: it must let go of the oldest)."""
    server.wait_idle()
    at_once(server, [f"{SIDE_TALK} ({i})" for i in range(4)], 24)
    assert sum(slot["n_held"] > 48 for slot in server.request("GET", "/slots")[2]["slots"]) == 4
    results: list[tuple[int, dict, dict, str]] = []

    def client(i: int) -> None:
        prompt = PROMPTS[i % len(PROMPTS)]
        body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
        status, headers, payload = server.request(
            "POST", "/v1/chat/completions", {**body, "max_tokens": 24}
        )
        results.append((status, headers, payload, prompt))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    answered = [(payload, prompt) for status, _, payload, prompt in results if status == 200]
    refused = [(headers, payload) for status, headers, payload, _ in results if status == 503]
    assert len(answered) + len(refused) == 24
    assert len(answered) >= 4 and refused
    for payload, prompt in answered:
        assert payload["choices"][0]["message"]["content"] == reference(prompt, 24)[0]
    for headers, payload in refused:
        assert int(headers["retry-after"]) >= 1 and payload["error"]["code"] == "server_busy"
    cache = server.health()["prompt_cache"]
    assert cache["entries"] and cache["bytes"] <= cache["limit_bytes"] == CACHE_MB * 2**20


def test_a_client_gone_mid_stream_leaves_the_others_right(server: Server):
    server.wait_idle()
    cancelled_before = server.log.read_text().count("cancelled after")
    counting = start_stream(server, max_tokens=400)  # a slot busy until it is closed
    others: dict[str, object] = {}
    asking = threading.Thread(target=lambda: others.update(a=at_once(server, PROMPTS[:2], 32)))
    asking.start()
    time.sleep(0.3)  # the others are running beside it
    counting.close()
    asking.join(timeout=300)
    for prompt, answer in zip(PROMPTS[:2], others["a"]):
        assert answer.choices[0].message.content == reference(prompt, 32)[0]
    server.wait_idle()
    assert server.log.read_text().count("cancelled after") == cancelled_before + 1
    # Every slot answers right afterwards, the cancelled one's included.
    for prompt, answer in zip(PROMPTS, at_once(server, PROMPTS, 16)):
        assert answer.choices[0].message.content == reference(prompt, 16)[0]


def test_sigterm_ends_the_streams_and_the_server(smol_f32: Path, smol_q4: Path, tmp_path: Path):
    log = tmp_path / "stderr.txt"
    command = [sys.executable, "-m", "specllama", "serve", "--target", str(smol_f32)]
    command += ["--draft", str(smol_q4), "--parallel", "2", "--ctx", "512", "--port", "0"]
    env = {**os.environ, "SPECLLAMA_API_KEY": KEY, "NO_COLOR": "1"}
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    try:
        started = _started(log, process)
        streams = [_counting(started) for _ in range(2)]
        process.send_signal(signal.SIGTERM)
        for stream in streams:  # each ends, with an error event last; none hangs
            assert '"error"' in stream.read().decode()
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
    text = log.read_text()
    assert "Traceback" not in text and "server stopped" in text


def _counting(server: Server) -> http.client.HTTPResponse:
    """A streamed text completion that counts on, read until its first text arrived."""
    connection = http.client.HTTPConnection(*server.address, timeout=30)
    body = {"model": "m", "prompt": COUNTING, "max_tokens": 400, "stream": True}
    connection.request("POST", "/v1/completions", json.dumps(body), JSON_POST)
    response = connection.getresponse()
    while '"text":"' not in response.readline().decode():
        pass
    return response


def _started(log: Path, process: subprocess.Popen) -> Server:
    deadline = time.monotonic() + 120
    while "specllama serve http" not in log.read_text():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    url = log.read_text().split("specllama serve ")[1].split("/v1")[0]
    started = Server(url, "m", log, process)
    deadline = time.monotonic() + 60
    while True:
        try:
            started.health()
            return started
        except (OSError, http.client.HTTPException):
            assert time.monotonic() < deadline
            time.sleep(0.1)


@pytest.mark.parametrize(
    ("drafter", "why"),
    [("mtp", "a draft head reads the target's hidden rows"), ("ngram", "recurrent layers")],
)
def test_what_cannot_run_in_slots_is_refused_in_one_line(qwen35_mtp: Path, drafter, why):
    """A draft head follows one sequence; a hybrid target's state cannot be cut back per slot."""
    args = ["serve", "--target", str(qwen35_mtp), "--drafter", drafter, "--parallel", "2"]
    result = CliRunner().invoke(app, [*args, "--port", "0", "--ctx", "512"])
    assert result.exit_code == 2  # a usage error
    assert why in result.output and "--parallel 1" in result.output
    assert "Traceback" not in result.output


MAIN = "You are a careful assistant who answers questions about fruit. " * 12
SIDE = "You write short titles for conversations, in five words at most. " * 12


@pytest.fixture
def two_slots(smol_f32: Path, tmp_path: Path) -> Iterator[Server]:
    yield from serve(smol_f32, ["--parallel", "2", "--cache-ram", "0"], tmp_path / "stderr.txt")


def test_a_side_request_takes_another_slot_and_the_conversation_stays(two_slots: Server):
    """Without a prompt cache: the main conversation's next turn finds its slot as it left it,
    because the side request between went to a slot of its own."""

    def ask(system: str, turns: list[dict]):
        messages = [{"role": "system", "content": system}, *turns]
        return two_slots.client().chat.completions.create(
            model="m", messages=messages, max_tokens=12
        )

    first = [{"role": "user", "content": "Name three fruits."}]
    main = ask(MAIN, first)
    side = ask(SIDE, [{"role": "user", "content": "Title: fruit names"}])
    assert side.usage.prompt_tokens_details.cached_tokens < 10
    said = {"role": "assistant", "content": main.choices[0].message.content}
    again = ask(MAIN, [*first, said, {"role": "user", "content": "And vegetables?"}])
    assert again.usage.prompt_tokens_details.cached_tokens >= main.usage.prompt_tokens
