"""`specllama chat`: the read-eval-print loop around an Engine and a Conversation.

The conversation (and its trimming) lives in chat.py, every pixel in ui.py; this module turns
lines into commands or turns, drives the generator, and keeps the session's numbers.

KV reuse between turns comes from the backend: each turn's prompt is the whole conversation
rendered through the chat template, and `generate` syncs the target context to it, keeping the
common prefix (the previous turns) and evaluating only what is new.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specllama.chat import INTERRUPTED_MARK, Conversation, Message
from specllama.cli.answer_split import StreamedAnswer
from specllama.cli.terminal import deferred_sigint, setup_readline
from specllama.cli.ui import ChatView, answer_summary, live_line
from specllama.engine.constraint import Grammar
from specllama.engine.events import FinishEvent, RoundEvent, TokenEvent
from specllama.engine.sampling import SamplingParams
from specllama.engine.stats import GenerationStats, LiveCounter, TargetRate
from specllama.errors import ContextOverflowError, SpecllamaError, UsageError
from specllama.family.thinking import ReasoningMode
from specllama.models.catalog import DRAFTERS
from specllama.paths import state_dir
from specllama.session import Engine

COMMANDS: list[tuple[str, str]] = [
    ("/help", "this list"),
    ("/stats", "the session's statistics, with the histogram of accepted lengths"),
    ("/reset", "forget the conversation (the system prompt stays)"),
    ("/system TEXT", "set the system prompt; /system alone removes it"),
    ("/draft-max N", "most tokens drafted per round"),
    ("/drafter model|ngram|none", "who drafts (none = the target alone)"),
    ("/temperature T", "0 = greedy"),
    ("/max-tokens N", "most tokens per answer"),
    ("/color [on|off]", "colour tokens by origin (toggles without an argument)"),
    ("/save FILE", "the conversation as JSON, or Markdown for .md"),
    ("/thinking", "the last answer's thinking, unfolded"),
    ("/exit", "leave (Ctrl-D or Ctrl-C at the prompt too)"),
    ("//text", "send a message that starts with /"),
]
COMMAND_NAMES = [usage.split()[0] for usage, _ in COMMANDS if not usage.startswith("//")]


def measure_target_step(target: Any, n: int = 6) -> list[float]:
    """Time `n` one-token decodes of the target (after one warm-up), then undo them.

    What the target alone pays per token; the "est." speedup divides by it.
    """
    start = target.n_past
    tokens = target.tokenize("The quick brown fox jumps over the lazy dog.", add_bos=False)
    tokens = (tokens * (n + 1))[: n + 1]
    if start + len(tokens) >= target.n_ctx or not tokens:
        return []
    samples = []
    try:
        for i, token in enumerate(tokens):
            before = target.decode_seconds
            target.decode([token], [0])
            if i:
                samples.append(target.decode_seconds - before)
    finally:
        target.rollback(start)
    return samples


@dataclass
class Turn:
    """What one answer did, for tests and the summary line."""

    text: str  # the answer proper (without its thinking)
    stats: GenerationStats
    interrupted: bool
    n_prompt: int
    n_prompt_new: int  # prompt tokens the target evaluated for this turn
    n_prompt_reused: int  # prompt tokens already in the target's KV cache
    target_decoded: int  # every token the target evaluated during the turn
    thinking: str | None = None  # None: the answer did not think
    n_thinking_tokens: int = 0


class ChatSession:
    def __init__(
        self,
        engine: Engine,
        view: ChatView,
        *,
        params: SamplingParams,
        max_tokens: int,
        system: str | None = None,
        chat_template: bool = True,
        constraint: Grammar | None = None,
        reasoning: ReasoningMode = "auto",
        reasoning_budget: int | None = None,
    ) -> None:
        self.engine = engine
        self.reasoning = reasoning  # thinking on, off, or as the template has it
        self.reasoning_budget = reasoning_budget  # most thinking tokens (None: no bound)
        self.constraint = constraint  # every answer follows it (--json-schema, --grammar)
        self.view = view
        self.params = params
        self.max_tokens = max_tokens
        self.chat_template = chat_template
        self.conversation = Conversation(system)
        self.totals = GenerationStats(drafter=engine.drafter.name)
        self.target_rate = TargetRate()
        self.turns: list[Turn] = []
        self.n_prompt_new = 0
        self.n_prompt_reused = 0
        self.n_dropped_turns = 0
        self.done = False

    # -- lines ------------------------------------------------------------------------------

    def handle(self, line: str) -> None:
        """One line from the user: a command, or a message to answer. Errors are shown, and
        the session goes on."""
        text = line.strip()
        try:
            if not text:
                self.view.info("(nothing to send: type a message, or /help)")
            elif text.startswith("//"):
                self.answer(text[1:])
            elif text.startswith("/"):
                self.command(text)
            else:
                self.answer(text)
        except SpecllamaError as exc:
            self.view.error(str(exc), exc.hint)

    def command(self, text: str) -> None:
        name, _, arg = text.partition(" ")
        name, arg = name.lower(), arg.strip()
        handlers: dict[str, Callable[[str], None]] = {
            "/help": lambda _: self.view.help(COMMANDS),
            "/stats": lambda _: self.show_stats(),
            "/reset": self._reset,
            "/system": self._system,
            "/draft-max": self._draft_max,
            "/drafter": self._drafter,
            "/temperature": self._temperature,
            "/max-tokens": self._max_tokens,
            "/color": self._color,
            "/colour": self._color,
            "/save": self._save,
            "/thinking": self._thinking,
            "/exit": self._exit,
            "/quit": self._exit,
        }
        handler = handlers.get(name)
        if handler is None:
            raise UsageError(
                f"unknown command {name}", hint="/help lists them; // sends a line starting with /"
            )
        handler(arg)

    def _reset(self, _: str) -> None:
        self.conversation.reset()
        self.view.info("conversation cleared" + (" (system prompt kept)" if self.system else ""))

    @property
    def system(self) -> str | None:
        return self.conversation.system

    def _system(self, arg: str) -> None:
        self.conversation.system = arg or None
        self.view.info(f"system prompt set: {arg}" if arg else "system prompt removed")

    def _draft_max(self, arg: str) -> None:
        n = _parse(arg, int, "/draft-max N", "a whole number of tokens, e.g. /draft-max 4")
        if not 1 <= n <= 64:
            raise UsageError(f"/draft-max must be between 1 and 64, got {n}")
        self.engine.draft_max = self.engine.adaptive_draft_max = n
        if getattr(self.engine, "controller", None) is not None:
            self.engine.controller = None  # the next answer builds one with the new maximum
        self.view.info(f"draft-max set to {n}")

    def _drafter(self, arg: str) -> None:
        if arg not in DRAFTERS:
            raise UsageError(
                f"unknown drafter {arg!r}" if arg else "/drafter needs a name",
                hint=f"choose one of {', '.join(DRAFTERS)}",
            )
        self.engine.use_drafter(arg)
        self.totals.drafter = arg
        self.view.info(f"drafter set to {arg}")

    def _temperature(self, arg: str) -> None:
        t = _parse(arg, float, "/temperature T", "a number, 0 for greedy")
        if not 0 <= t <= 5:
            raise UsageError(f"/temperature must be between 0 and 5, got {t}")
        self.params = replace(self.params, temperature=t)
        self.view.info(f"temperature set to {t:g}" + (" (greedy)" if t == 0 else ""))

    def _max_tokens(self, arg: str) -> None:
        n = _parse(arg, int, "/max-tokens N", "a whole number of tokens")
        if n < 1:
            raise UsageError(f"/max-tokens must be at least 1, got {n}")
        self.max_tokens = n
        self.view.info(f"max-tokens set to {n}")

    def _color(self, arg: str) -> None:
        choices = {"": not self.view.color, "on": True, "off": False}
        if arg.lower() not in choices:
            raise UsageError(f"/color takes on or off, got {arg!r}")
        self.view.set_color(choices[arg.lower()])
        self.view.info(f"colour {'on' if self.view.color else 'off'}")

    def _save(self, arg: str) -> None:
        if not arg:
            raise UsageError("/save needs a file name", hint="/save chat.json or /save chat.md")
        path = Path(arg).expanduser()
        kind = self.conversation.save(path)
        self.view.info(f"saved {len(self.conversation.messages())} messages to {path} ({kind})")

    def _thinking(self, _: str) -> None:
        last = self.turns[-1] if self.turns else None
        if last is None or last.thinking is None:
            self.view.info("(the last answer did not think)")
            return
        self.view.show_thinking(last.thinking)

    def _exit(self, _: str) -> None:
        self.done = True

    # -- turns ------------------------------------------------------------------------------

    def prompt_tokens(self, messages: list[Message]) -> list[int]:
        return self.engine.reasoning_prompt(
            messages, self.reasoning, chat_template=self.chat_template
        )

    def _fit(self) -> list[int]:
        """Trim the oldest turns until prompt + max_tokens fits the context; the prompt."""
        n_ctx = self.engine.target.n_ctx
        budget = n_ctx - self.max_tokens
        # A message that cannot fit even alone is refused before any turn is dropped for it.
        head = self.conversation.messages()[:1] if self.conversation.system else []
        alone = self.prompt_tokens(head + self.conversation.turns[-1:])
        if len(alone) >= n_ctx:
            raise ContextOverflowError(
                f"this message needs {len(alone)} prompt tokens; the context holds {n_ctx}",
                hint="send a shorter message, or restart with a larger --ctx",
            )
        trimmed = self.conversation.fit(lambda m: len(self.prompt_tokens(m)), budget)
        if trimmed is not None:
            self.n_dropped_turns += trimmed.n_turns
            self.view.notice(
                f"context: dropped the {trimmed.n_turns} oldest turn(s) "
                f"({trimmed.n_tokens_before} -> {trimmed.n_tokens_after} prompt tokens) "
                f"to leave room for {self.max_tokens} new tokens in {n_ctx}"
            )
        prompt = self.prompt_tokens(self.conversation.messages())
        if len(prompt) > budget:
            self.view.notice(
                f"context: only {n_ctx - len(prompt)} tokens left for the answer (--ctx {n_ctx})"
            )
        return prompt

    def answer(self, text: str) -> Turn | None:
        self.conversation.add_user(text)
        try:
            return self._answer()
        except BaseException:
            self.conversation.pop_user()  # no answer: the message was not really sent
            raise

    def _answer(self) -> Turn:
        engine, view = self.engine, self.view
        prompt = self._fit()
        target = engine.target
        reused = min(target.common_prefix(prompt), len(prompt) - 1)
        decoded_before = target.n_decoded

        counter = LiveCounter(engine.drafter.name)
        answer = StreamedAnswer(engine, prompt, chat_template=self.chat_template)
        finish: FinishEvent | None = None
        params = self.params.with_seed()  # drawn here, so that an interrupted answer reports it
        events = engine.generate_thinking(
            prompt,
            params,
            max_tokens=self.max_tokens,
            budget=self.reasoning_budget,
            constraint=self.constraint,
        )
        view.answer_begin()
        try:
            with deferred_sigint() as interrupt:
                for event in events:
                    if isinstance(event, TokenEvent):
                        counter.on_token()
                        self._show(answer, answer.feed(event.token), event.from_draft)
                    elif isinstance(event, RoundEvent):
                        counter.on_round(
                            event.n_drafted, event.n_accepted, event.draft_s, event.target_s
                        )
                        self.target_rate.observe_round(event.n_drafted, event.target_s)
                        view.answer_progress(self._live_status(counter, interrupt.hit))
                    elif isinstance(event, FinishEvent):
                        finish = event
                    if interrupt.hit and finish is None:
                        break
        except BaseException:
            view.answer_abort()
            raise
        finally:
            events.close()  # stopping early: the generator rolls both contexts back

        self._show(answer, answer.finish(), False)
        if answer.in_thinking:  # cut off while thinking
            view.thinking_end(answer.n_thinking_tokens)
        interrupted = finish is None
        if finish is None:
            stats = counter.snapshot("interrupted")
            stats.seed = params.effective_seed
        else:
            stats = finish.stats
        stats.n_prompt = len(prompt)
        self.conversation.add_assistant(answer.text, interrupted=interrupted)

        self.totals.merge(stats)
        n_new = len(prompt) - 1 - reused
        self.n_prompt_new += n_new
        self.n_prompt_reused += reused
        speedup = self.target_rate.speedup(stats.tokens_per_s)
        view.answer_end(
            answer_summary(
                stats,
                speedup=speedup,
                target_alone=self.target_rate.tokens_per_s,
                n_prompt_new=n_new,
                n_prompt_reused=reused,
            ),
            mark=INTERRUPTED_MARK.strip() if interrupted else "",
        )
        turn = Turn(
            answer.text,
            stats,
            interrupted,
            len(prompt),
            n_new,
            reused,
            target.n_decoded - decoded_before,
            answer.thinking,
            answer.n_thinking_tokens,
        )
        self.turns.append(turn)
        return turn

    def _show(self, answer: StreamedAnswer, told: list[tuple[str, str]], from_draft: bool) -> None:
        """Thinking, dimmed and folded once it ends; the answer coloured by origin."""
        for kind, text in told:
            if kind == "thinking":
                self.view.answer_thinking(text)
            else:
                if answer.thinking is not None and not self.view.thinking_folded:
                    self.view.thinking_end(answer.n_thinking_tokens)
                self.view.answer_token(text, from_draft)

    def _live_status(self, counter: LiveCounter, stopping: bool) -> Any:
        stats = counter.snapshot()
        speedup = self.target_rate.speedup(stats.tokens_per_s)
        return live_line(stats, counter.last_draft_length, speedup, stopping)

    def show_stats(self) -> None:
        t = self.totals
        speedup = self.target_rate.speedup(t.tokens_per_s)
        rows = [
            ("answers", str(len(self.turns))),
            ("tokens generated", str(t.n_generated)),
            ("generation time", f"{t.time_s:.2f} s"),
            ("speed", f"{t.tokens_per_s:.1f} tok/s"),
            ("target alone (est.)", f"{self.target_rate.tokens_per_s:.1f} tok/s"),
            ("speedup (est.)", f"{speedup:.2f}x" if speedup else "-"),
            ("drafter now", f"{self.engine.drafter.name}, draft-max {self.engine.draft_max}"),
            ("rounds (target passes)", str(t.n_rounds)),
            ("drafted / accepted", f"{t.n_drafted} / {t.n_accepted}"),
            ("acceptance", f"{t.acceptance_rate:.1%}"),
            ("mean accepted per round", f"{t.mean_accepted_per_round:.2f}"),
            ("target / draft decode", f"{t.target_s:.2f} s / {t.draft_s:.2f} s"),
            ("overhead per round", f"{t.overhead_ms_per_round:.1f} ms"),
            ("prompt tokens new / cached", f"{self.n_prompt_new} / {self.n_prompt_reused}"),
            ("turns dropped (context)", str(self.n_dropped_turns)),
            ("messages kept", str(len(self.conversation.messages()))),
            ("temperature", f"{self.params.temperature:g}"),
        ]
        self.view.stats_table(rows, dict(t.accepted_histogram))


def _parse(arg: str, kind: type, usage: str, expected: str) -> Any:
    try:
        return kind(arg)
    except ValueError:
        shown = repr(arg) if arg else "nothing"
        raise UsageError(f"{usage}: expected {expected}, got {shown}") from None


# -- the loop ------------------------------------------------------------------------------


def run_repl(session: ChatSession, read: Callable[[str], str] = input) -> int:
    """Read lines until /exit, Ctrl-D or Ctrl-C at the prompt; exit code 0."""
    view = session.view
    save_history = (
        setup_readline(state_dir() / "history", COMMAND_NAMES) if os.isatty(0) else (lambda: None)
    )
    while not session.done:
        try:
            line = read(view.prompt())
        except (EOFError, KeyboardInterrupt):
            view.console.print()
            break
        if line.strip():
            save_history()
        view.echo_input(line)
        try:
            session.handle(line)
        except KeyboardInterrupt:  # Ctrl-C outside the streaming loop (e.g. while tokenizing)
            view.console.print()
            view.notice("interrupted")
    return 0


def start_view_facts(engine: Engine, samples: list[float], session: ChatSession) -> list[str]:
    config = engine.config
    drafter = engine.drafter.name
    draft = f"draft {config.draft.name} ({drafter})" if config.draft else f"drafter {drafter}"
    facts = [
        f"target {config.target.name} · {draft} · draft-max {engine.draft_max} · "
        f"ctx {engine.target.n_ctx} · max {session.max_tokens} tokens an answer",
    ]
    if samples:
        facts.append(
            f"target alone ≈ {session.target_rate.tokens_per_s:.1f} tok/s "
            "(median one-token decode measured; the speedups shown are estimates against it)"
        )
    return facts


def chat(
    engine: Engine,
    view: ChatView,
    *,
    params: SamplingParams,
    max_tokens: int,
    system: str | None,
    chat_template: bool,
    record: Path | None = None,
    constraint: Grammar | None = None,
    reasoning: ReasoningMode = "auto",
    reasoning_budget: int | None = None,
) -> int:
    session = ChatSession(
        engine,
        view,
        params=params,
        max_tokens=max_tokens,
        system=system,
        chat_template=chat_template,
        constraint=constraint,
        reasoning=reasoning,
        reasoning_budget=reasoning_budget,
    )
    samples = measure_target_step(engine.target)
    for seconds in samples:
        session.target_rate.add(seconds)
    view.banner("specllama chat", start_view_facts(engine, samples, session))
    try:
        return run_repl(session)
    finally:
        if record is not None:
            view.save_svg(str(record))
