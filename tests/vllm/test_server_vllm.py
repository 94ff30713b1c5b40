"""vLLM's OpenAI server with our processor (loaded through the package's entry point), queried with `openai`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from tests.vllm.conftest import ENGINE_OPTS  # noqa: E402

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
                                           "population": {"type": "integer", "minimum": 0}},
          "required": ["city", "population"], "additionalProperties": False}
# The tiny model's tokenizer has no chat template; the server gets this one.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
STARTUP_S = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(vllm_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert any(ep.value == "constrained.vllm_processor:ConstrainedLogitsProcessor"
               for ep in entry_points(group="vllm.logits_processors")), "pip install -e . registers the entry point"
    template = tmp_path_factory.mktemp("chat") / "template.jinja"
    template.write_text(CHAT_TEMPLATE)
    port = _free_port()
    log = (tmp_path_factory.mktemp("server") / "server.log").open("w")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(vllm_model_dir),
           "--host", "127.0.0.1", "--port", str(port), "--dtype", ENGINE_OPTS["dtype"], "--enforce-eager",
           "--max-model-len", str(ENGINE_OPTS["max_model_len"]), "--chat-template", str(template)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited with {proc.returncode}: see {log.name}")
            try:
                openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=5).models.list()
                break
            except openai.APIConnectionError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the server did not start in {STARTUP_S} s: see {log.name}")
                time.sleep(2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _client(url: str) -> Any:
    return openai.OpenAI(base_url=url, api_key="none")


def test_chat_completion_returns_valid_json(server: str) -> None:
    client = _client(server)
    model = client.models.list().data[0].id
    for seed in range(3):
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "A city as JSON:"}], max_tokens=100, seed=seed,
            extra_body={"vllm_xargs": {"constrained": json.dumps({"json_schema": SCHEMA})}},
        )  # fmt: skip
        jsonschema.validate(json.loads(reply.choices[0].message.content), SCHEMA)


def test_completion_streams_a_regex(server: str) -> None:
    client = _client(server)
    model = client.models.list().data[0].id
    stream = client.completions.create(model=model, prompt="Time:", max_tokens=20, seed=1, stream=True,
                                       extra_body={"vllm_xargs": {"constrained": '{"regex": "[0-2][0-9]:[0-5][0-9]"}'}})
    text = "".join(chunk.choices[0].text for chunk in stream)
    assert len(text) == 5 and text[2] == ":" and text[:2].isdigit() and int(text[:2]) < 30, text


def test_bad_schema_is_http_400_and_server_goes_on(server: str) -> None:
    client = _client(server)
    model = client.models.list().data[0].id
    with pytest.raises(openai.BadRequestError, match="minLength"):
        client.completions.create(model=model, prompt="x", max_tokens=10,
                                  extra_body={"vllm_xargs": {"constrained": json.dumps({"json_schema": {"minLength": -2}})}})
    reply = client.completions.create(model=model, prompt="y", max_tokens=100, seed=2,
                                      extra_body={"vllm_xargs": {"constrained": json.dumps({"json_schema": SCHEMA})}})
    jsonschema.validate(json.loads(reply.choices[0].text), SCHEMA)
