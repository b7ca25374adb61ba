"""The chat page in a real headless Chromium (the system's, driven by Playwright), against a real
`specllama serve` on the strict pair: F32 SmolLM2 target, its Q4_1 file drafting 4 tokens a
round, so that every answer has accepted drafts to colour and greedy text to compare.

Chromium comes from the system's packages (`apt-get install chromium`; `.ci/run` installs it);
nothing is downloaded. Without it these tests are skipped, loudly, unless
SPECLLAMA_REQUIRE_BROWSER=1 (CI sets it), when they fail.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from serving import KEY, PROMPT, Server, chat, reference, serve, start_stream

pytestmark = pytest.mark.slow

playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# As root and on a closed network: no sandbox, and none of Chromium's own connections.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP rebound.test 127.0.0.1",  # a name an attacker points here
]
N = 40  # tokens an answer may have: long enough to draft, short enough to be quick
TIMEOUT_MS = 120_000


def _no_browser() -> None:
    message = "no Chromium here: apt-get install chromium (the page tests need it)"
    if os.environ.get("SPECLLAMA_REQUIRE_BROWSER") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def server(smol_f32: Path, smol_q4: Path, tmp_path_factory) -> Iterator[Server]:
    extra = ["--draft", str(smol_q4), "--fixed", "--draft-max", "4", "--queue", "1"]
    yield from serve(smol_f32, extra, tmp_path_factory.mktemp("page") / "stderr.txt")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        _no_browser()
    with playwright.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


class Page:
    """One tab on the chat page, with the key given, and every console error collected."""

    def __init__(self, browser, server: Server, *, key: str | None = KEY, **context) -> None:
        self.context = browser.new_context(**context)
        if key is not None:
            self.context.add_init_script(f"sessionStorage.setItem('specllama.key', '{key}')")
        self.tab = self.context.new_page()
        self.tab.set_default_timeout(TIMEOUT_MS)
        self.errors: list[str] = []
        self.tab.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.tab.on("pageerror", lambda e: self.errors.append(str(e)))
        self.server = server

    def open(self) -> Page:
        self.tab.goto(f"{self.server.url}/")
        return self

    def ready(self) -> Page:
        self.tab.wait_for_selector("#server-facts dd")
        return self

    def setting(self, name: str, value: str) -> None:
        self.tab.fill(f"#set-{name}", value)
        self.tab.dispatch_event(f"#set-{name}", "change")

    def markdown(self, on: bool) -> None:
        self.tab.set_checked("#set-markdown", on)

    def ask(self, prompt: str) -> None:
        self.tab.fill("#input", prompt)
        self.tab.press("#input", "Enter")

    def answer(self, state: str = "done"):
        return self.tab.wait_for_selector(f".msg.assistant[data-state={state}]")

    def stored(self) -> list[dict]:
        return json.loads(self.tab.evaluate("localStorage.getItem('specllama.chats')"))

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def page(browser, server: Server) -> Iterator[Page]:
    opened = Page(browser, server).open().ready()
    yield opened
    opened.close()
    assert opened.errors == []


def api_answer(server: Server, prompt: str, max_tokens: int = N) -> tuple[str, dict]:
    answer = chat(server, prompt, max_tokens)
    return answer.choices[0].message.content, answer.model_extra["specllama"]


# -- the page and an answer -----------------------------------------------------------------------


def test_the_page_loads_clean_and_names_the_pair(page: Page, smol_f32: Path, smol_q4: Path):
    facts = page.tab.inner_text("#server-facts")
    assert smol_f32.name in facts and smol_q4.name in facts and "512 tokens" in facts
    options = page.tab.eval_on_selector_all("#set-drafter option", "os => os.map(o => o.value)")
    assert options == ["auto", "model", "ngram", "none"]
    assert page.tab.inner_text("#pair").startswith(smol_f32.name)


def test_an_answer_streams_the_apis_text_in_spans_that_count_the_drafts(page: Page):
    page.markdown(False)  # the text as it came, token by token
    page.setting("max_tokens", str(N))
    page.ask(PROMPT)
    answer = page.answer()
    text, stats = api_answer(page.server, PROMPT)
    assert text == reference(PROMPT, N)[0]
    assert answer.eval_on_selector(".body", "b => b.textContent") == text
    spans = answer.eval_on_selector_all(
        ".body .tok", "ss => ss.map(s => [s.dataset.i, s.className, s.textContent])"
    )
    assert "".join(t for _, _, t in spans) == text  # the spans cover exactly the answer
    by_origin = {}
    for i, kind, _ in spans:
        by_origin.setdefault(kind.removeprefix("tok o-"), set()).add(i)
    figures = page.stored()[0]["messages"][1]["figures"]  # what the stream said
    assert figures["n_accepted"] == stats["n_accepted"] > 0
    assert len(by_origin["model"]) == stats["n_accepted"]
    assert len(by_origin["target"]) == stats["n_generated"] - stats["n_accepted"]
    counts = answer.eval_on_selector_all(".origins .count", "cs => cs.map(c => c.dataset.count)")
    assert counts == [str(len(by_origin["target"])), str(len(by_origin["model"]))]
    line = answer.query_selector(".figures").inner_text()
    assert f"{stats['n_generated']} tokens" in line and "tok/s" in line
    assert f"of {stats['n_drafted']} drafted" in line and "drafter model" in line


def test_markdown_code_gets_a_copy_button(page: Page):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.setting("max_tokens", "60")
    page.ask("Write a Python function that adds two numbers, in a code block.")
    answer = page.answer()
    code = answer.query_selector(".code pre").inner_text()
    assert "def " in code and "return" in code
    page.tab.click(".code .copy")
    page.tab.wait_for_function(
        "() => document.querySelector('.code .copy').textContent === 'Copied'"
    )
    assert page.tab.evaluate("navigator.clipboard.readText()") == code.rstrip("\n")


HOSTILE = (
    'Look: <script>window.pwned = 1</script> and <img src=x onerror="window.pwned = 2">\n\n'
    "```html\n<script>window.pwned = 3</script>\n```\n**bold** <b>not bold</b>"
)


def test_model_output_that_looks_like_html_is_shown_as_text(page: Page):
    """An answer as the stream leaves it in the history, rendered on reload."""
    chat_ = {
        "id": "1",
        "title": "html",
        "messages": [
            {"role": "user", "content": "html please"},
            {
                "role": "assistant",
                "content": HOSTILE,
                "tokens": [[HOSTILE, "model"]],
                "figures": None,
                "state": "done",
            },
        ],
    }
    page.tab.evaluate(
        "c => { localStorage.setItem('specllama.chats', JSON.stringify([c]));"
        " localStorage.setItem('specllama.current', '1'); }",
        chat_,
    )
    for markdown in (True, False):
        page.markdown(markdown)
        page.tab.reload()
        body = page.tab.wait_for_selector(".msg.assistant .body")
        shown = body.inner_text()
        assert "<script>window.pwned = 1</script>" in shown and "onerror" in shown
        assert body.query_selector_all("script, img, b") == []
        assert page.tab.evaluate("window.pwned") is None
    assert body.query_selector("strong") is None  # markdown off
    page.markdown(True)
    assert page.tab.query_selector(".msg.assistant .body strong").inner_text() == "bold"


# -- stop, compare, again, edit, reload ------------------------------------------------------------


def test_stop_ends_the_generation_on_the_server(page: Page):
    server = page.server
    server.wait_idle()
    cancelled = server.log.read_text().count("cancelled after")
    page.setting("max_tokens", "400")
    page.ask("Count from 1 to 300, separated by commas.")
    page.tab.wait_for_function(
        "() => /tok\\/s/.test(document.querySelector('.msg.assistant .figures')?.textContent)"
    )
    page.tab.keyboard.press("Escape")
    answer = page.answer("stopped")
    server.wait_idle(timeout=30)
    stopped = re.findall(r"cancelled after (\d+) tokens", server.log.read_text())
    assert len(stopped) == cancelled + 1 and int(stopped[-1]) < 400
    assert "stopped" in answer.query_selector(".figures").inner_text()
    page.setting("max_tokens", str(N))  # the next request is answered, and right
    page.markdown(False)
    page.tab.click("#new-chat")
    page.ask(PROMPT)
    assert page.answer().query_selector(".body").text_content() == reference(PROMPT, N)[0]


def test_compare_shows_the_same_text_and_a_ratio(page: Page):
    page.markdown(False)
    page.setting("max_tokens", str(N))
    page.ask(PROMPT)
    answer = page.answer()
    page.tab.click("button.compare")
    verdict = page.tab.wait_for_selector(".comparison .verdict")
    assert verdict.get_attribute("data-same") == "true"
    assert float(verdict.get_attribute("data-ratio")) > 0
    assert re.search(r"\d+\.\d\dx", verdict.inner_text()) and "identical" in verdict.inner_text()
    alone = page.tab.query_selector(".comparison .body").text_content()
    assert alone == answer.query_selector(".body").text_content() == reference(PROMPT, N)[0]
    figures = page.tab.query_selector(".comparison .figures").inner_text()
    assert "nothing drafted" in figures and "drafter none" in figures


def test_same_answer_again_with_the_seed_of_a_sampled_answer(page: Page):
    page.markdown(False)
    page.setting("max_tokens", "24")
    page.setting("temperature", "1.0")
    page.ask(PROMPT)
    first = page.answer().query_selector(".body").text_content()
    seed = page.stored()[0]["messages"][1]["figures"]["seed"]
    assert isinstance(seed, int)
    page.tab.click("button.again")
    verdict = page.tab.wait_for_selector(".msg.assistant .verdict")
    assert "Same text as before" in verdict.inner_text()
    assert page.tab.query_selector(".msg.assistant .body").text_content() == first
    assert f"seed {seed}" in page.tab.inner_text(".msg.assistant .figures")


def test_edit_resend_new_chat_and_a_reload_keeps_the_history(page: Page):
    page.markdown(False)
    page.setting("max_tokens", "16")
    page.tab.fill("#input", "first line")
    page.tab.press("#input", "Shift+Enter")  # a new line, not a send
    assert page.tab.input_value("#input") == "first line\n"
    assert page.tab.query_selector(".msg.user") is None
    page.tab.fill("#input", "Name a fruit.")
    page.tab.press("#input", "Enter")
    page.answer()
    page.tab.click(".msg.user button")  # Edit: the message comes back to the box
    assert page.tab.input_value("#input") == "Name a fruit."
    assert page.tab.query_selector_all(".msg") == []
    page.ask(PROMPT)
    text = page.answer().query_selector(".body").text_content()
    assert text == reference(PROMPT, 16)[0]
    page.tab.reload()
    page.ready()
    assert page.tab.query_selector(".msg.user .body").text_content() == PROMPT
    assert page.tab.query_selector(".msg.assistant .body").text_content() == text
    assert page.tab.inner_text("#chat-list .current .open") == PROMPT  # named anew
    page.tab.click("#new-chat")
    assert page.tab.query_selector(".msg.user") is None
    assert len(page.tab.query_selector_all("#chat-list li")) == 1
    page.tab.click("#chat-list .open")
    assert page.tab.query_selector(".msg.assistant .body").text_content() == text


def test_a_busy_server_is_retried_until_it_answers(page: Page):
    server = page.server
    server.wait_idle()
    long_one = start_stream(server, max_tokens=400)
    waiting = threading.Thread(target=lambda: chat(server, PROMPT, 8))  # the one queue place
    waiting.start()
    deadline = time.monotonic() + 30
    while server.health()["waiting"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    page.markdown(False)
    page.setting("max_tokens", "16")
    page.ask(PROMPT)
    page.tab.wait_for_selector("#notice:has-text('busy')")
    long_one.close()
    answer = page.answer()
    waiting.join(timeout=60)
    assert answer.query_selector(".body").text_content() == reference(PROMPT, 16)[0]
    assert page.tab.is_hidden("#notice")
    page.errors[:] = [e for e in page.errors if "status of 503" not in e]  # the busy answers


def test_other_clients_requests_are_shown_while_they_run(page: Page):
    server = page.server
    server.wait_idle()
    assert page.tab.is_hidden("#busy")
    long_one = start_stream(server, max_tokens=400)
    page.tab.wait_for_selector("#busy:has-text('1 other request running')")
    long_one.close()
    page.tab.wait_for_selector("#busy", state="hidden")


# -- the key, other sites, screens ---------------------------------------------------------------


def test_a_wrong_key_is_refused_on_the_page_and_the_right_one_works(browser, server: Server):
    page = Page(browser, server, key=None).open()
    try:
        page.tab.wait_for_selector("#key-form:not([hidden])")
        assert "needs its API key" in page.tab.inner_text("#key-error")
        page.tab.fill("#key-input", "wrong-key")
        page.tab.press("#key-input", "Enter")
        page.tab.wait_for_selector("#key-error:has-text('refused')")
        assert (
            page.tab.is_visible("#key-form") and page.tab.query_selector("#server-facts dd") is None
        )
        page.tab.fill("#key-input", KEY)
        page.tab.press("#key-input", "Enter")
        page.ready()
        assert page.tab.is_hidden("#key-form")
        assert page.tab.evaluate("sessionStorage.getItem('specllama.key')") == KEY
    finally:
        page.close()
    # The browser logs the 401 responses as errors: those are the refusals this test wants.
    assert all("401" in error for error in page.errors), page.errors


HOSTILE_SITE = """<!doctype html><meta charset="utf-8"><script>
const api = "%s";
const results = {};
async function attempt(name, request) {
  try { const r = await request(); results[name] = r.type === "opaque" ? "opaque" : r.status; }
  catch (e) { results[name] = "blocked"; }
}
(async () => {
  await attempt("read", () => fetch(api + "/v1/models", {headers: {Authorization: "Bearer %s"}}));
  await attempt("status", () => fetch(api + "/specllama/status"));
  await attempt("post", () => fetch(api + "/v1/chat/completions", {method: "POST", mode: "no-cors",
    headers: {"Content-Type": "text/plain"},
    body: JSON.stringify({model: "%s", messages: [{role: "user", content: "hi"}]})}));
  document.title = JSON.stringify(results);
})();
</script>"""


def test_another_site_and_a_rebound_name_are_refused(browser, server: Server, tmp_path: Path):
    (tmp_path / "index.html").write_text(HOSTILE_SITE % (server.url, KEY, server.model))
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    server.wait_idle()
    answered = server.log.read_text().count("chat:")
    page = Page(browser, server)
    try:
        page.tab.goto(f"http://127.0.0.1:{site.server_address[1]}/index.html")
        page.tab.wait_for_function("() => document.title.startsWith('{')")
        results = json.loads(page.tab.title())
        # Nothing read: the browser sees no CORS header on the refusals.
        assert results == {"read": "blocked", "status": "blocked", "post": "opaque"}
        log = server.log.read_text()
        assert "refused GET /specllama/status: Requests from web pages at http://127.0.0.1:" in log
        assert "refused POST /v1/chat/completions" in log
        assert log.count("chat:") == answered  # the posted request never ran

        port = server.address[1]
        response = page.tab.goto(f"http://rebound.test:{port}/")
        assert response.status == 403 and "host_not_allowed" in response.text()
    finally:
        page.close()
        site.shutdown()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_phone_screen_in_light_and_dark(browser, server: Server, scheme: str):
    page = Page(browser, server, viewport={"width": 390, "height": 844}, color_scheme=scheme)
    try:
        page.open()
        page.tab.wait_for_selector("#input")
        assert page.tab.is_visible("#input") and page.tab.is_visible("#send")
        assert page.tab.is_hidden("#settings") and page.tab.is_hidden("#chats")
        page.tab.click("#toggle-settings")
        page.tab.wait_for_selector("#server-facts dd")
        assert page.tab.is_visible("#set-temperature")
        width = page.tab.evaluate("document.documentElement.scrollWidth")
        assert width <= 390  # nothing wider than the screen
        background = page.tab.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == ("rgb(255, 255, 255)" if scheme == "light" else "rgb(13, 17, 23)")
    finally:
        page.close()
    assert page.errors == []
