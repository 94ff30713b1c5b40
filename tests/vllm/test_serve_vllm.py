"""`constrained serve` on vLLM: our server over the session's vLLM engine, on 127.0.0.1, queried with `openai`.

The server is the one `constrained serve --backend vllm` runs (`Server`,
`create_app`, uvicorn), started in this process on the `vlm` fixture's engine,
so the stage starts one engine, not two. Every output is checked with
`jsonschema` or `re`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
jsonschema = pytest.importorskip("jsonschema")

MODEL = "tiny-vllm"
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
PHONE = r"[0-9]{3}-[0-9]{4}"
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                     "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}}}


def _schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}


def _messages(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You answer in the requested format."}, {"role": "user", "content": text}]


@pytest.fixture(scope="module")
def url(vlm: Any) -> Iterator[str]:
    from constrained.serve import Server, _warm_up, listen, uvicorn_server

    _warm_up(vlm)
    server = uvicorn_server(Server(vlm, MODEL))
    sock = listen("127.0.0.1", 0)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the server did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=30)


@pytest.fixture(scope="module")
def client(url: str) -> Any:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def _health(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/health", timeout=10).json()


def test_json_schema_n2_seeded(client: Any, url: str) -> None:
    assert _health(url)["backend"] == "vllm"
    kwargs = dict(model=MODEL, messages=_messages("A person"), seed=1, max_tokens=60, n=2,
                  response_format=_schema_format(PERSON))
    r = client.chat.completions.create(**kwargs)
    assert sorted(c.index for c in r.choices) == [0, 1]
    for c in r.choices:
        assert c.finish_reason == "stop"
        jsonschema.validate(json.loads(c.message.content), PERSON)
    assert r.usage.completion_tokens > 2 * 5 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    again = client.chat.completions.create(**kwargs)
    assert [c.message.content for c in again.choices] == [c.message.content for c in r.choices]


def test_streamed_regex_is_the_unstreamed_text(client: Any) -> None:
    kwargs = dict(model=MODEL, prompt="Phone:", seed=2, max_tokens=20,
                  extra_body={"response_format": {"type": "regex", "regex": PHONE}})
    whole = client.completions.create(**kwargs).choices[0]
    assert whole.finish_reason == "stop" and re.fullmatch(PHONE, whole.text)
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    pieces = [c.choices[0].text for c in chunks if c.choices]
    assert len([p for p in pieces if p]) > 1                  # sent as tokens came, not in one piece
    assert "".join(pieces) == whole.text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens >= 3


def test_tool_call(client: Any) -> None:
    r = client.chat.completions.create(model=MODEL, messages=_messages("Weather?"), seed=3, max_tokens=80,
                                       tools=[WEATHER], tool_choice="required")
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    (call,) = c.message.tool_calls
    assert call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER["function"]["parameters"])


def test_length(client: Any) -> None:
    r = client.completions.create(model=MODEL, prompt="Once upon a time", seed=4, max_tokens=5)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5


@pytest.mark.parametrize("stream", [False, True])
def test_stop_with_a_constraint(client: Any, stream: bool) -> None:
    fmt = {"response_format": {"type": "regex", "regex": PHONE}}
    free = client.completions.create(model=MODEL, prompt="Phone:", seed=5, max_tokens=20, extra_body=fmt).choices[0].text
    for stop, expected in ((free[1:3], free[: free.index(free[1:3])]), ("-", free[:3])):
        kwargs = dict(model=MODEL, prompt="Phone:", seed=5, max_tokens=20, stop=[stop], extra_body=fmt)
        if stream:
            chunks = [c.choices[0] for c in client.completions.create(stream=True, **kwargs) if c.choices]
            text = "".join(c.text for c in chunks)
            (last,) = [c for c in chunks if c.finish_reason]
        else:
            last = client.completions.create(**kwargs).choices[0]
            text = last.text
        assert text == expected and stop not in text      # streamed: no character of the stop was sent
        assert last.finish_reason == "stop" and last.model_extra["stop_reason"] == stop


def test_bad_schema_is_400_before_the_engine(client: Any, url: str) -> None:
    before = _health(url)["stats"].get("engine_requests", 0)
    bad = {"type": "object", "properties": {"name": {"type": "string", "maxLength": -1}}}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=_messages("x"), response_format=_schema_format(bad))
    assert "$.properties.name" in e.value.body["message"] and e.value.body["code"] == "invalid_schema"
    assert _health(url)["stats"].get("engine_requests", 0) == before


def test_past_the_context_is_400_before_the_engine(client: Any, url: str, vlm: Any) -> None:
    before = _health(url)["stats"].get("engine_requests", 0)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=vlm.max_model_len)
    assert e.value.body["param"] == "max_tokens" and "max_model_len" in e.value.body["message"]
    assert _health(url)["stats"].get("engine_requests", 0) == before


def test_leaving_a_stream_aborts_its_request_in_the_engine(client: Any, url: str, vlm: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.vllm.conftest import record_aborts

    aborted = record_aborts(vlm, monkeypatch)
    stream = client.completions.create(model=MODEL, prompt="Tell a long story:", seed=6, max_tokens=400, stream=True)
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()
    deadline = time.monotonic() + 20
    while not aborted or _health(url)["rows"] or vlm.model.get_num_unfinished_requests():
        assert time.monotonic() < deadline, f"not aborted in the engine: {aborted}, {_health(url)['rows']} rows"
        time.sleep(0.1)
    assert len(aborted) == 1


def test_unknown_engine_argument_is_refused_before_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    from constrained.cli import main

    assert main(["serve", "--backend", "vllm", "--vllm-args", '{"max_model_len": 64, "no_such_arg": 1}']) == 2
    assert "'no_such_arg' is not a vLLM engine argument" in capsys.readouterr().err
