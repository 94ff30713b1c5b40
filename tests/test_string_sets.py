"""`not` of a `pattern`, and `oneOf` branches that need it (`grammars.json_string_sets`):
exact against jsonschema, whatever escapes spell the string; bounded, with a loud refusal past the bound."""

from __future__ import annotations

import json
import time

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grammars.ast import Grammar
from grammars.dfa import LazyDFA
from grammars.errors import UnsupportedSchemaError
from grammars.json_schema import json_schema_grammar
from grammars.json_string_sets import MAX_STATES, difference, use_dfa_class
from grammars.json_strings import any_string_body, json_char, string_literal
from grammars.nfa import NFA
from grammars.regex import regex_node

SCHEMAS = [
    {"type": "string", "pattern": "^[ab]+", "not": {"pattern": "b$"}},
    {"type": "string", "maxLength": 3, "not": {"anyOf": [{"pattern": "^a"}, {"pattern": "\u00e9"}]}},
    {"oneOf": [{"pattern": "^[a-c]{2}$"}, {"pattern": "^[b-d]{2}$"}]},
    {"not": {"pattern": "[0-9]"}},
]


def _dfa(schema):
    g = json_schema_grammar(schema)
    return LazyDFA(g, max_depth=g.info["max_depth"])


_DFAS = [_dfa(s) for s in SCHEMAS]


@settings(max_examples=300, deadline=None, database=None)
@given(which=st.integers(0, len(SCHEMAS) - 1), text=st.text(alphabet="abcd0\u00e9\"\\", max_size=5),
       ascii_only=st.booleans())
def test_matches_jsonschema_in_every_spelling(which, text, ascii_only):
    expected = jsonschema.Draft202012Validator(SCHEMAS[which]).is_valid(text)
    assert _DFAS[which].matches(json.dumps(text, ensure_ascii=ascii_only).encode()) == expected


def test_non_strings_follow_the_inner_schema():
    # `not: {pattern}` holds for no non-string (the pattern does); with `type: string` inside, for all
    for schema, non_strings in (({"not": {"pattern": "a"}}, False), ({"not": {"type": "string", "pattern": "a"}}, True)):
        dfa = _dfa(schema)
        assert [dfa.matches(json.dumps(v).encode()) for v in (1, None, [], {})] == [non_strings] * 4
        assert jsonschema.Draft202012Validator(schema).is_valid(1) == non_strings


def test_the_nfa_is_built_from_the_automaton():
    # both cases of a UUID: exactly one matches unless every character is a digit
    uuid = "^[0-9{0}]{{8}}-([0-9{0}]{{4}}-){{3}}[0-9{0}]{{12}}$"
    schema = {"type": "string", "oneOf": [{"pattern": uuid.format("a-f")}, {"pattern": uuid.format("A-F")}]}
    g = json_schema_grammar(schema)
    assert NFA(g).num_states < 1_500          # one state per automaton state, not a copy per path
    dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    assert dfa.matches(b'"0123abcd-0000-0000-0000-000000000000"')
    assert not dfa.matches(b'"01234567-0000-0000-0000-000000000000"')


def test_past_the_bound_is_refused_with_the_path():
    t = time.perf_counter()
    with pytest.raises(UnsupportedSchemaError) as e:
        json_schema_grammar({"properties": {"p": {"type": "string", "pattern": f"^[ab]{{0,{MAX_STATES}}}$",
                                                  "not": {"pattern": "ab"}}}})
    assert "$.properties.p" in str(e.value) and f"{MAX_STATES}" in str(e.value)
    assert time.perf_counter() - t < 30


def test_difference_of_finite_sets():
    body = difference(any_string_body(0, 2), [string_literal("a"), string_literal("")], path="$")
    dfa = LazyDFA(Grammar({"start": body}))
    assert [dfa.matches(s) for s in (b"", b"a", b"\\u0061", b"b", b"ab")] == [False, False, False, True, True]


def test_equal_string_keywords_at_several_paths_build_one_product(monkeypatch: pytest.MonkeyPatch):
    # three members with the same `not` of a pattern: one product of automata, shared by all three,
    # and each member still exact (every spelling; jsonschema as the oracle)
    import grammars.json_string_keywords as js

    calls = []
    real = js.difference
    monkeypatch.setattr(js, "difference", lambda *a, **k: calls.append(k["path"]) or real(*a, **k))
    field = {"type": "string", "maxLength": 4, "not": {"pattern": "^a|b$"}}
    other = {"type": "string", "maxLength": 3, "not": {"pattern": "^a|b$"}}
    schema = {"type": "object", "properties": {"x": field, "y": dict(field), "z": dict(field), "w": other},
              "required": ["x", "y", "z", "w"], "additionalProperties": False}
    dfa = _dfa(schema)
    assert calls == ["$.properties.x", "$.properties.w"]     # y and z reuse x's
    validator = jsonschema.Draft202012Validator(schema)
    for name in "xyzw":
        for text in ("cd", "cab", "ab", "cdb", "ccccc", "cccc", "\u00e9\u00e9", "a"):
            doc = {"x": "c", "y": "c", "z": "c", "w": "c", name: text}
            for ascii_only in (False, True):
                assert dfa.matches(json.dumps(doc, ensure_ascii=ascii_only, separators=(",", ":")).encode()) == \
                    validator.is_valid(doc), (name, text, ascii_only)


def _pattern(pattern):
    return regex_node(pattern, dialect="ecma", search=True, encode=json_char)


_PRODUCTS = [  # (body, excluded, required): a `not`, a length with a pattern, two at once
    (any_string_body(0, None), [_pattern("^abc.+$")], []),
    (any_string_body(0, 8), [], [_pattern(r"^\d+\.\d+.*$")]),
    (any_string_body(1, 4), [string_literal("ab"), string_literal("\u00e9")], []),
]


@pytest.mark.parametrize("case", range(len(_PRODUCTS)))
def test_the_compiled_dfa_builds_the_same_products(case):
    # `compile_json_schema` has the products run on the compiled DFA (`use_dfa_class`): the automaton
    # noted for the NFA is the same, state for state, as the Python DFA's
    dfa_jit = pytest.importorskip("constrained.dfa_jit")
    if dfa_jit.product_dfa_class() is None:
        pytest.skip("numba kernels not available")
    from grammars import json_string_sets

    body, excluded, required = _PRODUCTS[case]
    before = json_string_sets._DFA_CLASS[0]
    noted = []
    for cls in (None, dfa_jit.ProductDFA):
        use_dfa_class(cls)
        try:
            tries: dict = {}
            difference(body, excluded, required=required, path="$", tries=tries)
            noted.append([(edges, accepting) for _, edges, accepting in tries.values()])
        finally:
            use_dfa_class(before)
    assert noted[0] == noted[1] and noted[0][0][0]


def test_compiling_a_schema_registers_the_compiled_product_dfa(vocabulary):
    from constrained.compile import compile_json_schema
    from constrained.dfa_jit import product_dfa_class
    from grammars import json_string_sets

    vocab = vocabulary("llama-bpe")
    fsm = compile_json_schema({"type": "string", "not": {"pattern": "^a"}}, vocab)
    assert json_string_sets._DFA_CLASS[0] is (product_dfa_class() or LazyDFA)
    assert [fsm.matches(t) for t in (b'"ba"', b'""', b'"ab"', b'"\\u0061b"')] == [True, True, False, False]


def test_a_component_many_states_enter_is_split_at_hubs(monkeypatch: pytest.MonkeyPatch):
    # keys matched by a pattern or not, beside declared names: the key automaton has a component
    # that many states enter (`_make_nodes`), and every key is still decided as jsonschema does
    from grammars import json_string_sets

    calls = []
    real = json_string_sets._make_nodes
    monkeypatch.setattr(json_string_sets, "_make_nodes", lambda *a: calls.append(1) or real(*a))
    schema = {"type": "object", "additionalProperties": {"type": "integer"},
              "patternProperties": {"f.o": {"type": "array", "minItems": 2}},
              "properties": {"bar": {"type": "array"}, "foo": {"type": "array", "maxItems": 3}}}
    dfa = _dfa(schema)
    assert calls
    validator = jsonschema.Draft202012Validator(schema)
    for key in ("foo", "fxo", "f\u00e9o", "afoo", "fo", "bar", "baz", "", "f\\o", "ffoo", "foox"):
        for value in (1, [1, 2], [1, 2, 3, 4], "s"):
            doc = {key: value}
            for ascii_only in (False, True):
                assert dfa.matches(json.dumps(doc, ensure_ascii=ascii_only).encode()) == validator.is_valid(doc), \
                    (key, value, ascii_only)
