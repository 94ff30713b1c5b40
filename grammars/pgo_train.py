"""The workload that `setup.py` runs between the two builds of a profile-guided build.

With GCC, `setup.py` builds the compiled modules of `grammars` twice: first
instrumented (``-fprofile-generate``), then this module compiles schemas and
regexes with them, and the second build (``-fprofile-use``) lays their code
out by what ran. The gain is in the code's footprint, not its instruction
count: a compile after other work (caches cold, as in a server between two
requests) runs through a few hundred KB of machine code, and a profile puts
the paths that run next to each other. On the dev corpus the benchmark's
workers took about 5% less time to the first mask per schema, and the schema
compiler ran into 11% fewer instruction-cache misses (bench/README,
"Profile-guided build").

It imports only `grammars` and the standard library (the build environment
has numpy and Cython, not numba), so the NFA is finished by its Python path
there: code that only the compiled kernels' path runs keeps GCC's ordinary
optimization (``-fprofile-partial-training``).

Every schema is compiled in both member orders (declared, and ``any_order=True``).

Run: ``python -m grammars.pgo_train [SCHEMA.json ...]``: each file is a schema,
or an object with a ``"schema"`` (`bench/corpus`'s files); the built-in
schemas and regexes below run as well. Exits 1 when no module of `grammars`
is compiled, so that `setup.py` knows the profile would be empty.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

from grammars import native
from grammars.dfa import LazyDFA
from grammars.errors import ConstraintError
from grammars.json_schema import json_schema_grammar
from grammars.nfa import NFA
from grammars.regex import regex_grammar

__all__ = ["SCHEMAS", "REGEXES", "train", "main"]

# Common shapes of real-world schemas (function calls, API payloads, configs); none copied from a corpus.
_ADDRESS = {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                             "zip": {"type": "string", "pattern": "^[0-9]{5}(-[0-9]{4})?$"}},
            "required": ["street", "city"]}
SCHEMAS: list[Any] = [
    {"type": "object", "properties": {"location": {"type": "string", "description": "City and state"},
                                      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
     "required": ["location"]},
    {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1},
                                      "name": {"type": "string", "minLength": 1, "maxLength": 64},
                                      "email": {"type": "string", "format": "email"},
                                      "created": {"type": "string", "format": "date-time"},
                                      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
                                      "score": {"type": "number", "minimum": 0, "maximum": 100},
                                      "active": {"type": "boolean", "default": True}},
     "required": ["id", "name"], "additionalProperties": False},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
     "definitions": {"address": _ADDRESS},
     "properties": {"billing": {"$ref": "#/definitions/address"}, "shipping": {"$ref": "#/definitions/address"},
                    "items": {"type": "array", "minItems": 1, "items": {
                        "type": "object", "properties": {"sku": {"type": "string"}, "qty": {"type": "integer",
                                                                                            "minimum": 1}},
                        "required": ["sku", "qty"]}}},
     "required": ["items"]},
    {"type": "object", "properties": {"value": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]},
                                      "kind": {"oneOf": [{"const": "a"}, {"const": "b"}]},
                                      "meta": {"type": "object", "additionalProperties": {"type": "string"}}}},
    {"type": "object", "properties": {"version": {"type": "string", "pattern": "^\\d+\\.\\d+\\.\\d+$"},
                                      "dependencies": {"type": "object", "patternProperties": {
                                          "^[a-z][a-z0-9-]*$": {"type": "string"}}},
                                      "scripts": {"type": "object"}, "private": {"type": "boolean"}}},
    {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "args": {"type": "object"},
        "mode": {"type": "string", "enum": ["read", "write", "append"]}}, "required": ["name"]}, "maxItems": 8},
    {"type": "object", "allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {"type": "string"}}}],
     "if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}},
    {"type": "object", "properties": {"node": {"$ref": "#"}, "label": {"type": "string"}}},
    {"type": "string", "format": "uuid"},
    {"type": "integer", "minimum": -40, "maximum": 120, "multipleOf": 5},
    {"type": "number", "exclusiveMinimum": 0, "maximum": 1.5},
    {"enum": ["red", "green", "blue", 1, None]},
    {},
]
REGEXES = [r"\d{3}-\d{4}", r"[A-Z][a-z]+( [A-Z][a-z]+)*", r"(\w+\.)+\w+@\w+\.(com|org|net)",
           r"^(?:[01]\d|2[0-3]):[0-5]\d$", r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"]


def _run(grammar: Any) -> None:
    """What a compile and its walks do with a grammar: the lazy NFA and its deferred bodies, the whole NFA."""
    nfa = NFA(grammar, max_depth=int(grammar.info.get("max_depth", 64)), lazy=True)
    while nfa.unbuilt:
        nfa.build_lazy(next(iter(nfa._lazy)))
    LazyDFA(grammar, max_states=2000, max_depth=int(grammar.info.get("max_depth", 64)))


def train(schemas: list[Any], rounds: int = 3) -> int:
    """Compile every schema (in declared member order, then with ``any_order=True``) and regex
    `rounds` times; returns how many compiled (a schema that raises `ConstraintError` is skipped:
    `bench/corpus` has some on purpose).

    Both orders: code the profile never saw is laid out apart from the paths that ran. Trained in
    declared order only, `any_order`'s compiles (`json_any_order.any_order_body`,
    `FragmentBuilder._build_any_order`) took 3-4% longer than declared order's after other work,
    where the two take the same time warm (`python -m bench.ttfm_interleaved 1 3 32 2
    [--any-order]`, against llguidance: median ratio 0.98 declared, 1.00-1.04 any order)."""
    done = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(rounds):
            for schema in schemas:
                for options in ({}, {"any_order": True}):
                    try:
                        _run(json_schema_grammar(schema, **options))
                        done += 1
                    except ConstraintError:
                        pass
            for pattern in REGEXES:
                _run(regex_grammar(pattern))
                done += 1
    return done


def _load(path: str) -> Any:
    data = json.loads(Path(path).read_text())
    return data["schema"] if isinstance(data, dict) and "schema" in data and "tests" in data else data


def main(argv: list[str] | None = None) -> int:
    files = sys.argv[1:] if argv is None else argv
    if not native.loaded():
        print("grammars.pgo_train: no compiled module of grammars is loaded", file=sys.stderr)
        return 1
    done = train(SCHEMAS + [_load(f) for f in files])
    print(f"grammars.pgo_train: {done} compiles with {len(native.loaded())} compiled modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
