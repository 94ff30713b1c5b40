"""`constrained.openai_api`: what each OpenAI request field becomes (no server needed)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic")

from constrained.openai_api import (  # noqa: E402
    APIError, ChatCompletionRequest, CompletionRequest, chat_prompt, constraint_of, fallback_chat, tool_schema,
)

USER = [{"role": "user", "content": "Hi"}]
F = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
    "x": {"type": "integer"}}, "required": ["x"]}}}
G = {"type": "function", "function": {"name": "g"}}


def chat(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": USER, **fields})


@pytest.mark.parametrize(("fields", "constraint", "param"), [
    ({}, {}, None),
    ({"response_format": {"type": "text"}}, {}, None),
    ({"response_format": {"type": "json_object"}}, {"schema": {"type": "object"}, "options": {}}, "response_format"),
    ({"response_format": {"type": "regex", "regex": "[ab]+"}}, {"regex": "[ab]+", "options": {}},
     "response_format.regex"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}},
     {"schema": {"type": "integer"}, "options": {}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"},
                                                                 "strict": True}}},
     {"schema": {"type": "object"}, "options": {"strict": True}}, "response_format.json_schema.schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"},
                                                                 "any_order": True}}},
     {"schema": {"type": "object"}, "options": {"any_order": True}}, "response_format.json_schema.schema"),
    ({"tools": [F], "tool_choice": "none"}, {}, None),
])
def test_constraint_of(fields: dict[str, Any], constraint: dict[str, Any], param: str | None) -> None:
    assert constraint_of(chat(**fields)) == (constraint, param)


def test_named_tool_is_a_call_with_its_parameters() -> None:
    schema, param = tool_schema(chat(tools=[G, F], tool_choice={"type": "function", "function": {"name": "f"}}))
    assert param == "tools[1].function.parameters"
    assert schema["properties"] == {"name": {"const": "f"}, "arguments": F["function"]["parameters"]}
    assert schema["required"] == ["name", "arguments"] and schema["additionalProperties"] is False


def test_required_is_any_of_the_tools() -> None:
    schema, param = tool_schema(chat(tools=[F, G], tool_choice="required"))
    assert param == "tools"
    assert [v["properties"]["name"]["const"] for v in schema["anyOf"]] == ["f", "g"]
    assert schema["anyOf"][1]["properties"]["arguments"] == {"type": "object"}   # no parameters: any object


@pytest.mark.parametrize("fields", [{"tools": [F, G]}, {"tools": [F, G], "tool_choice": "auto"}])
def test_auto_is_a_call_to_any_tool_or_text(fields: dict[str, Any]) -> None:
    """"auto" (the default with tools): the calls of "required", or text (`or_text`)."""
    constraint, param = constraint_of(chat(**fields))
    assert constraint == {"schema": tool_schema(chat(tools=[F, G], tool_choice="required"))[0],
                          "options": {"or_text": True}} and param == "tools"
    required, _ = constraint_of(chat(tools=[F, G], tool_choice="required"))
    assert required["options"] == {}
    assert constraint_of(chat(tools=[F], tool_choice="none")) == ({}, None)


@pytest.mark.parametrize(("fields", "param"), [
    ({"tools": [F], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"response_format": {"type": "regex"}}, "response_format.regex"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "n"}}}, "response_format.json_schema"),
])
def test_unusable_constraints_are_400(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(APIError) as e:
        constraint_of(chat(**fields))
    assert e.value.status == 400 and e.value.param == param


@pytest.mark.parametrize(("fields", "param"), [
    ({"logprobs": True}, "logprobs"), ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"logit_bias": {"5": 1.0}}, "logit_bias"), ({"stop": ["a", "b", "c", "d", "e"]}, "stop"), ({"stop": ""}, "stop"),
])
def test_fields_we_cannot_honour_are_refused(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(APIError) as e:
        chat(**fields).refuse_unsupported()
    assert e.value.param == param
    chat(frequency_penalty=0, logprobs=False, stop=["a"], user="u").refuse_unsupported()   # defaults pass


def test_completion_echo_is_refused() -> None:
    with pytest.raises(APIError, match="echo"):
        CompletionRequest.model_validate({"model": "m", "prompt": "x", "echo": True}).refuse_unsupported()


def test_fallback_chat_template() -> None:
    msgs = [{"role": "system", "content": "Be brief."}, *USER,
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}]
    assert fallback_chat(msgs, [F]).splitlines() == [
        'system: Tools: [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", '
        '"properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]',
        "system: Be brief.", "user: Hi", 'assistant: {"name": "f", "arguments": "{}"}', "assistant:"]


def test_chat_prompt_uses_the_tokenizer_template_or_the_fallback() -> None:
    pytest.importorskip("transformers")
    from tests.tiny_lms import hf_tokenizer

    req = chat(messages=[{"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}])
    qwen = hf_tokenizer("qwen2")                               # its GGUF vocabulary carries a chat template
    assert qwen.decode(chat_prompt(qwen, req)).endswith("<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")
    llama = hf_tokenizer("llama-spm")                          # none: the plain fallback
    assert llama.decode(chat_prompt(llama, req), skip_special_tokens=True) == "user: Hi there\nassistant:"


def test_non_text_content_is_400() -> None:
    pytest.importorskip("transformers")
    from tests.tiny_lms import hf_tokenizer

    req = chat(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    with pytest.raises(APIError) as e:
        chat_prompt(hf_tokenizer("llama-spm"), req)
    assert e.value.param == "messages[0].content"
