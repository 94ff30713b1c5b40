"""Regex -> IR -> lazy DFA, checked against Python's `re` itself."""

from __future__ import annotations

import itertools
import random
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grammars.ast import Grammar, literal, seq
from grammars.dfa import LazyDFA
from grammars.errors import RegexSyntaxError, UnsupportedRegexError
from grammars.regex import regex_grammar, regex_node
from grammars.utf8 import codepoints

_DFAS: dict[tuple[str, int], LazyDFA] = {}


def dfa_of(pattern: str, flags: int = 0) -> LazyDFA:
    key = (pattern, flags)
    if key not in _DFAS:
        _DFAS[key] = LazyDFA(regex_grammar(pattern, flags=flags))
    return _DFAS[key]


def accepts(pattern: str, text: str, flags: int = 0) -> bool:
    return dfa_of(pattern, flags).matches(text.encode("utf-8"))


# ---------------------------------------------------------------------------
# Tables

TABLE = [
    ("abc", "abc", True), ("abc", "ab", False), ("a|bc", "bc", True), ("", "", True),
    ("a*", "", True), ("a+", "", False), ("a?b", "b", True), ("a{3}", "aaa", True),
    ("a{3}", "aaaa", False), ("a{2,}", "aaaaa", True), ("a{,2}", "aaa", False),
    ("a{2,3}?", "aa", True), ("(ab)*?c", "ababc", True), ("[a-c]+", "abcab", True),
    ("[^a-c]", "d", True), ("[^a-c]", "b", False), ("[^a]", "é", True), ("[^a]", "😀", True),
    (".", "\n", False), ("(?s).", "\n", True), (".", "é", True), ("\\d", "٣", True),
    ("(?a)\\d", "٣", False), ("\\w+", "naïve_9", True), ("(?a)\\w+", "naïve", False),
    ("\\s", "\u2003", True), ("(?a)\\s", "\u2003", False), ("\\D", "x", True), ("\\W", "_", False),
    ("\\S+", "a b", False), ("[\\d\\s]+", "1 2", True), ("[^\\W\\d]+", "abc", True),
    ("[^\\W\\d]+", "ab1", False), ("\\x41\\u00e9\\U0001F600", "Aé😀", True),
    ("\\N{GREEK SMALL LETTER ALPHA}", "α", True), ("[α-ω]+", "λόγος", False), ("[α-ω]+", "λογος", True),
    ("(?i)hello", "HeLLo", True), ("(?i)[a-c]+", "AbC", True), ("(?i)k", "\u212a", True),
    ("(?i)s", "ſ", True), ("(?i)straße", "STRASSE", False), ("(?i)é", "É", True),
    ("(?i:a)b", "Ab", True), ("(?i:a)b", "AB", False), ("(?a:\\w)\\w", "aé", True), ("(?a:\\w)\\w", "éa", False),
    ("(?x) a b  # comment", "ab", True), ("(?P<year>\\d{4})-(?:\\d{2})", "2024-05", True),
    ("(?>ab|cd)e", "cde", True), ("a*+b", "aaab", True), ("[ab]++c", "abac", True), ("(?>a*)b", "aab", True),
    ("^abc$", "abc", True), ("\\Aabc\\Z", "abc", True), ("(^a|b)c", "ac", True), ("x(^a|b)c", "xac", False),
    ("x(^a|b)c", "xbc", True), ("(a$|b)c", "ac", False), ("(a$|b)c", "bc", True), ("a$", "a\n", False),
    ("(?m)^a$", "a", True), ("(^a)*", "aa", False), ("(^a)*", "a", True), ("(a|^b)+", "ba", True),
    ("(a|^b)+", "ab", False), ("(a|b$)+", "ab", True), ("(a|b$)+", "ba", False),
    ("(a|bc|d)*(e|f)?", "bcdae", True), ("((a|b)(c|d)){2}", "acbd", True),
    ("[0-9]{1,500}", "9" * 500, True), ("[0-9]{1,500}", "9" * 501, False),
    ("\\$\\d+\\.\\d{2}", "$12.50", True), ("[\\]a-]+", "]a-", True), ("[.*+?]", "*", True),
]


@pytest.mark.parametrize("pattern,text,accepted", TABLE)
def test_table(pattern: str, text: str, accepted: bool) -> None:
    assert (re.fullmatch(pattern, text) is not None) == accepted  # the table itself is right
    assert accepts(pattern, text) == accepted


ECMA_TABLE = [
    ("^\\d+$", "123", True), ("\\d", "٣", False), ("\\w", "é", False), ("\\s", "\u00a0", True),
    ("\\s", "\ufeff", True), (".", "\r", False), (".", "\u2028", False), ("a$", "a\n", False),
    ("[^]", "\n", True), ("a[]", "a", False), ("\\cJ", "\n", True), ("\\u{1F600}", "😀", True),
    ("\\uD83D\\uDE00", "😀", True), ("\\u00e9", "é", True), ("(?<year>\\d{4})", "1999", True),
    ("\\p{Lu}\\p{Ll}+", "Émile", True), ("\\p{Lu}", "é", False), ("\\P{L}", "1", True),
    ("[\\p{N}x]+", "x½9", True), ("\\a", "a", True), ("\\/", "/", True), ("[[a]", "[", True),
    ("\\x4", "x4", True), ("\\0", "\x00", True),
]


@pytest.mark.parametrize("pattern,text,accepted", ECMA_TABLE)
def test_ecma_table(pattern: str, text: str, accepted: bool) -> None:
    node = regex_node(pattern, dialect="ecma")
    assert LazyDFA(Grammar({"start": node})).matches(text.encode()) == accepted


SEARCH_TABLE = [
    ("abc", "xxabcxx", True), ("^abc", "xabc", False), ("^abc", "abcx", True), ("abc$", "xabc", True),
    ("abc$", "abcx", False), ("^a|b$", "ax", True), ("^a|b$", "xb", True), ("^a|b$", "xbx", False),
    ("^(a|b)$", "a", True), ("\\d{3}", "ab123cd", True), ("\\d{3}", "ab12cd", False), ("", "anything", True),
]


@pytest.mark.parametrize("pattern,text,accepted", SEARCH_TABLE)
def test_ecma_search(pattern: str, text: str, accepted: bool) -> None:
    node = regex_node(pattern, dialect="ecma", search=True)
    assert LazyDFA(Grammar({"start": node})).matches(text.encode()) == accepted


@pytest.mark.parametrize("pattern", ["abc", "^ab", "a|^b", "[0-9]+x", "(^a|b)c*", "a\\Z", "^a\\Z|b"])
def test_python_search_agrees_with_re_search(pattern: str) -> None:
    dfa = LazyDFA(Grammar({"start": regex_node(pattern, search=True)}))
    rng = random.Random(pattern)
    for _ in range(300):
        text = "".join(rng.choice("abcx09\n") for _ in range(rng.randint(0, 6)))
        assert dfa.matches(text.encode()) == (re.search(pattern, text) is not None), text


# ---------------------------------------------------------------------------
# Property tests against `re.fullmatch`

PATTERNS = [
    r"[a-z]+@[a-z]+\.(com|org)", r"\d{3}-\d{4}", r"(\+|-)?\d+(\.\d+)?([eE][+-]?\d+)?",
    r"[A-Z][a-z]*( [A-Z][a-z]*)*", r"\w+", r"\s*\S+\s*", r"[^\n]*", r".{0,5}", r"(?s).{2}",
    r"(ab|cd|e)*", r"(a|b)*a(a|b){3}", r"a{2,4}b{0,2}", r"(x|y)+?z", r"(?:[0-9a-f]{2}:){2}[0-9a-f]{2}",
    r"[αβγ]+[д-ж]*", r"[\u4e00-\u9fff]{1,3}", r"[😀-🙏]+", r"\d+", r"(?a)\w+\s\d", r"[^\W_]+",
    r"(?i)[a-f]+z", r"(?i)straße", r"(?i)ǅ|ǆ", r"(?i)[k-m]", r"((a|b)c?)+d", r"(ab*)*c",
    r"(a|ab)(c|bcd)(d*)", r"[-+]?[0-9]*\.?[0-9]+", r"\w+([-+.']\w+)*", r"(?x) [0-9]+ (\. [0-9]+)?",
    r"[\x00-\x7f]+", r"[^a-zA-Z0-9]+", r"(?:\\[\\\"nt]|[^\\\"])*", r"(0|[1-9][0-9]*)", r"[ab]{3,}",
    r"(?>[a-c]+)d", r"[0-9]++\.", r"(a|b)?c{1,3}?", r"\W+", r"(?s:.)a*", r"(?i:é|ß)x",
]


def _mutations(text: str, rng: random.Random) -> list[str]:
    alphabet = "ab0 .-_zZé\n\U0001F600аБ\u212aſ"
    out = []
    for _ in range(4):
        chars = list(text)
        op = rng.randrange(3)
        i = rng.randrange(len(chars) + 1)
        if op == 0:
            chars.insert(i, rng.choice(alphabet))
        elif op == 1 and chars:
            del chars[min(i, len(chars) - 1)]
        elif chars:
            chars[min(i, len(chars) - 1)] = rng.choice(alphabet)
        out.append("".join(chars))
    return out


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_positives_and_mutations(pattern: str, data: st.DataObject) -> None:
    text = data.draw(st.from_regex(pattern, fullmatch=True))
    assert accepts(pattern, text), text
    rng = random.Random(text)
    for other in _mutations(text, rng):
        assert accepts(pattern, other) == (re.fullmatch(pattern, other) is not None), (pattern, other)


@pytest.mark.parametrize("pattern", PATTERNS)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(alphabet="ab01 .-_cdzZé\nß\u212akK😀+", max_size=8))
def test_random_strings(pattern: str, text: str) -> None:
    assert accepts(pattern, text) == (re.fullmatch(pattern, text) is not None)


def test_ignorecase_matches_re_on_cased_characters() -> None:
    from grammars.charsets import _fold_tables

    changed, lower, fixes, cased = _fold_tables(False)
    rng = random.Random(0)
    probe = sorted(set(rng.sample(cased, 150)) | {0x49, 0x69, 0x130, 0x131, 0x3A3, 0x3C2, 0x1E9E, 0xDF})
    candidates = sorted(set(cased) | set(lower.values()))
    for c in probe:
        pattern = "(?i)" + re.escape(chr(c))
        dfa = LazyDFA(regex_grammar(pattern))
        for x in candidates:
            expected = re.fullmatch(pattern, chr(x)) is not None
            if expected or lower.get(x, x) == lower.get(c, c) or x % 29 == 0:
                assert dfa.matches(chr(x).encode()) == expected, (hex(c), hex(x))


# ---------------------------------------------------------------------------
# Errors

UNSUPPORTED = [
    (r"(a)\1", "backreference", 3), (r"(?P<x>a)(?P=x)", "backreference", 8),
    (r"a(?=b)", "lookahead", 1), (r"a(?!b)", "negative lookahead", 1),
    (r"(?<=a)b", "lookbehind", 0), (r"x(?<!a)b", "negative lookbehind", 1),
    (r"(a)?(?(1)b|c)", "conditional group", 4), (r"\bfoo", "word boundary", 0),
    (r"a\B", "word boundary", 1), (r"(?m)a?^b", "`^` (MULTILINE) anchor", 6), (r"a$b?", "`$` anchor", 1),
    (r"a*+a", "possessive quantifier", 2), (r"(?>a|ab)c", "atomic group", 0),
]


@pytest.mark.parametrize("pattern,construct,position", UNSUPPORTED)
def test_unsupported_constructs_are_named(pattern: str, construct: str, position: int) -> None:
    with pytest.raises(UnsupportedRegexError) as info:
        regex_node(pattern)
    assert info.value.construct.startswith(construct)
    assert info.value.position == position
    assert pattern in str(info.value) or repr(pattern) in str(info.value)


def test_ecma_unsupported_positions_map_to_original() -> None:
    with pytest.raises(UnsupportedRegexError) as info:
        regex_node(r"\u{1F600}\p{Lu}(?=x)", dialect="ecma")
    assert info.value.construct == "lookahead" and info.value.position == 15
    with pytest.raises(UnsupportedRegexError) as info:
        regex_node(r"ab\p{Script=Greek}", dialect="ecma")
    assert "Script=Greek" in info.value.construct and info.value.position == 2


@pytest.mark.parametrize("pattern,position", [("[a", 0), ("a{2,1}", 2), ("(ab", 0), ("a)", 1), ("*", 0)])
def test_syntax_errors_carry_re_message_and_position(pattern: str, position: int) -> None:
    with pytest.raises(RegexSyntaxError) as info:
        regex_node(pattern)
    assert info.value.position == position
    with pytest.raises(re.error) as original:
        re.compile(pattern)
    assert original.value.msg in str(info.value)


_SHORT_TEXTS = ["".join(t) for n in range(5) for t in itertools.product("abc", repeat=n)]


def _patterns_with_anchors() -> st.SearchStrategy[str]:
    atoms = st.sampled_from(["a", "b", "$", "^", "[ab]", "."])
    return st.recursive(atoms, lambda inner: st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda t: f"({t[0]}|{t[1]})"),
        st.tuples(inner, st.sampled_from(["*", "+", "?", "{2}", "{1,3}", "{0,2}"])).map(lambda t: f"({t[0]}){t[1]}"),
    ), max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(pattern=_patterns_with_anchors(), anchored=st.booleans())
def test_anchors_anywhere_match_as_re_does(pattern: str, anchored: bool) -> None:
    """`^` and `$` (ECMA, search) and `^` and `\\Z` (full match) wherever they stand, in
    repeats and alternatives too (`grammars.anchor_marks`): the texts `re` matches, every text up to 4 long."""
    pattern = ("^" if anchored else "") + pattern
    full_pattern = pattern.replace("$", r"\Z")
    search = LazyDFA(Grammar({"start": regex_node(pattern, dialect="ecma", search=True)}))
    full = LazyDFA(Grammar({"start": regex_node(full_pattern)}))
    for text in _SHORT_TEXTS:
        assert search.matches(text.encode()) == (re.search(pattern, text) is not None), (pattern, text)
        assert full.matches(text.encode()) == (re.fullmatch(full_pattern, text) is not None), (full_pattern, text)


@pytest.mark.parametrize("pattern", [r"(?>a\Z|b)c?", r"(a\Z|b)++c?", r"c?(?>^a|b)"])
def test_anchor_inside_atomic_or_possessive_raises(pattern: str) -> None:
    with pytest.raises(UnsupportedRegexError, match="anchor inside"):
        regex_node(pattern)


@pytest.mark.parametrize("pattern,flags", [(r"(?m)a\n^b", 0), (r"a\n^b", re.MULTILINE), (r"a$\nb", re.MULTILINE)])
def test_multiline_anchors_between_lines_raise(pattern: str, flags: int) -> None:
    # MULTILINE `^`/`$` hold at every line's start/end; `re`'s parser leaves that to its
    # matcher, so it was once read as the input's start/end (a language without "a\nb")
    with pytest.raises(UnsupportedRegexError, match="anchor"):
        regex_node(pattern, flags=flags)
    full = LazyDFA(Grammar({"start": regex_node(r"(?m)^ab$")}))
    assert full.matches(b"ab") and not full.matches(b"a\nb")


def test_python_search_with_dollar_before_newline_raises() -> None:
    # re.search("a$", "a\n") matches: `$` before the final newline, which the
    # unanchored suffix could read; we refuse rather than guess.
    with pytest.raises(UnsupportedRegexError):
        regex_node("a$", search=True)


def test_bad_dialect() -> None:
    with pytest.raises(ValueError, match="dialect"):
        regex_node("a", dialect="perl")


# ---------------------------------------------------------------------------
# The encode hook and sizes


def test_every_character_set_goes_through_encode() -> None:
    seen: list[list[tuple[int, int]]] = []

    def doubled(ranges: list[tuple[int, int]]) -> object:
        seen.append(ranges)
        one = codepoints(ranges)
        return seq(one, one)

    node = regex_node(r"a[b-d]\d.", encode=doubled)
    dfa = LazyDFA(Grammar({"start": node}))
    assert dfa.matches("aacc77éé".encode())
    assert not dfa.matches(b"acc77xx")
    assert [(0x61, 0x61)] in seen and [(0x62, 0x64)] in seen


def test_large_patterns_stay_linear() -> None:
    words = [f"w{i}x" for i in range(10_000)]
    node = regex_node("|".join(words))
    dfa = LazyDFA(Grammar({"start": node}))
    assert dfa.matches(b"w9999x") and not dfa.matches(b"w10000x")
    big = regex_node("a{1000}")
    assert LazyDFA(Grammar({"start": big})).matches(b"a" * 1000)
    assert regex_node("(" + "|".join(words[:50]) + ")+z") is not None
    assert literal(b"ab") == regex_node("ab")
