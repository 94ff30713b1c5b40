"""The first mask of a JSON document taken the short way over its leading whitespace (`constrained.lead_gap`)
is the full trie walk's: same tokens, and next states that allow the same tokens."""

from __future__ import annotations

import numpy as np
import pytest

from constrained.compile import compile_grammar
from constrained.dfa_jit import native_dfa_class
from constrained.lead_gap import in_gap
from constrained.token_fsm import TokenFSM
from grammars.errors import ConstraintError
from grammars.json_schema import json_schema_grammar
from grammars.json_values import WhitespacePolicy
from tests.conftest import requires_jit
from tests.schema_corpus import CORPUS

POLICIES = [
    WhitespacePolicy(),
    WhitespacePolicy(max_spaces=2, max_newlines=2, max_indent=4),
    WhitespacePolicy(indent_chars=" "),
    WhitespacePolicy(max_spaces=0, max_newlines=1, max_indent=0),
    WhitespacePolicy(max_spaces=3, max_newlines=0),
]


@pytest.mark.parametrize("gap, policy, member", [
    (b"", WhitespacePolicy(), True),
    (b" ", WhitespacePolicy(), True),
    (b"  ", WhitespacePolicy(), False),
    (b"  ", WhitespacePolicy(max_spaces=2), True),
    (b"\n" + b"\t " * 16, WhitespacePolicy(), True),
    (b"\n" + b" " * 33, WhitespacePolicy(), False),
    (b"\n\t", WhitespacePolicy(indent_chars=" "), False),
    (b"\n \n", WhitespacePolicy(), False),
    (b"\n \n", WhitespacePolicy(max_newlines=2), True),
    (b" \n", WhitespacePolicy(), False),
    (b"\t", WhitespacePolicy(), False),
    (b"\r\n", WhitespacePolicy(), False),
    (b" ", WhitespacePolicy(max_spaces=0), False),
])
def test_in_gap(gap, policy, member):
    assert in_gap(gap, policy) is member


@requires_jit
@pytest.mark.parametrize("name", ["llama-bpe", "gpt-2", "qwen2", "llama-spm"])
def test_first_mask_matches_full_walk(name, vocabulary):
    vocab, cls = vocabulary(name), native_dfa_class()
    for case in CORPUS[::3]:
        for policy in POLICIES:
            try:
                g = json_schema_grammar(case["schema"], whitespace=policy)
            except ConstraintError:             # unsupported: nothing to compare
                continue
            short = TokenFSM(cls(g, max_depth=g.info["max_depth"]), vocab, leading_gap=g.info["leading_gap"])
            full = TokenFSM(cls(g, max_depth=g.info["max_depth"]), vocab)
            a, b = short.masks(short.initial), full.masks(full.initial)
            assert np.array_equal(a.bitmask, b.bitmask), (case["name"], policy)
            # every allowed token leads to states allowing the same tokens (the full walk may
            # hold some of them in a slice view, the start's walk lists them all)
            for t in short.allowed_token_ids(short.initial).tolist():
                sa, sb = short.next_state(short.initial, t), full.next_state(full.initial, t)
                assert (sa < 0) == (sb < 0) and np.array_equal(short.bitmask(sa), full.bitmask(sb)), \
                    (case["name"], policy, t)


def test_not_for_text_or_without_a_leading_gap(vocabulary):
    assert json_schema_grammar({"type": "object"}, or_text=True).info["leading_gap"] is None
    assert json_schema_grammar({"type": "object"}, whitespace="compact").info["leading_gap"] is None
    g = json_schema_grammar({"type": "object"})
    assert g.info["leading_gap"] == WhitespacePolicy()
    fsm = compile_grammar(g, vocabulary("llama-bpe"))
    assert fsm.allowed_token_ids(fsm.initial).size > 0
