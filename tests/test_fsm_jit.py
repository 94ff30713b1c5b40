"""The compiled first-visit kernels (`constrained.fsm_jit`) against their numpy twins.

Each case runs twice over one shared DFA (so state ids mean the same in
both), first with the kernels, then with ``fsm_jit.load_kernels`` returning
None: every visited state's masks, ids, next states and slice view must be
identical.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.mask_corpus import CASES as BENCH_CASES
from constrained import fsm_jit
from constrained.token_fsm import TokenFSM
from grammars.dfa import LazyDFA
from grammars.json_schema import json_schema_grammar
from grammars.regex import regex_grammar
from tests.conftest import requires_jit
from tests.test_token_fsm import REGEXES, prefix_states

pytestmark = requires_jit


def _cases() -> list[tuple[str, object, int, list[bytes]]]:
    cases = [(p, regex_grammar(p), 64, [t.encode() for t in texts]) for p, texts in REGEXES]
    # keys that must differ from the declared names (first bytes excluded from a view) and
    # short maximum lengths (views whose counter closes)
    keys = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 3}, "nick": {"type": "string"}},
            "additionalProperties": {"type": "string", "minLength": 2, "maxLength": 6}}
    schemas = [(case["name"], case["schema"], case["instances"]) for case in BENCH_CASES[:8]]
    schemas.append(("keys", keys, [{"name": "abc", "nick": "x", "other": "yz"}, {"nab": "ééé", "n": "éé"}]))
    for name, schema, instances in schemas:
        g = json_schema_grammar(schema)
        texts = [json.dumps(v, ensure_ascii=False).encode() for v in instances]
        cases.append((name, g, g.info["max_depth"], texts))
    return cases


def _visit(dfa, texts: list[bytes], vocab) -> dict[int, object]:
    fsm = TokenFSM(dfa, vocab)
    return {q: fsm.masks(q) for q in prefix_states(dfa, texts, limit=48)}


def _same_view(a, b) -> bool:
    if a is None or b is None:
        return a is b
    same_excluded = (a.excluded is None) == (b.excluded is None) and (
        a.excluded is None or np.array_equal(a.excluded, b.excluded))
    return (a.slice.name == b.slice.name and np.array_equal(a.rows, b.rows) and a.cycle == b.cycle
            and a.capacity == b.capacity and same_excluded)


@pytest.mark.parametrize("name, dfa_kind", [("llama-bpe", "lazy"), ("gpt-2", "lazy"), ("llama-bpe", "native")])
def test_kernels_match_numpy(name, dfa_kind, vocabulary, monkeypatch):
    """Same states, masks, next states and slice views with and without the kernels."""
    pytest.importorskip("numba")
    from constrained.dfa_jit import native_dfa_class

    dfa_class = LazyDFA if dfa_kind == "lazy" else native_dfa_class()
    assert dfa_class is not None
    chains = []                                   # the native DFA's views, from `view_rows` in one kernel call
    if dfa_kind == "native":
        view_rows = dfa_class.view_rows
        monkeypatch.setattr(dfa_class, "view_rows", lambda self, *a: chains.append(view_rows(self, *a)) or chains[-1])
    assert fsm_jit.load_kernels() is not None, "numba is installed but the kernels are off (CONSTRAINED_JIT=0?)"
    vocab = vocabulary(name)
    # each state's own masks (`_compute`), not a twin's shared ones (`constrained.twins`)
    monkeypatch.setattr(TokenFSM, "share_counts", False)
    checked = viewed = 0
    for case, grammar, depth, texts in _cases():
        dfa = dfa_class(grammar, max_depth=depth)
        compiled = _visit(dfa, texts, vocab)
        with monkeypatch.context() as m:
            m.setattr(fsm_jit, "load_kernels", lambda: None)
            plain = _visit(dfa, texts, vocab)
        assert list(compiled) == list(plain), case
        for q, want in plain.items():
            got = compiled[q]
            assert np.array_equal(got.bitmask, want.bitmask), (case, q)
            assert np.array_equal(got.ids, want.ids) and np.array_equal(got.next, want.next), (case, q)
            assert got.accepting == want.accepting and _same_view(got.view, want.view), (case, q)
            checked += 1
            viewed += want.view is not None
    assert checked > 300 and viewed > 100, (checked, viewed)
    if dfa_kind == "native":
        rows = [c for c in chains if c not in (None, False)]
        assert len(rows) > 100 and any(c[3] is not None for c in rows) and any(c[1] is None for c in rows)


def test_flatten_moves_layout():
    moves = [[(0, np.array([1, 2])), (1, np.array([7]))], [(0, np.array([9]))]]
    flat = flatten_moves(moves)
    n = len(moves)
    groups = [flat[flat[a]:flat[a + 1]].reshape(-1, 3).tolist() for a in range(n)]
    got = [[(b, flat[lo:hi].tolist()) for b, lo, hi in g] for g in groups]
    assert got == [[(0, [1, 2]), (1, [7])], [(0, [9])]]


flatten_moves = fsm_jit.flatten_moves


@pytest.mark.parametrize("name", ["llama-bpe", "llama-spm"])
def test_byteset_slice_kernel_matches_numpy(name, vocabulary, monkeypatch):
    """Byte-set slices built by the kernel equal the numpy ones, field by field."""
    pytest.importorskip("numba")
    from constrained.slices import build_byteset_slice
    from constrained.vocab_index import VocabIndex
    from tests.test_token_fsm import _BYTESETS

    index = VocabIndex.for_vocab(vocabulary(name))
    fields = ("table", "end", "complete", "started", "member", "bitmask", "exits", "exit_from",
              "exit_level", "exit_first", "used_from")
    for chars in _BYTESETS + [b"", b"\x00", b"!$&'()*+,-.0123456789;=ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"]:
        mask = sum(1 << b for b in chars)
        fast = build_byteset_slice(mask, index.trie, index.usable, index.n_words)
        with monkeypatch.context() as m:
            m.setattr(fsm_jit, "load_kernels", lambda: None)
            slow = build_byteset_slice(mask, index.trie, index.usable, index.n_words)
        assert fast.name == slow.name and fast.max_started == slow.max_started, chars
        for field in fields:
            a, b = getattr(fast, field), getattr(slow, field)
            assert a.dtype == b.dtype, (field, chars)
            np.testing.assert_array_equal(a, b, err_msg=f"{field} {chars!r}")
