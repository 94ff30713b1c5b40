"""Micro-benchmarks of the token FSM on Llama-3's vocabulary (128,256 tokens).

Run: ``python -m pytest bench/bench_masks.py --benchmark-only -q``.

- warm decoding step: `fill_bitmask` + `advance` on states already visited;
- first visit of a state (fresh FSM over a warm DFA, so only the token-level
  work is timed), inside a JSON string and at a structural position, with
  and without slices;
- compile: JSON schema -> grammar -> lazy DFA -> FSM with its initial state.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np
import pytest

from bench.mask_corpus import CASES
from constrained.compile import compile_grammar
from constrained.gguf_tokenizers import hf_tokenizer
from constrained.token_fsm import TokenFSM
from constrained.vocab import Vocabulary
from constrained.vocab_index import VocabIndex
from grammars.json_schema import json_schema_grammar

pytest.importorskip("pytest_benchmark")

BY_NAME = {c["name"]: c for c in CASES}


@functools.cache
def _setup() -> tuple[Any, Vocabulary]:
    tok = hf_tokenizer("llama-bpe")
    vocab = Vocabulary.from_tokenizer(tok)
    VocabIndex.for_vocab(vocab)
    return tok, vocab


@functools.cache
def _warm_fsm(name: str) -> TokenFSM:
    tok, vocab = _setup()
    fsm = compile_grammar(json_schema_grammar(BY_NAME[name]["schema"]), vocab)
    for text in _texts(name):
        g = fsm.guide()
        for t in tok.encode(text, add_special_tokens=False):
            g.fill_bitmask(np.zeros(fsm.index.n_words, np.int32))
            g.advance(t)
    return fsm


def _texts(name: str) -> list[str]:
    return [json.dumps(x, ensure_ascii=False) for x in BY_NAME[name]["instances"]]


@pytest.mark.parametrize("name", ["user_profile", "order"])
def test_warm_step(benchmark: Any, name: str) -> None:
    """One decoding step on visited states: fill_bitmask + advance (per token, averaged over an instance)."""
    tok, vocab = _setup()
    fsm = _warm_fsm(name)
    ids = tok.encode(_texts(name)[0], add_special_tokens=False)
    buf = np.zeros(fsm.index.n_words, np.int32)

    def walk() -> None:
        g = fsm.guide()
        for t in ids:
            g.fill_bitmask(buf)
            g.advance(t)

    benchmark(walk)
    benchmark.extra_info["tokens"] = len(ids)


def _state_after(fsm: TokenFSM, text: bytes) -> int:
    return fsm.dfa.walk(fsm.initial, text)


@pytest.mark.parametrize("slices", [True, False], ids=["slices", "no-slices"])
@pytest.mark.parametrize("where", ["in_string", "after_key", "object_start"])
def test_first_visit(benchmark: Any, where: str, slices: bool) -> None:
    """Computing one state's masks from scratch (the DFA rows are already known)."""
    _, vocab = _setup()
    warm = _warm_fsm("user_profile")
    prefix = {"in_string": b'{"id": 1, "name": "Ada", "email": "ada@x.org", "age": 3, "bio": "Wrote',
              "after_key": b'{"id": 1, "name": ',
              "object_start": b'{"'}[where]
    state = _state_after(warm, prefix)
    TokenFSM(warm.dfa, vocab, use_slices=slices).masks(state)      # warm the DFA rows and slices

    def first_visit() -> None:
        TokenFSM(warm.dfa, vocab, use_slices=slices).masks(state)

    benchmark(first_visit)


@pytest.mark.parametrize("name", ["tool_call", "user_profile"])
def test_compile(benchmark: Any, name: str) -> None:
    """Schema -> FSM (not cached), vocabulary index already built."""
    _, vocab = _setup()
    schema = BY_NAME[name]["schema"]
    fsm = benchmark(lambda: compile_grammar(json_schema_grammar(schema), vocab))
    assert fsm.guide().allowed_token_ids().size
