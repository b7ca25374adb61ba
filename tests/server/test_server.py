"""`specllama serve` for real: the server in a subprocess on the strict pair (F32 SmolLM2 target,
its Q4_1 file as the draft), talked to with the official `openai` package and with raw HTTP.

Greedy answers must equal `specllama run` with the target alone, token for token (the text and
the token count), before and after every kind of error, disconnect and queue refusal.
"""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from serving import (
    COUNTING,
    CTX,
    JSON_POST,
    KEY,
    PROMPT,
    Server,
    chat,
    reference,
    run_target_alone,
    serve,
    start_stream,
)
from typer.testing import CliRunner

from specllama.cli.app import app

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(smol_f32: Path, smol_q4: Path, tmp_path_factory) -> Iterator[Server]:
    """One server for the module: fixed draft length (the draft model drafts every round),
    one generation and one waiting request at most, the key from the environment."""
    extra = ["--draft", str(smol_q4), "--fixed", "--draft-max", "4", "--queue", "1"]
    extra += ["--allow-host", "proxy.test", "--alias", "local-coder", "--alias", "gpt-4o-mini"]
    yield from serve(smol_f32, extra, tmp_path_factory.mktemp("serve") / "stderr.txt")


def assert_reference_answer(server: Server, prompt: str = PROMPT, max_tokens: int = 24) -> None:
    """The server still answers exactly as the target alone does."""
    answer = chat(server, prompt, max_tokens)
    text, n_generated = reference(prompt, max_tokens)
    assert answer.choices[0].message.content == text
    assert answer.usage.completion_tokens == n_generated


# -- answers ------------------------------------------------------------------------------------


def test_models_lists_the_served_model_and_its_aliases(server: Server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == [server.model, "local-coder", "gpt-4o-mini"]
    assert server.client().models.retrieve("local-coder").id == "local-coder"


def test_a_request_for_any_model_is_answered_by_the_served_one(server: Server):
    """Agents send their own model names (for main and side requests): all are answered."""
    answer = server.client().chat.completions.create(
        model="claude-haiku-4-5", messages=[{"role": "user", "content": PROMPT}], max_tokens=24
    )
    assert answer.model == server.model
    assert answer.choices[0].message.content == reference(PROMPT, 24)[0]


def test_greedy_chat_equals_run_with_the_target_alone(server: Server):
    answer = chat(server, temperature=0)
    text, n_generated = reference(PROMPT, 24)
    assert text.strip()
    choice = answer.choices[0]
    assert choice.message.content == text and choice.message.role == "assistant"
    assert answer.usage.completion_tokens == n_generated
    assert choice.finish_reason == ("length" if n_generated == 24 else "stop")
    stats = answer.model_extra["specllama"]  # what speculation did for this answer
    assert stats["n_generated"] == n_generated and stats["drafter"] == "model"
    assert 0 < stats["n_accepted"] <= stats["n_drafted"]


def test_a_request_without_temperature_is_greedy(server: Server):
    """The documented default: the server's --temperature (0), not OpenAI's 1.0."""
    prompt = "What is the capital of France?"
    assert chat(server, prompt, 16).choices[0].message.content == reference(prompt, 16)[0]


def test_streamed_chat_equals_run_and_ends_with_usage(server: Server):
    stream = chat(server, stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text, n_generated = reference(PROMPT, 24)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].model_extra["specllama"]["n_generated"] == n_generated
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == n_generated


def test_async_text_completion_equals_run_without_template(server: Server):
    async def complete():
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
        async with client:
            whole = await client.completions.create(
                model=server.model, prompt=COUNTING, max_tokens=20
            )
            stream = await client.completions.create(
                model=server.model, prompt=COUNTING, max_tokens=20, stream=True
            )
            pieces = [chunk.choices[0].text async for chunk in stream if chunk.choices]
        return whole, "".join(pieces)

    whole, streamed = asyncio.run(complete())
    text, n_generated = reference(COUNTING, 20, template=False)
    assert whole.choices[0].text == streamed == text
    assert whole.usage.completion_tokens == n_generated


def test_a_continued_conversation_reuses_the_cached_prefix(server: Server):
    first = chat(server, "Name a colour.", 12)
    messages = [
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Name another one."},
    ]
    second = server.client().chat.completions.create(
        model=server.model, messages=messages, max_tokens=12
    )
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens  # the whole first turn came from the cache
    assert second.model_extra["specllama"]["n_prompt_reused"] == cached
    assert cached < second.usage.prompt_tokens


SAMPLED = [
    {"temperature": 0.8, "top_p": 0.95, "extra_body": {"top_k": 40, "min_p": 0.05}},
    {"temperature": 1.2, "top_p": 0.9, "extra_body": {"top_k": 100, "min_p": 0.02}},
]


def run_options(sampling: dict, seed: int) -> list[str]:
    """The `specllama run` options for a request's sampling fields."""
    extra = sampling["extra_body"]
    return [
        *("--temperature", str(sampling["temperature"]), "--top-p", str(sampling["top_p"])),
        *("--top-k", str(extra["top_k"]), "--min-p", str(extra["min_p"]), "--seed", str(seed)),
    ]


@pytest.mark.parametrize("sampling", SAMPLED, ids=["t0.8", "t1.2"])
def test_a_sampled_answer_with_a_seed_equals_run_with_the_target_alone(server, sampling):
    """The seed means the answer: the server (drafting with the model every round) writes what
    `specllama run --drafter none` writes with the same seed and sampling fields."""
    for seed in (3, 11):
        answer = chat(server, PROMPT, 24, seed=seed, **sampling)
        stats = answer.model_extra["specllama"]
        assert stats["seed"] == seed and stats["n_drafted"] > 0
        alone = json.loads(run_target_alone(PROMPT, 24, "--json", *run_options(sampling, seed))[-1])
        assert answer.choices[0].message.content == alone["text"]
        assert alone["seed"] == seed


def test_a_sampled_answer_without_a_seed_reports_the_one_it_drew(server: Server):
    sampling = SAMPLED[0]
    first = chat(server, PROMPT, 16, **sampling)
    seed = first.model_extra["specllama"]["seed"]
    assert isinstance(seed, int)
    again = chat(server, PROMPT, 16, seed=seed, **sampling)
    assert again.choices[0].message.content == first.choices[0].message.content
    assert chat(server, PROMPT, 16).model_extra["specllama"]["seed"] is None  # greedy


# -- stop strings -------------------------------------------------------------------------------


def test_stop_string_across_token_boundaries_is_never_emitted(server: Server):
    lines = [json.loads(line) for line in run_target_alone(PROMPT, 24, "--jsonl")]
    tokens = [line["text"] for line in lines if line["type"] == "token"]
    full = "".join(tokens)
    stop, cut = _stop_across_a_boundary(tokens)
    assert cut > 0 and stop not in full[:cut]
    expected = full[:cut]

    whole = chat(server, stop=[stop, "never appears"])
    assert whole.choices[0].message.content == expected
    assert whole.choices[0].finish_reason == "stop"
    assert whole.model_extra["specllama"]["finish_reason"] == "stop_string"
    streamed = "".join(
        c.choices[0].delta.content or "" for c in chat(server, stop=stop, stream=True)
    )
    assert streamed == expected


def _stop_across_a_boundary(tokens: list[str]) -> tuple[str, int]:
    """A stop string made of the end of one token and the start of the next, whose first
    occurrence in the text spans that boundary; and where the text must be cut."""
    full = "".join(tokens)
    boundaries = list(itertools.accumulate(len(t) for t in tokens))
    for i in range(2, len(tokens) - 1):
        left, right = tokens[i], tokens[i + 1]
        if len(left) >= 2 and len(right) >= 2:
            stop = left[-2:] + right[:2]
            at = full.find(stop)
            if at < boundaries[i] < at + len(stop):
                return stop, at
    raise AssertionError(f"no usable token boundary in {tokens}")


# -- one generation at a time -------------------------------------------------------------------


def test_two_clients_at_once_both_get_their_answers(server: Server):
    prompts = ["Name a planet.", "Name an animal."]
    answers: dict[str, str] = {}

    def ask(prompt: str) -> None:
        answers[prompt] = chat(server, prompt, 12).choices[0].message.content

    threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert answers == {p: reference(p, 12)[0] for p in prompts}


def test_beyond_the_queue_limit_503_and_the_queued_request_is_answered(server: Server):
    long_one = start_stream(server, max_tokens=400)  # generating
    queued: dict[str, object] = {}
    waiter = threading.Thread(target=lambda: queued.update(answer=chat(server, PROMPT, 24)))
    waiter.start()
    deadline = time.monotonic() + 30
    while server.health()["waiting"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)

    status, headers, body = server.request("POST", "/v1/chat/completions", _chat_body(server))
    assert status == 503 and int(headers["retry-after"]) >= 1
    assert body["error"]["code"] == "server_busy" and body["error"]["type"] == "server_error"

    long_one.close()  # the client goes away: its generation stops, the queued one runs
    waiter.join(timeout=120)
    assert queued["answer"].choices[0].message.content == reference(PROMPT, 24)[0]


@pytest.mark.parametrize("streamed", [True, False])
def test_a_client_that_disconnects_stops_its_generation(server: Server, streamed: bool):
    server.wait_idle()
    cancelled_before = server.log.read_text().count("cancelled after")
    if streamed:
        connection = start_stream(server, max_tokens=400)
    else:
        connection = http.client.HTTPConnection(*server.address, timeout=60)
        body = {"model": server.model, "prompt": COUNTING, "max_tokens": 400}
        connection.request("POST", "/v1/completions", json.dumps(body), JSON_POST)
        deadline = time.monotonic() + 30
        while not server.health()["generating"]:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    connection.close()
    server.wait_idle(timeout=30)
    lines = re.findall(r"cancelled after (\d+) tokens", server.log.read_text())
    assert len(lines) == cancelled_before + 1  # stopped, not run to its end
    assert int(lines[-1]) < 400
    assert_reference_answer(server)


# -- what the page needs: tokens by origin, a drafter per request, the server's status ---------


def test_streamed_tokens_make_up_the_text_and_count_the_accepted_drafts(server: Server):
    chunks = list(chat(server, max_tokens=40, stream=True))
    text, n_generated = reference(PROMPT, 40)
    extensions = [c.model_extra["specllama"] for c in chunks if "specllama" in c.model_extra]
    *live, final = extensions
    tokens = [token for ext in live for token in ext["tokens"]]
    assert "".join(piece for piece, _ in tokens) == text
    for c, ext in zip([c for c in chunks if "tokens" in c.model_extra.get("specllama", {})], live):
        assert "".join(piece for piece, _ in ext["tokens"]) == c.choices[0].delta.content
    origins = [who for _, who in tokens]
    assert len(origins) == n_generated == final["n_generated"]
    assert origins.count("model") == final["n_accepted"] > 0  # --fixed: the draft model drafts
    assert set(origins) == {"model", "target"}
    counts = [ext["n_generated"] for ext in live]
    assert counts == sorted(counts) and counts[-1] == n_generated
    assert all(ext["draft_length"] == 4 and ext["draft_source"] == "model" for ext in live[:-1])


@pytest.mark.parametrize("drafter", ["none", "ngram", "model", "auto"])
def test_a_request_chooses_its_drafter_and_the_answer_stays_the_same(server, drafter):
    answer = chat(server, max_tokens=24, extra_body={"specllama": {"drafter": drafter}})
    assert answer.choices[0].message.content == reference(PROMPT, 24)[0]
    stats = answer.model_extra["specllama"]
    assert stats["drafter"] == ("model" if drafter == "auto" else drafter)  # --drafter model
    assert (stats["n_drafted"] == 0) is (drafter == "none")


def test_a_drafter_the_server_has_not_loaded_is_refused(server: Server):
    def post(extension):
        return server.request(
            "POST", "/v1/chat/completions", _chat_body(server, specllama=extension)
        )

    assert_error(post({"drafter": "mtp"}), 400, "invalid_value", "specllama.drafter")
    assert_error(post({"drafter": 3}), 400, "invalid_type", "specllama.drafter")
    assert_error(post({"colour": "red"}), 400, "unknown_parameter", "specllama.colour")


def test_the_status_names_the_pair_and_what_can_draft(server: Server, smol_f32: Path, smol_q4):
    status, _, facts = server.request("GET", "/specllama/status")
    assert status == 200
    assert facts["model"] == server.model and facts["target"]["file"] == smol_f32.name
    assert facts["draft"] == {"file": smol_q4.name, "bytes": smol_q4.stat().st_size}
    assert facts["drafters"] == ["auto", "model", "ngram", "none"]
    assert facts["n_ctx"] == CTX and facts["adaptive"] is False and facts["draft_max"] == 4
    assert facts["slots"] == 1  # --parallel 1
    assert facts["device"].startswith("CPU")
    assert server.request("GET", "/specllama/status", headers={"Authorization": ""})[0] == 401


def test_the_page_is_served_with_its_policy_and_nothing_else_is(server: Server):
    connection = http.client.HTTPConnection(*server.address, timeout=30)
    for path, kind in [("/", "text/html"), ("/page/app.js", "text/javascript")]:
        connection.request("GET", path)  # no key: the page asks for it
        response = connection.getresponse()
        body = response.read()
        assert response.status == 200 and response.getheader("content-type").startswith(kind)
        assert "script-src 'self'" in response.getheader("content-security-policy")
    assert b"import" in body
    for path in ("/page/../app.py", "/page/guard.py", "/page/%2e%2e%2fapp.py"):
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        assert response.status == 404, path
    connection.close()


def test_other_sites_are_refused_and_the_next_answer_is_right(server: Server):
    hostile = server.request("GET", "/v1/models", headers={"Host": "attacker.example"})
    assert_error(hostile, 403, "host_not_allowed")
    assert "--allow-host attacker.example" in hostile[2]["error"]["message"]
    allowed = server.request("GET", "/v1/models", headers={"Host": "Proxy.test:8080"})
    assert allowed[0] == 200
    other_page = {"Origin": "http://127.0.0.1:1"}
    assert_error(server.request("GET", "/v1/models", headers=other_page), 403, "origin_not_allowed")
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    posted = server.request("POST", "/v1/chat/completions", _chat_body(server), headers=form)
    assert_error(posted, 415, "unsupported_media_type")
    assert "refused POST /v1/chat/completions" in server.log.read_text()
    assert_reference_answer(server)


# -- errors -------------------------------------------------------------------------------------


def _chat_body(server: Server, **fields) -> dict:
    body = {"model": server.model, "messages": [{"role": "user", "content": PROMPT}]}
    return {**body, "max_tokens": 8, **fields}


def assert_error(reply, status: int, code: str | None, param: str | None = None) -> None:
    got_status, _, body = reply
    assert got_status == status, body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code and body["error"]["message"]
    if param is not None:
        assert body["error"]["param"] == param


def test_every_error_has_its_status_and_shape_and_the_next_answer_is_right(server: Server):
    def post(**fields):
        return server.request("POST", "/v1/chat/completions", _chat_body(server, **fields))

    tools = [{"type": "function", "function": {"name": "f"}}]
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with_image = [{"role": "user", "content": [{"type": "text", "text": "What?"}, image]}]
    too_long = [{"role": "user", "content": "word " * (CTX + 50)}]
    malformed = server.request("POST", "/v1/chat/completions", b'{"model": "x", "messages": [')
    cases = [
        (malformed, 400, "invalid_json", None),
        (post(max_tokens="ten"), 400, "invalid_type", "max_tokens"),
        (post(n=2), 400, "unsupported_parameter", "n"),
        (post(logprobs=True), 400, "unsupported_parameter", "logprobs"),
        (post(tools=tools), 400, "tools_not_supported", "tools"),  # SmolLM2's template
        (post(messages=with_image), 400, "unsupported_parameter", "messages[0].content[1]"),
        (post(messages=too_long), 400, "context_length_exceeded", "messages"),
        (server.request("GET", "/v1/nowhere"), 404, None, None),
        (server.request("GET", "/v1/chat/completions"), 405, None, None),
        (server.request("GET", "/v1/models/gpt-4o"), 404, "model_not_found", "model"),
    ]
    for reply, status, code, param in cases:
        assert_error(reply, status, code, param)
    assert_reference_answer(server)


def test_the_api_key_is_required_except_for_health(server: Server):
    for authorization in ({"Authorization": ""}, {"Authorization": "Bearer wrong-key"}):
        reply = server.request("POST", "/v1/chat/completions", _chat_body(server), authorization)
        assert_error(reply, 401, "invalid_api_key")
        assert reply[1]["www-authenticate"] == "Bearer"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="nope", max_retries=0).models.list()
    assert server.request("GET", "/health", headers={"Authorization": ""})[0] == 200
    assert_reference_answer(server)


def test_a_body_over_the_limit_is_refused_before_it_is_read(server: Server):
    connection = http.client.HTTPConnection(*server.address, timeout=30)
    connection.putrequest("POST", "/v1/chat/completions")
    connection.putheader("Authorization", f"Bearer {KEY}")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(64 * 1024 * 1024))
    connection.endheaders(b"{")  # the server answers without waiting for the other 64 MiB
    response = connection.getresponse()
    body = json.loads(response.read())
    connection.close()
    assert response.status == 413 and body["error"]["code"] == "request_too_large"
    assert_reference_answer(server)


# -- the command --------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "0.0.0.0"])
def test_a_taken_port_is_one_error_line_and_exit_1(smol_f32: Path, host: str):
    """Before any model loads; on every interface without a key, after a warning."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = ["serve", "--target", str(smol_f32), "--host", host, "--port", str(port)]
        result = CliRunner().invoke(app, command, env={"SPECLLAMA_API_KEY": None})
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"error: cannot listen on {host}:{port}"), lines
    if host == "127.0.0.1":
        assert len(lines) == 1, lines
    else:
        assert len(lines) == 2 and lines[0].startswith("warning: listening on 0.0.0.0 without")


@pytest.mark.parametrize("origin", ["evil.example", "http://", "ftp://site", "http://a.b/path"])
def test_cors_takes_origins_only(smol_f32: Path, origin: str):
    command = ["serve", "--target", str(smol_f32), "--cors", "http://ok.example:3000"]
    result = CliRunner().invoke(app, [*command, "--cors", origin])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: --cors {origin!r} is not an origin (hint: give scheme://host[:port], or '*')"
    ]


def test_open_shows_the_page_in_the_browser_once_ready(smol_f32: Path, tmp_path: Path):
    """webbrowser runs $BROWSER with the URL: here a script that writes it down and fetches it."""
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.py"
    browser.write_text(
        "import sys, urllib.request\n"
        f"page = urllib.request.urlopen(sys.argv[1]).read()\n"
        f"open({str(opened)!r}, 'w').write(sys.argv[1] + ' ' + str(b'<title>specllama' in page))\n"
    )
    env = {"BROWSER": f"{sys.executable} {browser} %s", "DISPLAY": ""}
    for server in serve(smol_f32, ["--open"], tmp_path / "stderr.txt", env=env):
        deadline = time.monotonic() + 30
        while not opened.exists() or not opened.read_text():
            assert time.monotonic() < deadline, server.log.read_text()
            time.sleep(0.1)
        assert opened.read_text() == f"{server.url}/ True"


# -- a target that drafts with its own head (MTP): a synthetic qwen35 (tests/qwen35_models.py) --


MTP_CTX = 16384


@pytest.fixture(scope="module")
def mtp_server(qwen35_mtp: Path, tmp_path_factory) -> Iterator[Server]:
    """A tiny model writes ~1000 tokens a second here: room for an answer long enough to be
    cut short."""
    extra = ["--drafter", "mtp", "--fixed", "--draft-max", "3"]
    log = tmp_path_factory.mktemp("serve-mtp") / "stderr.txt"
    yield from serve(qwen35_mtp, extra, log, ctx=MTP_CTX)


def test_mtp_answers_equal_the_target_alone_and_a_disconnect_cancels(
    mtp_server: Server, qwen35_mtp: Path
):
    def completion(max_tokens: int):
        return mtp_server.client().completions.create(
            model=mtp_server.model, prompt=COUNTING, max_tokens=max_tokens
        )

    text, n_generated = reference(COUNTING, 40, template=False, target=qwen35_mtp)
    answer = completion(40)
    assert answer.choices[0].text == text and answer.usage.completion_tokens == n_generated
    stats = answer.model_extra["specllama"]
    assert stats["drafter"] == "mtp" and 0 < stats["n_accepted"] < stats["n_drafted"]
    long = MTP_CTX - 100
    start_stream(mtp_server, max_tokens=long).close()  # a client that goes away mid-answer
    mtp_server.wait_idle(timeout=30)
    cancelled = re.findall(r"cancelled after (\d+) tokens", mtp_server.log.read_text())
    assert len(cancelled) == 1 and int(cancelled[0]) < long
    assert completion(40).choices[0].text == text  # both caches were left right


def test_mtp_drafts_are_streamed_as_the_heads(mtp_server: Server, qwen35_mtp: Path):
    stream = mtp_server.client().completions.create(
        model=mtp_server.model, prompt=COUNTING, max_tokens=40, stream=True
    )
    extensions = [c.model_extra["specllama"] for c in stream if "specllama" in c.model_extra]
    *live, final = extensions
    tokens = [token for ext in live for token in ext["tokens"]]
    assert (
        "".join(text for text, _ in tokens)
        == reference(COUNTING, 40, template=False, target=qwen35_mtp)[0]
    )
    origins = [who for _, who in tokens]
    assert origins.count("mtp") == final["n_accepted"] > 0
    assert set(origins) == {"mtp", "target"} and len(origins) == final["n_generated"]


def test_n_predict_caps_every_answer_whatever_it_asks(smol_f32: Path, tmp_path: Path):
    """--n-predict N: no answer is longer than N tokens (llama-server's -n); one that asks for
    fewer gets what it asked; the text is the target alone's, cut there."""
    served = serve(smol_f32, ["--n-predict", "5"], tmp_path / "stderr.txt")
    server = next(served)
    try:
        for asked, got in [(24, 5), (None, 5), (3, 3)]:
            kwargs = {} if asked is None else {"max_tokens": asked}
            answer = server.client().chat.completions.create(
                model=server.model, messages=[{"role": "user", "content": PROMPT}], **kwargs
            )
            assert answer.usage.completion_tokens == got
            assert answer.choices[0].finish_reason == "length"
            assert answer.choices[0].message.content == reference(PROMPT, got)[0]
    finally:
        served.close()
