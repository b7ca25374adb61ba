"""An earlier answer's thinking, passed back by the client, read into `Message.reasoning` by
each API: Chat Completions' `reasoning_content` (or `reasoning`), Responses' `reasoning` items,
Messages' `thinking` blocks. No model needed."""

from __future__ import annotations

import pytest

from specllama.chat import Message, ToolCall, render_chat
from specllama.server.anthropic import parse_messages
from specllama.server.fields import ApiError
from specllama.server.openai_chat import parse_chat
from specllama.server.openai_responses import parse_responses

CALL = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
QUESTION = "Weather in Paris?"
RESULT = "18 C"


def chat(*messages: dict) -> tuple[Message, ...]:
    return parse_chat({"model": "m", "messages": list(messages)}).messages


def responses(*items: dict) -> tuple[Message, ...]:
    return parse_responses({"model": "m", "input": list(items)}).messages


def anthropic(*messages: dict) -> tuple[Message, ...]:
    return parse_messages({"model": "m", "max_tokens": 8, "messages": list(messages)}).messages


def refused(parse, *given: dict) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(*given)
    return caught.value


def user(text: str) -> dict:
    return {"role": "user", "content": text}


# -- Chat Completions ---------------------------------------------------------------------------


def chat_call(**more) -> dict:
    call = {"id": CALL.id, "type": "function"}
    call["function"] = {"name": CALL.name, "arguments": CALL.arguments}
    return {"role": "assistant", "content": None, "tool_calls": [call], **more}


def test_chat_reasoning_content_is_the_assistants_reasoning():
    assert chat(user(QUESTION), chat_call(reasoning_content="It is a weather question.")) == (
        Message("user", QUESTION),
        Message("assistant", "", tool_calls=(CALL,), reasoning="It is a weather question."),
    )


def test_chat_reasoning_as_some_clients_send_it_is_read_too():
    said = {"role": "assistant", "content": "Hello.", "reasoning": "Greet back."}
    assert chat(user("hi"), said)[1] == Message("assistant", "Hello.", reasoning="Greet back.")


def test_chat_reasoning_content_wins_over_reasoning():
    said = {"role": "assistant", "content": "x", "reasoning_content": "mine", "reasoning": "other"}
    assert chat(user("hi"), said)[1].reasoning == "mine"


@pytest.mark.parametrize("empty", [{"reasoning_content": ""}, {"reasoning_content": None}, {}])
def test_chat_no_or_empty_reasoning_is_none(empty):
    """As llama.cpp: an empty reasoning is no reasoning (the template sees no field)."""
    assert chat(user("hi"), {"role": "assistant", "content": "x", **empty})[1].reasoning is None


def test_chat_reasoning_that_is_not_text_is_refused_by_name():
    error = refused(chat, user("hi"), {"role": "assistant", "content": "x", "reasoning": 3})
    assert error.status == 400 and error.param == "messages[1].reasoning"


def test_chat_reasoning_in_a_users_message_is_refused_by_name():
    error = refused(chat, {"role": "user", "content": "hi", "reasoning_content": "no"})
    assert error.status == 400 and error.param == "messages[0].reasoning_content"


# -- Responses ----------------------------------------------------------------------------------


def reasoning_item(*texts: str, summary: tuple[str, ...] = ()) -> dict:
    return {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": t} for t in summary],
        "content": [{"type": "reasoning_text", "text": t} for t in texts],
        "encrypted_content": None,
    }


def said_item(text: str) -> dict:
    content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    return {"type": "message", "id": "msg_1", "role": "assistant", "content": content}


def call_item() -> dict:
    return {
        "type": "function_call",
        "id": "fc_1",
        "call_id": CALL.id,
        "name": CALL.name,
        "arguments": CALL.arguments,
        "status": "completed",
    }


def output_item(call_id: str = CALL.id) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": RESULT}


def test_responses_a_reasoning_item_is_the_thinking_of_the_message_after_it():
    assert responses(user("hi"), reasoning_item("Greet back."), said_item("Hello.")) == (
        Message("user", "hi"),
        Message("assistant", "Hello.", reasoning="Greet back."),
    )


def test_responses_the_reasoning_before_a_message_and_its_call_is_one_turns():
    assert responses(
        user(QUESTION), reasoning_item("Look it up."), said_item("Looking."), call_item()
    )[1] == (Message("assistant", "Looking.", tool_calls=(CALL,), reasoning="Look it up."))


def test_responses_a_tool_loop_keeps_each_turns_own_reasoning():
    """As Codex sends a loop: each call with the reasoning before it, then the answer."""
    second = ToolCall("call_2", "get_weather", '{"city": "Lyon"}')
    second_item = {**call_item(), "call_id": "call_2", "arguments": second.arguments}
    assert responses(
        user(QUESTION),
        reasoning_item("First Paris."),
        call_item(),
        output_item(),
        reasoning_item("Then Lyon."),
        second_item,
        output_item("call_2"),
        reasoning_item("Both known."),
        said_item("18 C in both."),
    ) == (
        Message("user", QUESTION),
        Message("assistant", "", tool_calls=(CALL,), reasoning="First Paris."),
        Message("tool", RESULT, tool_call_id=CALL.id),
        Message("assistant", "", tool_calls=(second,), reasoning="Then Lyon."),
        Message("tool", RESULT, tool_call_id="call_2"),
        Message("assistant", "18 C in both.", reasoning="Both known."),
    )


def test_responses_the_summary_stands_for_the_thinking_only_without_content():
    given = reasoning_item(summary=("**Plan**", "Greet back."))
    assert (
        responses(user("hi"), given, said_item("Hello."))[1].reasoning == "**Plan**\n\nGreet back."
    )
    given = reasoning_item("The whole thought.", summary=("A summary.",))
    assert responses(user("hi"), given, said_item("Hello."))[1].reasoning == "The whole thought."


def test_responses_reasoning_with_no_text_is_no_reasoning():
    """Codex with OpenAI's models: an empty summary and content encrypted for OpenAI's servers."""
    given = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"}
    assert responses(user("hi"), given, said_item("Hello."))[1] == Message("assistant", "Hello.")


def test_responses_reasoning_no_assistant_item_follows_is_a_turn_of_its_own():
    """An answer that ended inside its thinking: the turn the model wrote, with no text."""
    assert responses(user("hi"), reasoning_item("Hmm, what"), user("Go on.")) == (
        Message("user", "hi"),
        Message("assistant", "", reasoning="Hmm, what"),
        Message("user", "Go on."),
    )


def test_responses_reasoning_items_in_a_row_join():
    given = responses(user("hi"), reasoning_item("One."), reasoning_item("Two."), said_item("x"))
    assert given[1].reasoning == "One.\nTwo."


@pytest.mark.parametrize(
    ("part", "param"),
    [
        ({"content": [{"type": "output_text", "text": "x"}]}, "input[1].content[0].type"),
        ({"content": [{"type": "reasoning_text"}]}, "input[1].content[0].text"),
        ({"summary": [{"type": "summary_text", "text": 1}]}, "input[1].summary[0].text"),
        ({"content": "x"}, "input[1].content"),
        ({"surprise": 1}, "input[1].surprise"),
    ],
)
def test_responses_a_malformed_reasoning_item_is_refused_by_name(part, param):
    item = {"type": "reasoning", "summary": [], **part}
    error = refused(responses, user("hi"), item, said_item("x"))
    assert error.status == 400 and error.param == param


# -- Messages -----------------------------------------------------------------------------------


def thinking(text: str) -> dict:
    return {"type": "thinking", "thinking": text, "signature": "EqQBCkYIBxgCKkB"}


def use_block() -> dict:
    return {"type": "tool_use", "id": CALL.id, "name": CALL.name, "input": {"city": "Paris"}}


def test_anthropic_thinking_blocks_are_the_assistants_reasoning():
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
    turn = {"role": "assistant", "content": [thinking("Look it up."), redacted, use_block()]}
    result = {"type": "tool_result", "tool_use_id": CALL.id, "content": RESULT}
    assert anthropic(user(QUESTION), turn, {"role": "user", "content": [result]}) == (
        Message("user", QUESTION),
        Message("assistant", "", tool_calls=(CALL,), reasoning="Look it up."),
        Message("tool", RESULT, tool_call_id=CALL.id),
    )


def test_anthropic_several_thinking_blocks_join_and_redacted_alone_is_none():
    text = {"type": "text", "text": "Hello."}
    turn = {"role": "assistant", "content": [thinking("One."), text, thinking("Two.")]}
    assert anthropic(user("hi"), turn, user("And?"))[1].reasoning == "One.\nTwo."
    redacted = {"type": "redacted_thinking", "data": "EmwK"}
    turn = {"role": "assistant", "content": [redacted, text]}
    assert anthropic(user("hi"), turn, user("And?"))[1] == Message("assistant", "Hello.")


def test_anthropic_a_turn_of_thinking_alone_is_an_assistant_turn():
    turn = {"role": "assistant", "content": [thinking("Hmm, what")]}
    assert anthropic(user("hi"), turn, user("Go on."))[1] == Message(
        "assistant", "", reasoning="Hmm, what"
    )


@pytest.mark.parametrize(
    ("block", "param"),
    [
        ({"type": "thinking", "signature": ""}, "messages[1].content[0].thinking"),
        ({"type": "thinking", "thinking": 1}, "messages[1].content[0].thinking"),
        ({**thinking("x"), "surprise": 1}, "messages[1].content[0].surprise"),
    ],
)
def test_anthropic_a_malformed_thinking_block_is_refused_by_name(block, param):
    turn = {"role": "assistant", "content": [block, {"type": "text", "text": "x"}]}
    error = refused(anthropic, user("hi"), turn, user("And?"))
    assert error.status == 400 and error.param == param


# -- the same conversation through all three ---------------------------------------------------

# A template that keeps every assistant turn's reasoning, as Qwen3's does in a tool loop.
KEEPS_REASONING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' %}<think>{{ m.reasoning_content or '' }}</think>{% endif %}"
    "{{ m.content }}<|im_end|>\n{% endfor %}"
)


def test_the_same_thinking_passed_back_through_each_api_renders_the_same_prompt():
    thought, answer, follow_up = "The user greets me.", "Hello.", "And you?"
    given = {
        "chat": chat(
            user("hi"),
            {"role": "assistant", "content": answer, "reasoning_content": thought},
            user(follow_up),
        ),
        "responses": responses(
            user("hi"), reasoning_item(thought), said_item(answer), user(follow_up)
        ),
        "messages": anthropic(
            user("hi"),
            {"role": "assistant", "content": [thinking(thought), {"type": "text", "text": answer}]},
            user(follow_up),
        ),
    }
    prompts = {api: render_chat(KEEPS_REASONING, list(m)) for api, m in given.items()}
    assert f"<think>{thought}</think>{answer}<|im_end|>" in prompts["chat"]
    assert prompts["responses"] == prompts["chat"] == prompts["messages"]
