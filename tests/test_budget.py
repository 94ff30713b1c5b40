"""Budget-aware completion: constrained samples end complete within `max_tokens`.

Real tiny random models (HF and MLX), whose samples wander inside strings
and whitespace until they are cut off; with `budget_aware` (the default) the
last tokens are steered to a complete output. Every output is checked with
`jsonschema` or `re`.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from constrained.budget import completions
from constrained.compile import compile_json_schema, compile_regex
from constrained.generate import GenerationRequest, generate, generate_batch, model_vocabulary
from tests.tiny_lms import async_lm


def _nested(depth: int) -> dict:
    schema: dict = {"type": "object", "properties": {"name": {"type": "string", "minLength": 3}},
                    "required": ["name"], "additionalProperties": False}
    for i in range(depth):
        schema = {"type": "object", "properties": {f"level{i}": schema, "note": {"type": "string"}},
                  "required": [f"level{i}", "note"], "additionalProperties": False}
    return schema


SCHEMAS = {
    "deep nesting": _nested(6),
    "long required strings": {"type": "object", "properties": {
        "title": {"type": "string", "minLength": 40}, "body": {"type": "string", "minLength": 60},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 3}}, "required": ["title", "body", "tags"]},
    "open object": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
}


@pytest.fixture(scope="module", params=["hf", "mlx"])
def lm(request):
    if request.param == "mlx":
        pytest.importorskip("mlx.core")
    return async_lm("llama-spm", request.param)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_tight_budgets_end_complete_and_valid(lm, name):
    schema = SCHEMAS[name]
    fsm = compile_json_schema(schema, model_vocabulary(lm))
    fewest = completions(fsm).tokens_needed(fsm.initial)     # the shortest output, in this vocabulary's tokens
    assert fewest is not None and fewest > 3 and completions(fsm).is_shortest(fsm.initial)
    check = jsonschema.Draft202012Validator(schema)
    for slack in (0, 5, 40):
        budget = fewest + slack
        on, off = generate_batch(lm, [
            GenerationRequest("JSON:", schema=schema, max_tokens=budget, seed=slack, n=6),
            GenerationRequest("JSON:", schema=schema, max_tokens=budget, seed=slack, n=6, budget_aware=False)])
        for g in on:
            assert g.status == "complete", (name, budget, g.status, g.error, g.text)
            assert len(g.token_ids) <= budget and check.is_valid(json.loads(g.text)), (name, g.text)
        # the random model wanders: without steering, tight budgets cut samples off
        if slack == 0:
            assert any(g.status == "max_tokens" for g in off), [g.text for g in off]
            assert all(g.steered == 0 for g in off) and any(g.steered for g in on)


def test_regex_budget(lm):
    pattern = r"[a-z]{12}-[0-9]{6}(-x)?"
    fsm = compile_regex(pattern, model_vocabulary(lm))
    fewest = completions(fsm).tokens_needed(fsm.initial)
    gens = generate(lm, "id:", regex=pattern, max_tokens=fewest, n=8, seed=3)
    assert all(g.status == "complete" and re.fullmatch(pattern, g.text) for g in gens), [g.text for g in gens]


def test_a_budget_below_the_shortest_output_is_refused_up_front(lm):
    schema = SCHEMAS["long required strings"]
    with pytest.raises(ValueError, match=r"max_tokens=5 is below the shortest complete output .* \d+ tokens"):
        generate(lm, "JSON:", schema=schema, max_tokens=5)
    # in a batch it fails that request only; without steering the request runs (and is cut off)
    bad, good, free = generate_batch(lm, [GenerationRequest("JSON:", schema=schema, max_tokens=5),
                                          GenerationRequest("JSON:", schema={"type": "integer"}, max_tokens=5),
                                          GenerationRequest("JSON:", schema=schema, max_tokens=5, budget_aware=False)])
    assert bad[0].status == "error" and "below the shortest complete output" in bad[0].error
    assert good[0].status == "complete" and isinstance(good[0].value, int)
    assert free[0].status == "max_tokens"
