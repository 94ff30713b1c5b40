"""Lazy NFA rules: subschemas built when the DFA first reaches them (`NFA.build_lazy`).

A `JitDFA` makes its NFA with ``lazy=True``: a large labeled node (a subschema)
that surely ends without a rule call becomes a FREE call to a rule whose body
is built on first reach. These tests hold it to the eager NFA: same masks,
every state live, byte classes split when a late body needs it, errors at
compile time, and an NFA left as it was when a build fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from constrained.compile import clear_cache, compile_json_schema
from grammars import lazy
from grammars.ast import AnyOrder, Grammar, alt, byte_range, literal, repeat, seq
from grammars.errors import StateBudgetError
from grammars.json_schema import json_schema_grammar
from grammars.nfa import NFA, SPLICE
from tests.conftest import requires_jit
from tests.test_dfa import check_random_grammar
from tests.test_lazy_compile import vocab_encode

pytestmark = requires_jit
from constrained.dfa_jit import JitDFA  # noqa: E402

CORPUS = Path(__file__).resolve().parent.parent / "bench" / "corpus"

# The schemas of the tests of the mechanism defer parts from this many syntax nodes (their
# size; whatever `lazy.LAZY_MIN` is, a trade of build overhead against compile time).
SMALL = 24

NESTED = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "size": {"type": "object", "properties": {"w": {"type": "number"}, "h": {"type": "number"},
                                                  "unit": {"enum": ["cm", "in"]}}, "required": ["w", "h"]},
        "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"},
                                                                             "v": {"type": "integer"}}}},
    },
    "required": ["name", "size"],
}


@pytest.fixture
def eager(monkeypatch):
    """Compile with the whole NFA built up front (as before lazy rules)."""
    def compile_eager(schema, vocab):
        clear_cache()
        with monkeypatch.context() as m:
            m.setattr(JitDFA, "lazy_nfa", False)
            fsm = compile_json_schema(schema, vocab)
        clear_cache()
        return fsm
    return compile_eager


def test_subschemas_are_built_when_first_reached(vocabulary, monkeypatch) -> None:
    vocab = vocabulary("llama-bpe")
    monkeypatch.setattr(lazy, "LAZY_MIN", SMALL)
    clear_cache()
    fsm = compile_json_schema(NESTED, vocab)
    nfa = fsm.dfa.nfa
    eager_states = NFA(json_schema_grammar(NESTED)).num_states
    assert nfa.unbuilt >= 2, "the nested object and the array's items are deferred"
    assert nfa.num_states < 0.6 * eager_states, (nfa.num_states, eager_states)
    before = nfa.unbuilt
    guide = fsm.guide()
    for t in _ids(vocab, json.dumps({"name": "a", "size": {"w": 1, "h": 2.5, "unit": "cm"}})):
        assert guide.advance(t)
    assert fsm.is_accepting(guide.state)
    assert nfa.unbuilt < before, "walking into `size` built its rule"
    assert (nfa.arrays.call_op == SPLICE).any(), "a body with one call site is spliced in (no frame)"


def _ids(vocab, text: str) -> list[int]:
    return vocab_encode(vocab, text)


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json"))[::3], ids=lambda p: p.stem)
def test_lazy_and_eager_masks_agree(path, vocabulary, eager) -> None:
    """Every mask along every valid test of a corpus schema is the eager NFA's mask."""
    vocab = vocabulary("llama-bpe")
    case = json.loads(path.read_text())
    try:
        want = eager(case["schema"], vocab)
    except Exception as e:  # noqa: BLE001 - a schema the compiler refuses is refused alike
        with pytest.raises(type(e)):
            clear_cache()
            compile_json_schema(case["schema"], vocab)
        return
    clear_cache()
    got = compile_json_schema(case["schema"], vocab)
    walked = 0
    for test in case["tests"]:
        if not test["valid"]:
            continue
        ids = _ids(vocab, json.dumps(test["data"]))
        a, b = fsm_masks(got, ids), fsm_masks(want, ids)
        assert len(a) == len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            assert np.array_equal(x, y), f"mask {i} of {test['description']!r}"
        walked += 1
    assert walked or not any(t["valid"] for t in case["tests"])


def fsm_masks(fsm, ids: list[int]) -> list[np.ndarray]:
    guide, out = fsm.guide(), []
    for t in ids:
        out.append(fsm.bitmask(guide.state).copy())
        if not guide.advance(t):
            break
    else:
        out.append(fsm.bitmask(guide.state).copy())
    return out


def test_byte_classes_split_when_a_late_rule_needs_it(monkeypatch) -> None:
    """A deferred part with bytes nothing built before tells apart: the DFA's byte classes
    split when it is built, rows computed before keep their targets, and it matches exactly."""
    monkeypatch.setattr(lazy, "LAZY_MIN", SMALL)
    late = alt(seq(literal(b"y" * 30), byte_range(ord("H"), ord("J"))), literal(b"z"))
    g = Grammar({"start": seq(literal(b"xxxx"), late)}, info={"labels": {id(late): (late, "$.late")}})
    dfa = JitDFA(g)
    assert dfa.nfa.unbuilt == 1 and dfa.num_classes == 2          # x and every other byte
    first = dfa.walk(dfa.initial, b"xxxx")                          # its closure builds `late`
    assert dfa.nfa.unbuilt == 0 and dfa.num_classes == 5           # y, z and H-J split off
    assert dfa.is_accepting(dfa.walk(first, b"z"))
    assert dfa.matches(b"xxxx" + b"y" * 30 + b"I") and not dfa.matches(b"xxxx" + b"y" * 30 + b"K")
    assert not dfa.matches(b"xxxx" + b"y" * 29 + b"H") and not dfa.matches(b"xxxxy")
    assert dfa.nfa.num_states == NFA(g).num_states + 3    # the same body; a call exit, a placeholder, a start


@pytest.mark.parametrize("head, deferred", [(b"", 0), (b"{", 0), (b"[ {", 0), (b"[{\"", 0), (b"[{\"k", 1)])
def test_parts_the_first_tokens_reach_are_built_at_compile(head: bytes, deferred: int, monkeypatch) -> None:
    """A labeled part that at most `OPENING` (3) bytes lead to from its rule's start is built
    at compile, since the first mask's tokens (`{"`, `[{"`) would build it at once; one
    further in is deferred. Nullable parts between (whitespace) read no byte."""
    monkeypatch.setattr(lazy, "LAZY_MIN", SMALL)
    late = alt(seq(literal(b"y" * 30), byte_range(ord("H"), ord("J"))), literal(b"z"))
    items = [byte_range(b, b) if b != 0x20 else repeat(literal(b" "), 0, None) for b in head]
    g = Grammar({"start": seq(*items, late)}, info={"labels": {id(late): (late, "$.late")}})
    dfa = JitDFA(g)
    assert dfa.nfa.unbuilt == deferred
    assert dfa.matches(head + b"z") and dfa.matches(head.replace(b" ", b"   ") + b"y" * 30 + b"I")
    assert dfa.matches(head.replace(b" ", b"") + b"z") and not dfa.matches(head + b"y" * 30 + b"K")


def test_any_order_objects_are_deferred_past_the_first_tokens(vocabulary, monkeypatch) -> None:
    """With `any_order`, an object's body (an `AnyOrder`) of `LAZY_MIN_IN_BODY` syntax nodes or
    more is deferred: the nested object is built when the DFA first reaches it, not at compile."""
    vocab = vocabulary("llama-bpe")
    monkeypatch.setattr(lazy, "LAZY_MIN_IN_BODY", SMALL)
    clear_cache()
    fsm = compile_json_schema(NESTED, vocab, any_order=True)
    nfa = fsm.dfa.nfa

    def bodies() -> int:
        return sum(type(node) is AnyOrder for node in nfa._lazy.values())

    assert bodies() == 1, "the nested object's body is deferred (the array's items are, with the array)"
    guide = fsm.guide()
    for t in _ids(vocab, json.dumps({"size": {"unit": "cm", "h": 2.5, "w": 1}, "name": "a"})):
        assert guide.advance(t)
    assert fsm.is_accepting(guide.state)
    assert bodies() == 0, "walking into `size` built its body"


@pytest.mark.parametrize("seed", range(60))
def test_random_labeled_grammars_lazy(seed: int, monkeypatch) -> None:
    """Random grammars with labeled parts, deferred from 2 nodes up: every DFA state
    live and every match as the reference matcher says."""
    monkeypatch.setattr(lazy, "LAZY_MIN", 2)
    check_random_grammar(seed, JitDFA, max_rules=2, counted=seed % 2 == 1, labeled=True, texts=80, max_len=8,
                         max_states=20000)


def test_minimum_past_64_bits_fails_at_compile_even_when_deferred(vocabulary) -> None:
    vocab = vocabulary("gpt-2")
    deep = {"type": "object", "properties": {"o": {"type": "object", "properties": {
        "x": {"type": "string"}, "y": {"type": "string"}, "z": {"type": "array", "minItems": 10**20}}}}}
    with pytest.raises(StateBudgetError, match="counted repeat's minimum"):
        compile_json_schema(deep, vocab)


def test_a_failed_build_leaves_the_nfa_as_it_was(vocabulary, monkeypatch) -> None:
    vocab = vocabulary("llama-bpe")
    clear_cache()
    fsm = compile_json_schema(NESTED, vocab)
    nfa = fsm.dfa.nfa
    state = (nfa.num_states, nfa.unbuilt, len(nfa.rule_start), nfa.arrays.edge_dst.copy())
    real = NFA._build_pending

    def failing(self):
        real(self)                            # the body and its subroutines are built, then it fails
        raise MemoryError("injected")

    monkeypatch.setattr(NFA, "_build_pending", failing)
    rule = next(r for r in nfa._lazy if r != 1)     # (rule 1, the deferred any-value prelude, is appended)
    with pytest.raises(MemoryError):
        nfa.build_lazy(rule)
    assert (nfa.num_states, nfa.unbuilt, len(nfa.rule_start)) == state[:3]
    assert np.array_equal(nfa.arrays.edge_dst, state[3])
    monkeypatch.setattr(NFA, "_build_pending", real)
    ids = _ids(vocab, json.dumps({"name": "x", "size": {"w": 1, "h": 2}, "tags": [{"k": "a", "v": 1}]}))
    guide = fsm.guide()
    for t in ids:
        assert guide.advance(t)
    assert fsm.is_accepting(guide.state)


OPEN = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}


def test_the_any_value_prelude_is_built_when_an_extra_member_reaches_it(vocabulary, monkeypatch) -> None:
    # an open object's extra members take any JSON value: that rule (the prelude, rule 1)
    # is not in the NFA at compile nor for the first mask, only once a walk reaches an
    # undeclared key's value (a mask inside a key does: tokens such as `x":` end in one)
    vocab = vocabulary("llama-bpe")
    clear_cache()
    fsm = compile_json_schema(OPEN, vocab)
    nfa = fsm.dfa.nfa
    assert 1 in nfa._lazy and nfa.rule_names[1] == "any_json_value"
    at_compile = nfa.num_states
    monkeypatch.setattr(NFA, "preludes", False)          # the eager NFA, for comparison
    eager = NFA(json_schema_grammar(OPEN), lazy=False)
    assert at_compile < eager.num_states // 2
    monkeypatch.undo()

    guide = fsm.guide()
    assert len(guide.allowed_token_ids()) > 1             # the first mask: before `{`, nothing reaches it
    assert 1 in nfa._lazy

    doc = {"id": 1, "name": "x", "extra": [{"a": None, "b": [1.5, "s", True]}, {}]}
    guide = fsm.guide()
    for t in _ids(vocab, json.dumps(doc)):
        assert guide.advance(t)
    assert guide.is_accepting()
    assert 1 not in nfa._lazy and nfa.rule_start[1] >= 0  # built, and the walk went on through it
    for bad in ('{"id": 1, "extra": [1,]}', '{"id": 1, "extra": {"a" 1}}'):
        guide = fsm.guide()
        ok = all(guide.advance(t) for t in _ids(vocab, bad))
        assert not (ok and guide.is_accepting()), bad


def test_a_failed_prelude_build_leaves_the_nfa_as_it_was(vocabulary, monkeypatch) -> None:
    vocab = vocabulary("llama-bpe")
    clear_cache()
    nfa = compile_json_schema(OPEN, vocab).dfa.nfa
    before = (nfa.num_states, nfa.unbuilt, len(nfa.rule_start), list(nfa.rule_names))

    real = NFA._append_prelude

    def failing(self):
        real(self)                            # its states and rules are appended, then it fails
        raise MemoryError("injected")

    monkeypatch.setattr(NFA, "_append_prelude", failing)
    with pytest.raises(MemoryError):
        nfa.build_lazy(1)
    monkeypatch.undo()
    # rolled back: the rule waits for its body again
    assert (nfa.num_states, nfa.unbuilt, len(nfa.rule_start), list(nfa.rule_names)) == before
    assert 1 in nfa._lazy and nfa._lazy_prelude is not None
    nfa.build_lazy(1)
    assert nfa.num_states > before[0] and nfa.rule_start[1] >= 0 and len(nfa.rule_start) > before[2]


def test_a_cached_lazy_nfa_keeps_no_per_edge_python_objects(vocabulary, monkeypatch) -> None:
    # between builds a lazy NFA's edges live in its numpy tables only, and the key tries kept
    # for its bodies as their words: a cached FSM then gives the cyclic GC little to walk
    vocab = vocabulary("llama-bpe")
    monkeypatch.setattr(lazy, "LAZY_MIN", SMALL)
    clear_cache()
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "size": NESTED["properties"]["size"]
                                               | {"additionalProperties": {"type": "integer"}}}}
    fsm = compile_json_schema(schema, vocab)
    nfa = fsm.dfa.nfa
    assert nfa.unbuilt and nfa._eps_src is None and nfa._call_op is None
    kept = [note for note in nfa._tries.values() if len(note) == 6]
    assert kept and all(note[1] is None and sorted(note[5]) == ["h", "unit", "w"] for note in kept)
    guide = fsm.guide()
    for t in _ids(vocab, json.dumps({"name": "a", "size": {"w": 1, "h": 2, "unit": "in", "d": 3}})):
        assert guide.advance(t)
    assert guide.is_accepting()
    assert getattr(nfa, "_eps_src", None) is None        # dropped again after the build (pure Python: deleted)
    for bad in ('{"size": {"w": 1, "h": 2, "w": 3}}', '{"size": {"w": 1, "h": 2, "d": "x"}}'):
        guide = fsm.guide()
        ok = all(guide.advance(t) for t in _ids(vocab, bad))
        assert not (ok and guide.is_accepting()), bad


CYCLE_SCHEMAS = [
    NESTED, OPEN,
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}, {"enum": ["a", "b"]}],
     "items": {"type": "boolean"}, "minItems": 2, "maxItems": 5},
    {"type": "object", "properties": {"e": {"enum": ["a", "bb", 3], "maxLength": 1},
                                      "p": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2}}},
    {"oneOf": [{"type": "object", "required": ["a"], "additionalProperties": False,
                "properties": {"a": {"type": "string"}}},
               {"type": "object", "required": ["b"], "properties": {"b": {"type": "integer"}}}]},
]


def test_a_compile_leaves_no_reference_cycles(vocabulary) -> None:
    # what a compile makes and drops is freed at once by reference counting; a cycle (a
    # recursive closure, an object holding its own bound method) kept the compile's state
    # until the GC's next pass, and that pass ran inside the next compile
    import gc

    vocab = vocabulary("llama-bpe")
    for schema in CYCLE_SCHEMAS:                          # modules and per-process tables loaded
        clear_cache()
        compile_json_schema(schema, vocab).guide().allowed_token_ids()
    clear_cache()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for schema in CYCLE_SCHEMAS:
            fsm = compile_json_schema(schema, vocab)
            fsm.guide().allowed_token_ids()
            del fsm
            clear_cache()
        gc.collect()
        ours = [o for o in gc.garbage
                if str(getattr(type(o), "__module__", "")).startswith(("grammars", "constrained"))
                or str(getattr(o, "__module__", "") if callable(o) else "").startswith(("grammars", "constrained"))]
        assert not ours, sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in ours})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_copying_a_fragment_built_before_a_body_reads_the_tables() -> None:
    """Between builds the columns are stand-ins (`_thaw_columns`): copying a fragment built
    before reads its edges from the tables and appends what a copy from full lists did."""
    nfa = NFA(json_schema_grammar(NESTED), lazy=True)
    assert nfa.unbuilt
    eps, byte, call = nfa._head_tables
    assert call.shape[1]                                      # (so the call columns are copied too)
    entry = 0
    frag = (entry, 0, 0, 0, 0, nfa._count, nfa.rule_end[0], eps.shape[1], byte.shape[1], call.shape[1])

    def copied(stand_ins: bool) -> tuple[list[int], ...]:
        twin = NFA(json_schema_grammar(NESTED), lazy=True)
        twin._thaw_columns()
        if not stand_ins:                                     # the lists as they were before stand-ins
            for name, row in zip(lazy._COLUMNS, (*eps, *byte, *call)):
                setattr(twin, name, row.tolist())
            twin._stub = None
        n = [len(getattr(twin, name)) for name in lazy._COLUMNS]
        start = twin._new()
        end = twin._copy(frag, start)
        return (end, twin._count), *(getattr(twin, name)[k:] for name, k in zip(lazy._COLUMNS, n))

    got = copied(True)
    assert got == copied(False)
    assert got[1] and got[3]                                  # edges were copied, not nothing


def test_a_body_called_from_before_its_build_is_spliced_in_the_tables(vocabulary) -> None:
    """The one call of a lazy body lies in the tables (the lists hold stand-ins): `_splice`
    finds it there and makes it a SPLICE, and the body's end goes on where the call did."""
    vocab = vocabulary("llama-bpe")
    clear_cache()
    fsm = compile_json_schema(NESTED, vocab)
    nfa = fsm.dfa.nfa
    rule = next(r for r in nfa._lazy if r != 1)
    site = int(np.flatnonzero(nfa._head_tables[2][1] == rule)[0])
    exit_ = int(nfa._head_tables[2][2, site])
    ids = _ids(vocab, json.dumps({"name": "x", "size": {"w": 1, "h": 2}, "tags": [{"k": "a", "v": 1}]}))
    guide = fsm.guide()
    for t in ids:                                             # the DFA builds the bodies it reaches
        assert guide.advance(t)
    assert fsm.is_accepting(guide.state)
    assert rule not in nfa._lazy
    a = nfa.arrays                                            # (every body built: the tables are gone)
    spliced = (a.call_op == SPLICE) & (a.call_dst == exit_)
    assert spliced.sum() == 1 and a.call_rule[spliced][0] == -1
    assert nfa.rule_start[rule] == nfa.rule_end[rule] != int(a.call_to[spliced][0])    # left to its placeholder
    eps_ptr, eps_dst = a.eps_ptr, a.eps_dst
    assert any(exit_ in eps_dst[eps_ptr[s]:eps_ptr[s + 1]].tolist() for s in range(nfa.num_states))
