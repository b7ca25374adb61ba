"""JSON read while it is written: what is settled of a value never goes past the text (nor
past what is not JSON), and a value read whole is where `json` reads it."""

from __future__ import annotations

import json
import random

from specllama.json_text import (
    Growing,
    elements,
    find,
    member_at,
    members,
    settled_end,
    string_at,
    value_end,
)

VALUE = {"path": 'a "b" \\ c', "n": [1, -2.5e3, True, None], "deep": {"x": "}]"}, "e": ""}


def test_every_prefix_of_a_value_is_settled_up_to_where_it_may_still_change():
    text = json.dumps(VALUE)
    for cut in range(len(text) + 1):
        end, whole = settled_end(text[:cut], 0, cut)
        assert end <= cut and text.startswith(text[:end])
        assert whole == (cut == len(text))  # only the last brace makes it whole
    assert settled_end(text + "</tool_call>", 0, len(text) + 12) == (len(text), True)


def test_what_is_not_json_ends_what_is_settled():
    text = '{"a": 1, <|call|>'
    assert settled_end(text, 0, len(text)) == (text.index("<"), False)


def test_members_and_elements_as_far_as_they_are_written():
    text = json.dumps({"name": "f", "arguments": {"city": "Paris"}})
    for cut in range(len(text)):
        written, end = members(text[:cut], 0)
        assert end is None
        for member in written:
            if member.end is not None:
                assert json.loads(text[member.start : member.end]) == json.loads(text)[member.key]
    written, end = members(text, 0)
    assert [m.key for m in written] == ["name", "arguments"] and end == len(text)
    assert string_at(text, member_at(text, 0, ["name"])) == "f"
    assert member_at(text[: text.index("Paris")], 0, ["arguments", "city"]).end is None
    array = json.dumps([{"a": 1}, {"b": [2]}])
    spans, end = elements(array, 0)
    assert [json.loads(array[s:e]) for s, e in spans] == [{"a": 1}, {"b": [2]}]
    assert end == len(array)


def test_a_number_at_the_end_of_the_text_may_go_on():
    assert value_end("12", 0) is None
    assert value_end("12,", 0) == 2
    assert value_end('"ab"', 0) == 4
    rng = random.Random(3)
    text = json.dumps(VALUE)
    for _ in range(50):
        cut = rng.randint(0, len(text) - 1)
        assert value_end(text[:cut], 0) is None


def test_a_growing_text_reads_as_the_same_text_read_afresh():
    """Fed in random pieces, a growing text's readings (each resumed where the last stopped)
    are, at every point, those of a plain copy read from scratch; `find` too."""
    text = json.dumps({"a": [VALUE, '\\"}'], "b": {"c": "x\\\\"}}) + " <|end|> " + json.dumps(VALUE)
    later = text.rindex("{")
    for seed in range(5):
        rng, grown, at = random.Random(seed), Growing(""), 0
        while at < len(text):
            step = rng.randint(1, 5)
            grown, at = grown.grown(text[at : at + step]), at + step
            plain = str(grown)
            for start in (0, later):
                if start < len(plain):
                    assert settled_end(grown, start, len(plain)) == settled_end(
                        plain, start, len(plain)
                    )
                    assert value_end(grown, start) == value_end(plain, start)
                    assert members(grown, start) == members(plain, start)
            assert find(grown, "<|end|>", 1) == plain.find("<|end|>", 1)
            assert elements(grown, 6) == elements(plain, 6)


def test_a_backslash_at_the_end_of_a_growing_string_waits_for_its_character():
    grown = Growing('{"a": "x\\')
    assert settled_end(grown, 0, len(grown)) == (len(grown), False)  # a string: all so far
    grown = grown.grown('"')  # escaped: the string goes on
    assert settled_end(grown, 0, len(grown)) == (len(grown), False)
    grown = grown.grown('"}')
    assert settled_end(grown, 0, len(grown)) == (len(grown), True)
    assert json.loads(grown) == {"a": 'x"'}
