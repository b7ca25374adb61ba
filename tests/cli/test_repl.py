"""`specllama chat` on real models: turns, KV reuse, Ctrl-C, context trimming, bad input, and
the REPL driven for real in a pseudo-terminal (pexpect), with a text capture of the screen."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pyte
import pytest
from rich.console import Console
from signals import ctrl_c_as_from_a_terminal

from specllama.chat import INTERRUPTED_MARK
from specllama.cli.repl import ChatSession, measure_target_step
from specllama.cli.ui import ChatView
from specllama.engine.sampling import SamplingParams
from specllama.session import Engine, EngineConfig

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0.0)
# These tests need the draft model to draft every round (a fixed length, not the adaptive
# controller, which may judge drafting not worth it on a CPU and skip it).
ADAPTIVE = "adaptive" in {f.name for f in dataclasses.fields(EngineConfig)}
FIXED = {"adaptive": False} if ADAPTIVE else {}
FIXED_FLAG = ["--fixed"] if ADAPTIVE else []


@pytest.fixture(scope="module")
def engine(smol_f32: Path, smol_q4: Path) -> Iterator[Engine]:
    """The strict pair: F32 target, its Q4_1 file as the draft (accepted ~90% of the time)."""
    config = EngineConfig(
        target=smol_f32,
        draft=smol_q4,
        drafter="model",
        draft_max=4,
        n_ctx=1024,
        n_threads=2,
        **FIXED,
    )
    with Engine(config) as loaded:
        yield loaded


def text_view(**kwargs) -> ChatView:
    console = Console(file=io.StringIO(), force_terminal=True, width=120, highlight=False)
    return ChatView(color=True, console=console, live=False, **kwargs)


def output(view: ChatView) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", view.console.file.getvalue())


def session_on(engine: Engine, view: ChatView | None = None, **kwargs) -> ChatSession:
    engine.use_drafter("model")
    engine.draft_max = 4
    engine.target.rollback(0)  # every test starts from an empty KV cache
    options = {"params": GREEDY, "max_tokens": 8, **kwargs}
    return ChatSession(engine, view or text_view(), **options)


# -- in process -------------------------------------------------------------------------------


def test_second_turn_does_not_re_evaluate_the_first(engine: Engine):
    session = session_on(engine)
    first = session.answer("Name a colour.")
    second = session.answer("Name another one.")

    def prefill(turn) -> int:
        """Tokens the target evaluated for the prompt: all it evaluated, less the verify
        batches (one pending token plus the drafts, each round)."""
        return turn.target_decoded - (turn.stats.n_rounds + turn.stats.n_drafted)

    # Turn 1 evaluates its whole prompt but the last token (the first round feeds that one).
    assert prefill(first) == first.n_prompt_new == first.n_prompt - 1
    assert first.n_prompt_reused == 0
    # Turn 2 keeps turn 1's prompt and answer in the cache and evaluates only the new part.
    assert prefill(second) == second.n_prompt_new
    assert second.n_prompt_reused >= first.n_prompt + first.stats.n_generated - 2
    assert second.n_prompt_new < first.n_prompt
    assert second.n_prompt_new + second.n_prompt_reused == second.n_prompt - 1
    print(
        f"\nturn 1: prompt {first.n_prompt} tokens, {prefill(first)} evaluated; "
        f"turn 2: prompt {second.n_prompt} tokens, {prefill(second)} evaluated, "
        f"{second.n_prompt_reused} reused from the KV cache"
    )
    assert "cached tokens" in output(session.view)


def test_greedy_chat_answer_equals_the_target_alone(engine: Engine):
    """The REPL shows the target's own answer (strict F32 target): same text with or without
    the drafter, and the session totals add up."""
    drafted = session_on(engine, max_tokens=16)
    text = drafted.answer("What is the capital of France?").text
    assert drafted.turns[0].stats.n_accepted > 0
    alone = session_on(engine, max_tokens=16)
    alone.handle("/drafter none")
    assert alone.answer("What is the capital of France?").text == text
    assert alone.turns[0].stats.n_drafted == 0
    # One-token rounds are exactly what the target-alone estimate needs.
    assert alone.target_rate.known


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
        SamplingParams(temperature=1.2, top_k=100, top_p=0.9, min_p=0.02),
    ],
    ids=["t0.8", "t1.2"],
)
def test_a_sampled_second_turn_that_reuses_the_cache_equals_the_target_alone(engine, params):
    """With a seed, the second turn of a chat (drafted, the first turn from the KV cache) is
    what the target alone writes for the same conversation from an empty cache."""
    questions = ("Name a colour.", "Name another one, and say why.")
    for seed in range(3):
        seeded = dataclasses.replace(params, seed=seed)
        chat = session_on(engine, params=seeded, max_tokens=16)
        first = chat.answer(questions[0])
        second = chat.answer(questions[1])
        assert second.n_prompt_reused > first.n_prompt
        assert second.stats.seed == seed and second.stats.n_drafted > 0

        alone = session_on(engine, params=seeded, max_tokens=16)  # an empty cache
        alone.handle("/drafter none")
        alone.conversation.add_user(questions[0])
        alone.conversation.add_assistant(first.text)
        again = alone.answer(questions[1])
        assert again.n_prompt_reused == 0 and again.stats.n_drafted == 0
        assert again.text == second.text


class InterruptingView(ChatView):
    """Sends itself a real SIGINT (what Ctrl-C does) once a few tokens have streamed."""

    def __init__(self, after: int) -> None:
        view = text_view()
        super().__init__(color=True, console=view.console, live=False)
        self.after = after
        self.seen = 0

    def answer_token(self, piece: str, from_draft: bool) -> None:
        super().answer_token(piece, from_draft)
        self.seen += 1
        if self.seen == self.after:
            os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_mid_answer_keeps_the_partial_answer_and_the_session(engine: Engine):
    view = InterruptingView(after=6)
    session = session_on(engine, view, max_tokens=200)
    turn = session.answer("Write a long story about a dragon.")
    assert turn is not None and turn.interrupted
    assert 6 <= turn.stats.n_generated < 200
    last = session.conversation.messages()[-1]
    assert last.interrupted and last.content.endswith(INTERRUPTED_MARK)
    assert "[interrupted]" in output(view)
    # Stopped at a clean point: the target holds the prompt and the answer (less the pending
    # token), and the next turn reuses that prefix.
    assert engine.target.n_past == turn.n_prompt + turn.stats.n_generated - 1
    view.after = -1
    session.max_tokens = 4
    follow = session.answer("Thanks.")
    assert not follow.interrupted and follow.n_prompt_reused > turn.n_prompt
    assert [m.role for m in session.conversation.messages()] == ["user", "assistant"] * 2


def test_mtp_chat_second_turn_and_ctrl_c_keep_both_caches_right(qwen35_mtp: Path):
    """The model's own draft head in a chat: an answer cut short by Ctrl-C, then a second turn
    that reuses the cache, both heads' caches included; it is the target alone's answer."""
    config = EngineConfig(target=qwen35_mtp, drafter="mtp", draft_max=3, n_ctx=4096, **FIXED)
    with Engine(config) as mtp:
        view = InterruptingView(after=6)
        chat = ChatSession(mtp, view, params=GREEDY, max_tokens=2000)
        first = chat.answer("Count on.")
        assert first.interrupted and first.stats.n_drafted > 0
        view.after = -1
        chat.max_tokens = 24
        second = chat.answer("Go on.")
        assert second.n_prompt_reused > first.n_prompt and second.stats.n_accepted > 0

        alone = ChatSession(mtp, text_view(), params=GREEDY, max_tokens=24)
        alone.handle("/drafter none")
        mtp.target.rollback(0)
        alone.conversation.add_user("Count on.")
        alone.conversation.add_assistant(chat.conversation.messages()[1].content)
        assert alone.answer("Go on.").text == second.text


def test_context_trimming_drops_old_turns_with_a_notice(smol_f32: Path, smol_q4: Path):
    config = EngineConfig(
        target=smol_f32, draft=smol_q4, drafter="model", n_ctx=192, n_threads=2, **FIXED
    )
    with Engine(config) as small:
        view = text_view()
        session = ChatSession(small, view, params=GREEDY, max_tokens=16, system="Be brief.")
        for i in range(4):
            session.answer(f"Question {i}: " + "tell me about the sea and the sky. " * 4)
        assert session.n_dropped_turns >= 1
        messages = session.conversation.messages()
        assert messages[0].role == "system" and messages[0].content == "Be brief."
        assert messages[-2].content.startswith("Question 3")
        assert "context: dropped the" in output(view)
        # A message that cannot fit at all is refused with a clear line; the session goes on.
        session.handle("word " * 400)
        assert "context holds 192" in output(view)
        assert session.conversation.messages()[-1].role == "assistant"


def test_bad_input_gives_clear_messages_and_the_session_goes_on(engine: Engine, tmp_path):
    session = session_on(engine, max_tokens=4)
    bad = {
        "/frobnicate": "unknown command /frobnicate",
        "/draft-max abc": "expected a whole number of tokens",
        "/draft-max 0": "between 1 and 64",
        "/drafter bogus": "unknown drafter 'bogus'",
        "/temperature hot": "expected a number",
        "/save": "/save needs a file name",
        f"/save {tmp_path}/no/such/c.json": "cannot write",
        "/color purple": "/color takes on or off",
        "   ": "nothing to send",
    }
    for line, message in bad.items():
        session.handle(line)
        assert message in output(session.view), line
    assert session.conversation.messages() == []
    assert engine.draft_max == 4 and session.params.temperature == 0
    session.handle("/draft-max 2")
    session.handle("Hello!")
    assert engine.draft_max == 2 and len(session.turns) == 1
    assert session.turns[0].stats.n_drafted <= 2 * session.turns[0].stats.n_rounds
    session.handle(f"/save {tmp_path}/c.md")
    assert "## User\n\nHello!" in (tmp_path / "c.md").read_text(encoding="utf-8")
    session.handle("/stats")
    assert "accepted draft tokens per round" in output(session.view)


def test_measure_target_step_leaves_the_context_as_it_was(engine: Engine):
    engine.target.rollback(0)
    engine.target.decode([1, 2, 3])
    samples = measure_target_step(engine.target, n=3)
    assert len(samples) == 3 and all(s > 0 for s in samples)
    assert engine.target.tokens == [1, 2, 3]


# -- in a pseudo-terminal -----------------------------------------------------------------------


class Terminal:
    """A pexpect child whose output is also fed to a pyte screen (a terminal emulator)."""

    def __init__(self, args: list[str], tmp_path: Path, rows: int = 50, cols: int = 110):
        env = {**os.environ, "TERM": "xterm-256color", "XDG_STATE_HOME": str(tmp_path)}
        env.pop("NO_COLOR", None)
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "specllama", *args],
            env=env,
            dimensions=(rows, cols),
            timeout=120,
            preexec_fn=ctrl_c_as_from_a_terminal,
        )
        self.child.logfile_read = self  # pexpect writes what it reads here

    def write(self, data: bytes) -> None:
        self.stream.feed(data)

    def flush(self) -> None:
        pass

    def drain(self, seconds: float) -> None:
        """Keep reading (so the screen stays current) for a while."""
        self.child.expect(pexpect.TIMEOUT, timeout=seconds)

    def capture(self) -> str:
        """The screen as text; runs of colour written as [colour]...[/]."""
        lines = []
        for y in range(self.screen.lines):
            row = self.screen.buffer[y]
            out, current = [], "default"
            for x in range(self.screen.columns):
                char = row[x]
                fg = char.fg
                if fg != current:
                    if current != "default":
                        out.append("[/]")
                    if fg != "default":
                        out.append(f"[{fg}]")
                    current = fg
                out.append(char.data)
            if current != "default":
                out.append("[/]")
            lines.append("".join(out).rstrip())
        return "\n".join(lines).rstrip()


def chat_args(smol_f32: Path, smol_q4: Path, *extra: str) -> list[str]:
    return ["chat", "-t", str(smol_f32), "-d", str(smol_q4), "--threads", "2", *FIXED_FLAG, *extra]


def test_repl_in_a_pty_two_turns_command_ctrl_c_and_a_third_turn(
    smol_f32: Path, smol_q4: Path, tmp_path: Path
):
    term = Terminal(chat_args(smol_f32, smol_q4, "-n", "12"), tmp_path)
    child = term.child
    child.expect_exact(">>> ")
    assert "target alone" in term.capture()

    child.sendline("Name a colour.")
    child.expect("cached tokens")
    child.expect_exact(">>> ")
    child.sendline("/draft-max 3")
    child.expect_exact("draft-max set to 3")
    child.sendline("/draft-max abc")
    child.expect_exact("expected a whole number")
    child.sendline("Name a fruit.")
    child.expect("cached tokens")
    child.expect_exact(">>> ")

    child.sendline("/max-tokens 400")
    child.expect_exact(">>> ")
    child.sendline("Write a long story about a dragon.")
    child.expect(rb"tok/s \W+ accepted \d+%")  # the live stats line is up
    term.drain(1.5)
    during = term.capture()
    child.sendintr()  # Ctrl-C in the middle of the answer
    child.expect_exact("[interrupted]")
    child.expect_exact(">>> ")

    child.sendline("/max-tokens 8")
    child.expect_exact(">>> ")
    child.sendline("What was my first question?")
    child.expect("cached tokens")
    child.expect_exact(">>> ")
    saved = tmp_path / "conversation.json"
    child.sendline(f"/save {saved}")
    child.expect_exact("saved 8 messages")
    child.expect_exact(">>> ")
    term.drain(0.3)
    after = term.capture()
    child.sendline("/exit")
    child.expect(pexpect.EOF)
    child.close()

    print("\n--- screen while the third answer streams ---\n" + during)
    print("\n--- screen at the end ---\n" + after)
    assert child.exitstatus == 0
    # Colours by origin: accepted draft tokens green, the target's own blue; stats line dim.
    assert "[green]" in during and "[blue]" in during
    assert re.search(r"⏵ +\d+\.\d tok/s · accepted \d+% · [\d.]+/round · draft \d", during)
    assert "est." in during and "vs target alone" in during
    # The conversation state: the third turn was sent with the first two (and the cut one).
    messages = json.loads(saved.read_text(encoding="utf-8"))["messages"]
    assert [m["content"] for m in messages[0::2]] == [
        "Name a colour.",
        "Name a fruit.",
        "Write a long story about a dragon.",
        "What was my first question?",
    ]
    assert messages[5].get("interrupted") is True
    assert messages[5]["content"].endswith(INTERRUPTED_MARK)
    assert not messages[7].get("interrupted")
    assert (tmp_path / "specllama" / "history").read_text().count("Name a fruit.") == 1


@pytest.mark.parametrize("key", ["ctrl-c", "ctrl-d"])
def test_ctrl_c_or_ctrl_d_at_the_prompt_exits_cleanly(
    key: str, smol_f32: Path, smol_q4: Path, tmp_path: Path
):
    term = Terminal(chat_args(smol_f32, smol_q4, "--no-color"), tmp_path)
    term.child.expect_exact(">>> ")
    if key == "ctrl-c":
        term.child.sendintr()
    else:
        term.child.sendeof()
    term.child.expect(pexpect.EOF)
    term.child.close()
    assert term.child.exitstatus == 0
    assert "[green]" not in term.capture() and "Traceback" not in term.capture()


def test_record_saves_the_session_as_svg(engine: Engine, tmp_path: Path):
    view = text_view(record=True)
    session = session_on(engine, view, max_tokens=6)
    view.echo_input("Name a colour.")
    turn = session.answer("Name a colour.")
    session.handle("/stats")
    path = tmp_path / "chat.svg"
    view.save_svg(str(path))
    svg = path.read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "specllama&#160;chat" in svg  # the title
    assert "Name&#160;a&#160;colour." in svg
    assert "accepted&#160;draft&#160;tokens&#160;per&#160;round" in svg
    assert turn.stats.n_generated >= 1
