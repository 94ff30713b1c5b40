"""Compile-time benchmarks for regex -> IR -> lazy DFA.

Run as pytest-benchmark:   python -m pytest bench/bench_regex.py --benchmark-only
Or as a script (one JSON line per case, build ms and µs per new DFA row):
                           python bench/bench_regex.py
"""

from __future__ import annotations

import json
import random
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grammars.ast import Grammar, Ref, alt, byte_range, byteset, literal, optional, plus, seq, star  # noqa: E402
from grammars.dfa import LazyDFA  # noqa: E402
from grammars.regex import regex_grammar, regex_node  # noqa: E402


def _words(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10))))
    return sorted(out)


def json_like() -> Grammar:
    ws = star(byteset(b" \n"))
    number = seq(optional(literal(b"-")), plus(byte_range(0x30, 0x39)))
    string_ = seq(literal(b'"'), star(byte_range(0x61, 0x7A)), literal(b'"'))
    items = seq(Ref("value"), star(seq(ws, literal(b","), ws, Ref("value"))))
    member = seq(string_, ws, literal(b":"), ws, Ref("value"))
    return Grammar({
        "value": alt(Ref("array"), Ref("object"), number, string_, literal(b"true"), literal(b"null")),
        "array": seq(literal(b"["), ws, optional(items), ws, literal(b"]")),
        "object": seq(literal(b"{"), ws, optional(seq(member, star(seq(ws, literal(b","), ws, member)))),
                      ws, literal(b"}")),
    }, start="value")


def _random_json(rng: random.Random, depth: int) -> str:
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(["1", "-20", '"ab"', "null", "true"])
    if rng.random() < 0.5:
        return "[" + ", ".join(_random_json(rng, depth - 1) for _ in range(rng.randint(0, 3))) + "]"
    body = ", ".join(f'"k{chr(97 + i)}": {_random_json(rng, depth - 1)}' for i in range(rng.randint(0, 3)))
    return "{" + body + "}"


WORDS = _words(5000)
ALT_5000 = "|".join(WORDS)
_RNG = random.Random(1)
EXP_TEXT = bytes(_RNG.choice(b"ab") for _ in range(3000))
JSON_DOCS = [_random_json(random.Random(i), 6).encode() for i in range(40)]

CASES = {
    "a{1000}": (lambda: Grammar({"start": regex_node("a{1000}")}), [b"a" * 1000], {}),
    "[0-9]{1,500}": (lambda: Grammar({"start": regex_node("[0-9]{1,500}")}), [b"7" * 500], {}),
    "(a|b)*a(a|b){12}": (lambda: regex_grammar("(a|b)*a(a|b){12}"), [EXP_TEXT], {}),
    "5000 words": (lambda: Grammar({"start": regex_node(ALT_5000)}), [w.encode() for w in WORDS[::50]], {}),
    "email-ish": (lambda: regex_grammar(r"[\w.+-]+@[\w-]+(\.[\w-]+)*\.[a-z]{2,6}"),
                  [b"john.doe+x@mail.example.com"], {}),
    "json-like depth 12": (json_like, JSON_DOCS, {"max_depth": 12}),
}


def _build_and_walk(name: str) -> LazyDFA:
    make, texts, opts = CASES[name]
    dfa = LazyDFA(make(), **opts)
    for t in texts:
        dfa.walk(dfa.initial, t)
    return dfa


def measure(name: str) -> dict:
    make, texts, opts = CASES[name]
    t0 = time.perf_counter()
    grammar = make()
    t1 = time.perf_counter()
    dfa = LazyDFA(grammar, **opts)
    t2 = time.perf_counter()
    accepted = sum(dfa.is_accepting(dfa.walk(dfa.initial, t)) for t in texts)
    t3 = time.perf_counter()
    rows = sum(1 for r in dfa._rows if r is not None)
    return {
        "case": name, "ir_ms": round(1e3 * (t1 - t0), 2), "dfa_init_ms": round(1e3 * (t2 - t1), 2),
        "walk_ms": round(1e3 * (t3 - t2), 2), "rows": rows, "us_per_row": round(1e6 * (t3 - t2) / max(rows, 1), 1),
        "nfa_states": dfa.nfa.num_states, "classes": dfa.num_classes, "accepted": f"{accepted}/{len(texts)}",
    }


def test_bench_a1000(benchmark) -> None:
    benchmark(_build_and_walk, "a{1000}")


def test_bench_digits_1_500(benchmark) -> None:
    benchmark(_build_and_walk, "[0-9]{1,500}")


def test_bench_exponential_lazy(benchmark) -> None:
    benchmark(_build_and_walk, "(a|b)*a(a|b){12}")


def test_bench_words_5000(benchmark) -> None:
    benchmark(_build_and_walk, "5000 words")


def test_bench_json_like(benchmark) -> None:
    benchmark(_build_and_walk, "json-like depth 12")


if __name__ == "__main__":
    for case in CASES:
        best = min((measure(case) for _ in range(3)), key=lambda r: r["dfa_init_ms"] + r["walk_ms"])
        print(json.dumps(best))
