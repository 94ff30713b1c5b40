"""Micro-benchmarks of the prefix trie once its byte budget is reached.

Run: ``python -m pytest bench/bench_trie.py --benchmark-only -q``.

A serving process fills its trie and then evicts on every insert. Eviction
must cost O(what it evicts): the target is a full trie's insert within 1.2x
of an unbounded one's (it took 3-4x when every insert scanned the LRU).
Each round stores logprobs and a KV segment for 64 decode steps of a fresh
request that shares a 32-token prompt with the others, as a backend does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from constrained.token_trie import TokenTrie

pytest.importorskip("pytest_benchmark")

VOCAB = 1_000                     # small rows: the cost under test is bookkeeping, not copies
STEPS = 64
PROMPT = tuple(range(1000, 1032))


class _KV:
    """A stand-in KV handle: the trie only reads `nbytes`."""

    nbytes = 4 << 10


def _fill(trie: TokenTrie, request: int) -> None:
    logprobs = np.zeros(VOCAB, np.float32)
    tokens = PROMPT
    for step in range(STEPS):
        tokens = tokens + (request * STEPS + step,)
        trie.put_logprobs(tokens, logprobs)
        trie.put_kv(tokens, _KV(), len(tokens) - 1 if step else 0)


def _rounds(trie: TokenTrie) -> Any:
    counter = iter(range(10**9))
    return lambda: _fill(trie, next(counter))


@pytest.mark.parametrize("budget", ["unbounded", "full"])
def test_trie_inserts(benchmark: Any, budget: str) -> None:
    per_request = STEPS * (VOCAB * 4 + _KV.nbytes)
    trie = TokenTrie(None if budget == "unbounded" else 200 * per_request)
    fill = _rounds(trie)
    for _ in range(220):                  # past the budget: every later insert evicts
        fill()
    benchmark.pedantic(fill, rounds=40, iterations=1, warmup_rounds=2)
    if budget == "full":
        assert trie.evictions > 0 and trie.nbytes <= trie.max_bytes
