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
from specllama.reasoning import opens_thinking, template_thinks
from specllama.server.fields import ApiError
from specllama.server.request import GenerationRequest
from specllama.session import Engine
from specllama.tool_calls import ToolFormat, call_grammar, detect_format, template_knows_tools

GRAMMARS_KEPT = 16  # compiled output rules kept: clients send the same schema again and again


@dataclass(frozen=True)
class Prepared:
    """What a request becomes before it is queued."""

    prompt: list[int]
    constraint: Grammar | None  # the rule the answer follows
    tool_format: ToolFormat | None  # the answer is read for tool calls in this syntax
    prediction: list[int] | None = None  # the answer the client expects, as tokens
    thinking: bool | None = None  # see Served.thinking


class Grammars:
    """Output rules compiled for the target's vocabulary, the last few kept. Compiling runs on
    the request's thread (off the event loop); the worker only reads compiled ones."""

    def __init__(self, engine: Engine, kept: int = GRAMMARS_KEPT) -> None:
        self._engine = engine
        self._kept = kept
        self._compiled: OrderedDict[ConstraintSpec, Grammar] = OrderedDict()
        self._special: dict[str, bool] = {}
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

    def special(self, markers: tuple[str, ...]) -> set[str]:
        """Which of `markers` (`<tool_call>`...) are special tokens of the vocabulary: a
        grammar must write those as tokens, for the model writes them as one token."""
        for marker in markers:
            if marker not in self._special:
                try:
                    self.get(ConstraintSpec("lark", f"start: {marker}\n"))
                    self._special[marker] = True
                except ConstraintError:
                    self._special[marker] = False
        return {m for m in markers if self._special[m]}


class Preparer:
    def __init__(self, engine: Engine, model_id: str) -> None:
        self.engine = engine
        self.model_id = model_id  # for the messages that name the model
        self.grammars = Grammars(engine)

    def prepare(self, asked: GenerationRequest) -> Prepared:
        """Tokenise the prompt (through the model's template, with the client's tools) and
        compile the output rule: the work a request needs before it is queued."""
        tool_format = self.tool_format(asked)
        prompt = self.prompt_tokens(asked, tool_format)
        predicted = None
        if asked.prediction is not None:  # its text as the answer would hold it
            predicted = self.engine.text_tokens(asked.prediction)
        constraint = self._constraint(asked, tool_format)
        return Prepared(prompt, constraint, tool_format, predicted, self._thinking(asked, prompt))

    def _thinking(self, asked: GenerationRequest, prompt: list[int]) -> bool | None:
        """Whether the answer may think (the template knows the tags), and begins inside the
        thinking (the prompt opened it)."""
        if asked.prompt is not None or not template_thinks(self.engine.target.chat_template):
            return None
        return opens_thinking(self.engine.target.detokenize(prompt[-4:]))

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
        names = [tool.name for tool in asked.tools]
        return detect_format(template, names) if asked.uses_tools else None

    def prompt_tokens(self, asked: GenerationRequest, tool_format: ToolFormat | None) -> list[int]:
        try:
            if asked.prompt is not None:  # a text completion: the prompt as it is
                as_is = [Message("user", asked.prompt)]
                return self.engine.prompt_tokens(as_is, chat_template=False)
            tools = [tool.as_openai() for tool in asked.tools] if tool_format else None
            return self.engine.prompt_tokens(list(asked.messages), tools=tools)
        except SpecllamaError as exc:  # the model's chat template refused these messages
            raise ApiError(400, str(exc), param="messages", code="invalid_value") from None

    def _constraint(self, asked: GenerationRequest, fmt: ToolFormat | None) -> Grammar | None:
        """The compiled rule: the forced call, response_format or grammar, or a JSON answer
        or a call (response_format beside tools the model may call)."""
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
        if spec is None:
            return None
        try:
            return self.grammars.get(spec)
        except Exception as exc:  # the rule is the client's: whatever fails to compile is its
            if not isinstance(exc, ConstraintError):  # (the GBNF reader raises plain ones)
                exc = ConstraintError(f"the rule cannot be compiled: {exc}")
            code = "invalid_grammar" if param == "grammar" else "invalid_schema"
            raise ApiError(400, f"Invalid '{param}': {exc}", param=param, code=code) from None

    def max_tokens(self, prompt: list[int], asked: GenerationRequest) -> int:
        """The prompt must leave room for one new token; generation ends at a full context."""
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
        room = n_ctx - n_prompt
        return room if asked.max_tokens is None else min(asked.max_tokens, room)


def _reply_schema(spec: ConstraintSpec | None) -> dict[str, object] | None:
    """response_format's schema, for a grammar that also allows calls."""
    if spec is None:
        return None
    schema = json.loads(spec.source) if spec.kind == "json_schema" else {"type": "object"}
    return schema if isinstance(schema, dict) else {}
