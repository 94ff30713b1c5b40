"""Random edits of a JSON schema's keywords, for `bench.mutations --edit-schemas`.

`edit_schema` changes one to three keywords of a schema's subschemas (bounds,
`required`, `enum`, types, patterns, formats; with ``structural=True`` also the
keywords of boolean logic, conditionals, dependencies and recursion), so that
the fuzzer compares ours with `jsonschema` on schemas no corpus holds.

Example:
    >>> import random
    >>> edited = edit_schema({"type": "object", "properties": {"a": {"type": "integer"}}}, random.Random(0))
    >>> isinstance(edited, dict)
    True
"""

from __future__ import annotations

import copy
import random
from typing import Any

__all__ = ["edit_schema"]

_BOUNDS = {"minimum": [0, 1, -1, 2, 5, 10, 12, 100, 0.5, 1.5, -2.5, 1e6], "multipleOf": [1, 2, 3, 5, 10, 0.5, 0.25, 0.1]}
_EDITS = ("bound", "required", "additionalProperties", "enum", "type", "pattern", "format", "uniqueItems")


# structural edits (`edit_schema(..., structural=True)`): the keywords of exact boolean logic,
# conditionals, dependencies, counted `contains` and recursion, around the schema's own parts
_STRUCTURAL = ("not", "oneOf", "anyOf", "allOf", "if", "dependentRequired", "dependentSchemas", "dependencies",
               "patternProperties", "propertyNames", "contains", "prefixItems", "const", "enum", "$ref")
_SMALL = ({"type": "string"}, {"type": "integer"}, {"type": "number", "minimum": 0}, {"type": "object"},
          {"type": "array"}, {"type": "null"}, {"type": "boolean"}, {"minLength": 3}, {"maxLength": 4},
          {"maxItems": 2}, {"pattern": "^[a-z]+$"}, {"not": {"type": "null"}}, {"minimum": 10}, {"maxProperties": 2})
_VALUES = (0, 1, -1, 2.5, "", "a", "example", None, True, False, [], {})


def edit_schema(schema: Any, rng: random.Random, structural: bool = False) -> Any:
    """A copy of `schema` with one to three keywords of its subschemas set or changed: a bound or
    count, `required`, `additionalProperties`, an `enum` shortened, a type added, a `pattern`, a
    `format`, `uniqueItems`; with `structural`, also `not`, `oneOf`, `anyOf`, `allOf`,
    `if`/`then`/`else`, the dependency keywords, `patternProperties`, `propertyNames`, `contains`
    with its counts, `prefixItems`, `const`, `enum` and a `$ref` to the root (recursion), each made
    of small schemas and copies of the schema's own parts."""
    schema = copy.deepcopy(schema)
    subs: list[dict] = []
    todo = [schema]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            subs.append(x)
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    for _ in range(rng.randint(1, 3)):
        n = rng.choice(subs)
        if structural and rng.random() < 0.6:
            _edit_structure(n, rng, subs)
            continue
        kind = rng.choice(_EDITS)
        if kind == "bound":
            key = rng.choice(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
                              "minItems", "maxItems", "minProperties", "maxProperties", "multipleOf"))
            values = _BOUNDS.get(key, _BOUNDS["minimum"] if "imum" in key else [0, 1, 2, 3, 5, 8, 20])
            n[key] = rng.choice(values)
        elif kind == "required" and isinstance(n.get("properties"), dict) and n["properties"]:
            have = n.get("required") if isinstance(n.get("required"), list) else []
            n["required"] = have[1:] if have and rng.random() < 0.5 else sorted(set(have) | {rng.choice(list(n["properties"]))})
        elif kind == "additionalProperties":
            n[kind] = rng.choice([True, False, {"type": "string"}])
        elif kind == "enum" and isinstance(n.get("enum"), list) and len(n["enum"]) > 1:
            n["enum"] = n["enum"][1:]
        elif kind == "type" and "type" in n:
            t = n["type"]
            n["type"] = sorted(({t} if isinstance(t, str) else set(t)) | {rng.choice(["null", "string", "integer", "number"])})
        elif kind == "pattern":
            n[kind] = rng.choice(["^[a-z]+$", "^\\d{3}$", "a", "^.{2,5}$", "^(x|y)*$"])
        elif kind == "format":
            n[kind] = rng.choice(["date", "email", "uuid", "ipv4", "date-time", "uri"])
        elif kind == "uniqueItems":
            n[kind] = True
    return schema


def _edit_structure(n: dict, rng: random.Random, subs: list[dict]) -> None:
    """One structural edit of subschema `n`, in place (see `edit_schema`)."""
    def part() -> Any:
        if rng.random() < 0.4 and subs:
            return copy.deepcopy(rng.choice(subs))
        return copy.deepcopy(rng.choice(_SMALL))

    props = n.get("properties") if isinstance(n.get("properties"), dict) else {}
    names = list(props) or ["a", "name", "id"]
    kind = rng.choice(_STRUCTURAL)
    if kind == "not":
        n["not"] = part()
    elif kind in ("oneOf", "anyOf", "allOf"):
        n[kind] = [part() for _ in range(rng.randint(1, 3))]
    elif kind == "if":
        n["if"] = rng.choice([part(), {"required": [rng.choice(names)]}])
        n["then"] = part()
        if rng.random() < 0.6:
            n["else"] = part()
    elif kind == "dependentRequired":
        n[kind] = {rng.choice(names): rng.sample(names, min(len(names), rng.randint(1, 2)))}
    elif kind == "dependentSchemas":
        n[kind] = {rng.choice(names): part()}
    elif kind == "dependencies":
        n[kind] = {rng.choice(names): rng.choice([rng.sample(names, min(len(names), 2)), part()])}
    elif kind == "patternProperties":
        n[kind] = {rng.choice(["^a", "^[a-z]+$", "_id$", "^x-", "."]): part()}
    elif kind == "propertyNames":
        n[kind] = rng.choice([{"pattern": "^[a-z_]+$"}, {"maxLength": 6}, {"enum": names}, {"not": {"const": names[0]}}])
    elif kind == "contains":
        n[kind] = part()
        if rng.random() < 0.5:
            n["minContains"] = rng.choice([0, 1, 2])
        if rng.random() < 0.5:
            n["maxContains"] = rng.choice([1, 2, 3])
    elif kind == "prefixItems":
        n[kind] = [part() for _ in range(rng.randint(1, 2))]
    elif kind == "const":
        n[kind] = rng.choice(_VALUES)
    elif kind == "enum":
        n[kind] = rng.sample(_VALUES, rng.randint(1, 4))
    else:
        n["$ref"] = "#"
