"""Micro-benchmarks of the token FSM's hot paths on the real llama-bpe vocabulary (128k tokens).

Run: ``python -m pytest bench/bench_mask_steps.py --benchmark-only -q``.

- ``fill_bitmask`` at a state already visited (the steady state of decoding);
- ``advance`` over a whole instance, memoized states;
- a cold walk: a fresh FSM computing every state's mask for the first time
  (the cost `python -m bench masks` shows as TBM p99);
- compile + first mask (TTFM) of a mid-size API schema.
The vocabulary build itself is in `bench_vocab.py`.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np
import pytest

from bench.api_shapes import SHAPES
from constrained.compile import clear_cache, compile_json_schema
from constrained.gguf_tokenizers import hf_tokenizer
from constrained.token_fsm import TokenFSM
from constrained.vocab import Vocabulary

pytest.importorskip("pytest_benchmark")

SCHEMAS = {s["name"]: s for s in SHAPES if s["name"] in ("api_tool_call_weather", "api_order")}


@functools.cache
def _setup() -> tuple[Any, Vocabulary]:
    tok = hf_tokenizer("llama-bpe")
    return tok, Vocabulary.from_tokenizer(tok)


def _instance(name: str) -> tuple[dict, list[int]]:
    tok, _ = _setup()
    entry = SCHEMAS[name]
    text = json.dumps(entry["valid"][0], separators=(",", ":"))
    return entry["schema"], tok.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_fill_bitmask_warm(benchmark: Any, name: str) -> None:
    _, vocab = _setup()
    schema, ids = _instance(name)
    guide = compile_json_schema(schema, vocab).guide()
    for t in ids[: len(ids) // 2]:
        assert guide.advance(t)
    buf = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    guide.fill_bitmask(buf)                       # visit the state once
    benchmark(guide.fill_bitmask, buf)
    assert (int(buf[ids[len(ids) // 2] >> 5]) >> (ids[len(ids) // 2] & 31)) & 1


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_advance_instance_warm(benchmark: Any, name: str) -> None:
    _, vocab = _setup()
    schema, ids = _instance(name)
    guide = compile_json_schema(schema, vocab).guide()

    def walk() -> bool:
        guide.reset()
        return all(guide.advance(t) for t in ids)

    assert walk()                                  # visit every state once
    benchmark.extra_info["tokens"] = len(ids)
    assert benchmark(walk)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_cold_walk_all_masks(benchmark: Any, name: str) -> None:
    _, vocab = _setup()
    schema, ids = _instance(name)
    dfa = compile_json_schema(schema, vocab).dfa   # the byte DFA stays warm: this times the token masks

    def cold() -> bool:
        guide = TokenFSM(dfa, vocab).guide()
        buf = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
        for t in ids:
            guide.fill_bitmask(buf)
            if not guide.advance(t):
                return False
        return True

    benchmark.extra_info["tokens"] = len(ids)
    assert benchmark.pedantic(cold, rounds=3, iterations=1)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_compile_first_mask(benchmark: Any, name: str) -> None:
    _, vocab = _setup()
    schema, _ = _instance(name)
    buf = np.zeros((vocab.size + 31) // 32, dtype=np.int32)

    def ttfm() -> None:
        clear_cache()
        compile_json_schema(schema, vocab).guide().fill_bitmask(buf)

    benchmark.pedantic(ttfm, rounds=5, iterations=1)
    assert buf.any()
