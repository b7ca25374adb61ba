"""A pair's prompts and the text of its answers: messages rendered through the target's chat
template into prompt tokens, for a reasoning mode too; the target's tokens read back as text
with a family's markers kept; and the thinking the template tells of, split from the answer and
bounded to a budget."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

from specllama.chat import Message, plain_prompt, render_chat
from specllama.engine.budget import ThinkingWatch, bounded
from specllama.engine.detok import TextStream
from specllama.engine.events import Event
from specllama.engine.sampling import SamplingParams
from specllama.errors import UsageError
from specllama.family.thinking import (
    ReasoningMode,
    TemplateThinking,
    ThinkingSplit,
    opens_thinking,
    template_thinking,
    thinking_settings,
)
from specllama.llama.backend import LlamaBackend

PROMPT_TAIL = 8  # the prompt's last tokens: enough to hold a start marker (Kimi K3's is 4)


def prompt_tokens(
    target: LlamaBackend,
    messages: list[Message],
    *,
    chat_template: bool = True,
    tools: list[dict[str, Any]] | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """Messages -> the target's prompt tokens, through the model's own chat template (shown
    `tools`, OpenAI's function tools, when there are some, and `template_kwargs`, a request's
    `chat_template_kwargs`)."""
    if not chat_template:
        return target.tokenize("\n\n".join(m.content for m in messages))
    template = target.chat_template
    if template is None:
        return target.tokenize(plain_prompt(messages))
    vocab = target.vocab
    bos = target.special_token_text(vocab.bos) if vocab.add_bos else ""
    eos = target.special_token_text(vocab.eos)
    text = render_chat(
        template,
        messages,
        bos_token=bos,
        eos_token=eos,
        tools=tools,
        template_kwargs=template_kwargs,
    )
    # A template that writes the BOS itself must not get a second one from the tokenizer.
    add_bos = vocab.add_bos and not (bos and text.startswith(bos))
    return target.tokenize(text, add_bos=add_bos)


class PromptsAndThinking:
    """The prompt and thinking methods of a loaded pair (`pair.Engine`), over its `target` and
    its `generate`."""

    target: LlamaBackend
    generate: Callable[..., Iterator[Event]]

    def prompt_tokens(
        self,
        messages: list[Message],
        *,
        chat_template: bool = True,
        tools: list[dict[str, Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> list[int]:
        return prompt_tokens(
            self.target,
            messages,
            chat_template=chat_template,
            tools=tools,
            template_kwargs=template_kwargs,
        )

    def text_tokens(self, text: str) -> list[int]:
        """Text as the target would write it in an answer (no BOS, special tokens as text)."""
        return self.target.tokenize(text, add_bos=False, special=False)

    def target_text_stream(self, preserved: Collection[str] = ()) -> TextStream:
        """The target's tokens as text; the `preserved` markers (a family's `<think>`,
        `<tool_call>`...) that are one token each are written as their text even when that
        token is a control token."""
        return TextStream(self.target, self.marker_tokens(preserved))

    def marker_tokens(self, markers: Collection[str]) -> set[int]:
        """The ids of the `markers` that the target's vocabulary holds as one token."""
        ids = set()
        for marker in markers:
            tokens = self.target.tokenize(marker, add_bos=False, special=True)
            if len(tokens) == 1:
                ids.add(tokens[0])
        return ids

    # -- thinking ---------------------------------------------------------------------------

    @property
    def thinking(self) -> TemplateThinking | None:
        """What the target's chat template says about thinking (None: its family does not
        think)."""
        return template_thinking(self.target.chat_template)

    def reasoning_prompt(
        self,
        messages: list[Message],
        mode: ReasoningMode = "auto",
        *,
        chat_template: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[int]:
        """The prompt tokens, rendered for a reasoning mode: the template's own switch, or an
        empty thinking block closed after the generation prompt (`thinking_settings`)."""
        settings = thinking_settings(self.target.chat_template if chat_template else None, mode)
        kwargs = settings.template_kwargs or None
        tokens = self.prompt_tokens(
            messages, chat_template=chat_template, tools=tools, template_kwargs=kwargs
        )
        if settings.prefill:
            tokens += self.target.tokenize(settings.prefill, add_bos=False, special=True)
        return tokens

    def answer_split(self, prompt: list[int]) -> ThinkingSplit | None:
        """A splitter of the answer to `prompt` into thinking and text (None: no thinking),
        begun inside the thinking when the prompt opened it. Read the answer with
        `target_text_stream(thinking.syntax.markers)`, so that markers reach it."""
        if self.thinking is None:
            return None
        syntax = self.thinking.syntax
        tail = "".join(map(self.target.special_token_text, prompt[-PROMPT_TAIL:]))
        return ThinkingSplit(syntax, inside=opens_thinking(syntax, tail))

    def generate_thinking(
        self,
        prompt: list[int],
        params: SamplingParams,
        *,
        max_tokens: int,
        budget: int | None = None,
        **options: Any,
    ) -> Iterator[Event]:
        """`generate`, with the thinking bounded to `budget` tokens (None: unbounded): then its
        end marker is written and the answer goes on (`engine.budget`)."""
        split = self.answer_split(prompt) if budget is not None else None
        if split is None or self.thinking is None:
            return self.generate(prompt, params, max_tokens=max_tokens, **options)
        if options.get("constraint") is not None:
            raise UsageError("a thinking budget does not go with an output rule (a schema)")
        params = params.with_seed()  # one seed for every phase
        watch = ThinkingWatch(self.target_text_stream(self.thinking.syntax.markers), split)
        return bounded(
            lambda context, n: self.generate(context, params, max_tokens=n, **options),
            prompt,
            max_tokens=max_tokens,
            budget=budget,
            end=self.target.tokenize(self.thinking.ending, add_bos=False, special=True),
            watch=watch,
        )
