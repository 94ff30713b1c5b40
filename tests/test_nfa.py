"""NFA construction: fragment replay, shared suffixes, finishability, byte classes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from grammars import fragments
from grammars.ast import NOTHING, Alt, ByteSet, Grammar, Ref, Seq, alt, literal, seq, star
from grammars.dfa import LazyDFA
from grammars.json_schema import json_schema_grammar
from grammars.byte_classes import byte_classes
from grammars.need import INF
from grammars.nfa import NFA
from grammars.regex import regex_grammar

CORPUS = Path(__file__).resolve().parent.parent / "bench" / "corpus"
SCHEMAS = sorted(CORPUS.glob("*.json"))
REGEXES = [r"[a-f]+\d|[^x]é|\w{2}", r"(ab|cd){2,5}x?", r"\d{1,3}(\.\d{1,3}){3}", r"[^\x00-\xff]|a", r"(a|b)*abb"]


def _grammar(path: Path) -> Grammar | None:
    try:
        return json_schema_grammar(json.loads(path.read_text())["schema"])
    except ValueError:
        return None


def _shape(nfa: NFA) -> tuple:
    return ([list(e) for e in nfa.eps], [list(e) for e in nfa.edges], [list(c) for c in nfa.calls],
            np.asarray(nfa.need).tolist(), nfa.rule_start, np.asarray(nfa.is_end).tolist())


@pytest.mark.parametrize("path", SCHEMAS[::3], ids=lambda p: p.stem)
def test_replay_and_fast_need_build_the_same_nfa(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g = _grammar(path)
    if g is None:
        pytest.skip("unsupported schema")
    monkeypatch.setattr(NFA, "subroutines", False)       # without replay there is nothing to call
    # a compact node's DFA has another shape (tested below); templates recorded with it carry it
    monkeypatch.setattr(NFA, "minimal_dfas", False)
    monkeypatch.setattr(fragments, "_TEMPLATES", {})
    fast = NFA(g, max_depth=g.info["max_depth"])
    monkeypatch.setattr(NFA, "replay", False)
    monkeypatch.setattr(NFA, "fast_need", False)
    slow = NFA(g, max_depth=g.info["max_depth"])
    assert _shape(fast) == _shape(slow)


@pytest.mark.parametrize("pattern", REGEXES)
def test_fast_need_matches_search_on_regexes(pattern: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = regex_grammar(pattern)
    fast = NFA(g)
    monkeypatch.setattr(NFA, "fast_need", False)
    assert np.asarray(fast.need).tolist() == np.asarray(NFA(g).need).tolist()


def test_dead_parts_are_not_finishable() -> None:
    # Seq/Alt built directly, bypassing the smart constructors' simplification
    g = Grammar({"start": Alt((Seq((literal(b"a"), NOTHING, literal(b"b"))), Seq((ByteSet(0), literal(b"c"))),
                                literal(b"d")))})
    nfa = NFA(g)
    assert nfa.need[nfa.rule_start[0]] == 0
    assert INF in list(nfa.need)
    dfa = LazyDFA(g)
    assert dfa.matches(b"d") and not dfa.matches(b"ab") and not dfa.matches(b"c")
    assert NFA(Grammar({"start": NOTHING})).need[0] == INF


def test_shared_suffixes_are_built_once() -> None:
    tail = seq(literal(b"-tail"), star(literal(b"x")))
    g = Grammar({"start": alt(*(seq(literal(bytes([97 + i])), tail) for i in range(20)))})
    nfa = NFA(g)
    assert nfa.num_states < 20 + 2 * 10  # one copy of the tail, not twenty
    dfa = LazyDFA(g)
    assert dfa.matches(b"c-tailxx") and not dfa.matches(b"c-tai") and not dfa.matches(b"-tail")


def test_recursive_rules_with_replayed_fragments() -> None:
    item = seq(literal(b"("), star(Ref("S")), literal(b")"))
    g = Grammar({"start": seq(Ref("S"), Ref("S")), "S": alt(item, literal(b"."))})
    dfa = LazyDFA(g, max_depth=4)
    assert dfa.matches(b"(.)(())") and not dfa.matches(b"(.)(()") and not dfa.matches(b"((((()))))")


def _many_optional(n: int) -> dict:
    kinds = [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}]
    return {"type": "object", "properties": {f"p{i}": kinds[i % 3] for i in range(n)},
            "additionalProperties": False}


def test_many_optional_properties_are_linear() -> None:
    sizes = [NFA(json_schema_grammar(_many_optional(n))).num_states for n in (40, 160)]
    assert sizes[1] < 4.5 * sizes[0]


def test_many_optional_properties_language() -> None:
    g = json_schema_grammar(_many_optional(40), whitespace="compact")
    dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    assert dfa.matches(b"{}")
    assert dfa.matches(b'{"p3":"x","p31":7,"p38":false,"p39":"y"}')
    assert dfa.matches(b'{"p0":"","p1":1}')
    assert not dfa.matches(b'{"p31":7,"p3":"x"}')      # declared order
    assert not dfa.matches(b'{,"p3":"x"}')
    assert not dfa.matches(b'{"p3":"x",}')
    assert not dfa.matches(b'{"p3":"x""p4":1}')
    assert not dfa.matches(b'{"p3":"x","p3":"y"}')


def _reference_classes(masks: set[int]) -> np.ndarray:
    bits = np.array([[m >> b & 1 for b in range(256)] for m in sorted(masks)], dtype=np.uint8)
    return np.unique(bits.T, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int32)


@pytest.mark.parametrize("masks", [{1 << 65}, {0b110, 0b011}, {(1 << 256) - 1, 0xFF << 100, 1}, {0, 5}])
def test_byte_classes_match_np_unique(masks: set[int]) -> None:
    assert byte_classes(masks).tolist() == _reference_classes(masks).tolist()
    assert byte_classes(set()).tolist() == [0] * 256


def test_byte_classes_on_a_schema() -> None:
    nfa = NFA(json_schema_grammar({"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}))
    assert byte_classes(nfa.masks()).tolist() == _reference_classes(nfa.masks()).tolist()


def test_shared_templates_build_the_same_nfa(monkeypatch: pytest.MonkeyPatch) -> None:
    import grammars.fragments as nfa_module

    g = json_schema_grammar({"type": "object", "properties": {"a": {"type": "string"}, "n": {"type": "number"}}})
    monkeypatch.setattr(nfa_module, "_TEMPLATES", {})
    monkeypatch.setattr(NFA, "subroutines", False)
    monkeypatch.setattr(NFA, "minimal_dfas", False)
    cold = NFA(g, max_depth=g.info["max_depth"])       # records the templates
    assert nfa_module._TEMPLATES                         # whitespace, string chars, numbers are shared
    warm = NFA(g, max_depth=g.info["max_depth"])       # replays them
    monkeypatch.setattr(NFA, "replay", False)
    plain = NFA(g, max_depth=g.info["max_depth"])
    assert _shape(cold) == _shape(warm) == _shape(plain)
    assert warm.arrays.masks == plain.arrays.masks
    assert warm.arrays.edge_mask.tolist() == plain.arrays.edge_mask.tolist()


def _same_language(a: LazyDFA, b: LazyDFA) -> bool:
    """Whether two DFAs accept the same bytes: a walk over the pairs of states reachable together."""
    todo, seen = [(a.initial, b.initial)], {(a.initial, b.initial)}
    while todo:
        p, q = todo.pop()
        if a.is_accepting(p) != b.is_accepting(q):
            return False
        for byte in range(256):
            pair = (a.next_state(p, byte) if p >= 0 else -1, b.next_state(q, byte) if q >= 0 else -1)
            if pair != (-1, -1) and pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return True


@pytest.mark.parametrize("schema", [
    {"type": "number"}, {"type": "number", "exclusiveMinimum": 0}, {"type": "number", "minimum": -90, "maximum": 90.5},
    {"type": "number", "minimum": 1e-5, "exclusiveMaximum": 1e20}, {"type": "number", "maximum": -0.25}])
def test_compact_nodes_keep_their_language_in_fewer_states(schema, monkeypatch: pytest.MonkeyPatch) -> None:
    # number fragments are `compact`: built from their minimal DFA, not as a tree of states
    g = json_schema_grammar(schema)
    small = LazyDFA(g)
    monkeypatch.setattr(NFA, "minimal_dfas", False)
    monkeypatch.setattr(fragments, "_TEMPLATES", {})
    generic = LazyDFA(g)
    assert small.nfa.num_states < generic.nfa.num_states
    assert _same_language(small, generic)


def _kernels():
    from constrained.dfa_jit import load_kernels

    k = load_kernels()
    if k is None:
        pytest.skip("needs numba (CONSTRAINED_JIT=0 or not installed)")
    return k


@pytest.mark.parametrize("masks", [{1 << 65}, {0b110, 0b011}, {(1 << 256) - 1, 0xFF << 100, 1}, {0, 5}, set(),
                                   {(1 << 128) - (1 << 48), 1 << 34 | 1 << 92, (1 << 123) - (1 << 97), 1 << 10}])
def test_compiled_byte_classes_match(masks: set[int]) -> None:
    """The same class ids as the Python version whatever order the masks come in (an NFA's are
    in order of first use), and a membership row per mask as given."""
    for ordered in (sorted(masks), sorted(masks, reverse=True), sorted(masks, key=lambda m: bin(m).count("1"))):
        raw = np.frombuffer(b"".join(m.to_bytes(32, "little") for m in ordered), np.uint8).reshape(len(ordered), 32)
        classes, rep, mask_cls = _kernels().byte_classes(raw)
        assert classes.tolist() == byte_classes(masks).tolist()
        assert rep.tolist() == [classes.tolist().index(c) for c in range(len(rep))]      # least byte of each class
        for i, m in enumerate(ordered):
            assert mask_cls[i].tolist() == [m >> b & 1 for b in rep.tolist()]


@pytest.mark.parametrize("k", [63, 64, 65, 130, 300])
def test_compiled_byte_classes_match_past_one_word(k: int) -> None:
    """More masks than one 64-bit word of membership: ranges and single bytes, as schemas have."""
    rng = np.random.default_rng(k)
    masks = set()
    while len(masks) < k:
        lo, n = int(rng.integers(0, 256)), int(rng.integers(1, 40))
        masks.add(((1 << n) - 1) << lo & ((1 << 256) - 1) if rng.random() < 0.5 else 1 << lo)
    masks.discard(0)
    test_compiled_byte_classes_match(masks)


@pytest.mark.parametrize("path", SCHEMAS[::4], ids=lambda p: p.stem)
def test_compiled_csr_matches_numpy(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g = _grammar(path)
    if g is None:
        pytest.skip("unsupported schema")
    _kernels()
    from constrained.need_kernel import csr_from_columns

    from constrained.need_kernel import finish_from_columns

    monkeypatch.setattr(NFA, "finish_kernel", None)
    monkeypatch.setattr(NFA, "csr_kernel", staticmethod(csr_from_columns))
    compiled = NFA(g, max_depth=g.info["max_depth"])
    monkeypatch.setattr(NFA, "csr_kernel", None)
    plain = NFA(g, max_depth=g.info["max_depth"])
    monkeypatch.setattr(NFA, "finish_kernel", staticmethod(finish_from_columns))
    fused = NFA(g, max_depth=g.info["max_depth"])       # need, is_end and the CSR columns in one call
    for got in (compiled, fused):
        for name, value in vars(plain.arrays).items():
            have = getattr(got.arrays, name)
            assert (have == value if name == "masks" else have.tolist() == value.tolist()), name
    assert np.asarray(fused.need).tolist() == np.asarray(plain.need).tolist()
    assert fused.is_end.dtype == plain.is_end.dtype and fused.is_end.tolist() == plain.is_end.tolist()


@pytest.mark.parametrize("schema", [
    {"type": "object"}, {"type": "object", "properties": {"a": {"type": "array"}, "b": {}}, "required": ["b"]},
    {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string", "maxLength": 3}}}},
    {"anyOf": [{"type": "object"}, {"type": "string"}]}])
def test_preludes_keep_the_language(schema, monkeypatch: pytest.MonkeyPatch) -> None:
    # the any-value rule is copied in from a per-process prelude, built once
    g = json_schema_grammar(schema)
    assert g.info["prelude"] == "any_json_value"
    with_prelude = LazyDFA(g, max_depth=3)
    again = NFA(g, max_depth=3)
    assert again.rule_names[1] == "any_json_value" and again.rule_start[0] > again.rule_start[1]
    monkeypatch.setattr(NFA, "preludes", False)
    without = LazyDFA(g, max_depth=3)
    assert without.nfa.rule_start[0] == 0
    assert _same_language(with_prelude, without)


# `any_order=True` objects: their frame tests (PICK ... CLEAR) are epsilon moves to `need`, alike
# in the Python search and the compiled kernels, and replayed fragments keep them.
ANY_ORDER = [
    {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}, "b": {"$ref": "#"},
                                                         "c": {"type": "array", "items": {"$ref": "#"}}},
     "dependentRequired": {"b": ["c"]}, "dependentSchemas": {"c": {"properties": {"d": False}}}},
    {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(40)}, "maxProperties": 5,
     "additionalProperties": {"type": "integer"}},
    {"type": "array", "items": {"type": "object", "properties": {"k": {}, "v": {"type": "object", "properties": {
        "x": {}, "y": {}}, "required": ["y"]}}}, "maxItems": 9},
]


@pytest.mark.parametrize("schema", ANY_ORDER)
def test_any_order_need_agrees_with_the_kernels(schema, monkeypatch: pytest.MonkeyPatch) -> None:
    g = json_schema_grammar(schema, any_order=True)
    depth = g.info["max_depth"]
    _kernels()
    compiled = NFA(g, max_depth=depth)
    for name in ("finish_kernel", "need_columns_kernel", "need_kernel", "csr_kernel"):
        monkeypatch.setattr(NFA, name, None)
    plain = NFA(g, max_depth=depth)
    assert np.asarray(compiled.need).tolist() == np.asarray(plain.need).tolist()
    assert [list(c) for c in compiled.calls] == [list(c) for c in plain.calls]
    monkeypatch.setattr(NFA, "subroutines", False)
    monkeypatch.setattr(NFA, "minimal_dfas", False)
    monkeypatch.setattr(fragments, "_TEMPLATES", {})
    fast = NFA(g, max_depth=depth)
    monkeypatch.setattr(NFA, "replay", False)
    monkeypatch.setattr(NFA, "fast_need", False)
    assert _shape(fast) == _shape(NFA(g, max_depth=depth))


def test_equal_dags_built_twice_compare_in_one_pass() -> None:
    """Node equality walks nodes as trees. Two equal DAGs built apart (a schema's parts copied into
    its own `patternProperties` and `if` branches) reached the same pair of distinct, equal
    subnodes 2^depth times, and one dict lookup in the NFA builder ran for minutes (found by
    `python -m bench.mutations --edit-schemas --structural`). Equal nodes now share their children
    once compared. In a child process, so that a regression fails here instead of hanging the run."""
    import subprocess
    import sys

    code = """
from grammars.ast import Alt, Repeat, Seq, literal
def dag(depth, leaf):
    node = literal(leaf)
    for i in range(depth):
        node = Alt((Seq((node, literal(b"a"))), Seq((node, literal(b"b")))))
        if i % 7 == 0:
            node = Repeat(node, 0, 2)
    return node
a, b, c = dag(64, b"x"), dag(64, b"x"), dag(64, b"y")
assert a is not b and a == b and {a: 1}[b] == 1
assert a != c and b != c
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-2000:]
