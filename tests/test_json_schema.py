"""JSON Schema -> grammar, checked against `jsonschema` as the oracle.

Every instance jsonschema accepts must be accepted in every serialization
style; every mutated instance it rejects must be rejected.
"""

from __future__ import annotations

import copy
import datetime
import json
import re
from decimal import Decimal
import random
import warnings
from functools import lru_cache

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

import hypothesis_jsonschema._from_schema as _hjs
from hypothesis.internal.conjecture import utils as _cu

from grammars.dfa import LazyDFA
from grammars.errors import InvalidSchemaError, UnsupportedSchemaError
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


def _decimal_multiple_of(validator, multiple, instance, schema):
    """multipleOf with the spec's decimal meaning (jsonschema divides floats:
    it calls 19.99 not a multiple of 0.01)."""
    if validator.is_type(instance, "number"):
        q = Decimal(repr(instance)) / Decimal(repr(multiple))
        if q != q.to_integral_value():
            yield jsonschema.ValidationError(f"{instance!r} is not a multiple of {multiple!r}")


_RFC3339_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?([zZ]|[+-]([01]\d|2[0-3]):[0-5]\d)")


def _is_time(value) -> bool:
    return not isinstance(value, str) or _RFC3339_TIME.fullmatch(value) is not None


def _is_date_time(value) -> bool:
    if not isinstance(value, str):
        return True
    date, sep, time = value[:10], value[10:11], value[11:]
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        return False
    return re.fullmatch(r"\d{4}-\d\d-\d\d", date) is not None and sep in ("T", "t") and _is_time(time)


_DURATION = re.compile(
    r"P(?:(?:\d+D|\d+M(?:\d+D)?|\d+Y(?:\d+M(?:\d+D)?)?)(?:T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S))?"
    r"|T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)|\d+W)")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_URI_CHARS = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?#\[\]]|%[0-9A-Fa-f]{2})*")


def _is_hostname(value) -> bool:
    return not isinstance(value, str) or (
        len(value) <= 253 and all(_LABEL.fullmatch(label) for label in value.split(".")))


def _is_uri(value) -> bool:
    if not isinstance(value, str):
        return True
    scheme, colon, rest = value.partition(":")
    if not colon or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+\-.]*", scheme) or not _URI_CHARS.fullmatch(rest):
        return False
    if "#" in rest.partition("#")[2] or "[" in rest.replace("[", "", 1):  # one fragment, one IP literal
        return False
    return True


def _is_duration(value) -> bool:
    return not isinstance(value, str) or _DURATION.fullmatch(value) is not None


def _format_checker(cls):
    """The draft's checker plus reference checks for formats whose optional
    dependencies (rfc3339-validator, fqdn, rfc3987, isoduration) are absent here."""
    checker = copy.deepcopy(cls.FORMAT_CHECKER)
    for name, fn in (("time", _is_time), ("date-time", _is_date_time), ("hostname", _is_hostname),
                     ("uri", _is_uri), ("duration", _is_duration)):
        checker.checks(name)(fn)
    return checker


def _ecma_pattern(validator, pattern, instance, schema):
    """ECMA-262 `\\d` and `\\w` are ASCII; Python's `re` (jsonschema) makes them Unicode."""
    if validator.is_type(instance, "string") and not re.search(pattern, instance, re.ASCII):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def validator(schema):
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls = jsonschema.validators.extend(base, {"multipleOf": _decimal_multiple_of, "pattern": _ecma_pattern})
    return cls(schema, format_checker=_format_checker(base))


def key_order(schema) -> dict[str, int]:
    """Rank of every property name in document order (the grammar's default layout)."""
    order: dict[str, int] = {}

    def walk(node):
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                for name in list(props) + [r for r in node.get("required", []) if r not in props]:
                    order.setdefault(name, len(order))
            for key, value in node.items():
                if key not in ("enum", "const", "examples", "default"):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)
    return order


def canonical(value, order):
    """`value` with object keys in schema order, extra keys after them."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (order.get(k, len(order)), list(value).index(k)))
        return {k: canonical(value[k], order) for k in keys}
    if isinstance(value, list):
        return [canonical(v, order) for v in value]
    return value


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
        schema = _strict(entry["schema"])
    else:
        schema = entry["schema"]
    return validator(schema).is_valid(value)


def _strict(schema):
    """The schema with additionalProperties defaulting to false (what strict=True means)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) if k not in ("enum", "const") else v for k, v in schema.items()}
        if out.get("type") == "object" or "properties" in out:
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [_strict(x) for x in schema]
    return schema


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
        text = json.dumps(canonical(value, order), **style).encode("utf-8")
        assert dfa.matches(text), f"{name}: generated valid {text!r} rejected"

    check()


@settings(max_examples=30, deadline=None, database=None)
@given(tree=st.recursive(
    st.builds(lambda v: {"value": v}, st.integers()),
    lambda kids: st.builds(lambda v, cs: {"value": v, "children": cs}, st.integers(), st.lists(kids, max_size=3)),
    max_leaves=12), style=st.sampled_from(STYLES))
def test_generated_recursive_trees(tree, style):
    entry = BY_NAME["recursive_tree"]
    assert is_valid(entry, tree)
    assert dfa_for("recursive_tree").matches(json.dumps(tree, **style).encode())


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
    big = {"type": "object", "properties": {f"p{i}": {} for i in range(7)}}
    with pytest.raises(UnsupportedSchemaError, match="any_order"):
        json_schema_grammar(big, any_order=True)


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


def test_pattern_applies_to_decoded_string():
    dfa = _dfa({"type": "string", "pattern": "^a+$", "maxLength": 3})
    assert dfa.matches(b'"\\u0061a"') and dfa.matches(b'"aaa"')
    assert not dfa.matches(b'"aaaa"') and not dfa.matches(b'"\\u0061\\u0061\\u0061\\u0061"')


def test_number_syntax():
    bounded = _dfa({"type": "number", "minimum": 0.5})
    assert bounded.matches(b"5e-1") and bounded.matches(b"1e+16") and bounded.matches(b"0.50")
    assert not bounded.matches(b"4.9e-1") and not bounded.matches(b"0.49999")
    free = _dfa({"type": "number"})
    assert free.matches(b"10e5") and free.matches(b"-0.0E-0")
    assert not free.matches(b"01") and not free.matches(b"1.") and not free.matches(b"+1")
    integer = _dfa({"type": "integer"})
    assert not integer.matches(b"1.0") and not integer.matches(b"-0")


# -- errors ------------------------------------------------------------------------------

UNSUPPORTED = [
    ({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}, "uniqueItems",
     "$.properties.tags"),
    ({"type": "array", "contains": {"type": "integer"}}, "contains", "$"),
    ({"if": {"type": "string"}, "then": {"minLength": 1}}, "if", "$"),
    ({"properties": {"a": {"dependentRequired": {"x": ["y"]}}}}, "dependentRequired", "$.properties.a"),
    ({"unevaluatedProperties": False}, "unevaluatedProperties", "$"),
    ({"$ref": "https://example.com/schema.json"}, "$ref", "$"),
    ({"type": "string", "format": "color-hex"}, "format", "$"),
    ({"oneOf": [{"type": "integer"}, {"minimum": 3}]}, "oneOf", "$"),
    ({"allOf": [{"pattern": "a"}, {"pattern": "b"}]}, "pattern", "$.allOf[1]"),
    ({"type": "number", "multipleOf": 0.3}, "multipleOf", "$"),
    ({"not": {"type": "string", "minLength": 3}}, "not", "$"),
    ({"type": "object", "patternProperties": {"^a": {"type": "integer"}}}, "patternProperties", "$"),
]


@pytest.mark.parametrize("schema,keyword,path", UNSUPPORTED)
def test_unsupported_names_keyword_and_path(schema, keyword, path):
    with pytest.raises(UnsupportedSchemaError) as err:
        json_schema_grammar(schema)
    assert err.value.keyword == keyword and err.value.path == path
    assert f"{path}.{keyword}" in str(err.value)


def test_allow_approximate_warns():
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    with pytest.warns(UserWarning, match="uniqueItems"):
        g = json_schema_grammar(schema, allow_approximate=True)
    assert LazyDFA(g, max_depth=g.info["max_depth"]).matches(b"[1,1]")  # documented over-approximation


def test_unknown_keyword_warns():
    with pytest.warns(UserWarning, match="nullable"):
        json_schema_grammar({"type": "string", "nullable": True})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        json_schema_grammar({"type": "string", "title": "t", "description": "d", "examples": ["x"]})


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
