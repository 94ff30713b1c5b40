"""Numbers stay valid after `json.loads` (numbers="double", the default), or after Decimal parsing ("exact").

The property: every text the automaton of a random numeric schema accepts
validates with `jsonschema` once parsed. Texts are drawn by random walks
through the byte DFA (each step picks uniformly among the live bytes), so
they reach the edges the grammar draws: bounds, exponents, digit limits.
Then real sampling, on the mock, MLX and HF backends.
"""

from __future__ import annotations

import decimal
import json
import math
import random
import re
from decimal import Decimal

import jsonschema
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from backends.mock import MockLM
from constrained.generate import GenerationRequest, generate_batch
from grammars.deep import deep_call
from grammars.dfa import LazyDFA
from grammars.errors import UnsupportedSchemaError
from grammars.json_schema import json_schema_grammar
from tests.tiny_lms import async_lm, hf_tokenizer

# Bound values where decimal and double disagree, or where doubles end.
EDGES = [0, 1, -1, 0.1, -0.1, 0.5, 2.5, 1e-300, 5e-324, 1e300, 1.7976931348623157e308, 2 ** 53, 0.30000000000000004,
         123456789.123, 1e16, 1e-5, 10 ** 20]
DIVISORS = [1, 3, 5.0, 0.5, 2.5, 0.25, 0.1, 0.01, 0.3, 0.7]
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def bound_values() -> st.SearchStrategy:
    return st.one_of(st.sampled_from(EDGES), st.integers(-10 ** 6, 10 ** 6),
                     st.floats(-1e6, 1e6, allow_nan=False), st.floats(allow_nan=False, allow_infinity=False))


@st.composite
def numeric_schemas(draw) -> dict:
    schema = {"type": draw(st.sampled_from(["number", "integer"]))}
    for key in draw(st.lists(st.sampled_from(BOUNDS), max_size=2, unique=True)):
        schema[key] = draw(bound_values())
    if draw(st.booleans()):
        schema["multipleOf"] = draw(st.sampled_from(DIVISORS))
        if draw(st.booleans()):       # bounded: float divisors are then listed exactly
            lo = draw(st.integers(-50, 50))
            schema["minimum"], schema["maximum"] = lo, lo + draw(st.integers(0, 8))
    return schema


def walks(dfa: LazyDFA, rng: random.Random, count: int, max_len: int = 60) -> list[bytes]:
    """Texts the DFA accepts, by random walks (a walk that runs past `max_len` is dropped)."""
    out = []
    for _ in range(count * 4):
        state, text = dfa.initial, bytearray()
        while len(text) <= max_len:
            live = [b for b in range(256) if deep_call(dfa.next_state, state, b) >= 0]
            if dfa.is_accepting(state) and (not live or rng.random() < 0.25):
                out.append(bytes(text))
                break
            if not live:                      # the empty language (e.g. minimum > maximum)
                return out
            b = rng.choice(live)
            text.append(b)
            state = dfa.next_state(state, b)
        if len(out) == count:
            break
    return out


def _compiled(schema: dict, numbers: str) -> LazyDFA | None:
    try:
        # deep_call: a bound like 1e300 is a 301-digit integer range (as in `compile_json_schema`)
        return deep_call(lambda: LazyDFA(json_schema_grammar(schema, whitespace="compact", numbers=numbers)))
    except UnsupportedSchemaError as e:
        assert numbers == "double" or "multipleOf" in str(e), e   # refusing is allowed, and says why
        return None


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(schema=numeric_schemas(), seed=st.integers(0, 2 ** 16))
def test_every_accepted_number_validates_after_json_loads(schema, seed):
    dfa = _compiled(schema, "double")
    if dfa is None:       # refused: a float divisor, or one exact decimals refuse too
        assert isinstance(schema.get("multipleOf"), float) or _compiled(schema, "exact") is None, schema
        return
    check = jsonschema.Draft202012Validator(schema)
    for text in walks(dfa, random.Random(seed), 12):
        value = json.loads(text)
        assert isinstance(value, int) or math.isfinite(value), (schema, text)
        assert check.is_valid(value), (schema, text, value)
        assert value == 0 or text.strip(b"-0.").startswith(b"0") or float(value) != 0, (schema, text)


@settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(schema=numeric_schemas(), seed=st.integers(0, 2 ** 16))
@example(schema={"type": "number", "maximum": 1}, seed=1)     # walks to 7E-7808830536509502284
def test_every_accepted_number_validates_as_a_decimal_with_exact(schema, seed):
    dfa = _compiled(schema, "exact")
    if dfa is None:
        return
    # the schema's numbers as the decimals they are written as, the instance parsed as a Decimal
    exact = json.loads(json.dumps(schema), parse_float=Decimal)
    check = jsonschema.Draft202012Validator(exact)
    # `%` on long decimals needs the digits, and exact mode allows any exponent
    with decimal.localcontext(decimal.Context(prec=4000, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)):
        for text in walks(dfa, random.Random(seed), 12):
            value = json.loads(_clamp_exponent(text), parse_float=Decimal)
            assert check.is_valid(value), (schema, text, value)


def _clamp_exponent(text: bytes) -> bytes:
    """`text` with an exponent beyond +-10**6 set to +-10**6.

    Exact mode allows any exponent, and Decimal refuses those past about
    10**18. The schemas here have bounds within 1e309 and divisors of at
    most two decimals, so an exponent of +-10**6 decides every bound and
    `multipleOf` the same way the original one does.
    """
    def clamp(m: re.Match) -> bytes:
        exp = int(m.group(1))
        return b"e%d" % max(-10 ** 6, min(10 ** 6, exp))
    return re.sub(rb"[eE]([-+]?\d+)$", clamp, text)


def test_issue_examples_are_gone():
    dfa = LazyDFA(json_schema_grammar({"type": "number", "exclusiveMinimum": 0}))
    for text in (b"1.604e-55294741716849749040198600", b"7.22687470667598029288094E-01875988495", b"1e400", b"0.0"):
        assert not dfa.matches(text), text
    for text in (b"1.604e-300", b"1e-323", b"0.001", b"9.9999999999999999e+307", b"3"):
        assert dfa.matches(text), text
    # past [1e-323, 1e308) only where the bounds leave nothing else: whole decades keep the automaton small
    assert not dfa.matches(b"5e-324") and not dfa.matches(b"1e308")
    tiny = _compiled({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-323}, "double")
    huge = _compiled({"type": "number", "minimum": 1e308}, "double")
    assert tiny.matches(b"5e-324") and not tiny.matches(b"4e-324") and not tiny.matches(b"1e-323")
    assert huge.matches(b"1.7976931348623157e308") and huge.matches(b"1e308") and not huge.matches(b"1.8e308")
    cents = LazyDFA(json_schema_grammar({"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 3}))
    assert not cents.matches(b"2.0100") and not cents.matches(b"2.01") and cents.matches(b"2.02")
    with pytest.raises(UnsupportedSchemaError, match="numbers='exact'"):
        json_schema_grammar({"type": "number", "multipleOf": 0.01})
    assert LazyDFA(json_schema_grammar({"type": "number", "multipleOf": 0.01}, numbers="exact")).matches(b"2.01")


def test_numbers_option_is_checked():
    with pytest.raises(ValueError, match="numbers must be one of"):
        json_schema_grammar({"type": "number"}, numbers="float")


# -- sampling ------------------------------------------------------------------------------------

SAMPLED = [     # the issue's two schemas (multipleOf 0.01 bounded: unbounded it is refused by default)
    {"type": "number", "exclusiveMinimum": 0},
    {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 5},
]


def _backend(name: str):
    if name == "mock":
        return MockLM(hf_tokenizer("llama-bpe"))
    return async_lm("llama-bpe", name)


@pytest.mark.parametrize("backend", ["mock", "mlx", "hf"])
def test_sampled_numbers_validate(backend):
    lm = _backend(backend)
    reqs = [GenerationRequest(f"Value {i}:", schema=s, max_tokens=32, n=200, seed=i, options={"whitespace": "compact"})
            for i, s in enumerate(SAMPLED)]
    complete = 0
    for req, gens in zip(reqs, generate_batch(lm, reqs)):
        assert len(gens) == 200
        check = jsonschema.Draft202012Validator(req.schema)
        for gen in gens:
            assert gen.status in ("complete", "max_tokens"), gen.error
            if gen.status == "complete":
                complete += 1
                value = json.loads(gen.text)
                assert check.is_valid(value), (req.schema, gen.text)
    # random weights ramble in digits, but bounded digit counts make most samples finish
    assert complete >= 0.25 * 200 * len(reqs), complete


@pytest.mark.parametrize("schema", [
    {"type": "integer", "exclusiveMinimum": 2.144142217496685e+16, "multipleOf": 5.0},   # ran out of memory
    {"type": "integer", "minimum": 10 ** 20 + 3, "multipleOf": 4},
    {"type": "integer", "minimum": 7, "multipleOf": 16},       # its multiples below 10^4 listed, then tails
    {"type": "number", "minimum": 123456789, "multipleOf": 25},
])
def test_large_lower_bounds_with_a_multiple_of_compile_exactly(schema):
    """Multiples above a large bound are a leading part and a tail k divides, not a list of them."""
    check = jsonschema.Draft202012Validator(json.loads(json.dumps(schema), parse_float=Decimal))
    dfa = _compiled(schema, "exact")
    assert dfa is not None and dfa.num_states < 200
    texts = walks(dfa, random.Random(0), 40)
    assert len(texts) == 40
    lo = int(Decimal(repr(schema.get("minimum", schema.get("exclusiveMinimum")))))   # the bound as written
    k = int(schema["multipleOf"])
    first = (lo // k + 1) * k if "exclusiveMinimum" in schema or lo % k else lo
    with decimal.localcontext(decimal.Context(prec=4000)):     # `%` on long decimals needs the digits
        for text in texts:
            assert check.is_valid(json.loads(text, parse_float=Decimal)), (schema, text)
        for value, ok in ((first, True), (first - k, False), (first + k, True), (first + 1, False),
                          (first * 10, True), (first * 1000 + k, True)):
            assert dfa.matches(str(value).encode()) is ok, (schema, value)
            assert check.is_valid(value) is ok


@pytest.mark.parametrize("schema", [
    {"type": "number", "minimum": Decimal("1e400")},
    {"type": "number", "exclusiveMaximum": Decimal("-1e400")},
    {"type": "number", "maximum": Decimal("1e400"), "minimum": Decimal("-1.7976931348623159e308")},
])
def test_decimal_bounds_past_the_doubles_compile(schema):
    """A bound given as a Decimal beyond every double: no double lies past it, integers may
    (an `OverflowError` before, from the float search). Instances judged by jsonschema."""
    check = jsonschema.Draft202012Validator(schema)
    for numbers in ("double", "exact"):
        dfa = _compiled(schema, numbers)
        for text in ("0", "-1", "1.5", "1e300", "-1e300", "1" + "0" * 401, "-1" + "0" * 401, "1e401"):
            value = json.loads(text, parse_float=Decimal)
            if numbers == "double" and not isinstance(value, int) and not math.isfinite(float(value)):
                continue                    # ("double": a float past the doubles is never written)
            assert dfa.matches(text.encode()) is check.is_valid(value), (schema, numbers, text)


@pytest.mark.parametrize("schema", [
    {"type": "integer", "multipleOf": 0.25},
    {"type": "integer", "multipleOf": 0.75, "minimum": 2 ** 53 - 20, "maximum": 10 ** 20},   # (multiples of 3 below)
    {"type": "integer", "multipleOf": 0.1, "maximum": -(10 ** 18)},
    {"oneOf": [{"type": "string"}, {"type": "integer"}], "multipleOf": 0.25},
])
def test_integers_past_two_to_the_53_pass_a_fractional_multiple_of_as_validators_check_it(schema):
    """jsonschema checks `multipleOf: 0.25` as `float(n) / 0.25`: an integer past 2^53 passes it
    whatever it is (every double there is an integer), and was refused (9007199254740993 under
    Kubernetes' IntOrString with `multipleOf`, `bench.mutations` seed 61). Judged by jsonschema."""
    check = jsonschema.Draft202012Validator(schema)
    dfa = _compiled(schema, "double")
    texts = ["0", "3", "-7", "9007199254740971", "9007199254740973", "9007199254740991", "9007199254740992",
             "9007199254740993", "-9007199254740993", "12345678901234567890123", "-98765432109876543210",
             "-1000000000000000001", "1" + "0" * 300, "1" + "0" * 307]
    for text in texts:
        assert dfa.matches(text.encode()) is check.is_valid(json.loads(text)), (schema, text)


def test_integer_subschemas_share_one_tree_and_each_keeps_its_bounds():
    """Integer ranges are memoized across schemas (`json_numbers.int_range`): two
    properties with the same range get one tree, another range its own, and each still holds
    exactly its values."""
    from grammars.json_numbers import int_range, integer_multiples

    assert integer_multiples(0, None, 1) is int_range(0, None) is int_range(0, None)
    assert int_range(0, None) is not int_range(1, None)
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0},
                                               "b": {"type": "integer", "minimum": 0},
                                               "c": {"type": "integer", "minimum": 1, "maximum": 12}},
              "required": ["a", "b", "c"], "additionalProperties": False}
    dfa = LazyDFA(json_schema_grammar(schema, whitespace="compact"))
    for doc in ({"a": 0, "b": 7, "c": 12}, {"a": 10, "b": 0, "c": 1}, {"a": -1, "b": 0, "c": 1},
                {"a": 0, "b": -3, "c": 1}, {"a": 0, "b": 0, "c": 0}, {"a": 0, "b": 0, "c": 13}):
        text = json.dumps(doc, separators=(",", ":")).encode()
        assert dfa.is_accepting(dfa.walk(dfa.initial, text)) == jsonschema.Draft202012Validator(schema).is_valid(doc)


@pytest.mark.parametrize("draft", ["http://json-schema.org/draft-04/schema#", "https://json-schema.org/draft/2020-12/schema"])
def test_integer_enums_are_spelled_as_integers(draft):
    """`type: integer` beside `enum` spells its values as integers, as `integer` does everywhere:
    draft 4 calls `1.0` a number, not an integer (maskbench-dev's Github_easy---o42534 took
    `"month_of_year": 12.0`), and later drafts' `1.0` is refused as for every integer (README
    "Numbers"). With `number` among the types, values stay spelled by value."""
    from bench.oracle import validator

    cases = [({"type": "integer", "enum": [0, 1, 12, -2]}, ["0", "1", "12", "-2"], ["1.0", "12.0", "1e0", "-2.0", "0.0",
                                                                                   "-0.0", "3", "1.5"]),
             ({"type": "integer", "enum": [1.0, 2.5, "x"]}, ["1"], ["1.0", "2.5", "\"x\""]),
             ({"type": ["integer", "string"], "enum": [3, "x"]}, ["3", "\"x\""], ["3.0", "3e0"]),
             ({"type": ["number", "null"], "enum": [3, None]}, ["3", "3.0", "3e0", "null"], ["4"])]
    for schema, accepted, refused in cases:
        schema = {"$schema": draft, **schema}
        dfa = LazyDFA(json_schema_grammar(schema))
        check = validator(schema)
        for text in accepted:
            assert dfa.matches(text.encode()) and check.is_valid(json.loads(text)), (schema, text)
        for text in refused:
            assert not dfa.matches(text.encode()), (schema, text)
            if "draft-04" in draft:           # (later drafts call 12.0 an integer: refused by policy)
                assert not check.is_valid(json.loads(text)), (schema, text)
