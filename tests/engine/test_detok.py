"""Token ids -> text: characters split across tokens, and control tokens written or not."""

from __future__ import annotations

from specllama.engine.detok import TextStream

PIECES = {0: (b"", b"<ctl>"), 1: (b"\xc3", b"\xc3"), 2: (b"\xa9!", b"\xa9!")}


class Vocab:
    """Token 0 is a control token (`<ctl>`, nothing as plain text); 1 and 2 split a 'é'."""

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        return PIECES[token][special]


def written(stream: TextStream, tokens: list[int]) -> list[str]:
    return [stream.feed(t) for t in tokens] + [stream.flush()]


def test_a_character_split_across_tokens_waits_for_its_end():
    assert written(TextStream(Vocab()), [1, 2]) == ["", "é!", ""]


def test_control_tokens_are_written_only_when_asked_for():
    assert "".join(written(TextStream(Vocab()), [0, 1, 2, 0])) == "é!"
    assert "".join(written(TextStream(Vocab(), special={0}), [0, 1, 2, 0])) == "<ctl>é!<ctl>"
