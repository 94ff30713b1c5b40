"""Constrained generation inside a real vLLM engine: our processor masks, vLLM batches and caches."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

jsonschema = pytest.importorskip("jsonschema")

from constrained.generate import GenerationRequest, generate, generate_batch  # noqa: E402

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
TAGS = {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 4}
FLAG = {"type": "object", "properties": {"ok": {"type": "boolean"}, "note": {"type": ["string", "null"], "maxLength": 8}},
        "required": ["ok", "note"], "additionalProperties": False}
PHONE = r"\(\d{3}\) \d{3}-\d{4}"


def test_sixteen_requests_three_schemas_one_regex_all_valid(vlm: Any) -> None:
    constraints: list[dict[str, Any]] = [{"schema": PERSON}, {"schema": TAGS}, {"schema": FLAG}, {"regex": PHONE}]
    requests = [GenerationRequest(f"Item {i}:", max_tokens=80, seed=i, options={"ascii": True} if "regex" in c else {}, **c)
                for i, c in enumerate(constraints * 4)]
    results = generate_batch(vlm, requests)
    assert len(results) == 16
    for req, (gen,) in zip(requests, results):
        assert gen.status == "complete", (gen.status, gen.error, gen.text)
        if req.regex is not None:
            assert re.fullmatch(PHONE, gen.text, flags=re.ASCII), gen.text
        else:
            jsonschema.validate(json.loads(gen.text), req.schema)
            assert gen.value == json.loads(gen.text)


def test_bad_schema_fails_alone(vlm: Any) -> None:
    requests = [GenerationRequest("A:", schema=PERSON, seed=1, max_tokens=80),
                GenerationRequest("B:", schema={"type": "object", "minProperties": -1}, max_tokens=80),
                GenerationRequest("C:", regex="[ab]{3}", seed=2, max_tokens=20)]
    good, bad, regex = generate_batch(vlm, requests)
    assert bad[0].status == "error" and "minProperties" in bad[0].error
    assert good[0].status == "complete" and jsonschema.validate(good[0].value, PERSON) is None
    assert regex[0].status == "complete" and re.fullmatch("[ab]{3}", regex[0].text)


def test_generate_n_samples_seeded(vlm: Any) -> None:
    first = generate(vlm, "Pick:", regex="(yes|no|maybe)", n=4, seed=3, backend="vllm")
    again = generate(vlm, "Pick:", regex="(yes|no|maybe)", n=4, seed=3, backend="vllm")
    assert [g.text for g in first] == [g.text for g in again]
    assert all(g.status == "complete" and g.text in ("yes", "no", "maybe") for g in first)


def test_stream_and_stop_sequences_in_the_engine(vlm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from constrained.streaming import stream
    from tests.vllm.conftest import record_aborts

    digits = r"[0-9]{3}-[0-9]{4}"
    (free,) = generate(vlm, "Phone:", regex=digits, seed=4, max_tokens=30)
    *pieces, whole = stream(vlm, "Phone:", regex=digits, seed=4, max_tokens=30)
    assert len(pieces) > 1 and "".join(pieces) == whole.text == free.text and whole.status == "complete"
    stop = free.text[1:3]                     # two digits sampled one after the other
    aborted = record_aborts(vlm, monkeypatch)
    *pieces, cut = stream(vlm, "Phone:", regex=digits, seed=4, max_tokens=30, stop=[stop])
    assert "".join(pieces) == cut.text == free.text[: free.text.index(stop)]
    assert (cut.status, cut.value, cut.stop_sequence) == ("stop", None, stop)
    assert len(cut.token_ids) < len(free.token_ids)
    deadline = time.monotonic() + 10
    while not aborted:                        # the engine request ended at the stop, not at the end
        assert time.monotonic() < deadline, "the engine request was not aborted at the stop sequence"
        time.sleep(0.05)
    (same,) = generate(vlm, "Phone:", regex=digits, seed=4, max_tokens=30, stop=[stop])
    assert (same.text, same.status, same.token_ids) == (cut.text, cut.status, cut.token_ids)


def test_the_cli_generates_on_its_own_engine(vllm_model_dir: Any) -> None:
    """`constrained generate --backend vllm`, as a user runs it: its own engine, started and shut down by the run."""
    import os
    import subprocess
    import sys

    from tests.vllm.conftest import ENGINE_OPTS

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "constrained", "generate", "--backend", "vllm", "--model", str(vllm_model_dir),
         "--vllm-args", json.dumps(ENGINE_OPTS), "--schema", json.dumps(PERSON), "--prompt", "A person:",
         "-n", "2", "--seed", "0", "--max-tokens", "64", "--json"],
        capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["sample"] for r in records] == [0, 1]
    for r in records:
        assert r["status"] == "complete", r
        jsonschema.validate(json.loads(r["text"]), PERSON)
    print(f"CLI run with its own vLLM engine: {time.monotonic() - started:.0f} s")
