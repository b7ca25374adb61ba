"""Stop strings over streamed text: found across pieces, never emitted, nothing else held."""

from __future__ import annotations

from specllama.engine.stops import StopMatcher


def stream(stops: list[str], pieces: list[str]) -> tuple[list[str], bool]:
    """What a client receives for these pieces: the emitted pieces, and whether it stopped."""
    matcher = StopMatcher(stops)
    out = [matcher.feed(p) for p in pieces]
    if not matcher.stopped:
        out.append(matcher.flush())
    return [p for p in out if p], matcher.stopped


def test_a_stop_string_split_over_pieces_is_found_and_not_emitted():
    out, stopped = stream(["\n\nUser:"], ["Hello", "\n", "\nUs", "er:", " more"])
    assert out == ["Hello"] and stopped


def test_text_that_only_starts_like_a_stop_string_is_held_then_released():
    matcher = StopMatcher(["STOP"])
    assert matcher.feed("abc ST") == "abc "  # "ST" could begin "STOP"
    assert matcher.feed("ART") == "START"
    assert matcher.feed(" S") == " "
    assert matcher.flush() == "S"  # the text ended: nothing is lost
    assert not matcher.stopped


def test_the_earliest_of_several_stop_strings_wins():
    out, stopped = stream(["world", "lo w"], ["hel", "lo wor", "ld"])
    assert "".join(out) == "hel" and stopped


def test_a_stop_string_inside_one_piece_cuts_it_and_nothing_follows():
    matcher = StopMatcher(["##"])
    assert matcher.feed("a ## b") == "a "
    assert matcher.feed("more") == "" and matcher.flush() == ""


def test_a_stop_string_at_the_very_start_emits_nothing():
    out, stopped = stream(["<end>"], ["<e", "nd>", "tail"])
    assert out == [] and stopped


def test_without_stop_strings_text_passes_through_unchanged():
    out, stopped = stream([], ["a", "", "b\n"])
    assert out == ["a", "b\n"] and not stopped


def test_overlapping_prefixes_hold_back_only_what_could_still_match():
    matcher = StopMatcher(["aab"])
    assert matcher.feed("aa") == ""
    assert matcher.feed("a") == "a"  # "aaa": only the last "aa" can still start "aab"
    assert matcher.feed("b") == "" and matcher.stopped
