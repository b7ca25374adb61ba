"""What a request becomes before it is queued: its prompt tokens (through the model's own chat
template, with the client's tools), the syntax its tool calls are read in, its output rule
compiled (response_format, text.format, grammar, or the call a tool_choice forces; the last
few kept), its prediction as tokens, and whether its answer may hold thinking.

This runs on the request's thread, off the event loop and beside the generation: the
vocabulary is read-only, so the worker thread may decode meanwhile.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

from specllama.chat import Message
from specllama.engine.constraint import ConstraintSpec, Grammar
from specllama.errors import ConstraintError, SpecllamaError
from specllama.family.detect import is_harmony
from specllama.family.detect import tool_format as family_format
from specllama.family.forced import json_lark, thinking_first
from specllama.family.harmony import HarmonyFormat, HarmonyReader
from specllama.family.pieces import Reader
from specllama.family.reader import AnswerReader, ReaderFactory
from specllama.family.thinking import (
    ReasoningMode,
    ThinkingSplit,
    opens_thinking,
    thinking_settings,
    thinking_syntax,
)
from specllama.server.fields import ApiError
from specllama.server.request import GenerationRequest
from specllama.server.strict_calls import lazy_call_grammar
from specllama.session import Engine
from specllama.tool_calls import Special, ToolFormat, call_grammar, template_knows_tools

PROMPT_TAIL = 8  # the prompt's last tokens: enough to hold a start marker (Kimi K3's is 4)
GRAMMARS_KEPT = 16  # compiled output rules kept: clients send the same schema again and again


@dataclass(frozen=True)
class Prepared:
    """What a request becomes before it is queued."""

    prompt: list[int]
    constraint: Grammar | None  # the rule the answer follows
    reader: ReaderFactory  # reads the answer into thinking, text and calls
    prediction: list[int] | None = None  # the answer the client expects, as tokens
    markers: tuple[str, ...] = ()  # the family's markers: written as text even when special
    thinking_budget: int | None = None  # the most thinking tokens; None: any


class Grammars:
    """Output rules compiled for the target's vocabulary, the last few kept. Compiling runs on
    the request's thread (off the event loop); the worker only reads compiled ones."""

    def __init__(self, engine: Engine, kept: int = GRAMMARS_KEPT) -> None:
        self._engine = engine
        self._kept = kept
        self._compiled: OrderedDict[ConstraintSpec, Grammar] = OrderedDict()
        self._special: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, spec: ConstraintSpec) -> Grammar:
        """The compiled rule (ConstraintError if it cannot be compiled or admits nothing)."""
        with self._lock:
            if spec in self._compiled:
                self._compiled.move_to_end(spec)
                return self._compiled[spec]
        grammar = self._engine.compile_constraint(spec)
        with self._lock:
            self._compiled[spec] = grammar
            while len(self._compiled) > self._kept:
                self._compiled.popitem(last=False)
        return grammar

    def special(self, markers: tuple[str, ...]) -> Special:
        """Which of `markers` (`<tool_call>`, `[TOOL_CALLS]`...) are special tokens of the
        vocabulary, each with how Lark writes it: a grammar must write those as tokens, for
        the model writes them as one token."""
        for marker in markers:
            if marker not in self._special:
                self._special[marker] = self._as_token(marker)
        return {m: self._special[m] for m in markers if self._special[m]}

    def _as_token(self, marker: str) -> str:
        """How Lark names the one special token `marker` is ("" when it is none): by its
        text where llguidance knows it so (`<tool_call>`), else by its id (`[TOOL_CALLS]`)."""
        if marker.startswith("<") and marker.endswith(">") and self._compiles(marker):
            return marker
        tokens = self._engine.target.tokenize(marker, add_bos=False, special=True)
        plain = self._engine.target.tokenize(marker, add_bos=False, special=False)
        if len(tokens) != 1 or tokens == plain:  # text, or a token written as text alike
            return ""
        by_id = f"<[{tokens[0]}]>"
        return by_id if self._compiles(by_id) else ""

    def _compiles(self, lark: str) -> bool:
        try:
            self.get(ConstraintSpec("lark", f"start: {lark}\n"))
        except ConstraintError:
            return False
        return True


class Preparer:
    def __init__(
        self,
        engine: Engine,
        model_id: str,
        reasoning: ReasoningMode = "auto",
        reasoning_budget: int | None = None,
        *,
        n_predict: int | None = None,
    ) -> None:
        self.engine = engine
        self.model_id = model_id  # for the messages that name the model
        self.grammars = Grammars(engine)
        self.reasoning = reasoning  # the server's --reasoning, where a request says nothing
        self.reasoning_budget = reasoning_budget
        self.n_predict = n_predict  # the server's cap on every answer (--n-predict)

    def prepare(self, asked: GenerationRequest) -> Prepared:
        """Tokenise the prompt (through the model's template, with the client's tools and
        its choice of thinking) and compile the output rule: the work a request needs before
        it is queued."""
        tool_format = self.tool_format(asked)
        prompt = self.prompt_tokens(asked)
        predicted = None
        if asked.prediction is not None:  # its text as the answer would hold it
            predicted = self.engine.text_tokens(asked.prediction)
        split = self._thinking(asked, prompt)
        thinks = (asked.reasoning or self.reasoning) != "off"
        if isinstance(tool_format, HarmonyFormat) and not thinks:
            tool_format = HarmonyFormat(asked.tools, thinking=False)
        constraint = self._constraint(asked, tool_format, split if thinks else None)
        markers = tool_format.markers if tool_format is not None else ()
        if split is not None:
            markers += split.syntax.markers
        if self._harmony(asked):  # its channels' markers, with tools or without
            markers += HarmonyFormat.markers
        budget = asked.reasoning_budget
        if budget is None:
            budget = self.reasoning_budget
        return Prepared(
            prompt,
            constraint,
            self._reader(asked, tool_format, split),
            predicted,
            markers,
            budget if split is not None and constraint is None else None,
        )

    def _reader(
        self, asked: GenerationRequest, fmt: ToolFormat | None, split: ThinkingSplit | None
    ) -> ReaderFactory:
        """A reader of the answer: gpt-oss's channels by hand; else the thinking split off,
        then the family's calls."""
        if self._harmony(asked):
            return HarmonyReader

        def read() -> Reader:
            return AnswerReader(split=split.fresh() if split is not None else None, calls=fmt)

        return read

    def _harmony(self, asked: GenerationRequest) -> bool:
        """Whether the answer is in gpt-oss's channels (a chat with its template)."""
        return asked.prompt is None and is_harmony(self.engine.target.chat_template or "")

    def _thinking(self, asked: GenerationRequest, prompt: list[int]) -> ThinkingSplit | None:
        """Whether the answer may think (the template knows the markers), and begins inside
        the thinking (the prompt opened it)."""
        template = self.engine.target.chat_template
        syntax = thinking_syntax(template)
        if asked.prompt is not None or syntax is None or self._harmony(asked):
            return None
        tail = "".join(map(self.engine.target.special_token_text, prompt[-PROMPT_TAIL:]))
        return ThinkingSplit(syntax, inside=opens_thinking(syntax, tail))

    def tool_format(self, asked: GenerationRequest) -> ToolFormat | None:
        """The syntax the model writes calls in, when the request offers tools; a model whose
        template knows no tools is refused when the request needs them."""
        history = any(m.tool_calls or m.role == "tool" for m in asked.messages)
        if not (asked.uses_tools or history):
            return None
        template = self.engine.target.chat_template
        if template is None or not template_knows_tools(template):
            why = (
                "has no chat template" if template is None else "has a chat template without tools"
            )
            raise ApiError(
                400,
                f"The model '{self.model_id}' cannot use tools: it {why}, so it was "
                "never shown how to call a function. Serve a model whose template knows tools "
                "(Qwen2.5, Llama 3.1+, Mistral...), or send no tools and no tool messages.",
                param="tools" if asked.tools else "messages",
                code="tools_not_supported",
            )
        return family_format(template, asked.tools) if asked.uses_tools else None

    def prompt_tokens(self, asked: GenerationRequest) -> list[int]:
        """The prompt's tokens: through the model's template, with the client's tools and its
        choice of thinking (a text completion's prompt as it is)."""
        try:
            if asked.prompt is not None:  # a text completion: the prompt as it is
                as_is = [Message("user", asked.prompt)]
                return self.engine.prompt_tokens(as_is, chat_template=False)
            # The tools stay in the prompt with tool_choice "none" (as llama-server renders
            # them), so that the next turn's prefix still matches the prompt cache.
            tools = [tool.as_openai() for tool in asked.tools] or None
            thinking = thinking_settings(
                self.engine.target.chat_template, asked.reasoning or self.reasoning
            )
            kwargs = {**thinking.template_kwargs, **asked.template_kwargs}
            prompt = self.engine.prompt_tokens(
                list(asked.messages), tools=tools, template_kwargs=kwargs or None
            )
            if thinking.prefill:  # an empty thinking block, closed: the template has no switch
                prompt += self.engine.target.tokenize(thinking.prefill, add_bos=False)
            return prompt
        except SpecllamaError as exc:  # the model's chat template refused these messages
            raise ApiError(400, str(exc), param="messages", code="invalid_value") from None

    def _constraint(
        self, asked: GenerationRequest, fmt: ToolFormat | None, split: ThinkingSplit | None
    ) -> Grammar | None:
        """The compiled rule: the forced call, response_format or grammar, or a JSON answer
        or a call (response_format beside tools the model may call); a model that thinks may
        think first."""
        spec, param = self._rule(asked, fmt)
        if spec is not None and split is not None and spec.kind != "gbnf":
            spec = self._thinking_first(spec, split)
        if spec is None:
            return None
        try:
            return self.grammars.get(spec)
        except Exception as exc:  # the rule is the client's: whatever fails to compile is its
            if not isinstance(exc, ConstraintError):  # (the GBNF reader raises plain ones)
                exc = ConstraintError(f"the rule cannot be compiled: {exc}")
            code = "invalid_grammar" if param == "grammar" else "invalid_schema"
            raise ApiError(400, f"Invalid '{param}': {exc}", param=param, code=code) from None

    def _thinking_first(self, spec: ConstraintSpec, split: ThinkingSplit) -> ConstraintSpec | None:
        """The rule, with the thinking allowed before it (`family.forced`); a client's own
        Lark grammar or regex is left as it is (it says what the whole answer is)."""
        if spec.kind in ("json_schema", "json_object"):
            source = json.loads(spec.source) if spec.kind == "json_schema" else True
            lark = json_lark(source)
        elif (spec.kind == "lark" and spec.source.startswith("start: calls")) or (
            spec.source.startswith("start: reply | calls")
        ):
            lark = spec.source
        else:
            return spec
        syntax = split.syntax
        special = self.grammars.special(syntax.markers)
        return ConstraintSpec(
            "lark", thinking_first(lark, syntax, inside=split.inside, special=special)
        )

    def _rule(
        self, asked: GenerationRequest, fmt: ToolFormat | None
    ) -> tuple[ConstraintSpec | None, str | None]:
        """The rule the client asked for, with the tools' calls where it forces one (or
        allows one beside a response_format, or its tools are strict), and where it says it."""
        spec, param = asked.rule, asked.rule_param
        if fmt is not None and (asked.forces_call or spec is not None):
            special = self.grammars.special(fmt.markers)
            reply = _reply_schema(spec) if not asked.forces_call else None
            tools = asked.forced_tools()
            # A named function is one call (as OpenAI answers it, and as instructor expects);
            # "required" may be several when parallel calls are allowed.
            parallel = asked.parallel_tool_calls and asked.tool_choice != "function"
            lark = call_grammar(fmt, tools, parallel=parallel, special=special, or_json=reply)
            spec, param = ConstraintSpec("lark", lark), param or "tools"
        elif fmt is not None:  # tool_choice "auto": strict tools' calls follow their schemas
            special = self.grammars.special(fmt.markers)
            parallel = asked.parallel_tool_calls
            lark = lazy_call_grammar(fmt, asked.tools, parallel=parallel, special=special)
            spec, param = (ConstraintSpec("lark", lark), "tools") if lark else (None, None)
        return spec, param

    def max_tokens(self, prompt: list[int], asked: GenerationRequest) -> int:
        """The prompt must leave room for one new token; generation ends at a full context, at
        what the request asks, or at the server's --n-predict, whichever comes first."""
        n_ctx, n_prompt = self.engine.target.n_ctx, len(prompt)
        param = "prompt" if asked.prompt is not None else "messages"
        if n_prompt == 0:
            raise ApiError(400, "The prompt is empty.", param=param, code="invalid_value")
        if n_prompt >= n_ctx:
            raise ApiError(
                400,
                f"This model's maximum context length is {n_ctx} tokens. However, your "
                f"{param} resulted in {n_prompt} tokens. Please reduce the length of the "
                f"{param}, or restart the server with a larger --ctx.",
                param=param,
                code="context_length_exceeded",
            )
        caps = [n_ctx - n_prompt, asked.max_tokens, self.n_predict]
        return min(cap for cap in caps if cap is not None)


def _reply_schema(spec: ConstraintSpec | None) -> dict[str, object] | None:
    """response_format's schema, for a grammar that also allows calls."""
    if spec is None:
        return None
    schema = json.loads(spec.source) if spec.kind == "json_schema" else {"type": "object"}
    return schema if isinstance(schema, dict) else {}
