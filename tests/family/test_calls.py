"""Every real template's own way of writing calls reads back to the same calls: whole, streamed
in random pieces, two at once, after text; streamed, each call comes as it is written (its
start, its arguments in pieces that join to its arguments exactly, its end); and the grammar
that forces a call accepts what the template writes. No model: the grammars are compiled
against a byte vocabulary whose special tokens are the family's markers."""

from __future__ import annotations

import json
import random

import pytest
from chat_templates import NOT_READ, all_templates, template_names

from specllama.family.call_stream import CallStream, parse_answer
from specllama.family.calls import LearntFormat
from specllama.family.detect import tool_format
from specllama.family.hand_written import Llama3
from specllama.family.harmony import HarmonyFormat
from specllama.family.pieces import Piece
from specllama.family.probes import written_calls
from specllama.family.reader import AnswerReader, read_whole
from specllama.tool_calls import Tool, call_grammar, special_by_text

WEATHER = Tool(
    "get_weather",
    "The weather",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "units": {"type": "object"},
        },
        "required": ["city"],
    },
)
NOW = Tool("now", "The time", {"type": "object", "properties": {}})
TOOLS = [WEATHER, NOW]
ONE = [("get_weather", {"city": "Paris", "days": 3})]
TWO = [("get_weather", {"city": "New York, NY", "days": 2, "units": {"t": "c"}}), ("now", {})]


def tool_templates() -> list[str]:
    return [n for n in template_names() if "tools" in all_templates()[n]]


def read(fmt, text: str, chunks: random.Random | None = None):
    """(content, [(name, arguments)], broken), fed whole or in random pieces."""
    reader = fmt.reader() if isinstance(fmt, HarmonyFormat) else None
    if reader is None:
        stream = CallStream(fmt)
        feed, finish = stream.feed, stream.finish
    else:
        feed, finish = reader.feed, reader.finish
    pos = 0
    while pos < len(text):
        step = chunks.randint(1, 9) if chunks else len(text)
        feed(text[pos : pos + step])
        pos += step
    finish()
    result = stream.result() if reader is None else reader.result()
    calls = [(c.name, json.loads(c.arguments)) for c in result.calls]
    return result.content, calls, result.broken


def written(name: str, calls) -> str:
    try:
        return written_calls(all_templates()[name], calls)
    except Exception as exc:  # a template that cannot render these calls
        pytest.skip(f"the template does not render these calls: {exc}")


@pytest.mark.parametrize("name", tool_templates())
def test_a_call_in_the_templates_own_syntax_reads_back(name):
    if name in NOT_READ:
        pytest.xfail(NOT_READ[name])
    fmt = tool_format(all_templates()[name], TOOLS)
    text = written(name, ONE)
    if "get_weather" not in text:
        pytest.skip("the template writes no calls")
    content, calls, broken = read(fmt, text)
    assert calls == ONE and not broken, (type(fmt).__name__, text)
    assert not (content or "").strip()
    for seed in range(3):
        assert read(fmt, text, random.Random(seed)) == (content, calls, broken)


@pytest.mark.parametrize("name", tool_templates())
def test_two_calls_and_text_before_read_back(name):
    if name in NOT_READ:
        pytest.xfail(NOT_READ[name])
    fmt = tool_format(all_templates()[name], TOOLS)
    text = written(name, TWO)
    if "now" not in text.replace("get_weather", ""):
        pytest.skip("the template writes one call a turn")
    assert read(fmt, text)[1] == TWO, text
    if isinstance(fmt, Llama3 | HarmonyFormat):
        return  # the whole answer is the call / the text is a channel of its own
    content, calls, broken = read(fmt, "Let me look that up.\n" + text)
    assert calls == TWO and not broken
    assert content == "Let me look that up."
    assert read(fmt, "Let me look that up.\n" + text, random.Random(7)) == (content, calls, broken)


# -- streamed as written ---------------------------------------------------------------------

RICH = [("get_weather", {"city": "Saint-Étienne, Loire", "days": 12, "units": {"t": "c"}})]


def reader_for(fmt):
    return fmt.reader() if isinstance(fmt, HarmonyFormat) else AnswerReader(calls=fmt)


def feed(fmt, text: str, steps: random.Random | None = None) -> list[tuple[str, Piece]]:
    reader, out, at = reader_for(fmt), [], 0
    while at < len(text):
        step = steps.randint(1, 9) if steps else 1
        chunk = text[at : at + step]
        at += len(chunk)
        out += [(text[:at], piece) for piece in reader.feed(chunk)]
    return out + [(text, piece) for piece in reader.finish()]


def check_calls(fed: list[tuple[str, Piece]], verbatim: bool) -> list[tuple[str, str, int]]:
    """Each call's pieces in order (start, arguments, end), one call at a time, with one id,
    the arguments joined equal to the call's; `verbatim`: the arguments so far are always in
    the text fed so far. Returns (name, arguments, how many argument pieces) per call."""
    calls: dict[int, dict] = {}
    for so_far, piece in fed:
        if piece.kind == "call_start":
            assert piece.index not in calls and piece.index == len(calls)
            assert piece.call.arguments == ""
            assert all(c["end"] is not None for c in calls.values()), "one call at a time"
            calls[piece.index] = {"start": piece.call, "args": [], "end": None}
        elif piece.kind == "call_args":
            call = calls[piece.index]
            assert call["end"] is None and piece.text
            call["args"].append(piece.text)
            if verbatim:
                assert "".join(call["args"]) in so_far, (so_far, call["args"])
        elif piece.kind == "call":
            call = calls[piece.index]
            assert call["end"] is None and not piece.broken
            call["end"] = piece.call
    found = []
    for index in range(len(calls)):
        start, args, end = calls[index]["start"], calls[index]["args"], calls[index]["end"]
        assert end is not None, "every call that starts ends"
        assert (end.id, end.name) == (start.id, start.name)
        assert "".join(args) == end.arguments
        found.append((end.name, end.arguments, len(args)))
    return found


def rendered(name: str, calls) -> tuple[object, str]:
    if name in NOT_READ:
        pytest.xfail(NOT_READ[name])
    text = written(name, calls)
    if "get_weather" not in text:
        pytest.skip("the template writes no calls")
    return tool_format(all_templates()[name], TOOLS), text


@pytest.mark.parametrize("name", tool_templates())
def test_a_call_streams_as_it_is_written(name):
    fmt, text = rendered(name, RICH)
    whole = read_whole(reader_for(fmt), text)
    assert [(c.name, json.loads(c.arguments)) for c in whole.calls] == RICH, text
    verbatim = whole.calls[0].arguments in text  # JSON as written (else built, tagged)
    fed = feed(fmt, text)
    ((call_name, arguments, n_pieces),) = check_calls(fed, verbatim)
    assert (call_name, arguments) == (whole.calls[0].name, whole.calls[0].arguments)
    assert n_pieces > 1, "the arguments come as they are written, not all at the end"
    end = next(so_far for so_far, piece in fed if piece.kind == "call")
    first = next(so_far for so_far, piece in fed if piece.kind == "call_args")
    assert len(first) < len(end), "the first piece comes before the call ends"
    for seed in range(3):
        assert check_calls(feed(fmt, text, random.Random(seed)), verbatim)[0][:2] == (
            call_name,
            arguments,
        )


@pytest.mark.parametrize("name", tool_templates())
def test_two_calls_after_text_stream_in_order(name):
    fmt, text = rendered(name, TWO)
    if "now" not in text.replace("get_weather", ""):
        pytest.skip("the template writes one call a turn")
    if not isinstance(fmt, HarmonyFormat):
        text = "Let me look that up.\n" + text
    whole = read_whole(reader_for(fmt), text)
    assert [(c.name, json.loads(c.arguments)) for c in whole.calls] == TWO, text
    verbatim = all(c.arguments in text for c in whole.calls)
    for steps in (None, random.Random(1)):
        fed = feed(fmt, text, steps)
        found = check_calls(fed, verbatim)
        assert [(n, a) for n, a, _ in found] == [(c.name, c.arguments) for c in whole.calls]
        said = "".join(p.text for _, p in fed if p.kind == "text")
        assert said == (whole.content or "")


# -- forced calls ---------------------------------------------------------------------------


class ByteVocabulary:
    """A vocabulary of the 256 bytes, the markers as special tokens, and an end token."""

    def __init__(self, special: list[str]) -> None:
        self.special = special
        self.tokens = [bytes([i]) for i in range(256)]
        self.tokens += [b"\xff" + s.encode() for s in special] + [b"\xff<eos>"]
        self.eos_token_id = len(self.tokens) - 1
        self.bos_token_id = None
        self.special_token_ids = list(range(256, len(self.tokens)))

    def __call__(self, text):
        return list(text.encode() if isinstance(text, str) else text)

    def ids(self, text: str) -> list[int]:
        out: list[int] = []
        while text:
            hits = [(text.find(s), -len(s), k) for k, s in enumerate(self.special) if s in text]
            if not hits:
                return out + list(text.encode())
            at, minus, k = min(hits)
            out += [*text[:at].encode(), 256 + k]
            text = text[at - minus :]
        return out


def compact_arguments(text: str, arguments: dict) -> str:
    """`text` with the arguments' JSON written compact, as the forced grammar writes it."""
    decoder = json.JSONDecoder()
    for at in (i for i, ch in enumerate(text) if ch == "{"):
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            continue
        if value == arguments:
            return text[:at] + json.dumps(arguments) + text[end:]
    return text


def accepts(grammar: str, special: list[str], text: str) -> bool:
    llguidance = pytest.importorskip("llguidance")
    from llguidance._tokenizer import TokenizerWrapper

    vocab = ByteVocabulary(special)
    tokenizer = llguidance.LLTokenizer(TokenizerWrapper(vocab), slices=[])
    matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(grammar))
    assert not matcher.is_error(), matcher.get_error()
    return matcher.consume_tokens(vocab.ids(text)) and matcher.is_accepting()


@pytest.mark.parametrize("name", tool_templates())
def test_the_forced_grammar_accepts_what_the_template_writes(name):
    if name in NOT_READ:
        pytest.xfail(NOT_READ[name])
    fmt = tool_format(all_templates()[name], TOOLS)
    if not isinstance(fmt, LearntFormat | HarmonyFormat):
        pytest.skip("a hand-written format, tested in tests/family/test_hand_written.py")
    text = written(name, ONE)
    if "get_weather" not in text:
        pytest.skip("the template writes no calls")
    special = list(fmt.markers)  # every marker a special token, `[ARGS]` too: named by id
    by_id = {m: m if m.startswith("<") else f"<[{256 + k}]>" for k, m in enumerate(special)}
    grammar = call_grammar(fmt, TOOLS, parallel=True, special=by_id)
    if isinstance(fmt, HarmonyFormat):  # the template writes the recipient first
        text = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3}<|call|>'  # noqa: E501
    forced = compact_arguments(text, ONE[0][1])  # the grammar writes compact JSON
    assert accepts(grammar, special, forced), (grammar, forced)
    assert read(fmt, text)[1] == ONE


def test_a_forced_tagged_call_reads_back_with_typed_values():
    """Qwen3-Coder writes strings bare: what the grammar lets through is read back typed."""
    fmt = tool_format(all_templates()["Qwen3-Coder"], TOOLS)
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo </parameter> x\n"
        "</parameter>\n<parameter=days>\n12\n</parameter>\n</function>\n</tool_call>"
    )
    grammar = call_grammar(
        fmt, TOOLS, parallel=False, special=special_by_text(["<tool_call>", "</tool_call>"])
    )
    assert not accepts(grammar, ["<tool_call>", "</tool_call>"], text)  # the end marker inside
    good = text.replace("São Paulo </parameter> x", "São Paulo")
    assert accepts(grammar, ["<tool_call>", "</tool_call>"], good)
    assert parse_answer(fmt, good).calls[0].arguments == '{"city": "São Paulo", "days": 12}'


def test_a_call_broken_off_is_text_and_broken():
    fmt = tool_format(all_templates()["GLM-4.6"], TOOLS)
    text = "Sure.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Par"
    parsed = parse_answer(fmt, text)
    assert parsed.calls == [] and parsed.broken and parsed.content.endswith("Par")
    stream = CallStream(fmt)
    shown = "".join(d.content for ch in text for d in stream.feed(ch))
    assert shown == "Sure."  # the markup is held while it may still be a call
