"""`constrained.constraint_spec`: reading and checking the constraint a request sends to vLLM (no vLLM needed)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from constrained.constraint_spec import ConstraintSpec, check_constraint, parse_constraint
from constrained.generate import GenerationRequest, _engine_constraint


@pytest.mark.parametrize("extra_args, kind, options, budget_aware", [
    ({"constrained": {"json_schema": {"type": "integer"}}}, "json_schema", {}, True),
    ({"constrained": {"regex": "[0-9]+", "ascii": True, "budget_aware": False}}, "regex", {"ascii": True}, False),
    ({"constrained": json.dumps({"json_schema": {"type": "null"}, "whitespace": "compact"})}, "json_schema",
     {"whitespace": "compact"}, True),
    ({"constrained": {"json_schema": '{"type": "boolean"}'}}, "json_schema", {}, True),
])  # fmt: skip
def test_parse(extra_args: dict, kind: str, options: dict, budget_aware: bool) -> None:
    spec = parse_constraint(extra_args)
    assert (spec.kind, spec.options, spec.budget_aware) == (kind, options, budget_aware)
    assert parse_constraint(spec.to_xargs()) == spec          # what a request carries reads back the same


@pytest.mark.parametrize("extra_args", [None, {}, {"other": 1}])
def test_no_constraint(extra_args: Any) -> None:
    assert parse_constraint(extra_args) is None


@pytest.mark.parametrize("value, message", [
    ("{not json", "not valid JSON"),
    ([1, 2], "must be an object"),
    ({"schema": {}}, "exactly one of 'json_schema' and 'regex'"),
    ({"json_schema": {}, "regex": "a"}, "exactly one of"),
    ({"regex": 5}, "'regex' must be a string"),
    ({"json_schema": [1]}, "'json_schema' must be a JSON object"),
    ({"json_schema": "{oops"}, "'json_schema' is not valid JSON"),
    ({"regex": "a", "budget_aware": "yes"}, "'budget_aware' must be true or false"),
])  # fmt: skip
def test_malformed_entries_are_quoted(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_constraint({"constrained": value})


@pytest.mark.parametrize("entry, message", [
    ({"json_schema": {"type": "nope"}}, "`type`"),
    ({"json_schema": {"type": "array", "uniqueItems": True}}, "uniqueItems"),
    ({"regex": "("}, "RegexSyntaxError"),
    ({"regex": "a", "whitespace": "compact"}, "bad constraint option"),
    ({"json_schema": {"type": "string"}, "max_states": 0}, "'max_states' must be a positive integer"),
    ({"json_schema": {"allOf": [{"type": "string"}, {"type": "integer"}]}}, "matches no text"),
])  # fmt: skip
def test_check_refuses_bad_constraints(entry: dict, message: str) -> None:
    spec = parse_constraint({"constrained": entry})
    for _ in range(2):                                         # the second answer comes from the cache
        with pytest.raises(ValueError, match=message):
            check_constraint(spec)


def test_check_accepts_and_is_lazy() -> None:
    # `max_states=3` is too few to decode this, but admission only builds what the start needs
    check_constraint(parse_constraint({"constrained": {"regex": "[a-z]{0,40}x", "max_states": 3}}))
    check_constraint(ConstraintSpec("json_schema", {"type": "object", "properties": {"a": {"type": "integer"}}}))


def test_generate_requests_become_engine_constraints() -> None:
    class Person:          # a pydantic-like class: its JSON schema is what travels
        @staticmethod
        def model_json_schema() -> dict:
            return {"type": "object"}

    assert _engine_constraint(GenerationRequest("p", schema=Person)) == {"json_schema": {"type": "object"}, "budget_aware": True}
    assert _engine_constraint(GenerationRequest("p", regex="a+", options={"ascii": True}, budget_aware=False)) == \
        {"regex": "a+", "ascii": True, "budget_aware": False}
    assert _engine_constraint(GenerationRequest("p")) is None
