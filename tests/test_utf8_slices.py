"""UTF-8 slices minus a few ASCII bytes (search patterns inside strings), on real vocabularies.

A search pattern such as `"pattern": "[0-9]"` sends a few ASCII bytes elsewhere
at every character, so the precomputed UTF-8 slices are irregular there; the
token FSM then uses a UTF-8 slice that also excludes those bytes, derived from
a precomputed one (`slices.derive_utf8_slice`).  Checked here: the derived
slice equals the generic construction, such states get it, and their masks
and next states equal those of the plain trie walk and of a brute-force walk.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from constrained.compile import compile_json_schema, compile_regex
from constrained.slices import UTF8_SLICES, build_slice, derive_utf8_slice, nodes_by_byte, utf8_table
from constrained.equivalence import equivalent as equivalent_states
from constrained.token_fsm import TokenFSM
from constrained.vocab_index import VocabIndex
from tests.test_token_fsm import Oracle, check_states, prefix_states

_JSON = UTF8_SLICES["json_string"]
_LINE = UTF8_SLICES["line"]
# (base slice, excluded bytes of the derived slice)
_DERIVED = [
    ("json_string", _JSON + b"0123456789"),
    ("json_string", _JSON + b"@"),
    ("json_string", _JSON + b"f"),
    ("json_string", _JSON + bytes(range(ord("a"), ord("z") + 1)) + b" "),
    ("json_string", _JSON),                           # nothing more: the base itself
    ("line", _LINE + b"x/"),
]
# (schema or regex, texts whose prefixes give the states checked)
_SEARCH_SCHEMAS = [
    ({"type": "string", "pattern": "[0-9]"}, ["héllo wörld 42 ünï 😀", "日本語 7"]),
    ({"type": "string", "pattern": "@", "maxLength": 6}, ["é@日b", "ab@"]),
    ({"type": "string", "pattern": "foo"}, ["Ünïcode then foo and ñ"]),
]
_SEARCH_REGEXES = [(".*foo.*", ["añb 日本 foo ü"])]


def _index_and_base(vocab, name: str):
    index = VocabIndex.for_vocab(vocab)
    k = list(UTF8_SLICES).index(name)
    return index, index.slices[k], index._slice_states[k]


@pytest.mark.parametrize("name", ["llama-bpe", "gpt-2", "llama-spm"])
def test_derived_slice_matches_generic_construction(name, vocabulary):
    """`derive_utf8_slice` equals `build_slice(utf8_table(excluded))`; its `used_from` may be larger."""
    vocab = vocabulary(name)
    for base_name, excluded in _DERIVED:
        index, base, states = _index_and_base(vocab, base_name)
        fast = derive_utf8_slice(base, states, excluded, index.trie, nodes_by_byte(index.trie), index.n_words)
        slow = build_slice("x", utf8_table(excluded), index.trie, index.usable, index.n_words)
        assert fast.max_started == slow.max_started, excluded
        for field in ("table", "end", "member", "bitmask", "exits", "exit_from", "exit_level", "exit_first"):
            np.testing.assert_array_equal(getattr(fast, field), getattr(slow, field), err_msg=f"{field} {excluded!r}")
        members = slow.member
        for field in ("complete", "started"):
            np.testing.assert_array_equal(getattr(fast, field)[members], getattr(slow, field)[members])
        # every move a token makes is checked by `slice_view` (extra ones only make it stricter)
        levels = len(slow.used_from)
        deep = fast.used_from[np.minimum(np.arange(levels), len(fast.used_from) - 1)]
        assert not (slow.used_from & ~deep).any(), excluded
        for a, (got, want) in enumerate(zip(fast.moves, slow.moves)):
            assert [(b, ids.tolist()) for b, ids in got] == [(b, ids.tolist()) for b, ids in want], (excluded, a)
        mask = sum(1 << b for b in range(0x80) if b not in excluded)
        assert fast.name == f"utf8:{mask:x}"


def test_derived_slice_needs_a_base_that_excludes_less(vocabulary):
    index, base, states = _index_and_base(vocabulary("gpt-2"), "json_string")
    with pytest.raises(ValueError, match="excludes bytes"):
        derive_utf8_slice(base, states, b"@", index.trie, nodes_by_byte(index.trie), index.n_words)
    with pytest.raises(ValueError, match="excludes bytes"):
        derive_utf8_slice(base, states, _JSON + b"\xc3", index.trie, nodes_by_byte(index.trie), index.n_words)
    # a newline and a quote allowed: neither json_string nor line excludes a subset
    assert index.utf8_slice((1 << 128) - 1) is None
    with pytest.raises(ValueError, match="ASCII"):
        index.utf8_slice(1 << 200)


def test_utf8_slice_cache_is_bounded_lru(vocabulary, monkeypatch):
    import constrained.vocab_index as vocab_index

    index = VocabIndex.for_vocab(vocabulary("gpt-2"))
    monkeypatch.setattr(vocab_index, "_UTF8_SLICES", 2)
    full = sum(1 << b for b in range(0x80) if b not in _JSON)
    masks = [full & ~(1 << ord(c)) for c in "qrs"]
    first = index.utf8_slice(masks[0])
    assert index.utf8_slice(masks[0]) is first and index.cached_utf8_slice(masks[0]) is first
    index.utf8_slice(masks[1])
    index.cached_utf8_slice(masks[0])                 # used: masks[1] is now the oldest
    index.utf8_slice(masks[2])
    assert index.cached_utf8_slice(masks[1]) is None
    assert index.cached_utf8_slice(masks[0]) is first and index.cached_utf8_slice(masks[2]) is not None


def _search_fsms(vocab):
    for schema, texts in _SEARCH_SCHEMAS:
        fsm = compile_json_schema(schema, vocab)
        yield fsm, [json.dumps(t, ensure_ascii=False).encode() for t in texts]
    for pattern, texts in _SEARCH_REGEXES:
        yield compile_regex(pattern, vocab), [t.encode() for t in texts]


@pytest.mark.parametrize("name", ["llama-bpe", "gpt-2"])
def test_search_pattern_states_use_utf8_slice_and_match_plain_walk(name, vocabulary):
    """Search-pattern states get a derived UTF-8 view; masks and next states equal the plain walk's."""
    vocab = vocabulary(name)
    rng = random.Random(3)
    for fsm, texts in _search_fsms(vocab):
        plain = TokenFSM(fsm.dfa, vocab, use_slices=False)   # the same DFA: state ids agree
        derived = 0
        for q in prefix_states(fsm.dfa, texts, limit=40):
            view = fsm.masks(q).view
            derived += view is not None and view.slice.name.startswith("utf8:")
            assert np.array_equal(fsm.bitmask(q), plain.bitmask(q)), q
            allowed = fsm.allowed_token_ids(q)
            for t in rng.sample(allowed.tolist(), min(40, len(allowed))):
                a, b = fsm.next_state(q, t), plain.next_state(q, t)
                assert a == b or equivalent_states(fsm.dfa, a, b), (q, t)
        assert derived, texts


@pytest.mark.parametrize("name", ["llama-bpe", "llama-spm"])
def test_search_pattern_masks_match_brute_force(name, vocabulary):
    vocab = vocabulary(name)
    oracle = Oracle(vocab)
    for fsm, texts in _search_fsms(vocab):
        check_states(fsm, oracle, prefix_states(fsm.dfa, texts, limit=12), random.Random(4))
