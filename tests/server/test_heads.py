"""`specllama serve --draft HEAD.gguf`: a draft head in its own file (a synthetic DFlash head,
tests/head_models.py) drafts for the server's answers, chosen per request like any drafter, and
its accepted tokens are streamed as a head's. Talked to with the official `openai` package."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import head_models
import pytest
from serving import COUNTING, KEY, Server, reference, serve

pytestmark = pytest.mark.slow
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def head_server(tmp_path_factory) -> Iterator[Server]:
    # Fixed: the head drafts every round (the adaptive default would copy the repeated answers
    # from the server's memory instead).
    extra = ["--draft", str(head_models.tiny_dflash(0.8)), "--fixed", "--draft-max", "3"]
    log = tmp_path_factory.mktemp("serve-head") / "stderr.txt"
    yield from serve(head_models.tiny_target(), extra, log)


def _completion(server: Server, drafter: str, *, stream: bool = False):
    return server.client().completions.create(
        model=server.model, prompt=COUNTING, max_tokens=40, stream=stream,
        extra_body={"specllama": {"drafter": drafter}},
    )  # fmt: skip


def test_each_drafter_a_request_names_gives_the_target_alone_text(head_server: Server):
    text, n_generated = reference(COUNTING, 40, template=False, target=head_models.tiny_target())
    request = urllib.request.Request(f"{head_server.url}/specllama/status", headers=AUTH)
    with urllib.request.urlopen(request) as response:
        status = json.load(response)
    assert "dflash" in status["drafters"]
    for drafter in ("dflash", "auto", "ngram", "none"):
        answer = _completion(head_server, drafter)
        assert answer.choices[0].text == text, drafter
        assert answer.usage.completion_tokens == n_generated
    stats = _completion(head_server, "dflash").model_extra["specllama"]
    assert stats["drafter"] == "dflash" and 0 < stats["n_accepted"] < stats["n_drafted"]


def test_the_heads_accepted_tokens_are_streamed_as_a_heads(head_server: Server):
    stream = _completion(head_server, "dflash", stream=True)
    extensions = [c.model_extra["specllama"] for c in stream if "specllama" in c.model_extra]
    *live, final = extensions
    tokens = [token for ext in live for token in ext["tokens"]]
    target: Path = head_models.tiny_target()
    assert (
        "".join(text for text, _ in tokens)
        == reference(COUNTING, 40, template=False, target=target)[0]
    )
    origins = [who for _, who in tokens]
    assert origins.count("mtp") == final["n_accepted"] > 0  # a head's tokens, as MTP's
    assert set(origins) == {"mtp", "target"} and len(origins) == final["n_generated"]
