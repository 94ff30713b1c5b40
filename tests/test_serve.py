"""`constrained serve`: a real server on loopback, queried with the official `openai` client.

The server runs in a subprocess (`python -m constrained serve --port 0`) on the
tiny default model (random weights, real Llama-2 tokenizer), started once per
module. Every output is checked with `jsonschema` or `re`.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[1]
MODEL = "tiny-random-llama"
# The prefix trie's budget on the test server; the memory check allows it plus a margin.
CACHE_MB = 256

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
DIGITS = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1, "maxItems": 4}
FLAGS = {"type": "object", "properties": {"ok": {"type": "boolean"}, "tag": {"enum": ["x", "y", "z"]}},
         "required": ["ok", "tag"], "additionalProperties": False}
TAGS = {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string", "maxLength": 4},
                                                   "maxItems": 3}},
        "required": ["items"], "additionalProperties": False}
PHONE, ANSWER = r"[0-9]{3}-[0-9]{4}", r"(yes|no|maybe)"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}}}
SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string", "maxLength": 12}}, "required": ["query"],
    "additionalProperties": False}}}


def _schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}


def _messages(text: str = "Give me the answer.") -> list[dict[str, str]]:
    return [{"role": "system", "content": "You answer in the requested format."}, {"role": "user", "content": text}]


class _Server:
    """A `constrained serve` subprocess; `url` once it listens, its stderr kept for failure reports."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "constrained", "serve", "--port", "0", *args],
                                     cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self.url = self._wait_listening(timeout=240)
        threading.Thread(target=self._drain, daemon=True).start()

    def _wait_listening(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                return found.group(1)
        self.stop()
        raise RuntimeError("the server did not start:\n" + "".join(self.log))

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.log.append(line)

    def rss_mb(self) -> float | None:
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:                        # not Linux
            return None
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    srv = _Server("--backend", "mlx", "--cache-mb", str(CACHE_MB))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: _Server) -> Any:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def _health(server: _Server) -> dict[str, Any]:
    return httpx.get(f"{server.url}/health", timeout=10).json()


# ---------------------------------------------------------------------------- response_format


def test_models_and_health(client: Any, server: _Server) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]
    health = _health(server)
    assert health["status"] == "ok" and health["model"] == MODEL and health["backend"] == "mlx"
    assert health["gc_frozen_objects"] > 10_000      # startup's objects are out of the cyclic GC's reach


def test_json_schema(client: Any) -> None:
    r = client.chat.completions.create(model=MODEL, messages=_messages("A person"), seed=1, max_tokens=60,
                                       response_format=_schema_format(PERSON))
    choice = r.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), PERSON)
    assert r.usage.prompt_tokens > 5 and r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_json_schema_members_in_any_order(client: Any) -> None:
    fmt = _schema_format(PERSON)
    fmt["json_schema"]["any_order"] = True            # our extension
    r = client.chat.completions.create(model=MODEL, messages=_messages("A person"), seed=5, max_tokens=60, n=8,
                                       response_format=fmt)
    values = [json.loads(c.message.content) for c in r.choices]
    for v in values:
        jsonschema.validate(v, PERSON)
    assert {next(iter(v)) for v in values} == {"name", "age"}   # the random model opens with either member


def test_json_object(client: Any) -> None:
    r = client.chat.completions.create(model=MODEL, messages=_messages(), seed=2, max_tokens=80,
                                       response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_regex_extension(client: Any) -> None:
    r = client.completions.create(model=MODEL, prompt="Phone:", seed=3, max_tokens=20,
                                  extra_body={"response_format": {"type": "regex", "regex": PHONE}})
    assert r.choices[0].finish_reason == "stop"
    assert re.fullmatch(PHONE, r.choices[0].text)
    assert r.usage.completion_tokens >= 3


def test_n3(client: Any) -> None:
    r = client.chat.completions.create(model=MODEL, messages=_messages(), n=3, seed=4, max_tokens=40,
                                       response_format=_schema_format(FLAGS))
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    values = [json.loads(c.message.content) for c in r.choices]
    for v in values:
        jsonschema.validate(v, FLAGS)
    texts = {c.message.content for c in r.choices}
    assert len(texts) > 1                      # three draws, not one repeated
    assert r.usage.completion_tokens > 3 * 3


def test_length_is_never_passed_off_as_complete(client: Any) -> None:
    r = client.completions.create(model=MODEL, prompt="Once upon a time", seed=5, max_tokens=7)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 7


# ---------------------------------------------------------------------------- tools


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "search"}}])
def test_tools(client: Any, choice: Any) -> None:
    r = client.chat.completions.create(model=MODEL, messages=_messages("Weather in Paris?"), seed=6, max_tokens=80,
                                       tools=[WEATHER, SEARCH], tool_choice=choice)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    (call,) = c.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, SEARCH)}
    if isinstance(choice, dict):
        assert call.function.name == "search"
    jsonschema.validate(json.loads(call.function.arguments), tools[call.function.name])


def test_tools_stream(client: Any) -> None:
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=_messages("Weather?"), seed=7, max_tokens=80, tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True))
    calls = [tc for ch in chunks for c in ch.choices if c.delta.tool_calls for tc in c.delta.tool_calls]
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER["function"]["parameters"])
    assert chunks[-1].choices[0].finish_reason == "tool_calls" and chunks[-1].usage.completion_tokens > 0


def _auto_choice_is_valid(finish_reason: str, content: str | None, calls: list[Any]) -> bool:
    """A tool_choice "auto" choice: a complete call whose arguments fit its tool, or text not opening with "{"."""
    tools = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, SEARCH)}
    if finish_reason == "tool_calls":
        (call,) = calls
        jsonschema.validate(json.loads(call.function.arguments), tools[call.function.name])
        return content is None
    return not calls and not (content or "").lstrip(" \t\n\r").startswith("{")


@pytest.mark.parametrize("choice", [None, "auto"])
def test_tools_auto_is_a_call_or_text(client: Any, choice: Any) -> None:
    """With tools and no tool_choice (OpenAI's default, "auto"), each choice is a valid call or plain text."""
    kwargs = dict(messages=_messages("Weather in Paris?"), seed=11, max_tokens=40, n=4, tools=[WEATHER, SEARCH],
                  **({"tool_choice": choice} if choice else {}))
    r = client.chat.completions.create(model=MODEL, **kwargs)
    for c in r.choices:
        assert _auto_choice_is_valid(c.finish_reason, c.message.content, c.message.tool_calls or []), c
    texts, reasons, _ = _streamed_chat(client, **kwargs)                 # streamed: the same choices
    for c in r.choices:
        assert reasons[c.index] == c.finish_reason
        assert texts[c.index] == (c.message.content or "")


def test_auto_streams_text_and_holds_a_call_back() -> None:
    """The stream of "auto" choices: text goes out as it comes once its first character says text; a call,
    whose first character is "{", is held back and sent whole as tool_calls (the serve layer's own logic)."""
    from constrained.generate import Generation
    from constrained.openai_api import ChatCompletionRequest
    from constrained.serve import _Chunks

    req = ChatCompletionRequest.model_validate({"model": MODEL, "messages": _messages("Hi"), "tools": [WEATHER],
                                                "n": 2})
    out = _Chunks(req, MODEL, prompt_tokens=5)
    call = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}
    text = json.dumps(call)
    assert [out.text_now(0, part) for part in (text[:5], text[5:])] == ["", ""]      # held back: a call
    assert [out.text_now(1, part) for part in ("\n ", "Sun", "ny")] == ["", "\n Sun", "ny"]
    first = json.loads(out.final(0, Generation(text=text, token_ids=[1, 2], value=call))[6:])
    (tool_call,) = first["choices"][0]["delta"]["tool_calls"]
    assert first["choices"][0]["finish_reason"] == "tool_calls" and json.loads(tool_call["function"]["arguments"]) == \
        call["arguments"]
    last = json.loads(out.final(1, Generation(text="\n Sunny", token_ids=[3], value="\n Sunny"))[6:])
    assert last["choices"][0]["finish_reason"] == "stop" and last["choices"][0]["delta"] == {}


# ---------------------------------------------------------------------------- streaming and stop


def _streamed_chat(client: Any, **kwargs: Any) -> tuple[dict[int, str], dict[int, str], Any]:
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    usage = None
    for chunk in client.chat.completions.create(model=MODEL, stream=True, **kwargs):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                reasons[c.index] = c.finish_reason
        usage = chunk.usage or usage
    return texts, reasons, usage


def test_stream_matches_the_same_request_unstreamed(client: Any) -> None:
    kwargs = dict(messages=_messages("A person"), seed=8, max_tokens=60, n=2, response_format=_schema_format(PERSON))
    texts, reasons, usage = _streamed_chat(client, **kwargs)
    assert reasons == {0: "stop", 1: "stop"}
    for text in texts.values():
        jsonschema.validate(json.loads(text), PERSON)
    whole = client.chat.completions.create(model=MODEL, **kwargs)
    assert {c.index: c.message.content for c in whole.choices} == texts
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_stream_include_usage(client: Any) -> None:
    chunks = list(client.completions.create(model=MODEL, prompt="Digits:", seed=9, max_tokens=20, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"response_format": {"type": "regex", "regex": PHONE}}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert re.fullmatch(PHONE, text)


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequences(client: Any, stream: bool) -> None:
    free = client.completions.create(model=MODEL, prompt="The list:", seed=10, max_tokens=30).choices[0].text
    stop = free[len(free) // 2: len(free) // 2 + 2]       # two characters from the middle of the free text
    assert len(stop) == 2
    kwargs = dict(model=MODEL, prompt="The list:", seed=10, max_tokens=30, stop=[stop, "@@never@@"])
    if stream:
        chunks = list(client.completions.create(stream=True, **kwargs))
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        reason = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    else:
        r = client.completions.create(**kwargs)
        text, reason = r.choices[0].text, [r.choices[0].finish_reason]
    assert text == free[: free.index(stop)] and stop not in text
    assert reason == ["stop"]


def _completion(client: Any, stream: bool, **kwargs: Any) -> tuple[str, str, str | None]:
    """(text, finish_reason, stop_reason) of a one-choice /v1/completions request, streamed or not."""
    if not stream:
        c = client.completions.create(model=MODEL, **kwargs).choices[0]
        return c.text, c.finish_reason, (c.model_extra or {}).get("stop_reason")
    text, ends = "", []
    for chunk in client.completions.create(model=MODEL, stream=True, **kwargs):
        for c in chunk.choices:
            text += c.text
            if c.finish_reason:
                ends.append((c.finish_reason, (c.model_extra or {}).get("stop_reason")))
    assert len(ends) == 1
    return text, *ends[0]


@pytest.mark.parametrize("stream", [False, True])
def test_stop_with_a_regex_cuts_before_the_stop_and_never_sends_it(client: Any, stream: bool) -> None:
    fmt = {"response_format": {"type": "regex", "regex": PHONE}}
    free, reason, _ = _completion(client, False, prompt="Phone:", seed=11, max_tokens=20, extra_body=fmt)
    assert reason == "stop" and re.fullmatch(PHONE, free)
    # two digits sampled one after the other: streamed, the first is held back until the second shows
    stop = free[1:3]
    text, reason, stop_reason = _completion(client, stream, prompt="Phone:", seed=11, max_tokens=20,
                                            stop=[stop, "@@"], extra_body=fmt)
    assert text == free[: free.index(stop)] and stop not in text
    assert (reason, stop_reason) == ("stop", stop)
    # the forced "-" as the stop sequence: three digits, not a phone number, and said so only by stop_reason
    text, reason, stop_reason = _completion(client, stream, prompt="Phone:", seed=11, max_tokens=20, stop="-",
                                            extra_body=fmt)
    assert (text, reason, stop_reason) == (free[:3], "stop", "-")


@pytest.mark.parametrize("stream", [False, True])
def test_stop_with_a_json_schema(client: Any, stream: bool) -> None:
    kwargs = dict(messages=_messages("A person"), seed=12, max_tokens=60, n=2, response_format=_schema_format(PERSON))
    whole = client.chat.completions.create(model=MODEL, **kwargs)
    free = {c.index: c.message.content for c in whole.choices}
    if stream:
        texts, reasons, _ = _streamed_chat(client, stop=['"age"'], **kwargs)
    else:
        r = client.chat.completions.create(model=MODEL, stop=['"age"'], **kwargs)
        texts = {c.index: c.message.content for c in r.choices}
        reasons = {c.index: c.finish_reason for c in r.choices}
        assert [(c.model_extra or {}).get("stop_reason") for c in r.choices] == ['"age"', '"age"']
    assert reasons == {0: "stop", 1: "stop"}
    for i, text in texts.items():
        assert text == free[i][: free[i].index('"age"')]
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)
    # a stop sequence these documents never contain changes nothing
    r = client.chat.completions.create(model=MODEL, stop=["\n\n\n"], **kwargs)
    assert {c.index: c.message.content for c in r.choices} == free
    assert [(c.model_extra or {}).get("stop_reason") for c in r.choices] == [None, None]


@pytest.mark.parametrize("stream", [False, True])
def test_stop_inside_a_tool_call_is_no_tool_call(client: Any, stream: bool) -> None:
    kwargs = dict(messages=_messages("Weather?"), seed=7, max_tokens=80, tools=[WEATHER], stop=['"arguments"'],
                  tool_choice={"type": "function", "function": {"name": "get_weather"}})
    if stream:
        chunks = list(client.chat.completions.create(model=MODEL, stream=True, **kwargs))
        assert not [c for ch in chunks for c in ch.choices if c.delta.tool_calls]
        content = "".join(c.delta.content or "" for ch in chunks for c in ch.choices)
        reason = chunks[-1].choices[0].finish_reason
    else:
        c = client.chat.completions.create(model=MODEL, **kwargs).choices[0]
        assert c.message.tool_calls is None
        content, reason = c.message.content, c.finish_reason
    # the call's text up to its arguments (layout and escapes are the model's), as content
    assert reason == "stop" and content.lstrip().startswith("{") and '"name"' in content
    assert '"arguments"' not in content and content.rstrip().endswith(",")


# ---------------------------------------------------------------------------- errors


def test_bad_schema_is_400_with_the_path(client: Any, server: _Server) -> None:
    steps = _health(server)["steps"]
    bad = {"type": "object", "properties": {"name": {"type": "string", "maxLength": -1}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=_messages(), response_format=_schema_format(bad))
    err = e.value.body
    assert "maxLength" in err["message"] and "$.properties.name" in err["message"]
    assert err["param"] == "response_format.json_schema.schema" and err["code"] == "invalid_schema"
    assert _health(server)["steps"] == steps                 # no model time was spent on it


def test_unsupported_keyword_is_400(client: Any) -> None:
    bad = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=_messages(), response_format=_schema_format(bad))
    assert "`uniqueItems` is not supported at $.properties.tags" in e.value.body["message"]
    assert e.value.body["code"] == "unsupported_schema"


def test_bad_tool_parameters_are_400_with_their_path(client: Any) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=_messages(), tools=[tool], tool_choice="required")
    assert "$.properties.n" in e.value.body["message"] and "minimum" in e.value.body["message"]
    assert e.value.body["param"] == "tools[0].function.parameters"


def test_bad_regex_is_400(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="x", extra_body={"response_format": {"type": "regex",
                                                                                           "regex": "(ab"}})
    assert e.value.body["code"] == "invalid_regex" and "'(ab'" in e.value.body["message"]


def test_invalid_json_body(server: _Server) -> None:
    r = httpx.post(f"{server.url}/v1/chat/completions", content=b'{"model": "x", "messages": [',
                   headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code in (400, 422)
    assert r.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("depth", [1500, 100_000])
def test_deeply_nested_body_is_400(server: _Server, depth: int) -> None:
    """A schema nested past what JSON parsing recurses through is the client's error, not a 500."""
    schema = '{"items":' * depth + '{"type":"integer"}' + "}" * depth
    body = ('{"model": "%s", "prompt": "x", "max_tokens": 4, "response_format": {"type": "json_schema", '
            '"json_schema": {"name": "deep", "schema": %s}}}' % (MODEL, schema))
    r = httpx.post(f"{server.url}/v1/completions", content=body.encode(), headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert _health(server)["status"] == "ok"


def test_bad_field_is_400(client: Any) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=_messages(), temperature=-1)
    assert e.value.body["param"] == "temperature"


def test_unknown_model_is_404(client: Any) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=_messages())
    assert e.value.body["code"] == "model_not_found"


@pytest.mark.parametrize(("argv", "message"), [
    (["--backend", "vllm", "--batch-size", "4"], "--batch-size does not apply to --backend vllm"),
    (["--backend", "vllm", "--cache-mb", "64"], "--cache-mb does not apply to --backend vllm"),
    (["--backend", "vllm", "--vllm-args", "{max_model_len: 1}"], "--vllm-args is not valid JSON"),
    (["--backend", "vllm", "--vllm-args", "[1]"], "--vllm-args must be a JSON object"),
    (["--backend", "vllm", "--vllm-args", '{"model": "x"}'], "give the model with --model"),
    (["--backend", "hf", "--vllm-args", "{}"], "--vllm-args goes with --backend vllm"),
])
def test_serve_flags_are_checked_before_any_model_loads(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                        message: str) -> None:
    from constrained.cli import main

    assert main(["serve", *argv]) == 2
    assert message in capsys.readouterr().err


def test_serve_vllm_without_vllm_names_the_install(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    from constrained.cli import main

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here (tests/vllm serves on it)")
    assert main(["serve", "--backend", "vllm"]) == 2
    assert "pip install 'constrained[vllm]'" in capsys.readouterr().err


# ---------------------------------------------------------------------------- load, seeds, cancellation


LOAD_CASES = [("schema", PERSON), ("schema", DIGITS), ("schema", FLAGS), ("schema", TAGS),
              ("regex", PHONE), ("regex", ANSWER)]


async def _one(aclient: Any, i: int) -> tuple[int, Any]:
    kind, spec = LOAD_CASES[i % len(LOAD_CASES)]
    fmt = _schema_format(spec) if kind == "schema" else {"type": "regex", "regex": spec}
    r = await aclient.chat.completions.create(model=MODEL, messages=_messages(f"Request {i}"), seed=i,
                                              max_tokens=64, extra_body={"response_format": fmt})
    return i, r


def _check_valid(i: int, text: str) -> None:
    kind, spec = LOAD_CASES[i % len(LOAD_CASES)]
    if kind == "schema":
        jsonschema.validate(json.loads(text), spec)
    else:
        assert re.fullmatch(spec, text), (i, text)


@pytest.mark.slow
def test_load_64_concurrent(server: _Server) -> None:
    before_mb = server.rss_mb()

    async def run() -> list[tuple[int, Any]]:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0,
                                      timeout=300) as aclient:
            return await asyncio.gather(*(_one(aclient, i) for i in range(64)))

    started = time.perf_counter()
    results = asyncio.run(run())
    elapsed = time.perf_counter() - started
    assert sorted(i for i, _ in results) == list(range(64))
    assert len({r.id for _, r in results}) == 64              # none lost, none answered twice
    for i, r in results:
        (choice,) = r.choices
        assert choice.finish_reason == "stop", (i, choice)
        _check_valid(i, choice.message.content)
    health = _health(server)
    assert health["status"] == "ok" and health["rows"] == 0
    # the requests shared model calls: far fewer steps than 64 requests x their tokens
    tokens = sum(r.usage.completion_tokens for _, r in results)
    assert health["stats"]["kv_reused_tokens"] > 0
    after_mb = server.rss_mb()
    if before_mb is not None:
        # documented bound (README "Serving"): the prefix trie's budget plus 128 MiB
        assert after_mb - before_mb < CACHE_MB + 128, (before_mb, after_mb)
    print(f"64 requests, {tokens} tokens in {elapsed:.1f} s; RSS {before_mb} -> {after_mb} MiB")


@pytest.mark.slow
def test_same_seed_alone_or_among_32(server: _Server) -> None:
    async def run(ids: list[int]) -> dict[int, str]:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0,
                                      timeout=300) as aclient:
            done = await asyncio.gather(*(_one(aclient, 100 + i) for i in ids))
        return {i - 100: r.choices[0].message.content for i, r in done}

    alone = {}
    for i in (0, 1, 4):
        alone.update(asyncio.run(run([i])))
    together = asyncio.run(run(list(range(32))))
    assert {i: together[i] for i in alone} == alone
    for i, text in together.items():
        _check_valid(100 + i, text)


def test_disconnect_mid_stream_frees_its_row(client: Any, server: _Server) -> None:
    body = {"model": MODEL, "prompt": "Tell a long story:", "max_tokens": 3000, "seed": 11, "stream": True}
    with httpx.Client(timeout=60) as http:
        with http.stream("POST", f"{server.url}/v1/completions", json=body) as resp:
            lines = resp.iter_lines()          # read by hand: closing this iterator would close the stream
            got = []
            while len(got) < 5:
                line = next(lines)
                if line.startswith("data:"):
                    got.append(json.loads(line[5:]))
            assert all(c["choices"][0]["finish_reason"] is None for c in got)
            assert _health(server)["rows"] >= 1                # still decoding
            # another request, while the stream is open, completes untouched
            r = client.chat.completions.create(model=MODEL, messages=_messages(), seed=12, max_tokens=40,
                                               response_format=_schema_format(FLAGS))
            jsonschema.validate(json.loads(r.choices[0].message.content), FLAGS)
    deadline = time.monotonic() + 10
    while _health(server)["rows"] and time.monotonic() < deadline:
        time.sleep(0.05)
    health = _health(server)
    assert health["rows"] == 0
    time.sleep(0.3)
    assert _health(server)["steps"] == health["steps"]        # the loop is idle: the row is gone


@pytest.mark.slow
def test_slow_or_failing_compile_does_not_hold_up_others(server: _Server) -> None:
    rnd = random.Random(0)
    slow = {"enum": ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(12)) for _ in range(150_000)]}
    failing = {"type": "string", "pattern": "(a)\\1"}
    finished: dict[str, float] = {}

    async def timed(aclient: Any, name: str, fmt: dict[str, Any]) -> Any:
        try:
            return await aclient.chat.completions.create(model=MODEL, messages=_messages(name), seed=1,
                                                         max_tokens=40, response_format=fmt)
        finally:
            finished[name] = time.perf_counter()

    async def run() -> list[Any]:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0,
                                      timeout=300) as aclient:
            slow_one = asyncio.ensure_future(timed(aclient, "slow", _schema_format(slow)))
            bad_one = asyncio.ensure_future(timed(aclient, "bad", _schema_format(failing)))
            await asyncio.sleep(0.05)                         # both are compiling
            fast = await asyncio.gather(*(timed(aclient, f"fast{i}", _schema_format(FLAGS)) for i in range(4)))
            return [*fast, await asyncio.gather(slow_one, bad_one, return_exceptions=True)]

    *fast, (slow_r, bad_r) = asyncio.run(run())
    for r in fast:
        jsonschema.validate(json.loads(r.choices[0].message.content), FLAGS)
    assert isinstance(bad_r, openai.BadRequestError) and "backreference" in bad_r.body["message"]
    assert json.loads(slow_r.choices[0].message.content) in slow["enum"]
    assert max(finished[f"fast{i}"] for i in range(4)) < finished["slow"]


# ---------------------------------------------------------------------------- the Hugging Face backend


@pytest.mark.slow
@pytest.mark.hf
def test_hf_backend_serves_the_same_api() -> None:
    pytest.importorskip("transformers")
    srv = _Server("--backend", "hf", "--served-model-name", "tiny-hf")
    try:
        hf = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)
        assert _health(srv)["backend"] == "hf"
        r = hf.chat.completions.create(model="tiny-hf", messages=_messages("A person"), seed=1, max_tokens=60,
                                       n=2, response_format=_schema_format(PERSON))
        for c in r.choices:
            assert c.finish_reason == "stop"
            jsonschema.validate(json.loads(c.message.content), PERSON)
        chunks = list(hf.chat.completions.create(model="tiny-hf", messages=_messages("Weather?"), seed=2, max_tokens=80,
                                                 tools=[WEATHER, SEARCH], tool_choice="required", stream=True))
        (call,) = [tc for ch in chunks for c in ch.choices if c.delta.tool_calls for tc in c.delta.tool_calls]
        params = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, SEARCH)}
        jsonschema.validate(json.loads(call.function.arguments), params[call.function.name])
        text = hf.completions.create(model="tiny-hf", prompt="Phone:", seed=3, max_tokens=20,
                                     extra_body={"response_format": {"type": "regex", "regex": PHONE}}).choices[0].text
        assert re.fullmatch(PHONE, text)
    finally:
        srv.stop()


def test_disconnect_while_waiting_for_a_whole_response_frees_its_rows(server: _Server) -> None:
    body = {"model": MODEL, "prompt": "Tell a long story:", "max_tokens": 3000, "seed": 13, "n": 2}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/v1/completions", json=body, timeout=httpx.Timeout(10, read=0.5))
    deadline = time.monotonic() + 3                           # running on, 2 x 3000 tokens would take ~10 s
    while _health(server)["rows"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _health(server)["rows"] == 0
    r = httpx.post(f"{server.url}/v1/completions", json={**body, "max_tokens": 5}, timeout=30)
    assert r.status_code == 200 and len(r.json()["choices"]) == 2      # the server goes on serving
