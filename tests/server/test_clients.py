"""Structured-output libraries against a real `specllama serve`: instructor gets a pydantic
object back, through a forced tool call (Mode.TOOLS) and through response_format's JSON Schema
(Mode.JSON_SCHEMA), the way programs written for OpenAI's API use it.

The model is Qwen2.5-Coder 0.5B (the default pair's draft, cached by the first fetch), served
as the target with n-gram drafting: its chat template knows tools (SmolLM2's does not), and it
reads the few facts of the prompt right, where the 135M test model does not reliably.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import instructor
import pytest
from pydantic import BaseModel, Field
from serving import Server, serve

from specllama.models import hub
from specllama.models.catalog import load_catalog

pytestmark = pytest.mark.slow


class Person(BaseModel):
    name: str
    age: int = Field(ge=0, le=150)
    hobbies: list[str] = Field(max_length=4)


ASK = "Extract the person: Alice Moreau is 31 years old and likes chess and tea."


@pytest.fixture(scope="module")
def qwen_small() -> Path:
    _, draft, _ = hub.resolve_pair(load_catalog(), None)
    assert draft is not None
    return draft


@pytest.fixture(scope="module")
def server(qwen_small: Path, tmp_path_factory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    # n-gram lookup at a fixed length: no calibration to wait for at the start.
    yield from serve(qwen_small, ["--drafter", "ngram", "--fixed", "-k", "8"], log, ctx=2048)


@pytest.mark.parametrize(
    ("mode", "extra"),
    [
        # As instructor sends it: the one function forced by name, parallel_tool_calls left
        # at OpenAI's default (true): one call comes back all the same.
        pytest.param(instructor.Mode.TOOLS, {}, id="tools"),
        pytest.param(instructor.Mode.TOOLS, {"parallel_tool_calls": False}, id="tools-one-call"),
        pytest.param(instructor.Mode.JSON_SCHEMA, {}, id="json-schema"),
    ],
)
def test_instructor_gets_a_pydantic_object_back(server: Server, mode: instructor.Mode, extra):
    client = instructor.from_openai(server.client(), mode=mode)
    person = client.chat.completions.create(
        model=server.model,
        response_model=Person,
        messages=[{"role": "user", "content": ASK}],
        max_tokens=96,
        temperature=0,
        max_retries=0,  # the first answer must parse: no second try to hide a bad one
        **extra,
    )
    assert isinstance(person, Person)
    assert person.name.startswith("Alice") and person.age == 31
    assert {h.lower() for h in person.hobbies} >= {"chess", "tea"}


def test_a_streamed_partial_object_ends_as_the_whole_object(server: Server):
    """instructor's Partial streaming: the JSON Schema answer arrives in pieces, each one a
    valid partial object, the last one whole."""
    client = instructor.from_openai(server.client(), mode=instructor.Mode.JSON_SCHEMA)
    parts = list(
        client.chat.completions.create_partial(
            model=server.model,
            response_model=Person,
            messages=[{"role": "user", "content": ASK}],
            max_tokens=96,
            temperature=0,
            max_retries=0,
        )
    )
    assert len(parts) > 1
    last = parts[-1]
    assert last.name.startswith("Alice") and last.age == 31
