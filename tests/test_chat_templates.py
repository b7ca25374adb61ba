"""Chat templates render as llama.cpp renders them: every real template llama.cpp tests against
(`chat_templates.py`), the messages in the shapes each family reads, and a sandbox that stays
shut to a hostile template."""

from __future__ import annotations

import re

import pytest
from chat_templates import all_templates, template_names

from specllama.chat import Message, ToolCall, render_chat
from specllama.chat_template import (
    IDS_KIMI,
    IDS_NINE_ALPHANUMERICS,
    fields_read,
    nine_alphanumerics,
    template_needs,
    template_variables,
)
from specllama.errors import SpecllamaError

# The figure issue 51 counted: templates that read the tools or render an assistant's calls.
TEMPLATES_WITH_TOOLS_AT_LEAST = 63

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CALL_ID = "call_7f3a9e2b51d4"
CALL = ToolCall(CALL_ID, "get_weather", '{"city": "Zanzibar"}')
RESULT = "18 C and sunny"


def call_and_result() -> list[Message]:
    return [
        Message("system", "You are a weather helper."),
        Message("user", "What is the weather where I live?"),
        Message("assistant", "", tool_calls=(CALL,)),
        Message("tool", RESULT, tool_call_id=CALL_ID),
    ]


def tool_conversation() -> list[Message]:
    """A call, its result, the answer, a new question (Mistral's templates want the answer
    between the result and the next question, as llama.cpp's own probe has it)."""
    return [
        *call_and_result(),
        Message("assistant", "It is 18 C and sunny."),
        Message("user", "And tomorrow?"),
    ]


def takes_tools(template: str) -> bool:
    """Whether the template reads the tools, or writes an assistant's calls."""
    return "tools" in template_variables(template) or "tool_calls" in fields_read(template)


TOOL_TEMPLATES = [name for name in template_names() if takes_tools(all_templates()[name])]


def render(name: str, messages: list[Message], **kwargs) -> str:
    return render_chat(all_templates()[name], messages, bos_token="<s>", eos_token="</s>", **kwargs)


def test_as_many_templates_take_tools_as_the_issue_counted():
    without = sorted(set(template_names()) - set(TOOL_TEMPLATES))
    print(f"{len(TOOL_TEMPLATES)} take tools; not: {', '.join(without)}")
    assert len(TOOL_TEMPLATES) >= TEMPLATES_WITH_TOOLS_AT_LEAST


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
@pytest.mark.parametrize("conversation", [tool_conversation, call_and_result])
def test_a_tool_conversation_renders_the_call_and_its_result(name, conversation):
    """The call's name and argument are in the prompt wherever the template writes calls (LFM2's
    and Granite 3.3's read the tools but never an assistant's calls: llama.cpp loses them too)."""
    text = render(name, conversation(), tools=TOOLS)
    assert RESULT in text
    if "tool_calls" in fields_read(all_templates()[name]):
        assert "get_weather" in text
        assert "Zanzibar" in text
        assert "{'city': 'Zanzibar'}" not in text  # never Python's repr of the arguments


@pytest.mark.parametrize("name", template_names())
def test_a_plain_two_turn_conversation_renders(name):
    messages = [
        Message("user", "Hi there"),
        Message("assistant", "Hello! How can I help?"),
        Message("user", "Tell me a joke"),
    ]
    text = render(name, messages)
    for message in messages:
        assert message.content in text


@pytest.mark.parametrize("name", template_names())
def test_an_earlier_turn_with_reasoning_renders(name):
    messages = [
        Message("user", "Is it raining?"),
        Message("assistant", "Yes, it is.", reasoning="The sky looks grey."),
        Message("user", "Should I take an umbrella?"),
    ]
    text = render(name, messages)
    assert "Should I take an umbrella?" in text


def reads_reasoning(template: str) -> bool:
    needs = template_needs(template)
    return needs.reasoning_blocks or bool(set(needs.reasoning_fields) & fields_read(template))


THINKING_TOOL_TEMPLATES = [
    name for name in TOOL_TEMPLATES if reads_reasoning(all_templates()[name])
]


@pytest.mark.parametrize("name", THINKING_TOOL_TEMPLATES)
def test_reasoning_reaches_a_template_that_reads_it(name):
    """Thinking on, the reasoning of the turn still going on is in the prompt, in whichever field
    the family reads: before a call whose result is in, or (Apriel keeps it only there) in the
    last message."""
    thought = "I should look the weather up."
    before_a_call = call_and_result()
    before_a_call[2] = Message("assistant", "", tool_calls=(CALL,), reasoning=thought)
    last = [Message("user", "Is it raining?"), Message("assistant", "Yes.", reasoning=thought)]
    thinking = {"enable_thinking": True, "thinking": True}
    texts = [
        render(name, before_a_call, tools=TOOLS, template_kwargs=thinking),
        render(name, last, add_generation_prompt=False, template_kwargs=thinking),
    ]
    assert any(thought in text for text in texts)


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
def test_the_same_conversation_renders_the_same_text(name):
    assert render(name, tool_conversation(), tools=TOOLS) == render(
        name, tool_conversation(), tools=TOOLS
    )


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
def test_call_ids_reach_the_template_in_the_family_s_shape(name):
    needs = template_needs(all_templates()[name])
    text = render(name, tool_conversation(), tools=TOOLS)
    if needs.call_ids == IDS_NINE_ALPHANUMERICS:
        assert nine_alphanumerics(CALL_ID) in text and CALL_ID not in text
    elif needs.call_ids == IDS_KIMI:
        assert "functions.get_weather:0" in text and CALL_ID not in text


def test_the_families_that_need_other_shapes_are_found():
    needs = {name: template_needs(all_templates()[name]) for name in TOOL_TEMPLATES}
    assert needs["mistralai-Mistral-Nemo-Instruct-2407"].call_ids == IDS_NINE_ALPHANUMERICS
    assert needs["moonshotai-Kimi-K2"].call_ids == IDS_KIMI
    assert needs["meetkai-functionary-medium-v3.2"].text_arguments
    assert not needs["Qwen-Qwen3-0.6B"].text_arguments
    assert "thinking" in needs["openai-gpt-oss-120b"].reasoning_fields
    assert needs["mistralai-Ministral-3-14B-Reasoning-2512"].reasoning_blocks


def test_arguments_as_text_are_the_call_s_own_text():
    name = "meetkai-functionary-medium-v3.2"
    assert CALL.arguments in render(name, tool_conversation(), tools=TOOLS)


def test_nine_alphanumerics_are_the_same_for_the_same_id_and_differ_between_ids():
    shaped = nine_alphanumerics("call_abc")
    assert re.fullmatch(r"[A-Za-z0-9]{9}", shaped)
    assert nine_alphanumerics("call_abc") == shaped
    assert nine_alphanumerics("call_abd") != shaped
    assert nine_alphanumerics("a1B2c3D4e") == "a1B2c3D4e"  # already in shape


def test_a_result_whose_call_is_gone_gets_the_same_id_as_the_call_had():
    """Trimming may drop the assistant's call but keep its result: the id stays the same."""
    template = all_templates()["mistralai-Mistral-Nemo-Instruct-2407"]
    text = render_chat(template, [Message("tool", "x", tool_call_id=CALL_ID)], tools=TOOLS)
    assert nine_alphanumerics(CALL_ID) in text


# -- the sandbox ------------------------------------------------------------------------------


def test_generation_blocks_render_their_body():
    template = (
        "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    )
    assert render_chat(template, [Message("user", "a"), Message("assistant", "b")]) == "[a][b]"


def test_loop_controls_work():
    template = (
        "{% for m in messages %}{% if m.role == 'user' %}{% continue %}{% endif %}"
        "{{ m.content }}{% break %}{% endfor %}"
    )
    messages = [Message("user", "a"), Message("assistant", "b"), Message("assistant", "c")]
    assert render_chat(template, messages) == "b"


def test_templates_may_change_the_lists_and_dicts_they_are_given():
    template = (
        "{% set seen = [] %}{% set names = {} %}"
        "{% for m in messages %}{% set _ = seen.append(m.role) %}"
        "{% set _ = names.update({m.role: 1}) %}{% endfor %}"
        "{% set _ = seen.extend(['x', 'y']) %}{% set _ = seen.insert(0, 'w') %}"
        "{% set _ = seen.pop() %}{% set _ = tools.append('mine') %}"
        "{% set _ = messages[0].update({'content': 'changed'}) %}"
        "{{ seen | join(',') }}|{% for k, v in names.items() %}{{ k }}{% endfor %}"
        "|{{ tools | length }}"
    )
    tools = [{"type": "function", "function": {"name": "f"}}]
    messages = [Message("user", "a"), Message("assistant", "b")]
    assert render_chat(template, messages, tools=tools) == "w,user,assistant,x|userassistant|2"
    assert tools == [{"type": "function", "function": {"name": "f"}}]  # the caller's: untouched
    assert messages[0].content == "a"


def test_tojson_writes_what_a_filter_yields():
    template = (
        "{{ tools | map(attribute='function') | map(attribute='name') | list | tojson }}"
        "{{ tools | map(attribute='function') | tojson }}"
    )
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert render_chat(template, [], tools=tools) == '["f"][{"name": "f"}]'


def test_a_missing_value_added_to_a_string_is_empty_as_in_llama_cpp():
    template = "{{ 'a' + messages[0].missing + 'b' }}{{ none + 'c' }}"
    assert render_chat(template, [Message("user", "x")]) == "abc"


def sixty_four_times(start: str, step: str) -> str:
    """A template that doubles what `ns.x` holds 64 times."""
    return f"{{% set ns = namespace(x={start}) %}}{{% for i in range(64) %}}{step}{{% endfor %}}"


HOSTILE = {
    "a class's attributes": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "a function's globals": "{{ raise_exception.__globals__ }}",
    "a jinja global's globals": "{{ cycler.__init__.__globals__ }}",
    "mro": "{{ ''.__class__.mro() }}",
    "format's attribute access": "{{ '{0.__class__}'.format('') }}",
    "a bound method's owner": "{{ messages.append.__self__ }}",
    "a huge range": "{% for i in range(10**9) %}{% endfor %}",
    "a huge string": "{{ 'x' * 10**10 }}",
    "a huge list": "{{ [1] * 10**10 }}",
    "a huge number": "{{ 2 ** (10 ** 9) }}",
    "a list doubled": sixty_four_times("[1]", "{% set _ = ns.x.extend(ns.x) %}"),
    "a list added to itself": sixty_four_times("[1]", "{% set ns.x = ns.x + ns.x %}"),
    "a string added to itself": sixty_four_times("'x'", "{% set ns.x = ns.x + ns.x %}"),
    "a template that cannot be read": "{% if %}",
}


@pytest.mark.parametrize("template", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_template_is_refused_with_one_clear_error(template):
    with pytest.raises(SpecllamaError, match="chat template failed") as failure:
        render_chat(template, [Message("user", "x")])
    assert "\n" not in str(failure.value)


def test_template_kwargs_reach_the_template():
    template = (
        "{% if enable_thinking is defined and not enable_thinking %}off{% else %}on{% endif %}"
    )
    messages = [Message("user", "x")]
    assert render_chat(template, messages) == "on"
    assert render_chat(template, messages, template_kwargs={"enable_thinking": False}) == "off"
