"""Lazy DFA: depth bound, liveness, budget, byte classes, UTF-8 ranges."""

from __future__ import annotations

import itertools
import random
from functools import lru_cache

import numpy as np
import pytest

from grammars.ast import (
    EMPTY, NOTHING, Alt, ByteSet, Grammar, Node, Ref, Repeat, Seq, alt, byte_range, byteset, literal, optional,
    plus, repeat, seq, star,
)
from grammars.dfa import DEAD, UNEXPANDED, LazyDFA, compile_dfa
from grammars.errors import StateBudgetError
from grammars.regex import regex_grammar
from grammars.utf8 import codepoints, utf8_sequences


def json_like() -> Grammar:
    """Nested arrays/objects of numbers and strings, with optional spaces."""
    ws = star(byteset(b" "))
    number = seq(optional(literal(b"-")), plus(byte_range(0x30, 0x39)))
    string = seq(literal(b'"'), star(byte_range(0x61, 0x7A)), literal(b'"'))
    items = seq(Ref("value"), star(seq(ws, literal(b","), ws, Ref("value"))))
    member = seq(string, ws, literal(b":"), ws, Ref("value"))
    members = seq(member, star(seq(ws, literal(b","), ws, member)))
    return Grammar({
        "value": alt(Ref("array"), Ref("object"), number, string, literal(b"null")),
        "array": seq(literal(b"["), ws, optional(items), ws, literal(b"]")),
        "object": seq(literal(b"{"), ws, optional(members), ws, literal(b"}")),
    }, start="value")


def brackets() -> Grammar:
    """S -> "(" S ")" S | empty : balanced parentheses."""
    return Grammar({"S": alt(EMPTY, seq(literal(b"("), Ref("S"), literal(b")"), Ref("S")))}, start="S")


def reference_match(grammar: Grammar, data: bytes, max_depth: int) -> bool:
    """Independent matcher: set of end positions per (node, position, depth)."""

    @lru_cache(maxsize=None)
    def ends(node: Node, i: int, depth: int) -> frozenset[int]:
        if isinstance(node, ByteSet):
            return frozenset([i + 1]) if i < len(data) and data[i] in node else frozenset()
        if isinstance(node, Seq):
            cur = {i}
            for item in node.items:
                cur = {j for k in cur for j in ends(item, k, depth)}
            return frozenset(cur)
        if isinstance(node, Alt):
            return frozenset(j for item in node.items for j in ends(item, i, depth))
        if isinstance(node, Ref):
            if depth >= max_depth:
                return frozenset()
            return ends(grammar.rules[node.name], i, depth + 1)
        assert isinstance(node, Repeat)
        out: set[int] = set()
        cur, count = {i}, 0
        seen: set[tuple[int, ...]] = set()
        while cur:
            if count >= node.min:
                out |= cur
            if node.max is not None and count >= node.max:
                break
            key = tuple(sorted(cur))
            if count >= node.min and key in seen:
                break
            seen.add(key)
            cur = {j for k in cur for j in ends(node.item, k, depth)}
            count += 1
        return frozenset(out)

    return len(data) in ends(grammar.start_node, 0, 0)


def live_states(dfa: LazyDFA) -> tuple[set[int], int]:
    """Expand everything; return (states that can reach acceptance, #states)."""
    n = dfa.explore()
    rows = dfa.table
    live = {s for s in range(dfa.num_states) if dfa.is_accepting(s)}
    changed = True
    while changed:
        changed = False
        for s in range(dfa.num_states):
            if s not in live and any(int(t) in live for t in rows[s] if t >= 0):
                live.add(s)
                changed = True
    return live, n


# ---------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [0, 1, 2, 3, 5])
def test_recursion_depth_bound(depth: int) -> None:
    dfa = LazyDFA(brackets(), max_depth=depth)
    # Nesting k parentheses needs k + 1 nested calls of S... minus the start
    # rule itself: "(" * k needs depth k.
    for k in range(0, 8):
        assert dfa.matches(b"(" * k + b")" * k) == (k <= depth), k
    assert reference_match(brackets(), b"(())", depth) == (2 <= depth)


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_liveness_invariant_on_recursive_grammars(depth: int) -> None:
    for grammar in (json_like(), brackets()):
        dfa = LazyDFA(grammar, max_depth=depth)
        live, n = live_states(dfa)
        assert n == dfa.num_states
        assert live == set(range(dfa.num_states)), "a non-DEAD state cannot reach acceptance"


def test_liveness_with_dead_ends() -> None:
    # `b` can only be finished through a rule that never terminates: every
    # path through it must be pruned, not left as a stuck state.
    g = Grammar({"start": alt(seq(literal(b"a"), Ref("loop")), literal(b"ab")),
                 "loop": seq(literal(b"b"), Ref("loop"))})
    dfa = LazyDFA(g, max_depth=6)
    live, _ = live_states(dfa)
    assert live == set(range(dfa.num_states))
    assert dfa.walk(dfa.initial, b"abb") == DEAD
    assert dfa.matches(b"ab")


def test_empty_language() -> None:
    dfa = LazyDFA(Grammar({"start": NOTHING}))
    assert dfa.is_empty and not dfa.matches(b"")
    never = Grammar({"start": seq(literal(b"x"), Ref("start"))})
    assert LazyDFA(never, max_depth=10).is_empty
    assert not LazyDFA(Grammar({"start": EMPTY})).is_empty


@pytest.mark.parametrize("depth", [2, 4])
def test_json_like_agrees_with_reference(depth: int) -> None:
    g = json_like()
    dfa = LazyDFA(g, max_depth=depth)
    rng = random.Random(depth)
    samples = [b"[]", b"[1, 2]", b'{"a": [null]}', b"[[[]]]", b'{"k":{"k":1}}', b"[1,]", b"{1}"]
    alphabet = b'[]{}:," a1-nul'
    samples += [bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(300)]
    for data in samples:
        assert dfa.matches(data) == reference_match(g, data, depth), data


def test_state_budget_error() -> None:
    g = regex_grammar("(a|b)*a(a|b){12}")
    dfa = LazyDFA(g, max_states=200)
    with pytest.raises(StateBudgetError, match="200"):
        rng = random.Random(0)
        dfa.walk(dfa.initial, bytes(rng.choice(b"ab") for _ in range(5000)))
    assert LazyDFA(g, max_states=200).matches(b"a" * 13)


def test_byte_classes_move_alike_and_are_minimal_for_masks() -> None:
    g = regex_grammar(r"[a-f]+\d|[^x]é|\w{2}")
    dfa = LazyDFA(g)
    dfa.explore()
    classes = dfa.byte_class
    for mask in dfa.nfa.masks():
        inside = {int(classes[b]) for b in range(256) if mask >> b & 1}
        outside = {int(classes[b]) for b in range(256) if not mask >> b & 1}
        assert not inside & outside
    for s in range(dfa.num_states):
        row = dfa.transitions(s)
        for c in range(dfa.num_classes):
            assert len(set(row[classes == c].tolist())) == 1
        assert all(dfa.next_state(s, b) == row[b] for b in range(0, 256, 7))


def test_table_rows_and_arrays() -> None:
    dfa = compile_dfa(regex_grammar("ab|ac"))
    assert dfa.initial == 0 and dfa.table.shape == (1, dfa.num_classes)
    assert (dfa.table[0] == UNEXPANDED).all()
    dfa.expand(np.array([0]))
    assert (dfa.table[0] != UNEXPANDED).any()
    after_a = dfa.next_state(0, ord("a"))
    assert after_a >= 0 and not dfa.is_accepting(after_a)
    end = dfa.walk(after_a, b"c")
    assert dfa.accepting[end] and dfa.is_accepting(end)
    assert dfa.next_state(end, ord("c")) == DEAD and not dfa.is_accepting(DEAD)
    assert dfa.transitions(0).dtype == np.int32 and dfa.transitions(0).shape == (256,)
    assert dfa.nbytes > 0 and dfa.num_states == len(dfa.accepting)


def test_counted_repeats_and_nested_loops() -> None:
    g = Grammar({"start": seq(repeat(alt(literal(b"ab"), literal(b"a")), 2, 4), star(star(literal(b"c"))))})
    dfa = LazyDFA(g)
    for n in range(0, 7):
        for tail in (b"", b"cc"):
            data = b"ab" * n + tail
            assert dfa.matches(data) == reference_match(g, data, 0)


# ---------------------------------------------------------------------------
# UTF-8 ranges vs brute force


def _decodes_into(data: bytes, lo: int, hi: int) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return len(text) == 1 and lo <= ord(text) <= hi


@pytest.mark.parametrize("lo,hi", [(0, 0x10FFFF), (0x80, 0x7FF), (0x7F, 0x80), (0xD7FF, 0xE000),
                                   (0x3B1, 0x3C9), (0xFFFF, 0x10000), (0x1F600, 0x1F64F), (0x41, 0x41)])
def test_codepoints_vs_brute_force(lo: int, hi: int) -> None:
    dfa = LazyDFA(Grammar({"start": codepoints([(lo, hi)])}))
    for a, b in itertools.product(range(256), repeat=2):
        data = bytes([a, b])
        assert dfa.matches(data) == _decodes_into(data, lo, hi)
    rng = random.Random(lo)
    for _ in range(3000):
        data = bytes(rng.randrange(256) for _ in range(rng.choice((1, 3, 4))))
        assert dfa.matches(data) == _decodes_into(data, lo, hi), data
    for cp in rng.sample(range(lo, hi + 1), min(500, hi - lo + 1)):
        if not 0xD800 <= cp <= 0xDFFF:
            assert dfa.matches(chr(cp).encode())


def test_utf8_sequences_cover_exactly() -> None:
    rng = random.Random(1)
    for _ in range(30):
        lo = rng.randrange(0x110000)
        hi = min(0x10FFFF, lo + rng.choice((1, 100, 5000, 200000)))
        seqs = utf8_sequences(lo, hi)
        window = range(max(0, lo - 50), min(0x10FFFF, hi + 50) + 1)
        for cp in rng.sample(window, min(200, len(window))):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            enc = chr(cp).encode()
            hit = any(len(s) == len(enc) and all(a <= x <= b for x, (a, b) in zip(enc, s)) for s in seqs)
            assert hit == (lo <= cp <= hi), hex(cp)


def _random_node(rng: random.Random, names: list[str], d: int, counted: bool = False) -> Node:
    """A random grammar node. `counted`: more repeats, with bounds past the NFA's
    unroll limit (counter loops), and no empty sequences or alternations."""
    k = rng.randrange(7 if d < 3 else 2)
    if k == 0:
        return byteset(rng.sample(b"abc", rng.randint(1, 2)))
    if k == 1:
        return Ref(rng.choice(names)) if rng.random() < (0.5 if counted else 0.7) else literal(b"a")
    if k == 2:
        return seq(*[_random_node(rng, names, d + 1, counted) for _ in range(rng.randint(counted, 3))])
    if k == 3:
        return alt(*[_random_node(rng, names, d + 1, counted) for _ in range(rng.randint(counted, 3))])
    if k == 4 or counted:
        lo = rng.randint(0, 7 if counted else 2)
        hi = rng.choice([None, lo, lo + 1, lo + (5 if counted else 2)])
        return repeat(_random_node(rng, names, d + 1, counted), lo, hi)
    if k == 5:
        return Repeat(_random_node(rng, names, d + 1), 0, None)  # possibly nullable loop body
    return EMPTY


def check_random_grammar(seed: int, cls: type = LazyDFA, *, max_rules: int = 3, counted: bool = False,
                         max_states: int = 5000, texts: int = 60, max_len: int = 6, labeled: bool = False) -> None:
    """The random grammar of `seed` (`_random_node`): every DFA state live, and matches == the reference matcher.

    `labeled`: about half the sequences, alternations and repeats are labeled, as a
    schema's subschemas are, so that an NFA made with ``lazy=True`` defers them."""
    rng = random.Random(seed)
    names = [f"r{i}" for i in range(rng.randint(1, max_rules))]
    rules = {n: _random_node(rng, names, 0, counted) for n in names}
    info: dict = {}
    if labeled:
        info["labels"] = labels = {}
        todo = list(rules.values())
        while todo:
            node = todo.pop()
            if isinstance(node, (Seq, Alt, Repeat)):
                if rng.random() < 0.5:
                    labels[id(node)] = (node, f"$.n{len(labels)}")
                todo.extend(node.items if not isinstance(node, Repeat) else (node.item,))
    g = Grammar(rules, start=names[0], info=info)
    depth = rng.randint(0, 3)
    dfa = cls(g, max_depth=depth, max_states=max_states)
    live, _ = live_states(dfa)
    assert dfa.is_empty or live == set(range(dfa.num_states))
    for _ in range(texts):
        data = bytes(rng.choice(b"abc") for _ in range(rng.randint(0, max_len)))
        assert dfa.matches(data) == reference_match(g, data, depth), data


@pytest.mark.parametrize("seed", range(0, 120, 3))
def test_random_recursive_grammars(seed: int) -> None:
    """Differential (vs the reference matcher) and liveness on random grammars."""
    check_random_grammar(seed)
