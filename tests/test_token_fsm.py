"""Token FSM and Guide, on real vocabularies, against a brute-force oracle.

The oracle walks *every* token's bytes through the byte DFA from a state
(vectorized over a padded token x byte matrix: it shares no code with the trie
walk or the slices) and allows EOS iff the state accepts.  States come from
walking valid strings of regexes and JSON schemas byte by byte, so they
include states inside multi-byte characters, counters and escapes.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained.compile import compile_json_schema, compile_regex
from constrained.errors import IncompatibleVocabularyError
from constrained.slices import equivalent as equivalent_states
from constrained.token_fsm import TokenFSM
from constrained.vocab import Vocabulary
from grammars.dfa import LazyDFA
from grammars.regex import regex_grammar
from tests.schema_corpus import BY_NAME

VOCABS = ["gpt-2", "llama-bpe", "llama-spm", "qwen2"]

# (regex, valid strings whose byte prefixes give the states to check)
REGEXES = [
    (r"[a-z]+@[a-z]+\.com", ["john@example.com", "a@b.com"]),
    (r"\d{3}-\d{4}", ["555-1234"]),
    (r"(foo|bar)*baz", ["foobarfoobaz"]),
    (r".{0,12}", ["héllo wörld!", "日本語のテキスト"]),
    (r'"([^"\\]|\\.)*"', ['"a \\"quoted\\" word, ok"', '"ünïcödé 😀"']),
    (r"[a-z ]{2,40}", ["the quick brown fox jumps"]),
    (r'\{"id": [0-9]{1,5}, "tags": \[("[a-z]{1,8}"(, )?)*\]\}', ['{"id": 42, "tags": ["ab", "cdef"]}']),
]
SCHEMAS = ["object_required", "string_length", "format_email", "enum_mixed", "tool_call",
           "pydantic_like", "not_enum", "number_plain", "format_datetime", "array_of_objects"]


# ---------------------------------------------------------------------------
# the oracle


class Oracle:
    """Every usable token's bytes as a padded matrix, walked through a DFA column by column."""

    def __init__(self, vocab: Vocabulary) -> None:
        eos = set(vocab.eos_token_ids)
        self.ids = np.array([i for i, b in enumerate(vocab.token_bytes) if b and i not in eos], dtype=np.int64)
        toks = [vocab.token_bytes[i] for i in self.ids]
        self.lens = np.array([len(t) for t in toks])
        width = int(self.lens.max())
        buf = b"".join(t.ljust(width, b"\0") for t in toks)
        self.mat = np.frombuffer(buf, dtype=np.uint8).reshape(len(toks), width)
        self.eos = np.array(sorted(eos), dtype=np.int64)

    def walk(self, dfa, state: int) -> tuple[np.ndarray, np.ndarray]:
        """(allowed sorted ids incl. EOS iff accepting, next state per usable token or -1)."""
        states = np.full(len(self.ids), state, dtype=np.int64)
        for j in range(self.mat.shape[1]):
            idx = np.flatnonzero((self.lens > j) & (states >= 0))
            if not len(idx):
                break
            dfa.expand(np.unique(states[idx]))
            states[idx] = dfa.table[states[idx], dfa.byte_class[self.mat[idx, j]]]
        allowed = self.ids[states >= 0]
        if dfa.is_accepting(state):
            allowed = np.union1d(allowed, self.eos)
        return np.sort(allowed), states


_oracles: dict[str, Oracle] = {}


@pytest.fixture(scope="session")
def oracle(vocabulary):
    def get(name: str) -> Oracle:
        if name not in _oracles:
            _oracles[name] = Oracle(vocabulary(name))
        return _oracles[name]
    return get


def prefix_states(dfa, texts: list[bytes], limit: int) -> list[int]:
    """Distinct DFA states at every byte prefix of `texts` (evenly subsampled to `limit`)."""
    states: list[int] = []
    for text in texts:
        q = dfa.initial
        states.append(q)
        for b in text:
            q = dfa.next_state(q, b)
            assert q >= 0, text
            states.append(q)
    states = list(dict.fromkeys(states))
    if len(states) > limit:
        states = [states[i * len(states) // limit] for i in range(limit)]
    return states


def unpack(bitmask: np.ndarray, size: int) -> np.ndarray:
    return np.flatnonzero(np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:size])


def check_states(fsm: TokenFSM, oracle: Oracle, states: list[int], rng: random.Random) -> None:
    dfa, size = fsm.dfa, fsm.index.size
    for q in states:
        expected, nxt = oracle.walk(dfa, q)
        got = fsm.allowed_token_ids(q)
        assert got.dtype == np.int32 and np.all(np.diff(got) > 0)
        if not np.array_equal(got, expected):
            extra, missing = np.setdiff1d(got, expected), np.setdiff1d(expected, got)
            tb = fsm.vocab.token_bytes
            pytest.fail(f"state {q}: {len(extra)} extra e.g. {[tb[i] for i in extra[:5]]}, "
                        f"{len(missing)} missing e.g. {[tb[i] for i in missing[:5]]}")
        assert np.array_equal(unpack(fsm.bitmask(q), size), expected)
        # next states of a sample of allowed tokens: the DFA's own, or an equivalent state
        alive = np.flatnonzero(nxt >= 0)
        for k in rng.sample(list(alive), min(25, len(alive))):
            want, have = int(nxt[k]), fsm.next_state(q, int(oracle.ids[k]))
            assert have == want or equivalent_states(dfa, have, want), (q, oracle.ids[k])


# ---------------------------------------------------------------------------
# differential tests


@pytest.mark.parametrize("name", VOCABS)
@pytest.mark.parametrize("pattern,texts", REGEXES, ids=[r[0][:24] for r in REGEXES])
def test_regex_masks_match_brute_force(name, pattern, texts, vocabulary, oracle):
    vocab = vocabulary(name)
    fsm = TokenFSM(LazyDFA(regex_grammar(pattern)), vocab)
    states = prefix_states(fsm.dfa, [t.encode() for t in texts], limit=12)
    check_states(fsm, oracle(name), states, random.Random(0))


@pytest.mark.parametrize("name", VOCABS)
@pytest.mark.parametrize("case", SCHEMAS)
def test_schema_masks_match_brute_force(name, case, vocabulary, oracle):
    vocab = vocabulary(name)
    entry = BY_NAME[case]
    fsm = compile_json_schema(entry["schema"], vocab, **entry["options"])
    texts = [json.dumps(v, ensure_ascii=False).encode() for v in entry["valid"]]
    texts = [t for t in texts if fsm.dfa.matches(t)]
    assert texts, case
    check_states(fsm, oracle(name), prefix_states(fsm.dfa, texts, limit=12), random.Random(1))


def test_slices_off_gives_same_masks(vocabulary):
    vocab = vocabulary("llama-bpe")
    for pattern, texts in REGEXES:
        dfa = LazyDFA(regex_grammar(pattern))
        sliced, plain = TokenFSM(dfa, vocab), TokenFSM(dfa, vocab, use_slices=False)
        for q in prefix_states(dfa, [t.encode() for t in texts], limit=8):
            assert np.array_equal(sliced.bitmask(q), plain.bitmask(q)), (pattern, q)
