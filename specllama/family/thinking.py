"""A model's thinking, told from its answer, and turned on, off or left as the template has it.

Each family marks its thinking in its own way: `<think>`...`</think>` (Qwen3, DeepSeek, GLM,
MiniMax, Kimi K2...), `[THINK]`...`[/THINK]` (Magistral), `<seed:think>`...`</seed:think>`
(Seed-OSS), `<|START_THINKING|>`...`<|END_THINKING|>` (Cohere), Gemma 4's thought channel
(`<|channel>thought`...`<channel|>`). The markers are learnt from the template where it can tell,
as llama.cpp's template analysis does (docs/autoparser.md): render an assistant turn with its
reasoning and without, and read the markers around the reasoning; else render the generation
prompt with thinking on and off, and read the block the switch adds; else the known pairs the
template's text names. (gpt-oss's analysis channel is harmony's, read in `harmony.py`.)

A template lets the model open the thinking itself (the answer begins with the start marker) or
opens it in the prompt (the generation prompt ends with it, and the answer begins inside the
thinking). Either way the thinking ends at the end marker, and what follows is the answer
proper. As the answer streams, text that may be the start of a marker is held until the next
piece tells.

Thinking is turned off by the template's own switch (`enable_thinking=False`, DeepSeek V3.1's
`thinking=False`, `thinking_mode`, `reasoning_effort`...) where it has one, else by an empty
thinking block written after the generation prompt, closed (what Qwen3 renders with
enable_thinking false).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Literal

from specllama.chat import Message, render_chat
from specllama.errors import SpecllamaError
from specllama.tool_calls import held_prefix

ReasoningMode = Literal["on", "off", "auto"]
REASONING_MODES: tuple[ReasoningMode, ...] = ("on", "off", "auto")

# What the probes write: strings no template writes itself, to be found in what it renders.
USER = "U_USER_MSG Hello END_U"
ANSWER = "A_ASST_MSG I can help END_A"
THOUGHT = "REASON_PART I am thinking END_R"


@dataclass(frozen=True)
class ThinkingSyntax:
    """The markers around a family's thinking (without the whitespace the template puts
    around them). `start` is empty where the thinking has no opening marker: the answer begins
    inside it (Apriel's `[BEGIN FINAL RESPONSE]` only ends it)."""

    start: str
    end: str

    @property
    def markers(self) -> tuple[str, ...]:
        """The markers to render as text (a control token's text, see `TextStream`)."""
        return tuple(m for m in (self.start, self.end) if m)


KNOWN = (
    ThinkingSyntax("<think>", "</think>"),
    ThinkingSyntax("[THINK]", "[/THINK]"),  # Magistral, Ministral reasoning
    ThinkingSyntax("<seed:think>", "</seed:think>"),  # Seed-OSS
    ThinkingSyntax("<|START_THINKING|>", "<|END_THINKING|>"),  # Cohere
    ThinkingSyntax("<|channel>thought", "<channel|>"),  # Gemma 4
    ThinkingSyntax("<|open|>think<|sep|>", "<|close|>think<|sep|>"),  # Kimi K3
)


@dataclass(frozen=True)
class Switch:
    """A template variable that turns the thinking on and off."""

    name: str
    off: Any
    on: Any


# The switches templates read, tried in turn; the first that changes the generation prompt is
# the template's. `reasoning_effort` is tried with each value that means "none".
SWITCHES = (
    Switch("enable_thinking", False, True),
    Switch("thinking", False, True),  # DeepSeek V3.1+, Kimi K3, Granite 3.3
    Switch("thinking_mode", "disabled", "enabled"),  # MiniMax M3
    Switch("thinking_budget", 0, -1),  # Seed-OSS
    Switch("reasoning", False, True),  # Cohere 2
    Switch("reasoning_effort", "none", "high"),  # Cohere 2
    Switch("reasoning_effort", "no_think", "high"),  # Hunyuan
    Switch("reasoning_effort", "minimal", "high"),  # Solar Open
)


@dataclass(frozen=True)
class TemplateThinking:
    """What a chat template says about thinking."""

    syntax: ThinkingSyntax
    switch: Switch | None  # the template's own on/off variable, if it has one
    closed: str  # an empty thinking block, closed, as the template writes it
    opens: bool  # its generation prompt (by default) leaves the answer inside the thinking

    @property
    def ending(self) -> str:
        """The end marker, with the whitespace the template writes after it: what a bounded
        thinking is closed with."""
        return self.closed[self.closed.index(self.syntax.end) :]

    @property
    def closing(self) -> str:
        """What closes the thinking after the generation prompt: the empty block, or only its
        end where the prompt opened the thinking already."""
        return self.ending if self.opens else self.closed


@dataclass(frozen=True)
class ThinkingSettings:
    """How to render a prompt for a reasoning mode: more template variables, and text to write
    after the generation prompt (an empty thinking block, closed, where the template has no
    switch of its own)."""

    template_kwargs: dict[str, Any] = field(default_factory=dict)
    prefill: str = ""


# -- learning the markers from the template ---------------------------------------------------


@functools.lru_cache(maxsize=32)
def template_thinking(template: str | None) -> TemplateThinking | None:
    """What the template says about thinking; None when its family does not think (or the
    template cannot be rendered at all)."""
    if not template:
        return None
    switch = _switch(template)
    learnt = _from_reasoning_turn(template) or _from_switch(template, switch)
    if learnt is not None:
        syntax, closed = learnt
    else:
        syntax = _known(template)
        if syntax is None:
            return None
        closed = syntax.start + syntax.end
    prompt = _render(template, [Message("user", USER)], prompt=True)
    return TemplateThinking(syntax, switch, closed, opens_thinking(syntax, prompt or ""))


def thinking_syntax(template: str | None) -> ThinkingSyntax | None:
    """The markers of the template's thinking; None when its family does not think."""
    known = template_thinking(template)
    return known.syntax if known is not None else None


def _render(template: str, messages: list[Message], *, prompt: bool, **kwargs: Any) -> str | None:
    try:
        return render_chat(
            template, messages, add_generation_prompt=prompt, template_kwargs=kwargs or None
        )
    except SpecllamaError:
        return None


def _from_reasoning_turn(template: str) -> tuple[ThinkingSyntax, str] | None:
    """Render an answer with its reasoning and without: the markers are what surrounds the
    reasoning where the two differ (a known pair when one does). Also gives the empty block,
    as the template spaces it."""
    user = Message("user", USER)
    plain = _render(template, [user, Message("assistant", ANSWER)], prompt=False)
    reasoned = Message("assistant", ANSWER, reasoning=THOUGHT)
    both = _render(template, [user, reasoned], prompt=False, enable_thinking=True)
    if plain is None or both is None or THOUGHT not in both:
        return None
    at = both.index(THOUGHT)
    after = at + len(THOUGHT)
    syntax = _known_around(both, at, after) or _learnt_around(plain, both, at, after)
    if syntax is None:
        return None
    begin = both.rindex(syntax.start, 0, at) if syntax.start else len(both[:at].rstrip())
    stop = both.index(syntax.end, after) + len(syntax.end)
    stop += len(both[stop:]) - len(both[stop:].lstrip())
    return syntax, both[begin:at] + both[after:stop]


def _known_around(both: str, at: int, after: int) -> ThinkingSyntax | None:
    """The known pair that surrounds the reasoning, if one does."""
    for syntax in KNOWN:
        if both[:at].rstrip().endswith(syntax.start) and both[after:].lstrip().startswith(
            syntax.end
        ):
            return syntax
    return None


def _learnt_around(plain: str, both: str, at: int, after: int) -> ThinkingSyntax | None:
    """The markers around the reasoning: what the rendering with it adds, widened to whole
    markers; a marker beside it where the plain answer has an empty block already."""
    begin = min(_marker_boundary(both, _common_prefix(plain, both), backwards=True), at)
    stop = max(
        _marker_boundary(both, len(both) - _common_suffix(plain, both), backwards=False), after
    )
    if not both[after:stop].strip():  # the plain answer writes the end marker too
        stop = _adjacent_marker(both, after, backwards=False)
    end = both[after:stop].strip()
    if not end:
        return None
    if not both[begin:at].strip():  # the plain answer has an empty block: `<think></think>`
        beside = _adjacent_marker(both, at, backwards=True)
        if both[beside:at].strip() + end in "".join(plain.split()):
            begin = beside
    start = both[begin:at].strip()
    if start and (start[0] not in OPENERS or end[-1] not in OPENERS.values()):
        return None  # text around the reasoning, not markers (muse's `to=self` channel)
    if any(len(marker) > MARKER_MAX or "\n" in marker for marker in (start, end)):
        return None  # the template writes the messages out whole, or the like
    return ThinkingSyntax(start, end)


def _from_switch(template: str, switch: Switch | None) -> tuple[ThinkingSyntax, str] | None:
    """Render the generation prompt with thinking on and off: where one adds an empty block
    (`<think></think>`) or opens one, its two markers are the syntax."""
    if switch is None:
        return None
    on, off = _prompts(template, switch)
    if on is None or off is None:
        return None
    added = off[_common_prefix(on, off) :]
    marks = _markers(added)
    if len(marks) == 2 and added.strip().startswith(marks[0]):
        return ThinkingSyntax(marks[0], marks[1]), added.strip() + added[len(added.rstrip()) :]
    return None


def _known(template: str) -> ThinkingSyntax | None:
    """A known pair the template's text names, or `<think>` for the older templates that only
    cut the thinking from earlier answers (`content.split('</think>')`)."""
    for syntax in KNOWN:
        if syntax.start in template and syntax.end in template:
            return syntax
    if "</think>" in template:
        return KNOWN[0]
    return None


def _switch(template: str) -> Switch | None:
    """The template's own on/off variable: the first that changes the generation prompt by
    more than writing the value (gpt-oss's `Reasoning: none` is no switch)."""
    for switch in SWITCHES:
        on, off = _prompts(template, switch)
        if on is None or off is None or on == off:
            continue
        if isinstance(switch.off, str) and off.replace(switch.off, str(switch.on)) == on:
            continue
        return switch
    return None


def _prompts(template: str, switch: Switch) -> tuple[str | None, str | None]:
    """The generation prompt for one user message, thinking on and off."""
    user = [Message("user", USER)]
    return (
        _render(template, user, prompt=True, **{switch.name: switch.on}),
        _render(template, user, prompt=True, **{switch.name: switch.off}),
    )


# -- markers in rendered text: `<...>` and `[...]` as llama.cpp's analysis segments them --------

OPENERS = {"<": ">", "[": "]"}
MARKER_MAX = 40  # a longer run around the reasoning is no marker


def _marker_spans(text: str) -> list[tuple[int, int]]:
    spans, opened = [], None
    for at, char in enumerate(text):
        if opened is None and char in OPENERS:
            opened = at
        elif opened is not None and char == OPENERS[text[opened]]:
            spans.append((opened, at + 1))
            opened = None
    return spans


def _markers(text: str) -> list[str]:
    return [text[a:b] for a, b in _marker_spans(text)]


def _marker_boundary(text: str, at: int, *, backwards: bool) -> int:
    """`at`, moved out of a marker it falls inside (to its start, or to its end)."""
    for begin, end in _marker_spans(text):
        if begin < at < end:
            return begin if backwards else end
    return at


def _adjacent_marker(text: str, at: int, *, backwards: bool) -> int:
    """The far side of the marker next to `at` (across whitespace), or `at` if none is."""
    spans = _marker_spans(text)
    if backwards:
        before = [begin for begin, end in spans if end <= at and not text[end:at].strip()]
        return before[-1] if before else at
    after = [end for begin, end in spans if begin >= at and not text[at:begin].strip()]
    return after[0] if after else at


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _common_suffix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


# -- turning it on and off --------------------------------------------------------------------


def opens_thinking(syntax: ThinkingSyntax, generation_prompt: str) -> bool:
    """Whether a rendered prompt leaves the answer inside the thinking: it ends with the start
    marker (or, for a syntax without one, does not end with the end marker)."""
    tail = generation_prompt.rstrip()
    if not syntax.start:
        return not tail.endswith(syntax.end)
    return tail.endswith(syntax.start)


def thinking_settings(template: str | None, mode: ReasoningMode) -> ThinkingSettings:
    """How to render a prompt so that the model thinks (`on`), does not (`off`), or does what
    its template does by default (`auto`)."""
    known = template_thinking(template)
    if mode == "auto" or known is None:
        return ThinkingSettings()
    if known.switch is not None:
        value = known.switch.on if mode == "on" else known.switch.off
        return ThinkingSettings({known.switch.name: value})
    if mode == "on":
        return ThinkingSettings()
    return ThinkingSettings(prefill=known.closing)


# -- splitting an answer ----------------------------------------------------------------------


class ThinkingSplit:
    """Splits a streamed answer into ("thinking", text) and ("text", text) pieces: the thinking
    first (without the whitespace around it), then the answer, never back."""

    def __init__(self, syntax: ThinkingSyntax, *, inside: bool) -> None:
        self._syntax = syntax
        self.inside = inside or not syntax.start  # the answer begins inside the thinking
        self._state = "opening" if self.inside else "start"
        self._held = ""

    @property
    def syntax(self) -> ThinkingSyntax:
        return self._syntax

    def fresh(self) -> ThinkingSplit:
        """A split of another answer to the same prompt, from its start."""
        return ThinkingSplit(self._syntax, inside=self.inside)

    @property
    def state(self) -> Literal["start", "thinking", "answer"]:
        """Where the answer is: before anything tells, inside the thinking, or past it (the
        thinking closed, or the answer began without one)."""
        if self._state in ("opening", "thinking"):
            return "thinking"
        return "start" if self._state == "start" else "answer"

    def feed(self, text: str) -> list[tuple[str, str]]:
        self._held += text
        pieces: list[tuple[str, str]] = []
        if self._state == "start":
            self._state = self._opened()
        if self._state == "opening" and not self._begin_thinking():
            return []
        if self._state == "thinking":
            pieces += self._think()
        if self._state == "closed":  # the blank lines after the marker are no text
            self._held = self._held.lstrip()
            self._state = "text" if self._held else "closed"
        if self._state == "text":
            pieces.append(("text", self._held))
            self._held = ""
        return [(kind, piece) for kind, piece in pieces if piece]

    def finish(self) -> list[tuple[str, str]]:
        """What was held, as what it was part of."""
        held, self._held = self._held, ""
        if self._state in ("thinking", "opening"):
            # held: whitespace, then what began like the end marker (thinking cut off there)
            held = held.strip() if self._state == "opening" else held.rstrip()
            return [("thinking", held)] if held else []
        return [("text", held)] if held and self._state != "closed" else []

    def _opened(self) -> str:
        """From the start: the thinking opens, the text begins, or it cannot tell yet."""
        begun = self._held.lstrip()
        if begun.startswith(self._syntax.start):
            self._held = begun[len(self._syntax.start) :]
            return "opening"
        return "start" if self._syntax.start.startswith(begun) else "text"

    def _begin_thinking(self) -> bool:
        """Inside the thinking, at its start: skip the whitespace (and the start marker, which
        some models write again after the prompt opened it). False: cannot tell yet."""
        begun = self._held.lstrip()
        start = self._syntax.start
        if not begun or (start and start.startswith(begun) and begun != start):
            return False
        if start and begun.startswith(start):
            begun = begun[len(start) :].lstrip()
            if not begun:
                self._held = ""
                return False
        self._state, self._held = "thinking", begun
        return True

    def _think(self) -> list[tuple[str, str]]:
        said, closed, rest = self._held.partition(self._syntax.end)
        if closed:
            self._state, self._held = "closed", rest
            return [("thinking", said.rstrip())]
        cut = len(said) - held_prefix(said, self._syntax.end)
        cut = len(said[:cut].rstrip())  # trailing whitespace waits: the thinking may end there
        self._held = said[cut:]
        return [("thinking", said[:cut])]


def split_thinking(text: str, syntax: ThinkingSyntax, *, inside: bool) -> tuple[str | None, str]:
    """A whole answer: (its thinking, None without any; the rest)."""
    split = ThinkingSplit(syntax, inside=inside)
    pieces = split.feed(text) + split.finish()
    thinking = [t for kind, t in pieces if kind == "thinking"]
    said = "".join(t for kind, t in pieces if kind == "text")
    return ("".join(thinking) if thinking else None), said
