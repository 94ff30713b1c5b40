"""Building blocks of the JSON-schema compiler against independent oracles:
number automata vs `Decimal` comparisons, the JSON string encoder vs
`json.loads`, and the pattern x length product vs Python's `re`."""

from __future__ import annotations

import json
import re
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammars.ast import Grammar, star
from grammars.dfa import LazyDFA
from grammars.errors import UnsupportedSchemaError
from grammars.json_length import restrict_length
from grammars.json_numbers import Interval, int_range, integer_multiples, number_interval
from grammars.json_strings import ANY_CHAR, json_char, key_literal, string_not_in
from grammars.regex import regex_node


def dfa(node):
    return LazyDFA(Grammar({"start": node}))


BOUNDS = [None, "0", "0.5", "-1.25", "3.5", "100", "0.001", "-0.05", "7", "250.75", "1e-7", "12345678.9"]

plain = st.builds(
    lambda neg, i, frac: ("-" if neg else "") + i + (("." + frac) if frac else ""),
    st.booleans(), st.one_of(st.just("0"), st.integers(1, 10**9).map(str)),
    st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=6)))
scientific = st.builds(
    lambda neg, d, frac, e, es, z: f"{'-' if neg else ''}{d}{('.' + frac) if frac else ''}{e}{es}{'0' * z}",
    st.booleans(), st.sampled_from("123456789"), st.text("0123456789", max_size=3),
    st.sampled_from("eE"), st.sampled_from(["", "+", "-"]), st.integers(0, 2)).map(lambda s: s + "1")


@settings(max_examples=40, deadline=None)
@given(lo=st.sampled_from(BOUNDS), hi=st.sampled_from(BOUNDS), ls=st.booleans(), hs=st.booleans(),
       texts=st.lists(st.one_of(plain, scientific), min_size=20, max_size=20))
def test_number_interval_matches_decimal_comparison(lo, hi, ls, hs, texts):
    iv = Interval(None if lo is None else Decimal(lo), None if hi is None else Decimal(hi), lo_strict=ls, hi_strict=hs)
    automaton = dfa(number_interval(iv))
    for text in texts:
        assert automaton.matches(text.encode()) == iv.contains(Decimal(text)), (iv, text)


@pytest.mark.parametrize("limit", [0, 1, 2])
def test_fraction_limit_is_multiple_of_power_of_ten(limit):
    iv = Interval(Decimal("-3"), Decimal("12.5"), hi_strict=True)
    automaton = dfa(number_interval(iv, limit=limit, scientific=False))
    for n in range(-400, 1300, 7):
        for text in (str(Decimal(n) / 100), str(Decimal(n) / 1000) + "0"):
            v = Decimal(text)
            expected = iv.contains(v) and (v * 10**limit) % 1 == 0
            assert automaton.matches(text.encode()) == expected, text


@pytest.mark.parametrize("lo,hi", [(-17, 12345), (0, 0), (None, -3), (5, None), (None, None), (-1000, -999)])
def test_int_range(lo, hi):
    automaton = dfa(int_range(lo, hi))
    for v in list(range(-1100, 13000, 13)) + [-17, 12345, 0, -3, 5, -1000, -999]:
        ok = (lo is None or v >= lo) and (hi is None or v <= hi)
        assert automaton.matches(str(v).encode()) == ok, v
    assert not automaton.matches(b"-0") and not automaton.matches(b"01")


@pytest.mark.parametrize("k,lo,hi", [(3, -50, 50), (5, None, None), (4, 0, None), (8, None, -3), (25, 7, None)])
def test_integer_multiples(k, lo, hi):
    automaton = dfa(integer_multiples(lo, hi, k))
    for v in range(-3000, 3000):
        ok = (lo is None or v >= lo) and (hi is None or v <= hi) and v % k == 0
        assert automaton.matches(str(v).encode()) == ok, v


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=8), ascii_only=st.booleans(), upper=st.booleans())
def test_json_char_accepts_every_serialization(text, ascii_only, upper):
    body = json.dumps(text, ensure_ascii=ascii_only)[1:-1]
    if upper:
        body = re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), body)
    assert dfa(star(ANY_CHAR)).matches(body.encode())
    assert dfa(restrict_length(star(ANY_CHAR), len(text), len(text))).matches(body.encode())


@pytest.mark.parametrize("body", [b'"', b"\\", b"\x01", b"\\x41", b"\\ud800", b"\\udc00\\ud800", b"\\u12"])
def test_json_char_rejects_invalid(body):
    assert not dfa(star(ANY_CHAR)).matches(body)


def test_string_not_in():
    automaton = dfa(string_not_in(["a", "ab", ""]))
    assert [automaton.matches(s) for s in (b"", b"a", b"ab", b"abc", b"b", b"\\u0061", b"\\u0061c", b"b\\u0061")] == [
        False, False, False, True, True, False, False, True]


# spellings of one character each: (JSON text, decoded character)
_SPELLINGS = [("a", "a"), ("b", "b"), ("/", "/"), ("\\/", "/"), ("\\u0061", "a"), ("\\u0041", "A"), ("A", "A"),
              ("é", "é"), ("\\u00e9", "é"), ("\\u00E9", "é"), ("\\n", "\n"), ("\\u000a", "\n"), ('\\"', '"'),
              ("\\u0022", '"'), ("\\\\", "\\"), ("\\ud83d\\ude00", "\U0001F600"), ("\U0001F600", "\U0001F600")]


def _not_in_oracle(words: list[str], spelled: list[tuple[str, str]]) -> bool:
    """`string_not_in(words)` by its docstring: not a word, and (for printable-ASCII words)
    printable ASCII is raw (`"` and `\\` short-escaped) while the text still starts a word."""
    text = "".join(c for _, c in spelled)
    if text in words:
        return False
    if not all(" " <= ch <= "~" and ch not in '"\\' for w in words for ch in w):
        return True
    prefix = ""
    for spelling, ch in spelled:
        if not any(w.startswith(prefix) for w in words):
            break
        if " " <= ch <= "~" and spelling != (ch if ch not in '"\\' else "\\" + ch):
            return False
        prefix += ch
    return True


@pytest.mark.parametrize("words", [["a"], ["ab", "a/b", "b"], ["", "aa", "ab", "A"], ["é", "ab"], ["a\nb", "b"],
                                   ['a"b', "aa"], ["/", "//a"]])
@pytest.mark.parametrize("direct", [True, False], ids=["trie-built", "generic"])
def test_string_not_in_against_its_oracle(words: list[str], direct: bool) -> None:
    """Both NFA constructions: the direct one from the trie noted in the grammar's
    info (`trie_complement`), and the generic one from the alternation."""
    import random

    tries: dict = {}
    node = string_not_in(words, tries)
    assert bool(tries) == all(" " <= ch <= "~" and ch not in '"\\' for w in words for ch in w)
    automaton = LazyDFA(Grammar({"start": node}, info={"tries": tries if direct else {}}))
    rng = random.Random(repr(words))
    cases = [[next(sp for sp in _SPELLINGS if sp[0] == ch) for ch in w] for w in words if "\n" not in w and '"' not in w]
    cases += [[rng.choice(_SPELLINGS) for _ in range(rng.randint(0, 4))] for _ in range(1500)]
    for spelled in cases:
        body = "".join(sp for sp, _ in spelled)
        assert json.loads('"' + body + '"') == "".join(c for _, c in spelled)
        assert automaton.matches(body.encode()) == _not_in_oracle(words, spelled), body


def _key_oracle(name: str, spelled: list[tuple[str, str]]) -> bool:
    """`key_literal(name)` by its docstring: the text is `name`, and its printable ASCII is
    raw (`"` and `\\` short-escaped); other characters in any spelling."""
    if "".join(c for _, c in spelled) != name:
        return False
    return all(not " " <= ch <= "~" or spelling == (ch if ch not in '"\\' else "\\" + ch) for spelling, ch in spelled)


@pytest.mark.parametrize("name", ["a", "ab/", "é", "a\nb", 'a"b', "\\", "\U0001F600a", "aA"])
def test_key_literal_against_its_oracle(name: str) -> None:
    import itertools

    automaton = dfa(key_literal(name))
    per_char = [[sp for sp in _SPELLINGS if sp[1] == ch] for ch in name]
    cases = [list(spelled) for spelled in itertools.product(*per_char)]           # every spelling of the name
    assert any(_key_oracle(name, c) for c in cases)
    rng = __import__("random").Random(name)
    cases += [[rng.choice(_SPELLINGS) for _ in range(len(name))] for _ in range(300)]
    for spelled in cases:
        body = "".join(sp for sp, _ in spelled)
        assert automaton.matches(body.encode()) == _key_oracle(name, spelled), body


PATTERNS = ["^[a-z]+(-[0-9]{2,4})?$", "A[a-z]", "^(ab|c)*$", "x", "^.{2,}$", "^([a-z0-9][a-z0-9-]*)?$",
            "^([a-z]|[a-z][a-z-]*[0-9])$"]


@settings(max_examples=40, deadline=None)
@given(pattern=st.sampled_from(PATTERNS), lo=st.integers(0, 3), extra=st.one_of(st.none(), st.integers(0, 3)),
       words=st.lists(st.text("aAbcxz09-é😀", max_size=7), min_size=15, max_size=15), ascii_only=st.booleans())
def test_pattern_length_product(pattern, lo, extra, words, ascii_only):
    hi = None if extra is None else lo + extra
    body = regex_node(pattern, dialect="ecma", search=True, encode=json_char)
    automaton = dfa(restrict_length(body, lo, hi))
    for w in words:
        expected = re.search(pattern, w) is not None and lo <= len(w) and (hi is None or len(w) <= hi)
        text = json.dumps(w, ensure_ascii=ascii_only)[1:-1].encode()
        assert automaton.matches(text) == expected, (pattern, lo, hi, w)


def test_an_alternation_of_counted_runs_takes_long_bounds():
    # (Kubernetes label keys: at most 253 characters) each branch keeps its one counter loop,
    # where expanding per length exceeded the budget
    body = regex_node("^([A-Za-z0-9][A-Za-z0-9-._]*)?$", dialect="ecma", search=True, encode=json_char)
    automaton = dfa(restrict_length(body, 0, 253))
    for w, ok in (("", True), ("a", True), ("a" * 253, True), ("a" * 254, False), ("-a", False), ("a.b-c_d", True)):
        assert automaton.matches(w.encode()) == ok, w


def test_length_product_budget_raises():
    body = regex_node("a", dialect="ecma", search=True, encode=json_char)
    with pytest.raises(UnsupportedSchemaError, match="budget"):
        restrict_length(body, 0, 400, budget=10_000)
