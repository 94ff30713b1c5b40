"""The OpenAI request shapes `constrained serve` accepts, and what they mean for generation.

Requests are pydantic models. Fields a client may send that change nothing
here (`user`, `parallel_tool_calls`, ...) are accepted and ignored; fields
whose meaning we cannot honour (`logprobs`, penalties, `logit_bias`) are
refused with HTTP 400 rather than silently dropped.

A request becomes a *plan*: the prompt (chat messages rendered with the
tokenizer's chat template, or `FALLBACK_TEMPLATE`), the constraint, and the
sampling settings of a `GenerationRequest`:

- ``response_format`` ``{"type": "json_schema", "json_schema": {"schema": ...,
  "strict": ...}}``: the schema (``strict: true`` compiles with
  ``strict=True``: a missing ``additionalProperties`` means false; our
  extension ``"any_order": true`` lets object members come in any order);
  ``{"type": "json_object"}``: any JSON object; ``{"type": "regex", "regex":
  "..."}`` (our extension): a Python-syntax regular expression the whole
  output matches;
- ``tools`` with ``tool_choice`` ``"required"`` or ``{"type": "function",
  "function": {"name": ...}}``: a JSON object ``{"name": ..., "arguments":
  ...}`` whose arguments match the chosen function's ``parameters``; with
  ``"auto"`` (the default when tools are given), either such a call or text
  whose first character after JSON whitespace is not ``{``: the model
  decides, and whichever it writes is exact (``json_schema_grammar``'s
  ``or_text``);
- ``stop`` (up to 4 strings) ends the text where one appears, cut before
  it, with or without a constraint; a constrained text cut before its
  document was complete has ``finish_reason`` "stop" and ``stop_reason`` the
  stop sequence, and is never parsed into tool calls.

Example:
    >>> req = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
    ...     "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    ...     "tool_choice": "required"})
    >>> tool_schema(req)[0]["properties"]["name"]
    {'const': 'f'}
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "APIError",
    "ChatCompletionRequest",
    "CompletionRequest",
    "FALLBACK_TEMPLATE",
    "chat_prompt",
    "constraint_of",
    "tool_schema",
]

# How chat messages become a prompt when the tokenizer has no chat template: one line per
# message, "role: content", then "assistant:" for the model to continue.
FALLBACK_TEMPLATE = "{role}: {content}\n"


class APIError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.

    Example:
        >>> APIError(404, "no such model", code="model_not_found").body()["error"]["type"]
        'invalid_request_error'
    """

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class JSONSchemaFormat(_Shape):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    strict: bool | None = None
    any_order: bool | None = None          # our extension: object members in any order


class ResponseFormat(_Shape):
    type: Literal["text", "json_object", "json_schema", "regex"]
    json_schema: JSONSchemaFormat | None = None
    regex: str | None = None


class FunctionDef(_Shape):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | bool | None = None
    strict: bool | None = None


class Tool(_Shape):
    type: Literal["function"] = "function"
    function: FunctionDef


class FunctionName(_Shape):
    name: str


class NamedToolChoice(_Shape):
    type: Literal["function"] = "function"
    function: FunctionName


class ChatMessage(_Shape):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class _Sampling(_Shape):
    """Settings both endpoints share."""

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0, le=2)
    top_p: float = Field(default=1.0, gt=0, le=1)
    n: int = Field(default=1, ge=1, le=128)
    seed: int | None = Field(default=None, ge=0)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    response_format: ResponseFormat | None = None
    # refused unless left at their defaults (see `refuse_unsupported`)
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None

    def refuse_unsupported(self) -> None:
        """APIError 400 for a field set to a value this server cannot honour."""
        for name in ("logprobs", "top_logprobs", "frequency_penalty", "presence_penalty", "logit_bias"):
            if getattr(self, name):
                raise APIError(400, f"`{name}` is not supported by this server, got {getattr(self, name)!r}",
                               param=name, code="unsupported_parameter")
        stops = [self.stop] if isinstance(self.stop, str) else self.stop or []
        if len(stops) > 4 or any(not s for s in stops):
            raise APIError(400, f"`stop` must be up to 4 non-empty strings, got {self.stop!r}", param="stop")

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None


class CompletionRequest(_Sampling):
    prompt: str | list[int]
    echo: bool = False
    suffix: str | None = None

    def refuse_unsupported(self) -> None:
        super().refuse_unsupported()
        if self.echo or self.suffix:
            field = "echo" if self.echo else "suffix"
            raise APIError(400, f"`{field}` is not supported by this server", param=field, code="unsupported_parameter")


# ---------------------------------------------------------------------------- request -> plan


def constraint_of(req: _Sampling) -> tuple[dict[str, Any], str | None]:
    """``({"schema" | "regex": ..., "options": ...}, the request field it came from)``; ``({}, None)`` for free text."""
    if isinstance(req, ChatCompletionRequest) and req.tools and req.tool_choice != "none":
        schema, param = tool_schema(req)
        # "auto" (also the default with tools): a call, or text whose first non-space character is not "{"
        return {"schema": schema, "options": {"or_text": True} if tool_choice_is_auto(req) else {}}, param
    fmt = req.response_format
    if fmt is None or fmt.type == "text":
        return {}, None
    if fmt.type == "json_object":
        return {"schema": {"type": "object"}, "options": {}}, "response_format"
    if fmt.type == "regex":
        if not isinstance(fmt.regex, str):
            raise APIError(400, "response_format of type \"regex\" needs a string `regex`", param="response_format.regex")
        return {"regex": fmt.regex, "options": {}}, "response_format.regex"
    spec = fmt.json_schema
    if spec is None or spec.schema_ is None:
        raise APIError(400, "response_format of type \"json_schema\" needs `json_schema.schema`",
                       param="response_format.json_schema")
    options = {**({"strict": True} if spec.strict else {}), **({"any_order": True} if spec.any_order else {})}
    return {"schema": spec.schema_, "options": options}, "response_format.json_schema.schema"


def tool_schema(req: ChatCompletionRequest) -> tuple[dict[str, Any], str]:
    """The schema of a call to the tool(s) `tool_choice` allows, and the request field it came from.

    One tool: ``{"name": {"const": ...}, "arguments": <its parameters>}``, in that
    order (the name is forced, so it costs no sampling); several (``"required"``):
    ``anyOf`` those objects.
    """
    tools = req.tools or []
    if isinstance(req.tool_choice, NamedToolChoice):
        name = req.tool_choice.function.name
        chosen = [(i, t) for i, t in enumerate(tools) if t.function.name == name]
        if not chosen:
            raise APIError(400, f"`tool_choice` names the function {name!r}, which is not in `tools`",
                           param="tool_choice")
    else:
        chosen = list(enumerate(tools))
    variants = [_call_schema(t.function) for _, t in chosen]
    param = f"tools[{chosen[0][0]}].function.parameters" if len(chosen) == 1 else "tools"
    return (variants[0] if len(variants) == 1 else {"anyOf": variants}), param


def tool_choice_is_auto(req: ChatCompletionRequest) -> bool:
    """Whether the model may answer with text instead of a call (``"auto"``, OpenAI's default with tools)."""
    return bool(req.tools) and req.tool_choice in (None, "auto")


def tool_parameters(req: ChatCompletionRequest) -> list[tuple[str, Any]]:
    """(request field, parameters schema) of each tool that `tool_choice` allows, to check one by one."""
    name = req.tool_choice.function.name if isinstance(req.tool_choice, NamedToolChoice) else None
    return [(f"tools[{i}].function.parameters", _parameters(t.function))
            for i, t in enumerate(req.tools or []) if name is None or t.function.name == name]


def _parameters(fn: FunctionDef) -> Any:
    return {"type": "object"} if fn.parameters is None else fn.parameters


def _call_schema(fn: FunctionDef) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": {"const": fn.name}, "arguments": _parameters(fn)},
            "required": ["name", "arguments"], "additionalProperties": False}


def chat_prompt(tokenizer: Any, req: ChatCompletionRequest) -> list[int]:
    """Token ids of the chat: the tokenizer's chat template when it has one, else `FALLBACK_TEMPLATE`."""
    messages = [_message_dict(m, i) for i, m in enumerate(req.messages)]
    tools = [t.model_dump(exclude_none=True) for t in req.tools] if req.tools else None
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
        return list(tokenizer.encode(text, add_special_tokens=False))
    return list(tokenizer.encode(fallback_chat(messages, tools)))


def fallback_chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
    """The chat as plain text, for tokenizers without a chat template.

    Example:
        >>> fallback_chat([{"role": "user", "content": "Hi"}])
        'user: Hi\\nassistant:'
    """
    lines = []
    if tools:
        lines.append(FALLBACK_TEMPLATE.format(role="system", content="Tools: " + json.dumps(tools, ensure_ascii=False)))
    for m in messages:
        content = m.get("content") or ""
        for call in m.get("tool_calls") or ():
            fn = call.get("function", {})
            content += json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments")}, ensure_ascii=False)
        lines.append(FALLBACK_TEMPLATE.format(role=m["role"], content=content))
    return "".join(lines) + "assistant:"


def _message_dict(m: ChatMessage, i: int) -> dict[str, Any]:
    """A message as chat templates read it: text content (text parts joined), optional fields kept."""
    content = m.content
    if isinstance(content, list):
        parts = []
        for part in content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise APIError(400, f"only text content parts are supported, got a part of type {part.get('type')!r}",
                               param=f"messages[{i}].content", code="unsupported_content")
            parts.append(part["text"])
        content = "".join(parts)
    out = m.model_dump(exclude_none=True)
    out["content"] = content if content is not None else ""
    return out
