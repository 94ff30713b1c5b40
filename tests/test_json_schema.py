"""JSON Schema -> grammar, checked against `jsonschema` as the oracle.

Every instance jsonschema accepts must be accepted in every serialization
style; every mutated instance it rejects must be rejected.
"""

from __future__ import annotations

import copy
import json
import random
import re
import warnings
from functools import lru_cache

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

import hypothesis_jsonschema._from_schema as _hjs
from hypothesis.internal.conjecture import utils as _cu

from bench.oracle import canonical, key_order, strict_schema, validator
from grammars.deep import deep_call
from grammars.dfa import LazyDFA
from grammars.errors import InvalidSchemaError, UnsupportedSchemaError
from grammars.json_merge import LACKS
from grammars.json_refs import draft_of
from grammars.json_schema import WhitespacePolicy, json_schema_grammar, load_schema
from tests.schema_corpus import BY_NAME, CORPUS

class _OldMany:
    """The `cu.many` API hypothesis-jsonschema 0.23 calls (`more()`/`reject()`),
    which this hypothesis release renamed; without it every object schema fails
    to generate. Test-only shim over the same `draw_boolean` choices."""

    def __init__(self, data, min_size, max_size, average_size):
        self.data, self.min_size, self.max_size = data, min_size, max_size
        self.p = _cu._calc_p_continue(average_size - min_size, max_size - min_size)
        self.count = self.rejections = 0
        self.stopped = False

    def more(self) -> bool:
        if self.stopped or self.count >= self.max_size:
            return False
        go = self.count < self.min_size or self.data.draw_boolean(self.p)
        self.count += go
        return go

    def reject(self, why=None) -> None:
        self.count -= 1
        self.rejections += 1
        if self.rejections > max(3, 2 * self.count):
            if self.count < self.min_size:
                self.data.mark_invalid(why)
            self.stopped = True


if not hasattr(_cu.many, "more"):
    _hjs.cu = type("cu_shim", (), {"many": _OldMany})


STYLES = [
    dict(separators=(",", ":")),
    dict(),
    dict(indent=2),
    dict(indent=4, ensure_ascii=False),
    dict(separators=(",", ":"), ensure_ascii=False),
]


@lru_cache(maxsize=None)
def dfa_for(name: str) -> LazyDFA:
    entry = BY_NAME[name]
    g = json_schema_grammar(entry["schema"], **entry["options"])
    return LazyDFA(g, max_depth=g.info["max_depth"])


def texts(value, order=None):
    value = canonical(value, order or {})
    return [json.dumps(value, **style).encode("utf-8") for style in STYLES]


def is_valid(entry, value) -> bool:
    if entry["options"].get("strict"):
        schema = strict_schema(entry["schema"])
    else:
        schema = entry["schema"]
    return validator(schema, entry["options"].get("numbers", "double")).is_valid(value)


NAMES = [c["name"] for c in CORPUS]


@pytest.mark.parametrize("name", NAMES)
def test_corpus_examples(name):
    entry = BY_NAME[name]
    dfa = dfa_for(name)
    order = key_order(entry["schema"])
    for value in entry["valid"]:
        assert is_valid(entry, value), f"corpus error: {value!r} should be valid"
        for text in texts(value, order):
            assert dfa.matches(text), f"{name}: valid {text!r} rejected"
    for value in entry["invalid"]:
        assert not is_valid(entry, value), f"corpus error: {value!r} should be invalid"
        for text in texts(value, order):
            assert not dfa.matches(text), f"{name}: invalid {text!r} accepted"


# -- mutations -------------------------------------------------------------------


def _mutations(value, rng: random.Random):
    """Values near `value`: other types, changed numbers/strings, dropped/added members."""
    out = [None, True, 0, -1, 1.5, "", "x", [], {}, [value], {"k": value}]
    if isinstance(value, bool):
        out.append(not value)
    elif isinstance(value, (int, float)):
        out += [value + 1, value - 1, value * 10 + 7, -value, value + 0.5, value - 0.001, str(value)]
    elif isinstance(value, str):
        out += [value + "a", value[:-1], value * 3, value.upper(), "9" + value, value + "\n"]
    elif isinstance(value, list):
        out += [value[:-1], value + value[-1:], value + ["x"], value + [None], list(reversed(value))]
        for i, item in enumerate(value):
            for m in rng.sample(_mutations(item, rng), 3):
                out.append(value[:i] + [m] + value[i + 1:])
    elif isinstance(value, dict):
        out.append({**value, "zz_extra": 1})
        for key in value:
            out.append({k: v for k, v in value.items() if k != key})
            for m in rng.sample(_mutations(value[key], rng), 4):
                out.append({**value, key: m})
    return out


def _all_instances(entry):
    return entry["valid"]


@pytest.mark.parametrize("name", NAMES)
def test_mutants_rejected(name):
    entry = BY_NAME[name]
    dfa = dfa_for(name)
    rng = random.Random(name)
    order = key_order(entry["schema"])
    checked = 0
    for value in _all_instances(entry):
        for mutant in _mutations(copy.deepcopy(value), rng):
            if is_valid(entry, mutant):
                continue
            checked += 1
            for text in texts(mutant, order):
                assert not dfa.matches(text), f"{name}: invalid mutant {text!r} accepted"
        for text in texts(value, order):  # truncations are never complete valid documents of this schema
            for cut in range(1, len(text)):
                prefix = text[:cut]
                try:
                    parsed = json.loads(prefix)
                except ValueError:
                    assert not dfa.matches(prefix), f"{name}: truncated {prefix!r} accepted"
                    continue
                if not is_valid(entry, parsed):
                    assert not dfa.matches(prefix)
    assert checked or not entry["valid"] or name.startswith("any_")


# -- generated instances -------------------------------------------------------------

HYPO = [c["name"] for c in CORPUS if c.get("hypothesis", True) and c["valid"]]


@pytest.mark.parametrize("name", HYPO)
def test_generated_instances_accepted(name):
    entry = BY_NAME[name]
    dfa = dfa_for(name)
    order = key_order(entry["schema"])

    @settings(max_examples=25, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(value=from_schema(entry["schema"]), style=st.sampled_from(STYLES))
    def check(value, style):
        if not is_valid(entry, value):
            return  # hypothesis-jsonschema occasionally over-generates (formats)
        if _outside_float_range(value):
            return  # documented: floats keep to [1e-323, 1e308) unless bounds lie beyond (grammars.json_doubles)
        text = json.dumps(canonical(value, order), **style).encode("utf-8")
        if not dfa.matches(text) and _has_integral_float(value):
            # documented: `integer` is written -?(0|[1-9]\d*) (jsonschema also counts 100.0 as one)
            text = json.dumps(canonical(_integral_floats_as_ints(value), order), **style).encode("utf-8")
        assert dfa.matches(text), f"{name}: generated valid {text!r} rejected"

    check()


def _has_integral_float(value) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return any(_has_integral_float(v) for v in items)


def _integral_floats_as_ints(value):
    """`value` with every integer-valued float an int (the same instance to a validator)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral_floats_as_ints(v) for v in value]
    return value


def _outside_float_range(value) -> bool:
    """Whether `value` holds a nonzero float of magnitude below 1e-323 or from 1e308 on."""
    if isinstance(value, float):
        return value != 0 and not 1e-323 <= abs(value) < 1e308
    if isinstance(value, dict):
        value = value.values()
    return isinstance(value, (list, dict, type({}.values()))) and any(_outside_float_range(v) for v in value)


@settings(max_examples=30, deadline=None, database=None)
@given(tree=st.recursive(
    st.builds(lambda v: {"value": v}, st.integers()),
    lambda kids: st.builds(lambda v, cs: {"value": v, "children": cs}, st.integers(), st.lists(kids, max_size=3)),
    max_leaves=12), style=st.sampled_from(STYLES))
def test_generated_recursive_trees(tree, style):
    entry = BY_NAME["recursive_tree"]
    assert is_valid(entry, tree)
    text = json.dumps(tree, **style)
    # pretty printing is allowed up to the whitespace policy's indentation, never past it
    indent = max(len(line) - len(line.lstrip(" ")) for line in text.split("\n"))
    assert dfa_for("recursive_tree").matches(text.encode()) == (indent <= WhitespacePolicy().max_indent)


# -- the token FSM ---------------------------------------------------------------------

CONTAINS = [n for n in NAMES if "contains" in n]


@pytest.mark.parametrize("name", CONTAINS)
def test_contains_token_walks(name, vocabulary, tokenizer):
    """Through the compiled token FSM (gpt-2 vocabulary, real tokenizations): every valid instance
    walks to a finish, every invalid one is refused along the way or cannot finish."""
    from constrained.compile import compile_json_schema

    entry, vocab, tok = BY_NAME[name], vocabulary("gpt-2"), tokenizer("gpt-2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # the report's notes (draft-07 ignores maxContains)
        fsm = compile_json_schema(entry["schema"], vocab, **entry["options"])
    eos = vocab.eos_token_ids[0]

    def finishes(text: bytes) -> bool:
        g = fsm.guide()
        return all(g.advance(t) for t in tok.encode(text.decode(), add_special_tokens=False).ids) and g.advance(eos)

    order = key_order(entry["schema"])
    for value in entry["valid"]:
        for text in texts(value, order):
            assert finishes(text), f"{name}: valid {text!r} refused"
    for value in entry["invalid"]:
        for text in texts(value, order):
            assert not finishes(text), f"{name}: invalid {text!r} accepted"


# -- options ---------------------------------------------------------------------------


def _dfa(schema, **kw):
    g = json_schema_grammar(schema, **kw)
    return LazyDFA(g, max_depth=g.info["max_depth"])


def test_whitespace_policies():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}}
    value = {"a": [1, 2]}
    compact = _dfa(schema, whitespace="compact")
    assert compact.matches(b'{"a":[1,2]}')
    assert not compact.matches(b'{"a": [1, 2]}')
    default = _dfa(schema)
    for text in texts(value):
        assert default.matches(text)
    assert default.matches(b'\n{"a":[1,2]}\n')
    assert default.matches(b'{"a" : [1,2]}')  # Jackson's pretty printer
    assert not default.matches(b'{"a":  [1,2]}')  # two spaces without a newline
    assert not default.matches(b'{\n\n"a":[1,2]}')  # two newlines
    assert not default.matches(b'{\n' + b" " * 33 + b'"a":[1,2]}')
    assert not default.matches(b'{"a":\n[1,2]}')  # line breaks only after { [ , and before } ]
    wide = _dfa(schema, whitespace=WhitespacePolicy(max_spaces=2, max_newlines=2, max_indent=40))
    assert wide.matches(b'{"a":  [1,2]}') and wide.matches(b'{\n\n' + b" " * 40 + b'"a":[1,2]}')


def test_property_order_and_any_order():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"], "additionalProperties": False}
    assert not _dfa(schema).matches(b'{"b":1,"a":2}')
    free = _dfa(schema, any_order=True)
    assert free.matches(b'{"b":1,"a":2}') and free.matches(b'{"a":1,"b":2}')
    assert not free.matches(b'{"a":1,"a":2}') and not free.matches(b'{"a":1}')
    # the set of members taken is a 64-bit frame (tests/test_any_order.py): past 62 properties an
    # object keeps declared order, with a note in the compile report
    big = {"type": "object", "properties": {f"p{i}": {} for i in range(63)}}
    assert "any_order" in str(json_schema_grammar(big, any_order=True).info["report"][0])


def test_additional_keys_never_repeat_declared():
    dfa = _dfa({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert dfa.matches(b'{"a":1,"b":"x"}')
    assert not dfa.matches(b'{"a":1,"a":"x"}')
    assert not dfa.matches(b'{"a":1,"\\u0061":"x"}')  # the same key, escaped


def test_recursion_depth_bound():
    schema = BY_NAME["recursive_tree"]["schema"]
    def tree(depth):
        nested = {"value": 0}
        for i in range(depth):
            nested = {"value": i, "children": [nested]}
        return json.dumps(nested).encode()

    # The DFA bounds all rule calls together: recursive refs + any-value nesting + 1.
    assert _dfa(schema).matches(tree(16))
    assert not _dfa(schema).matches(tree(30))
    assert _dfa(schema, max_recursion_depth=32).matches(tree(30))
    assert not _dfa(schema, max_recursion_depth=4, max_any_depth=0).matches(tree(6))


def test_load_schema_variants():
    assert load_schema('{"type": "null"}') == {"type": "null"}
    pydantic = pytest.importorskip("pydantic")

    class Pet(pydantic.BaseModel):
        name: str
        age: int = 0

    g = json_schema_grammar(Pet)
    dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    assert dfa.matches(b'{"name": "rex", "age": 3}') and not dfa.matches(b'{"age": 3}')
    with pytest.raises(InvalidSchemaError):
        load_schema("{nope")


def test_string_escapes_and_lengths():
    dfa = _dfa({"type": "string", "minLength": 1, "maxLength": 1})
    for text in [b'"a"', b'"\\n"', b'"\\u00e9"', b'"\\u00E9"', b'"\\ud83d\\ude00"', '"😀"'.encode(), b'"\\/"']:
        assert dfa.matches(text), text
    for text in [b'""', b'"ab"', b'"\\ud83d"', b'"\x01"', b'"\\x41"', b'"\\ude00\\ud83d"']:
        assert not dfa.matches(text), text


def test_enum_and_const_strings_are_spelled_as_encoders_write_them():
    """Printable ASCII raw (`"` and `\\` escaped the short way), other characters in every spelling;
    json.dumps output, with or without ensure_ascii, is accepted."""
    values = ["circle", 'say "hi"', "a\\b", "caf\u00e9", "tab\there", "😀"]
    for schema in ({"enum": values}, {"type": "string", "enum": values}, {"const": {"k": values}}):
        dfa = _dfa(schema)
        for v in values:
            doc = {"k": values} if "const" in schema else v
            for ascii_only in (True, False):
                assert dfa.matches(json.dumps(doc, ensure_ascii=ascii_only).encode()), (schema, v, ascii_only)
    dfa = _dfa({"enum": values})
    assert not dfa.matches(b'"\\u0063ircle"')            # an escaped printable ASCII letter is refused
    assert dfa.matches(b'"caf\\u00E9"') and dfa.matches(b'"tab\\u0009here"')
    assert not dfa.matches(b'"circles"') and not dfa.matches(b'"Circle"')


def test_pattern_applies_to_decoded_string():
    dfa = _dfa({"type": "string", "pattern": "^a+$", "maxLength": 3})
    assert dfa.matches(b'"\\u0061a"') and dfa.matches(b'"aaa"')
    assert not dfa.matches(b'"aaaa"') and not dfa.matches(b'"\\u0061\\u0061\\u0061\\u0061"')


def test_number_syntax():
    bounded = _dfa({"type": "number", "minimum": 0.5})
    assert bounded.matches(b"5e-1") and bounded.matches(b"1e+16") and bounded.matches(b"0.50")
    assert not bounded.matches(b"4.9e-1") and not bounded.matches(b"0.49999")
    free = _dfa({"type": "number"})
    assert free.matches(b"1e6") and free.matches(b"-0.0") and free.matches(b"9.9e307")
    # json.loads reads these as inf, 0.0 or 1e6: not written by default (numbers="double")
    for text in (b"10e5", b"-0.0E-0", b"1e309", b"1e-400", b"0.12345678901234567891", b"2e308", b"1e308"):
        assert not free.matches(text), text
    exact = LazyDFA(json_schema_grammar({"type": "number"}, numbers="exact"))
    assert exact.matches(b"10e5") and exact.matches(b"-0.0E-0") and exact.matches(b"1e-400")
    assert not free.matches(b"01") and not free.matches(b"1.") and not free.matches(b"+1")
    integer = _dfa({"type": "integer"})
    assert not integer.matches(b"1.0") and not integer.matches(b"-0")


# -- errors ------------------------------------------------------------------------------

UNSUPPORTED = [
    ({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}, "uniqueItems",
     "$.properties.tags"),
    ({"type": "array", "contains": {"type": "integer", "multipleOf": 5}, "maxContains": 1}, "contains", "$"),
    ({"allOf": [{"contains": {"const": 1}}, {"contains": {"const": 2}}]}, "contains", "$.allOf[1]"),
    ({"if": {"multipleOf": 3}, "then": {"maximum": 5}}, "if", "$"),   # multipleOf has no negation here
    ({"type": "object", "dependentRequired": {f"p{i}": [f"q{i}"] for i in range(7)}}, "dependentRequired", "$"),
    ({"anyOf": [{"properties": {"a": True}}], "unevaluatedProperties": False}, "unevaluatedProperties", "$"),
    ({"if": {"required": ["a"]}, "then": {"properties": {"b": True}}, "unevaluatedProperties": False},
     "unevaluatedProperties", "$"),                     # what is evaluated depends on the branch that holds
    ({"contains": {"type": "integer"}, "unevaluatedItems": False}, "unevaluatedItems", "$"),
    ({"allOf": [{"properties": {"a": True}, "unevaluatedProperties": False}], "properties": {"b": True}},
     "unevaluatedProperties", "$.allOf[0]"),            # merged, its scope would change
    ({"$ref": "https://example.com/schema.json"}, "$ref", "$"),
    ({"oneOf": [{"type": "integer"}, {"minimum": 3}]}, "oneOf", "$"),   # a bound has no negation here
    ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, "oneOf", "$"),   # numbers that are not integers
    ({"allOf": [{"pattern": "a"}, {"pattern": "^b|c"}]}, "pattern", "$.allOf[1]"),   # an anchor in one alternative
    ({"type": "number", "multipleOf": 0.3}, "multipleOf", "$"),
    ({"not": {"type": "integer", "multipleOf": 3}}, "not", "$"),
    ({"type": "object", "patternProperties": {f"^{c}": {"maxLength": i} for i, c in enumerate("abcde")}},
     "patternProperties", "$"),                         # 2^5 - 1 groups of names
    ({"allOf": [{"patternProperties": {"^a": {"type": "integer"}}}, {"additionalProperties": False}]},
     "patternProperties", "$.allOf[1]"),
    ({"type": "string", "pattern": "^(?!a)b|c"}, "pattern", "$"),   # the lookahead binds one alternative only
    ({"type": "string", "pattern": "a(?!b)"}, "pattern", "$"),      # not at the start
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems", "$"),                         # the second side's extra names are the first's patterns'
]


def test_an_if_whose_condition_has_no_negation_says_why():
    with pytest.raises(UnsupportedSchemaError, match=r"`if` is not supported at \$\.if: the instances the condition "
                                                     r"rejects .* `multipleOf` at \$\.if has no negation here"):
        json_schema_grammar({"if": {"multipleOf": 3}, "then": {"maximum": 5}})


@pytest.mark.parametrize("schema,keyword,path", UNSUPPORTED)
def test_unsupported_names_keyword_and_path(schema, keyword, path):
    with pytest.raises(UnsupportedSchemaError) as err:
        json_schema_grammar(schema)
    assert err.value.keyword == keyword and err.value.path == path
    assert f"{path}.{keyword}" in str(err.value)


def test_max_contains_needs_a_negation_of_contains():
    """`maxContains` counts exactly only when the items not valid under `contains` compile: `multipleOf` has no
    negation here, and the message says so."""
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "integer"},
                                                        "contains": {"type": "integer", "multipleOf": 5},
                                                        "maxContains": 1}}}
    with pytest.raises(UnsupportedSchemaError) as err:
        json_schema_grammar(schema)
    assert err.value.keyword == "contains" and err.value.path == "$.properties.tags"
    message = str(err.value)
    assert message.startswith("`contains` is not supported at $.properties.tags.contains: maxContains 1 needs the "
                              "items not valid under `contains` ({'type': 'integer', 'multipleOf': 5})"), message
    assert "`multipleOf` at $.properties.tags.contains has no negation" in message, message
    # a format has one (strings not in it): maxContains with it is exact
    dated = _dfa({"type": "array", "contains": {"type": "string", "format": "date"}, "maxContains": 1})
    assert dated.matches(b'["x", "2024-01-31"]') and not dated.matches(b'["2024-01-31", "2024-02-01"]')
    assert not dated.matches(b'["2024-13-01"]')
    # a pattern has one (strings it does not match): maxContains with it is exact
    counted = _dfa({"type": "array", "contains": {"type": "string", "pattern": "^a"}, "maxContains": 1})
    assert counted.matches(b'["b", "ab"]') and not counted.matches(b'["ab", "ac"]') and not counted.matches(b'["b"]')
    # without maxContains the same `contains` is exact: no negation is needed
    dfa = _dfa({"type": "array", "contains": {"type": "string", "pattern": "^a"}})
    assert dfa.matches(b'["b", "ab"]') and not dfa.matches(b'["b", "c"]') and not dfa.matches(b'[123]')
    # a bound has a negation (a longer string): maxContains with it is exact
    bounded = _dfa({"type": "array", "contains": {"type": "string", "minLength": 2}, "maxContains": 1})
    assert bounded.matches(b'["a", "bc"]') and not bounded.matches(b'["ab", "cd"]') and not bounded.matches(b'["a"]')
    g = json_schema_grammar(schema, allow_approximate=True)          # approximating: maxContains dropped, reported
    assert [(n.keyword, n.path, n.kind) for n in g.info["report"]] == [("maxContains", "$.properties.tags",
                                                                         "approximated")]
    dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    assert dfa.matches(b'{"tags": [10, 15]}') and not dfa.matches(b'{"tags": [1]}')


def test_contains_with_item_counts_is_refused_past_the_size_budget():
    small = _dfa({"type": "array", "contains": {"const": 1}, "maxContains": 3, "maxItems": 40})
    assert small.matches(json.dumps([0] * 37 + [1] * 3).encode()) and not small.matches(json.dumps([1] * 4).encode())
    assert not small.matches(json.dumps([0] * 41).encode())
    with pytest.raises(UnsupportedSchemaError, match=r"counting 1 to 50 items valid under `contains` among at most "
                                                     r"1000 items takes \d+ layout states"):
        json_schema_grammar({"type": "array", "contains": {"const": 1}, "maxContains": 50, "maxItems": 1000})
    big = _dfa({"type": "array", "contains": {"const": 1}, "minContains": 10**6, "maxContains": 2 * 10**6})
    assert not big.matches(b"[1, 1]")                # counter loops: no unrolling without maxItems/minItems


D4, D6, D7 = (f"http://json-schema.org/draft-0{d}/schema#" for d in (4, 6, 7))
LATER_DRAFT_CASES = [
    # (schema, [(instance text, accepted)])
    ({"$schema": D4, "type": "integer", "const": 1}, [("1", True), ("2", False)]),
    ({"$schema": D4, "type": "integer", "not": {"const": 1}}, [("1", False), ("2", False)]),
    ({"$schema": D4, "oneOf": [{"const": 1}, {"const": 2}]}, [("1", False), ("2", False), ("3", False)]),
    ({"$schema": D4, "type": "array", "contains": {"const": 1}}, [("[1]", True), ("[2, 1]", True), ("[2]", False)]),
    # draft 4 reads both branches as "any object with `kind`": the `const`s are no discriminator
    ({"$schema": D4, "oneOf": [{"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                               {"properties": {"kind": {"const": "b"}}, "required": ["kind"]}]},
     [('{"kind": "a"}', False), ('{"kind": "c"}', False)]),
    ({"$schema": D4, "type": "object", "oneOf": [{"const": False}, {}]}, [("{}", False)]),
    # found by `bench.mutations --edit-schemas --structural` (seed 14): the negation of `items`, an
    # array that `contains` a non-string, lost its `contains` to draft 4's filter: any array passed
    ({"$schema": D4, "type": "array", "items": {"type": "string"},
      "not": {"items": {"type": "string"}, "additionalItems": False}}, [("[]", False), ('["a"]', False)]),
    ({"$schema": D6, "type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}},
     [("{}", True), ('{"a": 1}', False), ('{"a": 1, "b": 2}', True)]),
    ({"$schema": D7, "type": "array", "items": {"type": "integer"}, "prefixItems": [{"const": 1}]},
     [("[1]", True), ("[1, 2]", True), ("[2]", False), ('[1, "x"]', False)]),
    ({"$schema": D7, "type": "array", "contains": {"const": 1}, "minContains": 0, "maxContains": 1},
     [("[1]", True), ("[0, 1]", True), ("[]", False), ("[1, 1]", False)]),
    ({"$schema": D7, "not": {"type": "object", "dependentRequired": {"a": ["b"]}}},
     [("1", True), ("{}", False), ('{"a": 1}', False)]),
    # only later drafts read a `propertyNames`: the `const` inside its `not` keeps its meaning (it admitted
    # no name at all, stricter than either draft: `bench.mutations` seeds 22 and 61)
    ({"$schema": D4, "type": "object", "properties": {"a": {}, "b": {}}, "propertyNames": {"not": {"const": "a"}}},
     [('{"b": 1}', True), ('{"c": 1}', True), ("{}", True), ('{"a": 1}', False), ('{"b": 1, "a": 2}', False)]),
    ({"$schema": D4, "propertyNames": {"anyOf": [{"const": "x"}, {"not": {"const": "y"}}]}},
     [('{"x": 1}', True), ('{"z": 1}', True), ('{"y": 1}', False)]),
]


@pytest.mark.parametrize("schema, texts", LATER_DRAFT_CASES)
def test_keywords_of_later_drafts_are_enforced_outside_negations(schema, texts):
    """A keyword the schema's declared draft lacks (`const` in draft 4, `if` in draft 6,
    `maxContains` in draft 7): that draft's validators ignore it, 2020-12's enforce it. What passes
    must be valid under both, so it is enforced outside negations and ignored inside them, and the
    report says so."""
    g = json_schema_grammar(schema)
    dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    as_declared = validator(schema)
    as_2020 = jsonschema.Draft202012Validator({k: v for k, v in schema.items() if k != "$schema"})
    for text, accepted in texts:
        assert dfa.matches(text.encode()) == accepted, (schema, text)
        if accepted:
            assert as_declared.is_valid(json.loads(text)) and as_2020.is_valid(json.loads(text)), (schema, text)
    later = [n for n in g.info["report"] if n.kind == "later draft"]
    assert all(n.keyword in LACKS[draft_of(schema)] for n in later)
    assert bool(later) == any(k in LACKS[draft_of(schema)] for k in schema), g.info["report"]


DEPENDENCY_TEXTS = ["1", "{}", '{"name": 1}', '{"name": 1, "i": 2}', '{"name": 1, "i": 2, "j": 3}', '{"i": 1}',
                    '{"a": 1}', '{"a": 1, "b": 2}', '{"c": 1}', '{"c": 1, "d": 1}', '{"a": 1, "c": 2, "b": 0}']


@pytest.mark.parametrize("schema", [
    {"$schema": D7, "oneOf": [{}, {"dependencies": {"name": ["i"]}}]},
    {"$schema": D4, "oneOf": [{}, {"dependencies": {"name": ["i"]}}]},
    {"oneOf": [{}, {"dependentRequired": {"name": ["i", "j"]}}]},
    {"$schema": D7, "not": {"dependencies": {"a": {"required": ["b"]}, "c": ["d"]}}},
    {"not": {"dependentSchemas": {"a": {"required": ["b"]}}, "dependentRequired": {"c": ["d"]}}},
    {"oneOf": [{}, {"dependencies": {"name": ["i"]}}]},
])
def test_dependencies_have_a_negation(schema):
    """`dependentRequired`, `dependentSchemas` and draft-7 `dependencies` fail on an object with the
    name, and without a name it requires or invalid under its schema. Before, a draft-7 `oneOf`
    with such a branch matched nothing: the negation was looked at as 2020-12, where
    `dependencies` is a keyword of another draft, dropped (found by `bench.mutations`, seed 21)."""
    dfa = LazyDFA(json_schema_grammar(schema, any_order=True), max_depth=64)
    check = validator(schema)
    for text in DEPENDENCY_TEXTS:
        assert dfa.matches(text.encode()) == check.is_valid(json.loads(text)), text


@pytest.mark.parametrize("draft", [D4, D7])
def test_an_enum_beside_a_ref_does_not_tell_oneof_branches_apart_in_drafts_before_2019(draft):
    """In drafts 4 to 7 the keywords beside a `$ref` are ignored, so `{"enum": ["b"], "$ref": ...}`
    says nothing about the value: the two branches below both hold for `{"t": "a"}`, which
    `oneOf` must refuse. The disjointness check read that `enum` and let it pass (found by
    `bench.mutations --edit-schemas --structural`, seed 18, in Github_ultra---o65421)."""
    schema = {"$schema": draft, "type": "object", "required": ["t"],
              "oneOf": [{"properties": {"t": {"enum": ["a"]}}},
                        {"properties": {"t": {"enum": ["b"], "$ref": "#/definitions/any"}}}],
              "definitions": {"any": {}}}
    dfa = LazyDFA(json_schema_grammar(schema), max_depth=64)
    check = validator(schema)
    for text in ('{"t": "a"}', '{"t": "b"}', '{"t": "c"}', '{"t": 1}'):
        assert dfa.matches(text.encode()) == check.is_valid(json.loads(text)), text
    assert not dfa.matches(b'{"t": "a"}')


def test_an_anchor_declared_twice_is_an_invalid_schema_error():
    """Two different schemas with one anchor (or one `$id`): validators differ on which one a `$ref`
    means, so the schema is refused, naming both places; two equal ones are one."""
    twice = {"$defs": {"a": {"$anchor": "x", "type": "string"}, "b": {"$anchor": "x", "type": "integer"}},
             "$ref": "#x"}
    with pytest.raises(InvalidSchemaError, match=r"anchor 'x' is declared twice \(first at \$\.\$defs\.[ab]\)"):
        json_schema_grammar(twice)
    old = {"$schema": D4, "definitions": {"a": {"id": "#x", "type": "string"},
                                          "b": {"properties": {"c": {"id": "#x", "minimum": 1}}}},
           "$ref": "#x"}
    with pytest.raises(InvalidSchemaError, match="declared twice"):
        json_schema_grammar(old)
    resources = {"$defs": {"a": {"$id": "http://e.com/a", "type": "string"},
                           "b": {"$id": "http://e.com/a", "type": "null"}}, "$ref": "http://e.com/a"}
    with pytest.raises(InvalidSchemaError, match="resource 'http://e.com/a' is declared twice"):
        json_schema_grammar(resources)
    same = {"$defs": {"a": {"$anchor": "x", "type": "string"}, "b": {"$anchor": "x", "type": "string"}},
            "$ref": "#x"}
    dfa = LazyDFA(json_schema_grammar(same), max_depth=64)
    assert dfa.matches(b'"s"') and not dfa.matches(b"1")


D2020 = "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("schema, keyword", [
    ({"properties": {"a": {"$schema": D4, "$ref": "#/$defs/s", "enum": ["x"]}}, "$defs": {"s": {"type": "string"}}},
     "$ref"),
    ({"$schema": D7, "properties": {"a": {"$schema": D2020, "$ref": "#/definitions/s", "maxLength": 1}},
      "definitions": {"s": {"type": "string"}}}, "$ref"),
    ({"properties": {"a": {"$schema": D4, "const": "x"}}}, "const"),
    ({"$schema": D4, "definitions": {"d": {"$schema": D7, "type": "object"}}, "properties": {"a": {"if": {}}}}, "if"),
    ({"properties": {"a": {"$schema": D7, "dependencies": {"b": ["c"]}}}}, "dependencies"),
    ({"properties": {"a": {"$schema": D4, "id": "http://e.com/a", "type": "string"}}}, "id"),
])
def test_a_subschema_declaring_another_draft_is_refused_where_the_drafts_read_it_differently(schema, keyword):
    """A validator reads a subschema by the draft in effect where it evaluates it (jsonschema
    switches at each `$schema`, `$ref`s included), so with two drafts in one document a keyword
    they read differently has two readings; the schema is refused, naming that keyword."""
    with pytest.raises(UnsupportedSchemaError, match=rf"`{re.escape(keyword)}` is not supported .*declares (draft-0|2020)"):
        json_schema_grammar(schema)


@pytest.mark.parametrize("schema, texts", [
    ({"properties": {"a": {"$schema": D4, "type": "string", "maxLength": 2}}}, ['{"a": "xy"}', '{"a": "xyz"}']),
    ({"$schema": D4, "properties": {"a": {"$schema": D4, "$ref": "#/definitions/s", "enum": [1]}},
      "definitions": {"s": {"type": "string"}}}, ['{"a": "x"}', '{"a": 1}']),
    ({"$schema": D7, "definitions": {"p": {"$schema": D4, "type": "integer", "minimum": 1}},
      "items": {"$ref": "#/definitions/p"}, "type": "array"}, ["[1, 2]", "[0]", '["a"]']),
])
def test_a_subschema_declaring_another_draft_compiles_where_the_drafts_agree(schema, texts):
    """Drafts that read every keyword the document uses alike give it one reading: compiled, and
    exact (jsonschema, which switches drafts at each `$schema`, is the oracle)."""
    dfa = LazyDFA(json_schema_grammar(schema), max_depth=64)
    check = validator(schema)
    for text in texts:
        assert dfa.matches(text.encode()) == check.is_valid(json.loads(text)), text


@pytest.mark.parametrize("names", [
    {"anyOf": [{"pattern": "^a"}, {"pattern": "^b"}]}, {"allOf": [{"pattern": "^a"}, {"maxLength": 2}]},
    {"not": {"pattern": "^a", "maxLength": 3}}, {"if": {"pattern": "^a"}, "then": {"maxLength": 2}},
    {"not": {"const": "x"}}, {"pattern": "^a", "not": {"enum": ["ab"]}}, {"enum": ["a", "b"], "not": {"const": "a"}},
    {"oneOf": [{"pattern": "^a"}, {"maxLength": 1}]}])
@pytest.mark.parametrize("any_order", [False, True])
def test_property_names_hold_with_every_keyword(names, any_order):
    """`propertyNames` compiled as a string value: its `not`, `anyOf`, `oneOf` and `if` hold for
    the names of additional members too. They were ignored there, so `{"bookkeeper": {}}` passed
    `propertyNames: {"not": {"const": "bookkeeper"}}` (found by `bench.mutations --structural`)."""
    schema = {"type": "object", "propertyNames": names}
    dfa = LazyDFA(json_schema_grammar(schema, any_order=any_order), max_depth=64)
    check = jsonschema.Draft202012Validator(schema)
    for name in ("a", "b", "c", "ab", "abc", "x", "abcd", "bb"):
        text = '{"%s": 1}' % name
        assert dfa.matches(text.encode()) == check.is_valid(json.loads(text)), (names, text)


def test_merging_equal_values_built_as_dags_compares_them_once():
    """Values built as DAGs (a schema's parts copied into themselves, shared) were compared by
    `json_key`, which walks them as trees: merging two equal 64-level ones would not end (found by
    `bench.mutations --edit-schemas --structural`, seed 15). In a child process, so that a
    regression fails here instead of hanging the run."""
    import subprocess
    import sys

    code = """
from grammars.json_merge import Merger
def dag(depth, leaf):
    v = leaf
    for _ in range(depth):
        v = {"l": v, "r": [v, v]}
    return v
m = Merger(lambda ref, base, path: ({}, base, path), draft=2020)
a, b, c = dag(64, 1), dag(64, 1.0), dag(64, 2)
assert m.merge({"enum": [a, c]}, {"enum": [b, "x"]}, "$") == {"enum": [a]}
assert m.merge({"title": "t", "x-data": a}, {"x-data": b}, "$")["x-data"] is a
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-2000:]


def test_an_allof_of_many_anyofs_is_refused_past_the_branch_budget_not_left_to_grow():
    """`allOf` of `anyOf`s is one `anyOf` of every combination of branches. Eleven `if`s in an
    `allOf` (each two branches) took 109 s to compile, and a structural fuzz edit (the negation of
    an `allOf` of three `if`s, merged with its siblings) did not finish: past `MAX_MERGED_BRANCHES`
    the merge is refused at once. Ten still compile. In a child process, so that a regression
    fails here instead of stalling the run."""
    import subprocess
    import sys

    code = """
from grammars.errors import StateBudgetError
from grammars.json_schema import json_schema_grammar
def conditions(n):
    return {"type": "object", "allOf": [{"if": {"properties": {f"p{i}": {"const": "a"}}, "required": [f"p{i}"]},
                                         "then": {"required": [f"q{i}"]}} for i in range(n)]}
try:
    json_schema_grammar(conditions(11))
except StateBudgetError as e:
    assert "merging the anyOf branches at $.allOf[10] (1024 with 2) needs more than 1024 branches" in str(e), e
    print("refused")
json_schema_grammar(conditions(4))
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["refused", "ok"], out.stderr[-2000:]


@pytest.mark.parametrize("schema, keyword", [
    ({"allOf": [{"minimum": "x"}, {"minimum": 3}]}, "minimum"),         # was a bare TypeError
    ({"allOf": [{"type": "t"}, {"type": "string"}]}, "type"),           # was "nothing", silently
    ({"type": "integer", "if": {"minimum": 10}, "else": {"type": "o"}}, "type")])
def test_a_malformed_keyword_in_merged_subschemas_is_an_invalid_schema_error(schema, keyword):
    """Subschemas merged together (`allOf`, `if`/`else` rewritten as branches) are checked before
    their keywords are combined, as every compiled subschema is."""
    with pytest.raises(InvalidSchemaError, match=f"`{keyword}` must be"):
        json_schema_grammar(schema)


def test_a_later_drafts_keyword_that_is_not_exact_is_ignored_as_the_draft_does():
    """Where enforcing a keyword the declared draft lacks has no exact form, it is ignored, as that
    draft's validators do (exact for the schema as declared), with a note; without a declared draft
    it is refused."""
    cond = {"if": {"multipleOf": 3}, "then": {"minimum": 10}}      # (multipleOf has no negation here)
    g = json_schema_grammar({"$schema": D4, "type": "integer", **cond})
    assert LazyDFA(g, max_depth=g.info["max_depth"]).matches(b"3")
    assert [(n.keyword, n.kind) for n in g.info["report"]] == [("if", "later draft")]
    assert "ignored here: enforcing it is not exact" in str(g.info["report"][0])
    with pytest.raises(UnsupportedSchemaError, match="if"):
        json_schema_grammar({"type": "integer", **cond})


def test_allow_approximate_reports_what_it_drops():
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    g = json_schema_grammar(schema, allow_approximate=True)
    assert [(n.keyword, n.path, n.kind) for n in g.info["report"]] == [("uniqueItems", "$", "approximated")]
    assert LazyDFA(g, max_depth=g.info["max_depth"]).matches(b"[1,1]")  # documented over-approximation


def test_unknown_keywords_are_reported_with_likely_typos():
    g = json_schema_grammar({"type": "object", "maxProperties": 3, "x-kubernetes-group": "apps", "nullable": True,
                             "properties": {"name": {"type": "string", "maxLenght": 3}, "n": {"tpye": "integer"}}})
    report = {(n.keyword, n.path): n for n in g.info["report"]}
    assert sorted(report) == [("maxLenght", "$.properties.name"), ("nullable", "$"), ("tpye", "$.properties.n"),
                              ("x-kubernetes-group", "$")]
    assert str(report["maxLenght", "$.properties.name"]) == (
        "unknown keyword `maxLenght` at $.properties.name is ignored (did you mean `maxLength`?)")
    assert report["tpye", "$.properties.n"].suggestion == "type" and report["nullable", "$"].suggestion is None
    assert report["x-kubernetes-group", "$"].kind == "vendor"
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the grammar step itself never warns
        json_schema_grammar({"type": "string", "title": "t", "description": "d", "examples": ["x"], "maxLenght": 1})


def test_compile_warns_each_note_once_and_keeps_the_report(vocabulary):
    from constrained.compile import clear_cache, compile_json_schema
    from grammars.errors import SchemaNote

    clear_cache()
    gpt2_vocab = vocabulary("gpt-2")
    schema = {"type": "string", "maxLenght": 3}
    with pytest.warns(SchemaNote, match=r"did you mean `maxLength`") as caught:
        fsm = compile_json_schema(schema, gpt2_vocab)
    assert len(caught) == 1 and caught[0].filename == __file__          # pointed at the caller's line
    assert [n.keyword for n in fsm.report] == ["maxLenght"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compile_json_schema(schema, gpt2_vocab) is fsm                # a cache hit warns nothing


def test_compile_warns_only_the_notes_that_may_change_validity(vocabulary):
    """Vendor keywords, unknown ones with no likely typo and typos of annotations change no
    document's validity: in the report, not warned. A typo of an asserting keyword is warned."""
    from constrained.compile import clear_cache, compile_json_schema
    from grammars.errors import SchemaNote

    clear_cache()
    quiet = {"type": "string", "x-kubernetes-group": "g", "propertyOrder": 1, "descrption": "d", "readonly": True}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fsm = compile_json_schema(quiet, vocabulary("gpt-2"))
    notes = {n.keyword: n for n in fsm.report}
    assert sorted(notes) == ["descrption", "propertyOrder", "readonly", "x-kubernetes-group"]
    assert (notes["descrption"].suggestion, notes["readonly"].suggestion) == ("description", "readOnly")
    assert not any(n.warns for n in fsm.report)
    loud = {"type": "string", "_format": "date", "x-a": 1}
    with pytest.warns(SchemaNote) as caught:
        fsm = compile_json_schema(loud, vocabulary("gpt-2"))
    assert [str(w.message) for w in caught] == [
        "unknown keyword `_format` at $ is ignored (did you mean `format`?)"]
    assert [n.keyword for n in fsm.report] == ["_format", "x-a"]


def test_pattern_properties_beside_additional_properties_split_the_names():
    from grammars.json_schema import json_schema_grammar

    # `^.*$` misses names holding a newline (ECMA `.`), `.+` the empty name: those take
    # additionalProperties, the names matching no pattern
    for pattern, other in (("^.*$", "a\\nb"), (".+", "")):
        g = json_schema_grammar({"patternProperties": {pattern: {"type": "integer"}},
                                 "additionalProperties": {"type": "string"}})
        dfa = LazyDFA(g, max_depth=g.info["max_depth"])
        assert dfa.matches(b'{"x": 1}') and not dfa.matches(b'{"x": "1"}')
        assert dfa.matches(b'{"%s": "1"}' % other.encode()) and not dfa.matches(b'{"%s": 1}' % other.encode())
    g = json_schema_grammar({"patternProperties": {"(?:)": {"type": "integer"}}, "additionalProperties": False})
    dfa = LazyDFA(g)
    assert dfa.matches(b'{"any name": 1}') and not dfa.matches(b'{"x": "1"}')
    # a pattern's names are matched on the decoded string, and never spell a declared name
    g = json_schema_grammar({"properties": {"abc": {"maxLength": 2}}, "patternProperties": {"^a": {"type": "string"}},
                             "additionalProperties": False})
    dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    assert dfa.matches(b'{"\\u0061bd": "xyz"}') and not dfa.matches(b'{"\\u0061bd": 1}')
    assert not dfa.matches(b'{"\\u0061bc": "xyz"}') and not dfa.matches(b'{"ab\\u0063": "x"}')


def test_random_pattern_properties_agree_with_jsonschema():
    """Random objects of declared, pattern and additional members (patterns that overlap, match
    declared names, match every name or allow every value), against jsonschema."""
    rng = random.Random(7)
    patterns = ["^a", "b$", "^x-", "c", "^[ab]+$", ".*", "^.$", "a.b"]
    schemas = [{"type": "integer"}, {"type": "string"}, {"minimum": 3}, {"maxLength": 1}, {"enum": [1, "a"]}, True,
               {"type": "null"}]
    names = ["a", "ab", "b", "x-1", "c", "acb", "zz", "", "ba", "\u00e9"]
    values = [1, 5, "a", "abc", None]
    for _ in range(40):
        props = {k: rng.choice(schemas) for k in rng.sample(names, rng.randint(0, 2))}
        schema = {"type": "object", "properties": props,
                  "patternProperties": {p: rng.choice(schemas) for p in rng.sample(patterns, rng.randint(1, 3))}}
        extra = rng.choice([None, False, *schemas])
        if extra is not None:
            schema["additionalProperties"] = extra
        g = json_schema_grammar(schema)
        dfa = LazyDFA(g, max_depth=g.info["max_depth"])
        validator = jsonschema.Draft202012Validator(schema)
        for _ in range(15):
            inst = {k: rng.choice(values) for k in props if rng.random() < 0.5}
            inst.update({k: rng.choice(values) for k in rng.sample(names, rng.randint(0, 3)) if k not in props})
            for text in (json.dumps(inst), json.dumps(inst, ensure_ascii=False, separators=(",", ":"))):
                assert dfa.matches(text.encode()) == validator.is_valid(inst), (schema, text)


def test_draft4_id_is_its_identifier_not_an_unknown_keyword():
    """Draft-04 names a schema's URI `id` (later drafts `$id`): it bases refs there and is no note;
    under 2020-12 the same `id` is an unknown keyword (a likely `$id`)."""
    from grammars.json_schema import json_schema_grammar

    body = {"id": "http://example.com/root.json", "definitions": {"n": {"id": "n.json", "type": "integer"}},
            "type": "object", "properties": {"x": {"$ref": "n.json"}}, "required": ["x"], "additionalProperties": False}
    draft4 = json_schema_grammar({"$schema": "http://json-schema.org/draft-04/schema#", **body})
    assert [n.keyword for n in draft4.info["report"]] == []
    dfa = LazyDFA(draft4)
    assert dfa.matches(b'{"x": 3}') and not dfa.matches(b'{"x": "3"}')
    with pytest.raises(UnsupportedSchemaError, match="remote reference"):   # `$id`-less under 2020-12
        json_schema_grammar(body)


def test_an_unknown_format_is_an_annotation_reported_not_warned(vocabulary):
    """2020-12: `format` annotates unless the engine checks it; the other keywords still hold."""
    from constrained.compile import clear_cache, compile_json_schema

    clear_cache()
    schema = {"type": "object", "properties": {"site": {"type": "string", "format": "url", "maxLength": 8},
                                               "when": {"type": "string", "format": "date"}},
              "required": ["site", "when"], "additionalProperties": False}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fsm = compile_json_schema(schema, vocabulary("gpt-2"))
    assert [(n.keyword, n.path, n.kind) for n in fsm.report] == [("format", "$.properties.site", "annotation")]
    assert str(fsm.report[0]) == ("unknown `format` 'url' at $.properties.site is not checked "
                                  "(an annotation, as the spec allows)")
    dfa = _dfa(schema)
    assert dfa.matches(b'{"site": "any str", "when": "2024-02-29"}')
    assert not dfa.matches(b'{"site": "123456789", "when": "2024-02-29"}')      # maxLength still holds
    assert not dfa.matches(b'{"site": "x", "when": "someday"}')                  # a known format still checked


def test_or_text_is_the_document_or_text_not_opening_with_a_brace():
    """`or_text` (tool_choice "auto"): a valid document, or any text whose first non-space character is not "{"."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
              "additionalProperties": False}
    dfa = _dfa(schema, or_text=True)
    for text in ['{"a": 1}', "Hello", ' Hi {"a": 1}', "", "  \n", "héllo ☃", "[1]", "\t42"]:
        assert dfa.matches(text.encode()), text
    for text in ['{"b": 1}', "{ hi", '  {"a": 1} and more', '{"a": 1} trailing']:
        assert not dfa.matches(text.encode()), text
    assert not dfa.matches(b"\xff")                     # text is valid UTF-8
    assert not _dfa(schema).matches(b"Hello")           # off by default


INVALID = [
    ({"properties": {"name": {"type": "string", "maxLength": -1}}}, "$.properties.name", "-1"),
    ({"required": "name"}, "$", "'name'"),
    ({"type": "strng"}, "$", "'strng'"),
    ({"properties": {"a": 3}}, "$", "3"),
    ({"type": "string", "pattern": "("}, "$", "'('"),
    ({"multipleOf": 0}, "$", "0"),
    ({"$ref": "#/$defs/missing"}, "$", "'#/$defs/missing'"),
    ({"anyOf": []}, "$", "[]"),
]


@pytest.mark.parametrize("schema,path,value", INVALID)
def test_invalid_schemas_name_path_and_value(schema, path, value):
    with pytest.raises(InvalidSchemaError) as err:
        json_schema_grammar(schema)
    assert err.value.path == path and value in str(err.value)


def test_a_malformed_format_inside_a_negated_branch_is_a_schema_error_not_a_crash():
    schema = {"type": "object", "oneOf": [{"required": ["a"]}, {"properties": {"a": {"format": [1]}}, "required": ["b"]}]}
    with pytest.raises(UnsupportedSchemaError) as err:    # (was TypeError: unhashable type: 'list')
        json_schema_grammar(schema)
    assert err.value.keyword == "oneOf" and err.value.path == "$"


@pytest.mark.parametrize("schema,names", [
    # a keyword with no negation form, inside a property of the overlapping branch
    ({"oneOf": [{"type": "object"}, {"type": "object", "properties": {"a": {"type": "number", "multipleOf": 3}}}]},
     ["`multipleOf` at $.oneOf[1].properties.a"]),
    # a recursive branch: its negation is not regular
    ({"$defs": {"t": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}}},
      "oneOf": [{"type": "object", "required": ["x"]}, {"$ref": "#/$defs/t"}]},
     ["$.oneOf[1].properties.kids.items", "recursive $ref"]),
])
def test_an_overlapping_one_of_names_the_keyword_without_a_negation(schema, names):
    with pytest.raises(UnsupportedSchemaError) as err:
        json_schema_grammar(schema)
    assert err.value.keyword == "oneOf" and all(n in str(err.value) for n in names), str(err.value)


@pytest.mark.parametrize("schema", [
    {"type": "object", "not": {"propertyNames": False}},                    # a non-empty object
    {"not": {"propertyNames": False}},                                      # (every non-object fails it)
    {"oneOf": [{"propertyNames": False}, {"type": "object", "maxProperties": 1}]},  # overlap at {}
])
def test_negated_property_names_false_agrees_with_jsonschema(schema):
    g = json_schema_grammar(schema)
    dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    validator = jsonschema.Draft202012Validator(schema)
    for inst in ({}, {"a": 1}, {"a": 1, "b": 2}, [], [1], "x", 3, None, True):
        assert dfa.matches(json.dumps(inst).encode()) == validator.is_valid(inst), (schema, inst)


@pytest.mark.parametrize("schema", [
    {"type": "string", "not": {"format": "ipv4"}},
    {"not": {"format": "date"}},                                            # every non-string passes
    {"enum": ["1.2.3.4", "x", 5], "not": {"format": "ipv4"}},
    {"not": {"format": "no-such-format"}},                                  # an annotation: fails every string
    # overlapping oneOf: each branch holds with the other's negation (a string outside the format)
    {"oneOf": [{"type": "string", "format": "ipv4"}, {"type": "string", "maxLength": 7}]},
    {"if": {"format": "date"}, "then": {"maxLength": 5}},                 # (else: not a date, any length)
])
def test_negated_format_agrees_with_jsonschema(schema):
    g = json_schema_grammar(schema)
    dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    for inst in ("1.2.3.4", "1.2.3", "x", "", "2024-01-31", "2024-13-01", "255.255.255.255", 5, None, [], {}):
        assert dfa.matches(json.dumps(inst).encode()) == validator.is_valid(inst), (schema, inst)


RECURSIVE_MERGE = {
    # a menu item's children are menu items with one more keyword: the merge of the two recurses
    # into itself at every level (maskbench-dev's Github_medium---o13136 with `additionalProperties` added
    # beside its `allOf`, by a schema-editing fuzzer)
    "definitions": {"item": {"type": "object", "required": ["label"], "additionalProperties": False, "properties": {
        "label": {"type": "string"},
        "children": {"type": "array", "items": {"allOf": [{"$ref": "#/definitions/item"}],
                                                "additionalProperties": {"type": "string"}}}}}},
    "type": "array", "items": {"$ref": "#/definitions/item"},
}


def _refusal_in_child(schema) -> tuple[str, str, str]:
    """(keyword, path, message) of the `UnsupportedSchemaError` `json_schema_grammar(schema)` raises,
    run in a child process with a time limit: a crash or a hang fails the calling test, not the run."""
    import subprocess
    import sys

    code = ("import json, sys\nfrom grammars.json_schema import json_schema_grammar\nfrom grammars.errors import "
            "UnsupportedSchemaError\ntry:\n    json_schema_grammar(json.loads(sys.argv[1]))\n    print('compiled')\n"
            "except UnsupportedSchemaError as e:\n    print(json.dumps([e.keyword, e.path, str(e)]))\n")
    out = subprocess.run([sys.executable, "-c", code, json.dumps(schema)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() != "compiled", "compiled, but it should have been refused"
    return tuple(json.loads(out.stdout))


def test_a_recursive_ref_merged_with_other_keywords_is_refused_not_a_crash():
    """Compiled, the merge recursed until the C stack overflowed and the process died (SIGSEGV); in
    Python it took `deep_call`'s 50,000 levels. Now the repeated merge is refused with its path. A
    child process, so that a crash fails this test rather than the run."""
    keyword, path, _ = _refusal_in_child(RECURSIVE_MERGE)
    assert (keyword, path) == ("$ref", "$.definitions.item.properties.children.items.allOf[0]")


# found by `python -m bench.mutations --edit-schemas --structural` (seed 11): a dev-corpus schema
# with `if`/`then`/`else` added inside its `patternProperties` (so they are patterns there), the
# last holding a copy of the whole schema
COPIED_INTO_ITSELF = {'$schema': 'http://json-schema.org/draft-04/schema#',
                      'definitions': {'def': {'type': 'string',
                                              'if': {'maxProperties': 2},
                                              'then': {'type': 'string', 'if': {'maxProperties': 2}},
                                              'else': {'type': 'number', 'minimum': 0}}},
                      'type': 'object',
                      'patternProperties': {'^abc.+$': {'$ref': '#/definitions/def'},
                                            'if': {'type': 'integer'},
                                            'then': {'not': {'type': 'null'}},
                                            'else': {'$schema': 'http://json-schema.org/draft-04/schema#',
                                                     'definitions': {'def': {'type': 'string',
                                                                             'if': {'maxProperties': 2},
                                                                             'then': {'type': 'string',
                                                                                      'if': {'maxProperties': 2}},
                                                                             'else': {'type': 'number',
                                                                                      'minimum': 0}}},
                                                     'type': 'object',
                                                     'patternProperties': {'^abc.+$': {'$ref': '#/definitions/def'},
                                                                           'if': {'type': 'integer'},
                                                                           'then': {'not': {'type': 'null'}}}}}}


def test_a_schema_copied_into_its_own_branches_compiles():
    """Its NFA build hung: equality of the two equal copies' syntax walked them as trees (see
    `test_nfa.test_equal_dags_built_twice_compare_in_one_pass`). A child process with a time limit,
    so that a regression fails here instead of hanging the run; the verdicts agree with the oracle."""
    import subprocess
    import sys

    code = ("import json, sys\nfrom grammars.json_schema import json_schema_grammar\nfrom grammars.dfa import LazyDFA\n"
            "from constrained.dfa_jit import native_dfa_class\n"
            "s = json.loads(sys.argv[1])\ng = json_schema_grammar(s)\n"
            "dfa = (native_dfa_class() or LazyDFA)(g, max_depth=int(g.info.get('max_depth', 64)))\n"
            "for text in sys.argv[2:]:\n    print(dfa.matches(text.encode()))\n")
    docs = [{}, {"abcd": "x"}, {"abcd": 5}, {"xif": 3}, {"else": {"abcz": "q"}}, {"else": {"abcz": -1}},
            {"then": None}, {"if": 2}, {"if": "s"}, []]
    out = subprocess.run([sys.executable, "-c", code, json.dumps(COPIED_INTO_ITSELF), *map(json.dumps, docs)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [str(validator(COPIED_INTO_ITSELF).is_valid(d)) for d in docs]


# found by `python -m bench.mutations --edit-schemas --structural` (seed 12): a dev-corpus schema
# with `if`, `then` and `else` added inside a `patternProperties` (patterns there) whose values
# `$ref` the schema that holds them
RECURSIVE_PATTERN_MERGE = {'definitions': {'properties': {'minProperties': 1,
                                                          'patternProperties': {'^\\w+$': {'properties': {'column': {'type': 'string'},
                                                                                                          'country': {'type': 'string'},
                                                                                                          'format': {'type': 'string'},
                                                                                                          'literal': {},
                                                                                                          'nulls': {'type': 'array'},
                                                                                                          'transform': {'type': 'string'},
                                                                                                          'transforms': {'items': {'type': 'string'},
                                                                                                                         'type': 'array'}},
                                                                                           'type': 'object'},
                                                                                'if': {'$ref': '#/definitions/properties'},
                                                                                'then': {'properties': {'label': {'type': 'string'},
                                                                                                        'properties': {'$ref': '#/definitions/properties'}},
                                                                                         'required': ['label',
                                                                                                      'properties'],
                                                                                         'type': 'object'},
                                                                                'else': {'$ref': '#/definitions/properties'}},
                                                          'type': 'object'}},
                           'properties': {'collection': {'type': 'string',
                                                         'oneOf': [{'type': 'boolean'},
                                                                   {'type': 'string'},
                                                                   {'type': 'object'}]},
                                          'database': {'type': 'string'},
                                          'edges': {'items': {'properties': {'label': {'type': 'string'},
                                                                             'properties': {'$ref': '#/definitions/properties'},
                                                                             'source': {'type': 'string'},
                                                                             'target': {'type': 'string'}},
                                                              'required': ['label', 'source', 'target'],
                                                              'type': 'object'},
                                                    'type': 'array',
                                                    'dependentRequired': {'name': ['a', 'name']}},
                                          'nodes': {'minProperties': 1,
                                                    'patternProperties': {'^\\w+$': {'properties': {'label': {'type': 'string'},
                                                                                                    'properties': {'$ref': '#/definitions/properties'}},
                                                                                     'required': ['label',
                                                                                                  'properties'],
                                                                                     'type': 'object'}},
                                                    'type': 'object'},
                                          'query': {'type': 'string'},
                                          'table': {'type': 'string'}},
                           'required': ['database', 'collection', 'nodes'],
                           'type': 'object'}


def test_overlapping_patterns_whose_values_recurse_are_refused_not_a_hang():
    """A name matching several patterns gets their merged value, compiled inline; here it reached
    itself again through its `$ref`s and unrolled, each level a group per set of patterns, for
    minutes. Now the repeat is an `UnsupportedSchemaError` naming `patternProperties`. A child
    process with a time limit, so that a regression fails here instead of hanging the run."""
    keyword, _, message = _refusal_in_child(RECURSIVE_PATTERN_MERGE)
    assert keyword == "patternProperties" and "unrolls without end" in message, message


# found by `python -m bench.mutations --edit-schemas --structural` (seed 13): a dev-corpus schema
# with `enum: [{}]` added at its root and a `$ref` to the root beside a property's keywords (draft
# 4: the `$ref` alone counts)
ENUM_CHECK_THROUGH_ITSELF = {'$schema': 'http://json-schema.org/draft-04/schema#',
                             'type': 'object',
                             'properties': {'name': {'type': 'string', 'minLength': 1, 'maxLength': 255},
                                            'description': {'type': 'string', 'maxLength': 32767},
                                            'columns': {'type': 'array',
                                                        'items': {'title': 'Data Table Column',
                                                                  'description': 'Schema for a single Data Table '
                                                                                 'Column',
                                                                  'type': 'object',
                                                                  'properties': {'name': {'type': 'string',
                                                                                          'pattern': '^[0-9a-zA-Z_-]{1,255}$',
                                                                                          '$ref': '#'},
                                                                                 'dataType': {'type': 'string',
                                                                                              'enum': ['string',
                                                                                                       'number',
                                                                                                       'boolean']},
                                                                                 'constraint': {'type': 'string',
                                                                                                'enum': ['unique',
                                                                                                         'required',
                                                                                                         'optional'],
                                                                                                'maxLength': 5},
                                                                                 'defaultValue': {'type': ['string',
                                                                                                           'number',
                                                                                                           'boolean']}},
                                                                  'required': ['name', 'dataType', 'constraint'],
                                                                  'additionalProperties': False},
                                                        'maxItems': 50}},
                             'required': ['name'],
                             'additionalProperties': False,
                             'enum': [{}]}


def test_an_enum_checked_against_keywords_that_lead_back_to_it_is_refused_not_a_crash():
    """An `enum`'s values are checked at compile time against the keywords beside it, on a compiler
    of their own. Here those keywords `$ref` the root, whose `enum` needs the same check, so each
    level made a new compiler until the C stack overflowed (SIGSEGV; in Python a RecursionError).
    Now the repeated check is an `UnsupportedSchemaError` saying why. A child process, so that a
    crash fails this test rather than the run."""
    keyword, _, message = _refusal_in_child(ENUM_CHECK_THROUGH_ITSELF)
    assert keyword == "$ref" and "needs the same check again" in message, message


def test_merges_nested_past_the_nesting_limit_are_a_budget_error():
    """`allOf` nested 3,000 levels: each level merges the next, past `json_merge.MAX_MERGE_DEPTH`."""
    from grammars.errors import StateBudgetError
    from grammars.json_merge import MAX_MERGE_DEPTH

    schema: dict = {"type": "integer"}
    for _ in range(MAX_MERGE_DEPTH + 1000):
        schema = {"allOf": [schema, {"description": "a level"}]}
    with pytest.raises(StateBudgetError, match="levels of nesting"):
        deep_call(json_schema_grammar, schema)


@pytest.mark.parametrize("draft, checked", [("http://json-schema.org/draft-04/schema#", False),
                                            ("http://json-schema.org/draft-07/schema#", False),
                                            ("https://json-schema.org/draft/2020-12/schema", True)])
def test_a_format_the_draft_lacks_is_ignored_inside_negations(draft, checked):
    """`uuid` is no format of drafts 4 and 7, whose validators pass any string there. Checked inside
    a `oneOf` branch's negation, a draft-4 schema let through an object valid under both branches
    (found by `bench.mutations --edit-schemas`: maskbench-dev's Github_hard---o39535 with a `format`
    added). Outside negations the format is still checked (stricter than such a draft, never laxer)."""
    from bench.oracle import validator

    one_of = {"$schema": draft, "type": "object", "oneOf": [
        {"properties": {"uri": {"type": "string"}}, "required": ["uri"]},
        {"properties": {"id": {"type": "string", "format": "uuid"}}, "required": ["id"]}]}
    negated = {"$schema": draft, "type": "string", "not": {"format": "uuid"}}
    uuid = "00000000-0000-0000-0000-000000000000"
    for schema, texts in ((one_of, ['{"uri": "a", "id": "x"}', '{"uri": "a"}', '{"id": "%s"}' % uuid, '{"id": "x"}']),
                          (negated, ['"x"', '"%s"' % uuid])):
        dfa = LazyDFA(json_schema_grammar(schema, any_order=True), max_depth=64)
        check = validator(schema)
        for text in texts:
            if dfa.matches(text.encode()):
                assert check.is_valid(json.loads(text)), (draft, schema, text)
    # outside a negation every known format is checked, whatever the draft
    plain = LazyDFA(json_schema_grammar({"$schema": draft, "type": "string", "format": "uuid"}))
    assert plain.matches(f'"{uuid}"'.encode()) and not plain.matches(b'"x"')
    # and inside one, in the drafts that define it: a string that is no uuid passes `not`
    assert LazyDFA(json_schema_grammar(negated)).matches(b'"x"') is checked
