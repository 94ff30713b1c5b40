"""Compile time of JSON schemas: grammar, then NFA + the first DFA row.

Prints one JSON line per case:
`{"case", "grammar_ms", "first_row_ms", "nfa_states", "rules"}`; cases are the
test corpus (`tests/schema_corpus.py`) plus a few large schemas (300
properties, a deep `$ref` chain, a 1000-value enum, nested arrays of objects).

Run:  python bench/bench_schema_compile.py [--repeat 3] [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grammars.dfa import LazyDFA  # noqa: E402
from grammars.json_schema import json_schema_grammar  # noqa: E402
from tests.schema_corpus import CORPUS  # noqa: E402


def large_cases() -> list[tuple[str, dict, dict]]:
    wide = {f"field_{i:03d}": {"type": ["string", "integer", "boolean"][i % 3]} for i in range(300)}
    chain = {f"d{i}": {"type": "object", "properties": {"next": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(60)}
    chain["d60"] = {"type": "string"}
    return [
        ("wide_300_required", {"type": "object", "properties": wide, "required": list(wide),
                               "additionalProperties": False}, {}),
        ("wide_300_optional", {"type": "object", "properties": wide, "additionalProperties": False}, {}),
        ("wide_300_every_10th_required", {"type": "object", "properties": wide,
                                          "required": list(wide)[::10]}, {}),
        ("ref_chain_60", {"$defs": chain, "$ref": "#/$defs/d0"}, {}),
        ("enum_1000", {"enum": [f"value-{i}" for i in range(1000)]}, {}),
        ("orders", {"type": "array", "maxItems": 50, "items": {
            "type": "object", "required": ["id", "lines"], "additionalProperties": False, "properties": {
                "id": {"type": "string", "format": "uuid"},
                "created": {"type": "string", "format": "date-time"},
                "lines": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["sku", "qty"], "additionalProperties": False, "properties": {
                        "sku": {"type": "string", "pattern": "^[A-Z]{3}-\\d{4}$"},
                        "qty": {"type": "integer", "minimum": 1, "maximum": 999},
                        "price": {"type": "number", "minimum": 0, "multipleOf": 0.01}}}}}}}, {}),
    ]


def measure(name: str, schema: object, options: dict, repeat: int) -> dict:
    best_g = best_row = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        g = json_schema_grammar(schema, **options)
        t1 = time.perf_counter()
        dfa = LazyDFA(g, max_depth=g.info["max_depth"])
        dfa.expand([dfa.initial])
        t2 = time.perf_counter()
        best_g, best_row = min(best_g, t1 - t0), min(best_row, t2 - t1)
    return {"case": name, "grammar_ms": round(best_g * 1e3, 2), "first_row_ms": round(best_row * 1e3, 2),
            "nfa_states": dfa.nfa.num_states, "rules": len(g.rules)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=None)
    args = parser.parse_args()
    cases = [(c["name"], c["schema"], c["options"]) for c in CORPUS] + large_cases()
    total_g = total_row = 0.0
    for name, schema, options in cases:
        if args.only and args.only != name:
            continue
        row = measure(name, schema, options, args.repeat)
        total_g += row["grammar_ms"]
        total_row += row["first_row_ms"]
        print(json.dumps(row), flush=True)
    print(json.dumps({"case": "TOTAL", "grammar_ms": round(total_g, 1), "first_row_ms": round(total_row, 1)}))


if __name__ == "__main__":
    main()
