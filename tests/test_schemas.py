"""Object schemas closed as llama.cpp closes them."""

from __future__ import annotations

import json

import pytest

from specllama.engine.constraint import ConstraintSpec
from specllama.schemas import closed

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "year": {"type": "integer"}}}


def test_an_object_that_lists_its_properties_is_closed_at_every_depth():
    nested = {
        "type": "object",
        "properties": {"people": {"type": "array", "items": PERSON}, "lead": PERSON},
        "$defs": {"p": PERSON},
        "anyOf": [PERSON],
    }
    got = closed(nested)
    assert got["additionalProperties"] is False
    assert got["properties"]["people"]["items"]["additionalProperties"] is False
    assert got["properties"]["lead"]["additionalProperties"] is False
    assert got["$defs"]["p"]["additionalProperties"] is False
    assert got["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in PERSON  # the client's schema is left as it was


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},  # any object: nothing listed, nothing to close
        {**PERSON, "additionalProperties": True},  # the client said so
        {**PERSON, "additionalProperties": {"type": "string"}},
        True,
    ],
)
def test_what_the_client_said_or_left_open_stays(schema):
    got = closed(schema)
    if isinstance(schema, dict):
        assert got.get("additionalProperties") == schema.get("additionalProperties")
    else:
        assert got is schema


def test_an_all_of_and_its_parts_stay_open_their_insides_close():
    city = {"properties": {"city": {"type": "string"}, "home": PERSON}}
    schema = {"allOf": [PERSON, city], "properties": {}}
    got = closed(schema)
    assert all("additionalProperties" not in part for part in [got, *got["allOf"]])
    assert got["allOf"][1]["properties"]["home"]["additionalProperties"] is False


def test_a_schema_rule_is_the_closed_schema():
    assert json.loads(ConstraintSpec.json_schema(PERSON).source) == closed(PERSON)
