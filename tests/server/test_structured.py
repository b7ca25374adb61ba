"""Structured output through a real `specllama serve`, asked with the official `openai` client:
response_format (json_schema, json_object) and llama-server's `grammar` (GBNF).

The server runs the strict pair (F32 SmolLM2 target, its Q4_1 file as the draft), so a greedy
answer under a schema must be the same text, token for token, whoever drafts it: the target
alone, the n-gram lookup, or the draft model. A rule that cannot be compiled, or admits no
text, is one 400 naming its parameter, and the next request is answered right.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from serving import Server, serve

pytestmark = pytest.mark.slow

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer"},
        "fruits": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "age", "fruits"],
    "additionalProperties": False,
}
ASK = "Describe a person called Anna, aged 30, who likes apples, as JSON."
YES_NO = 'root ::= answer "."\nanswer ::= "Yes" | "No"'


@pytest.fixture(scope="module")
def server(smol_f32: Path, smol_q4: Path, tmp_path_factory) -> Iterator[Server]:
    extra = ["--draft", str(smol_q4), "--fixed", "--draft-max", "4"]
    yield from serve(smol_f32, extra, tmp_path_factory.mktemp("serve") / "stderr.txt")


def ask(
    server: Server,
    drafter: str | None = None,
    max_tokens: int = 96,
    prompt: str = ASK,
    grammar: str | None = None,
    **kwargs,
):
    """A greedy chat answer; `drafter` and `grammar` go as extra body fields."""
    extra: dict = {"specllama": {"drafter": drafter}} if drafter else {}
    if grammar is not None:
        extra["grammar"] = grammar
    return server.client().chat.completions.create(
        model=server.model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0,
        extra_body=extra or None,
        **kwargs,
    )


def schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "p", "schema": schema, "strict": True}}


def assert_person(text: str) -> None:
    person = json.loads(text)
    assert set(person) == {"name", "age", "fruits"}
    assert isinstance(person["name"], str) and len(person["name"]) <= 16
    assert type(person["age"]) is int
    assert isinstance(person["fruits"], list) and len(person["fruits"]) <= 3
    assert all(isinstance(f, str) for f in person["fruits"])


def test_a_json_schema_answer_is_the_same_whoever_drafts_it(server: Server):
    answers = {d: ask(server, d, response_format=schema_format(PERSON)) for d in DRAFTERS}
    texts = {d: a.choices[0].message.content for d, a in answers.items()}
    assert_person(texts["none"])
    assert texts["ngram"] == texts["model"] == texts["none"], texts
    counts = {d: a.usage.completion_tokens for d, a in answers.items()}
    assert len(set(counts.values())) == 1, counts
    assert all(a.choices[0].finish_reason == "stop" for a in answers.values())
    stats = answers["model"].model_extra["specllama"]
    assert stats["n_forced"] > 0  # keys and punctuation were drafted by the schema itself
    assert answers["none"].model_extra["specllama"]["n_drafted"] == 0


DRAFTERS = ("none", "ngram", "model")


def test_an_unconstrained_answer_to_the_same_prompt_is_not_that_json(server: Server):
    """The schema is what makes the answer JSON: the test above could fail."""
    text = ask(server, "none").choices[0].message.content
    with pytest.raises((ValueError, AssertionError)):
        assert_person(text)


def test_streamed_schema_tokens_make_up_the_text_and_some_are_forced(server: Server):
    stream = ask(server, "model", response_format=schema_format(PERSON), stream=True)
    text, tokens = "", []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        tokens += (chunk.model_extra.get("specllama") or {}).get("tokens", [])
    alone = ask(server, "none", response_format=schema_format(PERSON))
    assert text == alone.choices[0].message.content
    assert "".join(piece for piece, _ in tokens) == text
    assert {"grammar", "target"} <= {origin for _, origin in tokens}


def test_json_object_is_an_object(server: Server):
    answer = ask(server, response_format={"type": "json_object"}, max_tokens=128)
    assert answer.choices[0].finish_reason == "stop", answer.choices[0].message.content
    assert isinstance(json.loads(answer.choices[0].message.content), dict)


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_a_gbnf_grammar_is_followed(server: Server, drafter: str):
    answer = ask(server, drafter, prompt="Is the sky blue?", grammar=YES_NO)
    assert re.fullmatch(r"(Yes|No)\.", answer.choices[0].message.content)


def test_a_text_completion_takes_a_grammar(server: Server):
    answer = server.client().completions.create(
        model=server.model,
        prompt="Q: Is water wet?\nA:",
        max_tokens=8,
        temperature=0,
        extra_body={"grammar": YES_NO},
    )
    assert re.fullmatch(r"(Yes|No)\.", answer.choices[0].text)


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        (
            {"response_format": schema_format({"properties": {"a": {"$ref": "#/x"}}})},
            "response_format",
            "invalid_schema",
        ),
        (
            {"response_format": schema_format({"type": "integer", "minimum": 5, "maximum": 2})},
            "response_format",
            "invalid_schema",
        ),
        ({"extra_body": {"grammar": 'root ::= x\nx ::= x "a"'}}, "grammar", "invalid_grammar"),
        ({"extra_body": {"grammar": "root ::= undefined"}}, "grammar", "invalid_grammar"),
        ({"extra_body": {"grammar": "root ::= ["}}, "grammar", "invalid_grammar"),
    ],
)
def test_a_rule_that_cannot_be_followed_is_one_400_and_the_next_answer_is_right(
    server: Server, fields: dict, param: str, code: str
):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(
            model=server.model, messages=[{"role": "user", "content": ASK}], max_tokens=8, **fields
        )
    error = caught.value.body
    assert (caught.value.status_code, error["param"], error["code"]) == (400, param, code)
    assert error["message"].startswith(f"Invalid '{param}'")
    assert_person(ask(server, response_format=schema_format(PERSON)).choices[0].message.content)
