"""Key masks shared between the states of an `any_order` object's keys (`constrained.key_twins`):
every mask along documents and random token walks equals the one computed without sharing, and
what the documents' members and values are is decided as `jsonschema` decides it."""

import json
import random

import numpy as np
import pytest

from bench.oracle import is_valid
from constrained.compile import compile_grammar
from constrained.dfa_jit import native_dfa_class
from constrained.gguf_tokenizers import hf_tokenizer
from constrained.state_masks import KeyTwinMasks
from constrained.token_fsm import FINISHED, TokenFSM
from constrained.vocab import Vocabulary
from grammars.json_schema import json_schema_grammar
from grammars.nfa import NFA
from tests.test_twins import _configurations

pytestmark = pytest.mark.skipif(native_dfa_class() is None, reason="key twins read the native DFA's configurations")

_NAMES = ["alpha", "alphabet", "beta", "gamma", "delta", "epsilon", "eta", "theta", "iota", "kappa"]
CASES = {
    "open": {"type": "object", "properties": {n: {"type": "integer"} for n in _NAMES}, "required": ["beta"]},
    "open, values typed": {"type": "object", "required": ["alpha"], "additionalProperties": {"type": "string"},
                           "properties": {n: ({"type": "boolean"} if i % 2 else {"type": "integer"})
                                          for i, n in enumerate(_NAMES)}},
    # the frame also counts the members (minProperties / maxProperties)
    "counted": {"type": "object", "minProperties": 3, "maxProperties": 6,
                "properties": {n: {"type": "integer"} for n in _NAMES}},
    # names written with escapes: the additional keys are then built the exact way (every
    # spelling), not as the raw key trie's complement, and nothing is shared
    "quotes in names": {"type": "object", "properties": {'a"b': {"type": "integer"}, "a\\b": {"type": "integer"},
                                                         "ab": {"type": "integer"}, "a": {"type": "integer"}}},
    # open objects nested in open objects, and in an array
    "nested": {"type": "object", "properties": {
        "inner": {"type": "object", "properties": {n: {"type": "integer"} for n in _NAMES[:6]}},
        "list": {"type": "array", "items": {"type": "object", "properties": {n: {"type": "null"} for n in _NAMES[3:]}}},
        **{n: {"type": "integer"} for n in _NAMES[:5]}}},
    # a pattern matching every name: additional keys as with additionalProperties
    "universal pattern": {"type": "object", "patternProperties": {".*": {"type": "integer"}},
                          "properties": {n: {"type": "integer"} for n in _NAMES[:6]}},
}


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary.from_tokenizer(hf_tokenizer("llama-bpe"))


@pytest.fixture(scope="module")
def tokenizer():
    return hf_tokenizer("llama-bpe")


def _pair(spec, vocab) -> tuple[TokenFSM, TokenFSM]:
    def make():
        return compile_grammar(json_schema_grammar(spec, any_order=True), vocab)
    fsm, ref = make(), make()
    ref.share_keys = False
    return fsm, ref


def _documents(spec: dict, seed: int) -> list[dict]:
    """Objects of the schema's names in shuffled orders, with additional names that share the
    declared ones' prefixes, and some that break it (a missing required name, a wrong value)."""
    rng = random.Random(seed)
    names = list(spec.get("properties", {}))
    docs = []
    for _ in range(6):
        chosen = rng.sample(names, rng.randint(1, len(names)))
        doc = {}
        for n in chosen:
            sub = spec["properties"][n]
            doc[n] = ({"alphaX": 1, "delta": 2} if sub.get("type") == "object" else
                      [{"eta": None, "etaa": None}] if sub.get("type") == "array" else
                      rng.choice([True, False]) if sub.get("type") == "boolean" else
                      None if sub.get("type") == "null" else rng.randint(-50, 5000))
        for extra in rng.sample(["alphab", "alph", "be", "gammaa", "zeta", "a\"", "x y", "ünï"], 3):
            doc[extra] = rng.choice([7, "text", True])
        items = list(doc.items())
        rng.shuffle(items)
        docs.append(dict(items))
    return docs


def _walk_both(fsm: TokenFSM, ref: TokenFSM, ids: list[int]) -> tuple[bool, int]:
    """The same tokens through both: equal masks and configurations at each step. Returns
    (whether the whole text was accepted, how many steps had a shared key mask)."""
    s, r = fsm.initial, ref.initial
    shared = 0
    for tok in ids:
        assert np.array_equal(fsm.bitmask(s), ref.bitmask(r))
        assert _configurations(fsm, s) == _configurations(ref, r)
        shared += isinstance(fsm.masks(s), KeyTwinMasks)
        s, r = fsm.next_state(s, tok), ref.next_state(r, tok)
        assert (s >= 0) == (r >= 0)
        if s < 0:
            return False, shared
    assert np.array_equal(fsm.bitmask(s), ref.bitmask(r))
    return fsm.is_accepting(s), shared


@pytest.mark.parametrize("name", list(CASES))
def test_shared_key_masks_equal_the_masks_computed_alone(name, vocab, tokenizer):
    spec = CASES[name]
    fsm, ref = _pair(spec, vocab)
    shared = 0
    for seed in range(3):
        for doc in _documents(spec, seed):
            for style in ({"separators": (",", ":")}, {}, {"ensure_ascii": False}):
                text = json.dumps(doc, **style)
                accepted, n = _walk_both(fsm, ref, tokenizer.encode(text, add_special_tokens=False))
                shared += n
                assert accepted == is_valid(spec, doc), text
    # the walks met keys sharing a mask (additional keys with a quote: in every other case)
    assert (shared > 20) == (name != "quotes in names")
    assert not any(isinstance(m, KeyTwinMasks) for m in ref._memo.values())


_PREFIXES = ['{"', '{"gamma": 1, "', '{"beta": 2, "alphab": 3, "', '{"alpha": 4, "zeta": 5, "', '{"beta":6,"iota":7,"']


@pytest.mark.parametrize("name", ["open", "counted"])
def test_random_tokens_in_keys_are_allowed_as_without_sharing(name, vocab, tokenizer):
    """Random tokens inside keys after different members were taken, mostly tokens holding a
    quote (they may close the key, where the members taken decide): the same masks and next
    states with and without sharing."""
    spec = CASES[name]
    fsm, ref = _pair(spec, vocab)
    quote_ids = np.array([i for i, b in enumerate(vocab.token_bytes) if b and b'"' in b])
    shared = 0
    for seed in range(6):
        rng = random.Random(seed)
        for prefix in _PREFIXES:
            s, r = fsm.initial, ref.initial
            for tok in tokenizer.encode(prefix, add_special_tokens=False):
                s, r = fsm.next_state(s, tok), ref.next_state(r, tok)
            for _ in range(4):
                assert np.array_equal(fsm.bitmask(s), ref.bitmask(r))
                shared += isinstance(fsm.masks(s), KeyTwinMasks)
                allowed = fsm.allowed_token_ids(s)
                quoted = np.intersect1d(allowed, quote_ids)
                pool = quoted if len(quoted) and rng.random() < 0.6 else allowed
                tok = int(rng.choice(pool.tolist()))
                s, r = fsm.next_state(s, tok), ref.next_state(r, tok)
                assert (s >= 0) == (r >= 0) and (s == FINISHED) == (r == FINISHED)
                if s == FINISHED:
                    break
                assert _configurations(fsm, s) == _configurations(ref, r)
    assert shared > 20


def test_every_transition_of_a_shared_key_state(vocab, tokenizer):
    fsm, ref = _pair(CASES["open"], vocab)
    text = '{"gamma": 1, "alphab": 2, "beta": 3, "'
    s, r = fsm.initial, ref.initial
    for tok in tokenizer.encode(text, add_special_tokens=False):
        s, r = fsm.next_state(s, tok), ref.next_state(r, tok)
    assert isinstance(fsm.masks(s), KeyTwinMasks)
    assert fsm.mask_key(s) == s                       # its mask is its own: caches of masks keep it apart
    ids, nxt = fsm.transitions(s)
    ref_ids, ref_nxt = ref.transitions(r)
    assert np.array_equal(ids, ref_ids)
    assert np.array_equal(fsm.allowed_token_ids(s), ref.allowed_token_ids(r))
    for i in range(0, len(ids), max(1, len(ids) // 60)):
        assert fsm.next_state(s, int(ids[i])) == nxt[i]
        assert np.array_equal(fsm.bitmask(int(nxt[i])), ref.bitmask(int(ref_nxt[i])))
    taken = [vocab.token_bytes.index(b) for b in (b'beta', b'gamma')]
    after = [fsm.next_state(s, t) for t in taken]
    quote = vocab.token_bytes.index(b'":')
    assert all(a >= 0 and fsm.next_state(a, quote) < 0 for a in after)    # a member taken: not again


@pytest.mark.parametrize("spec", [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
     "patternProperties": {"^x": {"type": "string"}}, "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
     "propertyNames": {"enum": ["a", "b", "cc"]}},
], ids=["closed", "patterns", "propertyNames"])
def test_keys_that_are_not_any_other_name_share_nothing(spec):
    """Only additional keys that read every name but the declared ones (the raw key trie's
    complement) read every member's key too, which sharing needs."""
    nfa = NFA(json_schema_grammar(spec, any_order=True))
    assert nfa.key_entries == []


def test_open_keys_are_built_without_calls():
    """The additional key's states are inline (no subroutine call inside it), its and every
    member key's recorded, and closed: only a lone quote leaves them."""
    from constrained.key_twins import _closed
    nfa = NFA(json_schema_grammar(CASES["open"], any_order=True))
    (extra, members), = nfa.key_entries
    assert len(members) == len(_NAMES) and None not in members
    ranges = [(*r, 0) for r in (extra, *members)]
    assert all(_closed(nfa.arrays, nfa.num_states, ranges))
    first, end = members[0]
    # with the state after the closing quote: not closed (the others still are)
    assert _closed(nfa.arrays, nfa.num_states, [(first, end + 1, 0), *ranges[2:]]) == [False] + [True] * (len(ranges) - 2)


def test_keys_of_an_object_built_later_share_too(vocab, tokenizer):
    """An object in a lazily built part of the schema brings its keys when it is built: the
    classes found before are kept, the new object's keys are added, and masks stay exact."""
    inner = {"type": "object", "properties": {n: {"type": "integer"} for n in _NAMES}}
    spec = {"type": "object", "$defs": {"inner": inner},
            "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/inner"}},
                           **{n: {"type": "string"} for n in _NAMES[:4]}}}
    fsm, ref = _pair(spec, vocab)
    before = len(fsm.dfa.nfa.key_entries)
    docs = [{"beta": "x", "zeta": 1, "kids": [{"gamma": 1, "x": 2, "alpha": 3}, {"alphab": 4, "iota": 5}]},
            {"kids": [{"theta": 1, "kappa": 2}], "alpha": "y", "gammaa": None}]
    shared = 0
    for doc in docs:
        accepted, n = _walk_both(fsm, ref, tokenizer.encode(json.dumps(doc), add_special_tokens=False))
        assert accepted == is_valid(spec, doc)
        shared += n
    assert len(fsm.dfa.nfa.key_entries) > before >= 1    # the inner object was built after compiling
    assert fsm._keys.entries == len(fsm.dfa.nfa.key_entries) and shared > 5
