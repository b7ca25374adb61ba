"""TokenTape: the text a stop matcher lets through, handed out again as whole tokens."""

from __future__ import annotations

from specllama.engine.stops import StopMatcher
from specllama.server.origins import TARGET, TokenTape, origin


def through(tokens: list[tuple[str, str]], stops: tuple[str, ...] = ()) -> list[list]:
    """Feed tokens as the server does; the pieces handed out after each token, then at the end."""
    tape, matcher, out = TokenTape(), StopMatcher(stops), []
    for text, who in tokens:
        tape.add(text, who)
        out.append(tape.release(matcher.feed(text)))
        if matcher.stopped:
            break
    else:
        out.append(tape.release(matcher.flush()))
    out.append(tape.finish())
    return out


def test_without_stop_strings_each_token_comes_out_at_once():
    tokens = [("Hel", "target"), ("lo", "model"), ("", "model"), ("é", "target")]
    out = through(tokens)
    assert out[:4] == [[t] for t in tokens]  # the empty one (half a character) too
    assert out[4:] == [[], []]


def test_text_a_stop_string_held_back_comes_out_with_its_tokens():
    # " S" could begin the stop " STOP": held until " Sun" shows it does not.
    out = through([("Hi", "target"), (" S", "ngram"), ("un", "model")], stops=(" STOP",))
    assert out == [[("Hi", "target")], [], [(" S", "ngram"), ("un", "model")], [], []]


def test_a_token_cut_by_a_stop_string_keeps_the_part_before_it():
    out = through(
        [("A", "target"), ("B S", "model"), ("TOP", "target"), ("!", "target")], (" STOP",)
    )
    pieces = [piece for step in out for piece in step]
    assert pieces == [("A", "target"), ("B", "model")]  # "TOP" and "!" are the stop's or after it
    assert "".join(text for text, _ in pieces) == "AB"


def test_text_after_the_last_token_is_that_tokens():
    tape = TokenTape()
    tape.add("a", "model")
    tape.extend_last("\ufffd")  # the detokeniser's held bytes at the end
    tape.extend_last("")
    assert tape.release("a\ufffd") == [("a\ufffd", "model")]
    tape.extend_last("z")  # after every token was handed out: a piece of its own
    assert tape.release("z") == [("z", "model")]


def test_origin_names_the_drafter_kind_of_accepted_tokens_only():
    assert origin("ngram12-mixed", from_draft=True) == "ngram"
    assert origin("model", from_draft=True) == "model"
    assert origin("mtp", from_draft=True) == "mtp"
    assert origin("model", from_draft=False) == TARGET
