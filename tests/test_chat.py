"""Conversation state: trimming to fit the context, interrupted answers, saving."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specllama.chat import INTERRUPTED_MARK, Conversation, Message, ToolCall, render_chat
from specllama.errors import SpecllamaError


def words(messages: list[Message]) -> int:
    """A stand-in token counter: one token per word, plus 3 per message for the template."""
    return sum(len(m.content.split()) + 3 for m in messages)


def chat_of(n_turns: int, system: str | None = "be brief") -> Conversation:
    conv = Conversation(system)
    for i in range(n_turns):
        conv.add_user(f"question {i} " + "word " * 10)
        conv.add_assistant(f"answer {i} " + "word " * 10)
    return conv


def test_messages_put_the_system_prompt_first():
    conv = Conversation("sys")
    conv.add_user("hi")
    assert [m.role for m in conv.messages()] == ["system", "user"]
    assert [m.role for m in Conversation().messages()] == []


def test_fit_drops_oldest_turns_keeps_system_and_reports():
    conv = chat_of(4)
    conv.add_user("latest question")
    before = words(conv.messages())
    trimmed = conv.fit(words, budget=before - 40)
    assert trimmed is not None
    assert trimmed.n_turns == 2  # a turn is 15 + 15 "tokens": one is not enough
    assert [m.content.split()[:2] for m in trimmed.messages[:2]] == [
        ["question", "0"],
        ["answer", "0"],
    ]
    assert trimmed.n_tokens_before == before
    assert trimmed.n_tokens_after == words(conv.messages()) <= before - 40
    messages = conv.messages()
    assert messages[0] == Message("system", "be brief")
    assert messages[1].content.startswith("question 2")
    assert messages[-1].content == "latest question"


def test_fit_does_nothing_when_it_fits():
    conv = chat_of(2)
    assert conv.fit(words, budget=10_000) is None
    assert len(conv.turns) == 4


def test_fit_never_drops_the_last_message_even_when_over():
    conv = chat_of(3)
    conv.add_user("x " * 500)
    trimmed = conv.fit(words, budget=50)
    assert trimmed is not None and trimmed.n_turns == 3
    assert [m.role for m in conv.messages()] == ["system", "user"]
    assert words(conv.messages()) > 50  # the caller decides: too long for the context


def test_interrupted_answer_is_marked_in_content_and_json(tmp_path: Path):
    conv = Conversation()
    conv.add_user("tell me a story")
    conv.add_assistant("Once upon a time ", interrupted=True)
    last = conv.messages()[-1]
    assert last.interrupted
    assert last.content == "Once upon a time" + INTERRUPTED_MARK
    # The template sees the mark too, so the next turn knows the answer was cut.
    assert last.as_dict() == {"role": "assistant", "content": last.content}
    path = tmp_path / "c.json"
    assert conv.save(path) == "json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert saved["messages"][-1]["interrupted"] is True
    assert "interrupted" not in saved["messages"][0]


def test_save_markdown_and_unicode(tmp_path: Path):
    conv = Conversation("sys")
    conv.add_user("héllo 🐉")
    conv.add_assistant("bonjour")
    path = tmp_path / "c.md"
    assert conv.save(path) == "markdown"
    text = path.read_text(encoding="utf-8")
    assert "## System\n\nsys" in text and "## User\n\nhéllo 🐉" in text
    assert "## Assistant\n\nbonjour" in text


def test_save_to_a_missing_folder_is_one_clear_error(tmp_path: Path):
    with pytest.raises(SpecllamaError, match="cannot write"):
        Conversation().save(tmp_path / "no" / "such" / "c.json")


def test_pop_user_and_reset():
    conv = Conversation("sys")
    conv.add_user("a")
    conv.pop_user()
    assert conv.turns == []
    conv.add_user("a")
    conv.add_assistant("b")
    conv.pop_user()  # the last message is an answer: nothing to pop
    assert len(conv.turns) == 2
    conv.reset()
    assert conv.messages() == [Message("system", "sys")]


def test_tools_and_calls_reach_the_template_as_hugging_face_templates_read_them():
    """The tools as OpenAI writes them; an assistant's call with its arguments as an object
    (the template writes them with tojson, in the model's key order, `<` unescaped)."""
    template = (
        "{% for t in tools %}{{ t.function.name }};{% endfor %}"
        "{% for m in messages %}[{{ m.role }}:{{ m.content }}"
        "{% for c in m.tool_calls or [] %}{{ c.function.name }}{{ c.function.arguments | tojson }}"
        "{% endfor %}{% if m.tool_call_id %}#{{ m.tool_call_id }}{% endif %}]{% endfor %}"
    )
    messages = [
        Message("user", "go"),
        Message("assistant", "", tool_calls=(ToolCall("c1", "f", '{"z": "<b>", "a": 1}'),)),
        Message("tool", "42", tool_call_id="c1"),
    ]
    tools = [
        {"type": "function", "function": {"name": "f"}},
        {"type": "function", "function": {"name": "g"}},
    ]
    text = render_chat(template, messages, tools=tools)
    assert text == 'f;g;[user:go][assistant:f{"z": "<b>", "a": 1}][tool:42#c1]'
    assert render_chat(template, messages[:1]) == "[user:go]"  # no tools: none given


def test_a_call_whose_arguments_are_not_json_reaches_the_template_as_text():
    call = ToolCall("c1", "f", "not json")
    assert call.as_template_dict()["function"]["arguments"] == "not json"


def test_an_answer_s_reasoning_is_passed_back_as_llama_cpp_passes_it():
    message = Message("assistant", "yes", reasoning="hmm")
    assert message.as_dict() == {"role": "assistant", "content": "yes", "reasoning_content": "hmm"}


def test_arguments_may_reach_the_template_as_the_call_s_own_text():
    call = ToolCall("c1", "f", '{"a":  1}')
    assert call.as_template_dict()["function"]["arguments"] == {"a": 1}
    assert call.as_template_dict(text_arguments=True)["function"]["arguments"] == '{"a":  1}'
