"""A pattern with length bounds whose product is too large to list (`grammars.json_counted`): the
pattern's automaton with the count as a frame. Exact against jsonschema in every spelling, every
DFA state live; schemas that were refused (a hostname with 253 characters, an e-mail address with
254, words with 1,000) compile, and a pattern whose own automaton is too large is still refused."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constrained.compile import compile_json_schema
from constrained.dfa_jit import native_dfa_class
from grammars.ast import NOTHING, Counted, Grammar, non_empty
from grammars.dfa import LazyDFA
from grammars.errors import UnsupportedSchemaError
from grammars.json_counted import counted
from grammars.json_schema import json_schema_grammar
from grammars.json_string_sets import string_automaton
from grammars.json_strings import json_char
from grammars.regex import regex_node
from tests.test_dfa import live_states

DFA_CLASSES = [LazyDFA] + ([native_dfa_class()] if native_dfa_class() else [])
PATTERNS = [r"^\S+( \S+)*$", r"^[a-z0-9-]+(\.[a-z0-9-]+)*$", r"^(?:\S+\s+){0,3}\S+$", r"^[^@]+@[^@]+\.[a-z]{2,}$",
            r"^(ab)*$", r"x", r"^[é😀a]{2}b*$"]
ALPHABET = "ab x.-@é😀\"\\\n"


def _counted(pattern: str, lo: int, hi: int):
    body = regex_node(pattern, dialect="ecma", search=True, encode=json_char)
    return counted(*string_automaton(body, [], path="$"), lo, hi, path="$")


def _expected(pattern: str, lo: int, hi: int, w: str) -> bool:
    # (the alphabet's only spaces are " ", "\n" and "\t", where Python's \s and \S agree with ECMA's;
    # ECMA's $ is the end, Python's also before a last newline)
    return re.search(pattern.replace("$", r"\Z"), w) is not None and lo <= len(w) <= hi


def _has_counted(grammar: Grammar) -> bool:
    stack, seen = list(grammar.rules.values()), set()
    while stack:
        node = stack.pop()
        if type(node) is Counted:
            return True
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(getattr(node, "items", ()))
        stack.extend(x for x in (getattr(node, "item", None), getattr(node, "extra", None)) if x is not None)
    return False


@pytest.mark.parametrize("cls", DFA_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_counted_equals_the_product_and_every_state_is_live(pattern: str, cls: type) -> None:
    rng = random.Random(pattern)
    for lo, hi in ((0, 0), (0, 4), (2, 5), (3, 3), (5, 8)):
        try:
            node = _counted(pattern, lo, hi)
        except UnsupportedSchemaError:
            # "an even number" in a window of one count: counts 1 and 3 can finish at the start, 2 cannot
            assert pattern == r"^(ab)*$" and (lo, hi) == (3, 3)
            continue
        dfa = cls(Grammar({"start": node}), max_states=20_000)
        words = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, hi + 2))) for _ in range(300)]
        words += ["a.b", "ab ab", "a@b.cd", "ababab", "x" * hi, "éé", "😀abb"]
        for w in words:
            for ascii_only in (False, True):
                text = json.dumps(w, ensure_ascii=ascii_only)[1:-1].encode()
                assert dfa.matches(text) == _expected(pattern, lo, hi, w), (pattern, lo, hi, w)
        live, n = live_states(dfa)
        assert live == set(range(n)) or (node == NOTHING and n == 1), (pattern, lo, hi)


def test_no_string_of_those_lengths_is_nothing() -> None:
    assert _counted(r"^\d{3}$", 4, 10) == NOTHING and _counted(r"^\d{3}$", 0, 2) == NOTHING


@pytest.mark.parametrize("cls", DFA_CLASSES, ids=lambda c: c.__name__)
def test_non_empty_drops_only_the_empty_string(cls: type) -> None:
    node = non_empty(_counted(r"^(ab)*$", 0, 6))
    dfa = cls(Grammar({"start": node}))
    assert [dfa.matches(t) for t in (b"", b"ab", b"abab", b"ababab", b"abababab")] == [False, True, True, True, False]


def test_a_gap_wider_than_the_bounds_is_refused() -> None:
    # completions of 0 or 10 characters, a window of 2 counts: the counts that can finish are not an interval
    with pytest.raises(UnsupportedSchemaError, match="gaps"):
        _counted(r"^(a{10})*$", 9, 10)


SCHEMAS = [
    {"type": "string", "pattern": r"^(?:\S+\s+){0,3}\S+$", "maxLength": 300},
    {"type": "string", "pattern": r"^[a-z0-9-]+(\.[a-z0-9-]+)*$", "minLength": 1, "maxLength": 253},
    {"type": "string", "pattern": r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", "maxLength": 254},
    {"type": "string", "pattern": r"^\S+( \S+)*$", "minLength": 2, "maxLength": 1000},
    {"type": "string", "pattern": r"^\S+( \S+)*$", "maxLength": 1000, "not": {"enum": ["a b", "ab"]}},
]
_VALIDATORS = [jsonschema.Draft202012Validator(s) for s in SCHEMAS]
_GRAMMARS = [json_schema_grammar(s) for s in SCHEMAS]
_DFAS = [cls(g, max_states=100_000) for g in _GRAMMARS for cls in DFA_CLASSES]


def test_schemas_past_the_product_compile_counted() -> None:
    assert all(_has_counted(g) for g in _GRAMMARS)


def test_a_pattern_whose_own_automaton_is_too_large_is_still_refused() -> None:
    # (maskbench's Github_hard---o21074: 3,210 states before the length; see the module doc)
    schema = {"properties": {"about": {"type": "string", "pattern": r"^(?:\S+\s+){0,29}\S+$", "maxLength": 300}}}
    with pytest.raises(UnsupportedSchemaError, match=r"maxLength.*\$\.properties\.about.*2000"):
        json_schema_grammar(schema)


def _words(draw_text: str, rng: random.Random) -> list[str]:
    """`draw_text`, and it cut or grown to the bounds' edges."""
    out = [draw_text]
    for n in (252, 253, 254, 255, 299, 300, 301, 999, 1000, 1001):
        out.append((draw_text or "a") * (n // max(1, len(draw_text)) + 1))
        out[-1] = out[-1][:n]
    return out


@settings(max_examples=150, deadline=None, database=None)
@given(text=st.text(alphabet="ab .-@é😀\"\\\t", max_size=12), ascii_only=st.booleans())
def test_counted_schemas_match_jsonschema(text: str, ascii_only: bool) -> None:
    rng = random.Random(text)
    for k, validator in enumerate(_VALIDATORS):
        for w in _words(text, rng):
            expected = validator.is_valid(w)
            for dfa in _DFAS[k * len(DFA_CLASSES):(k + 1) * len(DFA_CLASSES)]:
                assert dfa.matches(json.dumps(w, ensure_ascii=ascii_only).encode()) == expected, (SCHEMAS[k], w)


def test_token_walks_never_stall_and_end_valid(vocabulary) -> None:
    """Random walks of allowed tokens: the mask is never empty, and every walk ends in a valid string."""
    vocab = vocabulary("llama-bpe")
    small = {"type": "string", "pattern": r"^\S+( \S+)*$", "minLength": 3, "maxLength": 40}
    for schema in (small, *SCHEMAS[:2]):
        fsm = compile_json_schema(schema, vocab)
        rng = np.random.default_rng(len(schema["pattern"]))
        for _ in range(6):
            guide, ids = fsm.guide(), []
            while not guide.is_finished():
                allowed = guide.allowed_token_ids()
                assert allowed.size, ids
                eos = np.isin(allowed, vocab.eos_token_ids)
                # lean towards ending once allowed, so that walks finish in a few hundred tokens
                tok = int(allowed[eos][0]) if eos.any() and rng.random() < 0.05 else int(rng.choice(allowed[~eos]))
                if tok in vocab.eos_token_ids:
                    break
                assert guide.advance(tok)
                ids.append(tok)
            text = vocab.decode(ids).decode()
            assert jsonschema.Draft202012Validator(schema).is_valid(json.loads(text)), text
