"""`any_order=True`: object members in every order, exactly, with O(n) automaton size.

`jsonschema` is the oracle: every valid instance is accepted in every member
order, and objects that repeat a declared key, miss a required one, break a
dependency or hold an invalid value are refused. The bit-set frame's ops are
checked between the Python DFA and the numba kernels, and on the real-world
schemas whose valid instances declared order rejects.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

import tests.test_json_schema  # noqa: F401 - installs the hypothesis-jsonschema shim
from bench.oracle import is_valid
from grammars.ast import AnyOrder, Grammar, NOTHING, literal
from grammars.dfa import LazyDFA
from grammars.json_schema import json_schema_grammar
from grammars.nfa import NFA
from tests.conftest import requires_jit

SCHEMAS = {
    "required and optional": {
        "type": "object", "additionalProperties": False, "required": ["a", "c"],
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"},
                       "d": {"type": "array", "items": {"type": "integer"}, "maxItems": 2}}},
    "dependencies": {
        "type": "object", "additionalProperties": False,
        "properties": {k: {"type": "integer"} for k in "abcde"},
        "dependentRequired": {"a": ["b"], "b": ["e"]},
        "dependentSchemas": {"c": {"properties": {"d": False}}, "e": {"not": {"required": ["a"]}}}},
    "open with patterns": {
        "type": "object", "required": ["b"], "additionalProperties": {"type": "integer"},
        "patternProperties": {"^x_": {"type": "string"}},
        "properties": {"a": {"type": "null"}, "b": {"type": "integer"}}},
    "counted": {
        "type": "object", "minProperties": 2, "maxProperties": 3, "required": ["a"],
        "additionalProperties": {"type": "integer"},
        "properties": {k: {"type": "integer"} for k in "abcd"}},
    "nested": {
        "type": "object", "additionalProperties": False, "required": ["inner", "n"],
        "properties": {"n": {"type": "integer"}, "inner": {
            "type": "object", "additionalProperties": False, "required": ["y"],
            "properties": {"x": {"type": "string"}, "y": {"type": "integer"}, "z": {"type": "null"}}}}},
}
# values a member may take: some valid for each schema above, some not
POOL = [0, 7, "s", "x_", True, None, [1], [1, 2, 3], {"y": 1}, {"x": "a", "y": 2, "z": None}, {"x": 1}, {}]
KEYS = ["a", "b", "c", "d", "e", "n", "inner", "x_1", "zz"]


def _dfa(schema: dict, **options) -> LazyDFA:
    g = json_schema_grammar(schema, any_order=True, **options)
    return LazyDFA(g, max_depth=g.info["max_depth"])


DFAS = {name: _dfa(schema) for name, schema in SCHEMAS.items()}


def _shuffled(value, rng: random.Random):
    """`value` with the members of every object in a random order."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: _shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_valid_instances_accepted_in_every_order(name):
    schema, dfa = SCHEMAS[name], DFAS[name]

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(value=from_schema(schema), seed=st.integers(0, 2**32), indent=st.sampled_from([None, 2]))
    def check(value, seed, indent):
        if not is_valid(schema, value):
            return                             # hypothesis-jsonschema over-generates now and then
        text = json.dumps(_shuffled(value, random.Random(seed)), indent=indent).encode()
        assert dfa.matches(text), text

    check()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_random_objects_agree_with_jsonschema(name):
    """Random subsets of keys, values and orders: accepted exactly when jsonschema says valid."""
    schema, dfa = SCHEMAS[name], DFAS[name]

    @settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(members=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(POOL), max_size=6),
           seed=st.integers(0, 2**32))
    def check(members, seed):
        text = json.dumps(_shuffled(members, random.Random(seed))).encode()
        assert dfa.matches(text) == is_valid(schema, members), text

    check()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_repeated_declared_keys_refused(name):
    """A valid object with one of its declared members written twice (the parsed object would
    keep the last one only) is refused, wherever the copy goes."""
    schema, dfa = SCHEMAS[name], DFAS[name]

    @settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(value=from_schema(schema), data=st.data())
    def check(value, data):
        declared = [k for k in value if k in schema.get("properties", {})]
        if not is_valid(schema, value) or not declared:
            return
        key = data.draw(st.sampled_from(declared))
        items = [json.dumps(k) + ":" + json.dumps(v) for k, v in value.items()]
        items.insert(data.draw(st.integers(0, len(items))), json.dumps(key) + ":" + json.dumps(value[key]))
        text = ("{" + ",".join(items) + "}").encode()
        assert dfa.matches(json.dumps(value).encode()) and not dfa.matches(text), text

    check()


def test_declared_order_stays_the_default():
    schema = {"type": "object", "properties": {"reasoning": {"type": "string"}, "answer": {"type": "integer"}},
              "required": ["reasoning", "answer"], "additionalProperties": False}
    g = json_schema_grammar(schema)
    ordered = LazyDFA(g, max_depth=g.info["max_depth"])
    free = _dfa(schema)
    assert ordered.matches(b'{"reasoning": "r", "answer": 1}') and not ordered.matches(b'{"answer": 1, "reasoning": "r"}')
    assert free.matches(b'{"reasoning": "r", "answer": 1}') and free.matches(b'{"answer": 1, "reasoning": "r"}')


def _nfa_states(n: int) -> int:
    schema = {"type": "object", "properties": {f"p{i:02}": {"type": "integer"} for i in range(n)},
              "required": [f"p{i:02}" for i in range(0, n, 3)], "additionalProperties": False}
    return NFA(json_schema_grammar(schema, any_order=True)).num_states


def test_many_properties_are_linear_and_fast():
    sizes = {n: _nfa_states(n) for n in (10, 20, 40, 62)}
    step = (sizes[20] - sizes[10]) / 10
    assert sizes[40] - sizes[20] == 20 * step and sizes[62] - sizes[40] == 22 * step, sizes
    assert step <= 30, sizes                            # a few states per member, whatever n
    schema = {"type": "object", "properties": {f"p{i:02}": {"type": "string"} for i in range(62)},
              "required": ["p00", "p61"], "additionalProperties": False}
    t0 = time.perf_counter()
    dfa = _dfa(schema)
    dfa.row(dfa.initial)
    assert time.perf_counter() - t0 < 2.0
    # members far apart in the bit set, in any order
    text = b'{"p61": "a", "p40": "b", "p00": "c", "p31": "d"}'
    assert dfa.matches(text) and not dfa.matches(text.replace(b'"p00"', b'"p61"'))
    # past 62, the object keeps declared order, with a note in the compile report
    too_many = {"type": "object", "properties": {f"p{i:02}": {"type": "integer"} for i in range(63)}}
    g = json_schema_grammar(too_many, any_order=True)
    (note,) = g.info["report"]
    assert note.kind == "declared order" and note.path == "$" and "at most 62" in str(note)
    ordered = LazyDFA(g, max_depth=g.info["max_depth"])
    assert ordered.matches(b'{"p00": 1, "p62": 2}') and not ordered.matches(b'{"p62": 1, "p00": 2}')


@pytest.mark.parametrize("schema,why", [
    ({"type": "object", "properties": {f"p{i:02}": {} for i in range(56)}, "maxProperties": 1}, "at most 55"),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "maxProperties": 1, "dependentRequired": {"a": ["b"]}},
     "dependencies"),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "maxProperties": 130,
      "additionalProperties": {"type": "integer"}}, "127"),
])
def test_past_the_frame_objects_keep_declared_order(schema, why):
    g = json_schema_grammar(schema, any_order=True)
    assert [n.kind for n in g.info["report"]] == ["declared order"] and why in str(g.info["report"][0])
    plain = json_schema_grammar(schema)
    rng = random.Random(0)
    dfa, ref = LazyDFA(g, max_depth=g.info["max_depth"]), LazyDFA(plain, max_depth=plain.info["max_depth"])
    for _ in range(50):
        keys = rng.sample(sorted(schema["properties"]), min(3, len(schema["properties"])))
        text = json.dumps({k: 1 for k in keys}).encode()
        assert dfa.matches(text) == ref.matches(text), text


def test_count_bounds():
    # a bound nothing can break is dropped; one nothing can meet is an empty language
    closed = {"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False}
    assert _dfa({**closed, "maxProperties": 500}).matches(b'{"b": 1, "a": 2}')
    assert _dfa({**closed, "minProperties": 3}).is_empty


def test_dependency_conflicts_keep_every_state_live():
    """Taking a member whose needs clash with a member taken is refused at once (no dead end):
    here `a` needs `b`, and `c` forbids `b`, so after `c` the key `a` is not offered."""
    schema = {"type": "object", "additionalProperties": False, "properties": {k: {"type": "integer"} for k in "abc"},
              "dependentRequired": {"a": ["b"]}, "dependentSchemas": {"c": {"properties": {"b": False}}}}
    dfa = _dfa(schema)
    assert dfa.walk(dfa.initial, b'{"c": 1, "a') < 0 and dfa.walk(dfa.initial, b'{"c": 1, "b') < 0
    assert dfa.matches(b'{"b": 1, "a": 2}') and not dfa.matches(b'{"a": 2}')
    assert not dfa.matches(b'{"c": 1,}')


BIT = {"enum": [0, 1]}
FINITE = {
    "dependencies": {"type": "object", "additionalProperties": False, "properties": {k: BIT for k in "abcd"},
                     "required": ["d"], "dependentRequired": {"a": ["b"], "b": ["d"]},
                     "dependentSchemas": {"c": {"properties": {"b": False}}}},
    "counted": {"type": "object", "additionalProperties": False, "properties": {k: BIT for k in "abcd"},
                "required": ["a"], "minProperties": 2, "maxProperties": 3},
    "all taken": {"type": "object", "additionalProperties": False, "properties": {k: BIT for k in "ab"}},
}


@pytest.mark.parametrize("name", sorted(FINITE))
def test_every_state_is_live(name):
    """Every DFA state reached can still complete: no comma before a member that cannot come,
    no member whose needs clash with those taken (whole automata, the values being finite)."""
    dfa = _dfa(FINITE[name], whitespace="compact")
    assert dfa.explore() > 10
    for s in range(dfa.num_states):
        assert _reaches_accepting(dfa, s), s


def _reaches_accepting(dfa: LazyDFA, start: int) -> bool:
    todo, seen = [start], {start}
    while todo:
        s = todo.pop()
        if dfa.is_accepting(s):
            return True
        for t in dfa.row(s):
            if t >= 0 and t not in seen:
                seen.add(t)
                todo.append(t)
    return False


def test_any_order_node_ops():
    """The node alone: bans, required bits, needs and counts."""
    a, b, c = literal(b"a"), literal(b"b"), literal(b"c")
    comma = literal(b",")
    # a and c clash; b required; c needs a... which it cannot have: c is only allowed where a is absent
    body = AnyOrder((a, b, c), (0b101, 0b010, 0b101), 0b010, ((2, 0b001),), NOTHING, comma)
    dfa = LazyDFA(Grammar({"start": body}))
    assert [dfa.matches(t) for t in (b"b", b"a,b", b"b,a", b"c,b", b"a,c,b", b"b,b")] == [
        True, True, True, False, False, False]
    counted = AnyOrder((a, b), (0b01, 0b10), 0, (), c, comma, 1, 2)    # 1 or 2 of a, b, c...
    dfa = LazyDFA(Grammar({"start": counted}))
    assert [dfa.matches(t) for t in (b"", b"c", b"c,c", b"a,c,b", b"b,a", b"a,a")] == [
        False, True, True, False, True, False]


@requires_jit
def test_kernels_agree_on_the_frame_ops():
    from constrained.dfa_jit import JitDFA
    from tests.test_dfa_jit import same_language

    wide = {"type": "object", "properties": {f"p{i:02}": {"type": "integer"} for i in range(62)},
            "required": ["p05", "p50"], "additionalProperties": False,
            "dependentRequired": {"p40": ["p33"]}}
    for schema in (*SCHEMAS.values(), wide):
        g = json_schema_grammar(schema, any_order=True)
        jit, ref = JitDFA(g, max_depth=g.info["max_depth"]), LazyDFA(g, max_depth=g.info["max_depth"])
        assert same_language(jit, ref, max_pairs=3000) > 100
    g = json_schema_grammar(wide, any_order=True)
    jit, ref = JitDFA(g, max_depth=g.info["max_depth"]), LazyDFA(g, max_depth=g.info["max_depth"])
    rng = random.Random(1)
    for _ in range(40):        # members with bits past 31 (a frame the kernel's old stack keys folded)
        keys = rng.sample(sorted(wide["properties"]), rng.randint(1, 8))
        text = json.dumps({k: 1 for k in keys}).encode()
        assert jit.matches(text) == ref.matches(text) == is_valid(wide, {k: 1 for k in keys}), text


def test_budget_steered_generation_ends_complete():
    """A wandering "model" (uniform over the allowed tokens) steered by `completions` once the
    budget binds ends with a complete, valid document."""
    from constrained.budget import completions
    from constrained.compile import compile_json_schema
    from constrained.vocab import Vocabulary

    tokens = [bytes([b]) for b in range(32, 127)] + [b"\n", b'"a"', b'"b"', b'"c"', b": ", b", ", None]
    vocab = Vocabulary.from_token_bytes(tokens, eos_token_ids=[len(tokens) - 1])
    schema = SCHEMAS["required and optional"]
    fsm = compile_json_schema(schema, vocab, any_order=True)
    plan = completions(fsm)
    fewest = plan.tokens_needed(fsm.initial)
    assert fewest is not None
    for seed in range(6):
        rng = random.Random(seed)
        state, out, remaining = fsm.initial, [], fewest + 12
        while remaining > 0:
            ids = plan.steer(state, remaining)
            tok = int(rng.choice(list(fsm.allowed_token_ids(state) if ids is None else ids)))
            if not plan.fits(state, tok, remaining):       # drawn again from the steered set
                tok = int(rng.choice(list(plan.steer(state, remaining, force=True))))
            if tok == len(tokens) - 1:
                break
            out.append(tokens[tok])
            state = fsm.next_state(state, tok)
            remaining -= 1
        text = b"".join(out)
        assert fsm.is_accepting(state), text
        assert is_valid(schema, json.loads(text)), text


# -- the real-world schemas whose valid instances declared order rejects ------------------

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus" / "maskbench-dev"
OUT_OF_ORDER = ["Github_easy---o87817", "Github_easy---o90314", "Github_medium---o27148", "Github_medium---o42021",
                "Github_medium---o83270", "Glaiveai2K---calculate_area_ef245c1f", "JsonSchemaStore---semgrep"]


@pytest.mark.parametrize("name", OUT_OF_ORDER)
def test_corpus_schemas_out_of_declared_order(name, hf_tok, vocabulary):
    """Each test instance (and valid ones shuffled) through the byte DFA, and as `bench masks` walks
    it: its llama-bpe tokens through the token FSM, EOS at the end (the compiled trie walk too)."""
    path = CORPUS / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared/corpus/maskbench-dev: see shared/corpus/README.md)")
    from constrained.compile import compile_json_schema

    case = json.loads(path.read_text())
    dfa = _dfa(case["schema"])
    tok = hf_tok("llama-bpe")
    fsm = compile_json_schema(case["schema"], vocabulary("llama-bpe"), any_order=True)
    rng = random.Random(0)
    for test in case["tests"]:
        texts = [json.dumps(test["data"], ensure_ascii=False, separators=(",", ":"))]
        if test["valid"]:
            texts += [json.dumps(_shuffled(test["data"], rng), ensure_ascii=False) for _ in range(3)]
        for text in texts:
            assert dfa.matches(text.encode()) == test["valid"], (test["description"], text)
            state = fsm.initial
            for t in tok.encode(text, add_special_tokens=False):
                state = fsm.next_state(state, t) if state >= 0 else state
            assert (state >= 0 and fsm.is_accepting(state)) == test["valid"], (test["description"], text)
