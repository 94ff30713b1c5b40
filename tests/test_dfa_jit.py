"""The native lazy DFA (`constrained.dfa_jit.JitDFA`) against the Python one (`grammars.dfa.LazyDFA`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.corpus import DEFAULT_CORPUS, load_corpus
from grammars.ast import NOTHING, Grammar, Ref, alt, literal, optional, seq
from grammars.dfa import LazyDFA
from grammars.errors import StateBudgetError
from grammars.json_schema import json_schema_grammar
from grammars.regex import regex_grammar
from tests.test_dfa import brackets, json_like

from tests.conftest import requires_jit  # noqa: E402

pytestmark = requires_jit
from constrained.dfa_jit import JitDFA, load_kernels  # noqa: E402

REGEXES = [r"[a-z]+@[a-z]+\.(com|org)", r"(ab|a)*b?", r"\d{2,5}(\.\d+)?", r"([^\x00-\x2f]|[0-9_])+", r"(a|b)*a(a|b){4}"]


def corpus_grammars(limit: int | None = None) -> list[tuple[str, Grammar, int]]:
    out = []
    for case in load_corpus(DEFAULT_CORPUS, None)[:limit]:
        try:
            g = json_schema_grammar(case.schema)
        except ValueError:
            continue
        out.append((case.name, g, int(g.info.get("max_depth", 64))))
    return out


def same_language(a, b, max_pairs: int = 4000) -> int:
    """Product walk from both initial states: the same bytes lead to states agreeing on
    acceptance and death, byte by byte (a JitDFA over a lazy NFA starts with coarser byte
    classes, split as its lazy rules are built). Returns the number of state pairs checked."""
    todo = [(a.initial, b.initial)]
    seen = set(todo)
    while todo and len(seen) < max_pairs:
        x, y = todo.pop()
        assert (x < 0) == (y < 0), (x, y)
        if x < 0:
            continue
        assert a.is_accepting(x) == b.is_accepting(y), (x, y)
        for pair in zip(a.transitions(x).tolist(), b.transitions(y).tolist()):
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return len(seen)


def test_kernels_load():
    assert load_kernels() is not None, "numba is installed but the native DFA is off (CONSTRAINED_JIT=0?)"


@pytest.mark.parametrize("module, constant", [("dfa_kernels", "DFA_KERNELS_SHA256"), ("fsm_jit", "FSM_JIT_SHA256")])
def test_walk_kernels_record_the_kernels_they_compile_in(module, constant) -> None:
    # numba's cache of walk_kernels is keyed on that file only; it must change when the
    # modules whose kernels it calls do
    import hashlib
    from pathlib import Path

    import constrained.walk_kernels as walk

    source = (Path(walk.__file__).parent / f"{module}.py").read_bytes()
    assert getattr(walk, constant) == hashlib.sha256(source).hexdigest()[:16], (
        f"constrained/{module}.py changed: set walk_kernels.{constant} to its new hash")


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_languages_agree(pattern):
    g = regex_grammar(pattern)
    assert same_language(JitDFA(g), LazyDFA(g)) > 3


@pytest.mark.parametrize("make,depth", [(json_like, 12), (brackets, 20)])
def test_recursive_languages_agree(make, depth):
    g = make()
    jit, ref = JitDFA(g, max_depth=depth), LazyDFA(g, max_depth=depth)
    assert same_language(jit, ref) > 50
    for text in [b"[1,[2,[3]]]", b'{"a":[1,{"b":null}]}', b"(()())", b"((", b"[1,]"]:
        assert jit.matches(text) == ref.matches(text), text


def test_schema_corpus_languages_agree():
    checked = 0
    for name, g, depth in corpus_grammars():
        jit, ref = JitDFA(g, max_depth=depth), LazyDFA(g, max_depth=depth)
        assert jit.is_empty == ref.is_empty, name
        checked += same_language(jit, ref, max_pairs=1500)
    assert checked > 20_000


def test_corpus_instances_match():
    cases = {c.name: c for c in load_corpus(DEFAULT_CORPUS, None)}
    n = 0
    for name, g, depth in corpus_grammars(30):
        jit, ref = JitDFA(g, max_depth=depth), LazyDFA(g, max_depth=depth)
        for test in cases[name].tests:
            data = json.dumps(test["data"], ensure_ascii=False).encode()
            assert jit.matches(data) == ref.matches(data), (name, test["description"])
            n += 1
    assert n > 100


def test_budget_empty_and_sizes():
    g = regex_grammar(r"[a-z]{0,40}")
    with pytest.raises(StateBudgetError):
        JitDFA(g, max_states=10).explore()
    assert JitDFA(Grammar({"start": NOTHING})).is_empty
    nested = Grammar({"start": seq(literal(b"("), optional(Ref("start")), literal(b")"))})
    dfa = JitDFA(nested, max_depth=40)
    assert dfa.explore() == LazyDFA(nested, max_depth=40).explore()
    assert dfa.matches(b"(" * 40 + b")" * 40) and not dfa.matches(b"(" * 42 + b")" * 42)
    assert dfa.nbytes > 0 and dfa.table.shape == (dfa.num_states, dfa.num_classes)
    with pytest.raises(ValueError, match="max_depth"):
        JitDFA(alt_grammar(), max_depth=-1)


def alt_grammar() -> Grammar:
    return Grammar({"start": alt(literal(b"a"), literal(b"b"))})


def test_walk_tokens_matches_trie_walk(vocabulary):
    """The in-kernel walk (rows computed as met) reads the same tokens as the numpy trie walk."""
    from constrained.vocab_index import VocabIndex

    trie = VocabIndex.for_vocab(vocabulary("gpt-2")).trie
    for _, g, depth in corpus_grammars(12):
        jit, ref = JitDFA(g, max_depth=depth), LazyDFA(g, max_depth=depth)
        for text in [b"", b"{", b'{"', b"[", b'"']:
            x, y = jit.walk(jit.initial, text), ref.walk(ref.initial, text)
            if x < 0:
                continue
            ids, nxt = jit.walk_tokens(trie, np.array([-1], np.int32), np.array([x], np.int32), False)
            want_ids, want_next = trie.walk(y, ref.byte_class, lambda: ref.table, ref.expand)
            assert sorted(ids.tolist()) == sorted(want_ids.tolist())
            # next states differ in numbering; they must agree on acceptance
            got = dict(zip(ids.tolist(), (jit.is_accepting(s) for s in nxt.tolist())))
            assert got == dict(zip(want_ids.tolist(), (ref.is_accepting(s) for s in want_next.tolist())))


def test_native_equivalence_matches_python():
    """`JitDFA.equivalent` agrees with the Python product walk on state pairs (and `equivalence.equivalent` uses it)."""
    from constrained.equivalence import equivalent_py as equivalent

    checked = 0
    for _, g, depth in corpus_grammars(25):
        dfa = JitDFA(g, max_depth=depth)
        states = [dfa.initial]
        for s in states:
            if len(states) > 40:
                break
            states += [t for t in set(dfa.transitions(s).tolist()) if t >= 0 and t not in states]
        for a in states[:12]:
            for b in states[:12]:
                want = equivalent(dfa, a, b)
                assert dfa.equivalent(a, b) == want, (a, b)
                checked += 1
    assert checked > 1000
    # distinct states with one language: after `a` and after `c` (copies of the same suffix)
    for pattern, x, y in [(r"(a[0-9]{1,3}|c[0-9]{0,2}[0-9])z", b"a1", b"c1"), (r"a(xy)*|c(x(yx)*y)?", b"ax", b"cx"),
                          (r"a[0-9]+|c[0-9]*[0-9]", b"a", b"c")]:
        dfa = JitDFA(regex_grammar(pattern))
        a, b = dfa.walk(dfa.initial, x), dfa.walk(dfa.initial, y)
        assert a != b and equivalent(dfa, a, b) and dfa.equivalent(a, b), pattern
        assert not dfa.equivalent(a, dfa.initial) and not equivalent(dfa, a, dfa.initial)


def test_wide_states_and_scratch_growth():
    """States with more than 63 moves take the per-class path; the kernel scratch grows on demand."""
    from grammars.ast import byte_range

    # distinct suffixes (shared ones would be built once): after "a", all 90 branches are alive
    branches = [seq(byte_range(97, 97 + i % 26), byte_range(48 + i % 10, 57), literal(b"x%d" % i)) for i in range(90)]
    g = Grammar({"start": alt(*branches)})
    jit, ref = JitDFA(g), LazyDFA(g)
    assert same_language(jit, ref, 20_000) > 20
    n, a = jit.nfa.num_states, jit.nfa.arrays
    moves = [sum(int(a.edge_ptr[c % n + 1] - a.edge_ptr[c % n]) for c in jit._cfg_data[jit._cfg_ptr[s]:jit._cfg_ptr[s + 1]]
                 if c >= 0) for s in range(jit.num_states)]
    assert max(moves) > 63 and len(jit._W[5]) > 256
    for text in [b"a0x0", b"z9x89", b"m5x12", b"a", b"a5x7", b"b0x1"]:
        assert jit.matches(text) == ref.matches(text), text


def test_walk_tokens_steps_from_states_before_the_nodes(vocabulary):
    """Mode 2 (states before each start node's byte) equals stepping first, then mode 1; the
    packed mask the kernel sets as it goes is that of the tokens it gives."""
    from constrained.slices import ids_bitmask
    from constrained.vocab_index import VocabIndex

    trie = VocabIndex.for_vocab(vocabulary("gpt-2")).trie
    for _, g, depth in corpus_grammars(8):
        fresh, stepped = JitDFA(g, max_depth=depth), JitDFA(g, max_depth=depth)
        q = fresh.walk(fresh.initial, b'{"')
        if q < 0:
            continue
        nodes = np.arange(0, trie.n_nodes, 97, dtype=np.int32)
        before = np.full(len(nodes), q, dtype=np.int32)
        n_words = (int(trie.term_ids.max()) >> 5) + 1
        words = np.zeros(n_words, np.uint32)
        ids, nxt = fresh.walk_tokens(trie, nodes, before, 2, words)   # rows computed as met
        assert len(ids) and np.array_equal(words.view(np.int32), ids_bitmask(ids, n_words))   # their packed mask
        q2 = stepped.walk(stepped.initial, b'{"')
        after = np.array([stepped.next_state(q2, int(b)) for b in trie.byte[nodes]], dtype=np.int32)
        want_ids, want_next = stepped.walk_tokens(trie, nodes, after, 1)
        assert sorted(ids.tolist()) == sorted(want_ids.tolist())
        assert sorted(map(fresh.is_accepting, nxt.tolist())) == sorted(map(stepped.is_accepting, want_next.tolist()))


def test_kernels_that_fail_to_load_fall_back_to_the_python_dfa(monkeypatch):
    """A kernel build error warns once and compiling goes on with `LazyDFA` (same answers)."""
    import constrained.dfa_jit as dfa_jit
    import constrained.dfa_loader as dfa_loader
    from constrained.compile import compile_grammar
    from types import SimpleNamespace

    def broken():
        raise RuntimeError("no LLVM for this CPU")

    from grammars.nfa import NFA

    monkeypatch.setattr(dfa_loader, "_loaded", False)
    monkeypatch.setattr(dfa_loader, "_kernels", None)
    monkeypatch.setattr(dfa_loader, "_warm_up", broken)
    for name in ("need_kernel", "need_columns_kernel", "csr_kernel", "finish_kernel"):
        monkeypatch.setattr(NFA, name, getattr(NFA, name))      # restored afterwards
    with pytest.warns(RuntimeWarning, match="no LLVM for this CPU"):
        assert dfa_jit.native_dfa_class() is None
    assert NFA.need_kernel is NFA.need_columns_kernel is NFA.csr_kernel is NFA.finish_kernel is None  # NFA steps too
    v = SimpleNamespace(token_bytes=(b"1", b"2", b"12", None), eos_token_ids=(3,), size=4, fingerprint="fallback")
    fsm = compile_grammar(regex_grammar("[12]+"), v)
    assert type(fsm.dfa) is LazyDFA and fsm.guide().allowed_token_ids().tolist() == [0, 1, 2]
