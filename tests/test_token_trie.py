"""TokenTrie: logprobs / KV-segment / FSM-state cache with LRU byte budget, tested with a mock KV handle."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest

from constrained.token_trie import TokenTrie


@dataclass(frozen=True)
class FakeKV:
    """A mock KV handle remembering which tokens it covers."""

    tokens: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return 10 * len(self.tokens)


def put(trie: TokenTrie, tokens: list[int], start: int) -> None:
    trie.put_kv(tokens, FakeKV(tuple(tokens[start:])), start)


def cut(kv: FakeKV, n: int) -> tuple[FakeKV, FakeKV]:
    assert 0 < n < len(kv.tokens), "a cut must leave both halves non-empty"
    return FakeKV(kv.tokens[:n]), FakeKV(kv.tokens[n:])


def covered(chain) -> tuple[int, ...]:
    """Concatenate a chain's tokens, checking the segments tile [0, end)."""
    out: tuple[int, ...] = ()
    for seg in chain:
        assert seg.start == len(out), "segments must be contiguous from 0"
        out += seg.handle.tokens
        assert len(out) == seg.end
    return out


def test_longest_kv_returns_root_first_chain() -> None:
    trie = TokenTrie()
    put(trie, [1, 2, 3], 0)
    put(trie, [1, 2, 3, 4, 5], 3)
    put(trie, [1, 2, 3, 4, 5, 6], 5)
    chain = trie.longest_kv([1, 2, 3, 4, 5, 6, 7, 8])
    assert [(s.start, s.end) for s in chain] == [(0, 3), (3, 5), (5, 6)]
    assert covered(chain) == (1, 2, 3, 4, 5, 6)
    assert covered(trie.longest_kv([1, 2, 3, 4, 5, 6], max_depth=5)) == (1, 2, 3, 4, 5)
    assert trie.longest_kv([1, 2]) == [] and trie.longest_kv([9, 1, 2, 3]) == []
    assert covered(trie.longest_kv([1, 2, 3, 4, 9])) == (1, 2, 3)  # diverges after a cached node
    assert trie.kv_chain([1, 2, 3, 4]) == []  # exact lookup: no KV stored at depth 4


@pytest.mark.parametrize(
    ("tokens", "start", "match"),
    [([1, 2, 3], 3, r"in \[0, 3\)"), ([1, 2, 3], -1, "got -1"), ([1, 2, 3], 2, "holds no KV")],
)
def test_put_kv_rejects_bad_starts(tokens: list[int], start: int, match: str) -> None:
    trie = TokenTrie()
    with pytest.raises(ValueError, match=match):
        put(trie, tokens, start)


def test_logprobs_and_states() -> None:
    trie = TokenTrie()
    lp = np.log(np.full(8, 1 / 8, dtype=np.float32))
    trie.put_logprobs([4, 5], lp)
    assert trie.get_logprobs([4, 5]) is lp and trie.get_logprobs([4]) is None
    assert trie.nbytes == lp.nbytes
    trie.set_state([4, 5], "schema-a", 17)
    assert trie.get_state([4, 5], "schema-a") == 17 and trie.get_state([4, 5], "other") is None
    assert trie.get_state([9], "schema-a") is None
    trie.put_logprobs([4, 5], lp[:4].copy())  # replacing re-counts bytes
    assert trie.nbytes == lp[:4].nbytes


def test_budget_evicts_least_recently_used() -> None:
    trie = TokenTrie(max_bytes=100)
    put(trie, [1, 1, 1, 1], 0)  # 40 bytes
    put(trie, [2, 2, 2, 2], 0)  # 40 bytes
    trie.longest_kv([1, 1, 1, 1, 7])  # touch [1,1,1,1]: now [2,2,2,2] is the oldest
    put(trie, [3, 3, 3], 0)  # 30 bytes -> over budget
    assert trie.nbytes == 70 <= trie.max_bytes
    assert trie.kv_chain([2, 2, 2, 2]) == [] and trie.kv_chain([1, 1, 1, 1]) != []
    assert trie.find([2]) is None  # payload-less path pruned
    assert trie.evictions == 1


def test_bases_outlive_their_dependents() -> None:
    trie = TokenTrie(max_bytes=10_000)
    put(trie, list(range(10)), 0)  # base, 100 bytes, the oldest entry
    put(trie, list(range(12)), 10)
    put(trie, list(range(10)) + [99], 10)
    trie.evict_to(100)  # the base is the LRU-oldest but pinned: dependents go first
    assert trie.nbytes == 100 and covered(trie.kv_chain(list(range(10)))) == tuple(range(10))
    trie.evict_to(0)
    assert trie.nbytes == 0 and trie.n_nodes == 0


def test_full_segment_unpins_its_ancestors() -> None:
    trie = TokenTrie()
    put(trie, [1, 2], 0)
    put(trie, [1, 2, 3], 2)
    put(trie, [1, 2, 3, 4], 0)  # a full copy: depends on nothing
    assert trie.find([1, 2]).dependents == 1  # only [1,2,3] depends on it
    put(trie, [1, 2, 3], 0)  # replacing [1,2,3]'s segment with a full one releases [1,2]
    assert trie.find([1, 2]).dependents == 0
    trie.evict_to(trie.nbytes - 20)
    assert covered(trie.longest_kv([1, 2, 3, 4, 5])) == (1, 2, 3, 4)


def test_split_cuts_the_segment_that_runs_through_a_prefix() -> None:
    trie = TokenTrie()
    put(trie, [1, 2], 0)
    put(trie, [1, 2, 3, 4, 5, 6], 2)         # one segment [2, 6) on the base [0, 2)
    held = trie.nbytes
    assert trie.split_kv([1, 2, 3, 4, 9], cut) is False  # not a path in the trie
    assert trie.split_kv([1, 2, 3, 4], cut) is True
    assert [(s.start, s.end) for s in trie.longest_kv([1, 2, 3, 4, 9])] == [(0, 2), (2, 4)]
    chain = trie.kv_chain([1, 2, 3, 4, 5, 6])
    assert [(s.start, s.end) for s in chain] == [(0, 2), (2, 4), (4, 6)] and covered(chain) == (1, 2, 3, 4, 5, 6)
    assert trie.nbytes == held                # the halves hold what the segment held
    assert trie.find([1, 2]).dependents == 1 and trie.find([1, 2, 3, 4]).dependents == 1
    assert trie.split_kv([1, 2, 3, 4], cut) is True and trie.nbytes == held  # already holds KV: nothing cut
    trie.evict_to(held - 20)                  # the tail goes; the shared head and its base stay
    assert trie.kv_chain([1, 2, 3, 4, 5, 6]) == [] and covered(trie.kv_chain([1, 2, 3, 4])) == (1, 2, 3, 4)


def test_split_finds_no_segment_where_none_runs_through() -> None:
    trie = TokenTrie()
    put(trie, [1, 2, 3], 0)
    trie.put_logprobs([1, 2, 3, 4, 5], np.zeros(2, np.float32))  # a path below [1, 2, 3, 4] without KV
    assert trie.split_kv([1, 2, 3, 4], cut) is False
    assert trie.split_kv([1, 2], cut) is True  # [1, 2, 3]'s segment runs through [1, 2]
    assert trie.split_kv([1, 2, 7], cut) is False
    put(trie, [5, 6, 7, 8], 0)
    assert trie.split_kv([5, 6], cut, max_visits=1) is False and trie.split_kv([5, 6], cut, max_visits=2) is True


def test_clear_kv_keeps_logprobs() -> None:
    trie = TokenTrie()
    put(trie, [1, 2, 3], 0)
    trie.put_logprobs([1, 2, 3], np.zeros(4, np.float32))
    trie.clear_kv()
    assert trie.longest_kv([1, 2, 3, 4]) == [] and trie.get_logprobs([1, 2, 3]) is not None
    assert trie.nbytes == 16
    trie.clear()
    assert trie.nbytes == 0 and trie.get_logprobs([1, 2, 3]) is None


def test_random_operations_keep_every_chain_complete() -> None:
    rng = random.Random(0)
    trie = TokenTrie(max_bytes=600)
    prompts = [[rng.randrange(3) for _ in range(rng.randrange(2, 12))] for _ in range(300)]
    for p in prompts:
        chain = trie.longest_kv(p, max_depth=len(p) - 1)
        start = chain[-1].end if chain else 0
        assert covered(chain) == tuple(p[:start])
        put(trie, p, 0 if len(chain) >= 3 or rng.random() < 0.2 else start)
        if rng.random() < 0.3:
            trie.put_logprobs(p, np.zeros(rng.randrange(1, 30), np.float32))
        if rng.random() < 0.3:
            trie.split_kv(p[: rng.randrange(1, len(p))], cut)
        assert trie.nbytes <= 600
    total = 0
    stack = [trie.root]
    while stack:  # every stored segment still has its whole chain, and bytes add up
        node = stack.pop()
        stack.extend(node.children.values())
        if node.kv is not None:
            total += node.kv.nbytes
            assert covered(trie.kv_chain(node.tokens())) == tuple(node.tokens())
        if node.logprobs is not None:
            total += node.logprobs.nbytes
    assert total == trie.nbytes
    assert trie.evictions > 0


def test_negative_budget_is_rejected() -> None:
    with pytest.raises(ValueError, match="got -1"):
        TokenTrie(max_bytes=-1)


def test_put_after_the_node_was_evicted_reattaches_it() -> None:
    # put_kv right after put_logprobs reuses the walked node; here the logprobs
    # alone blow the budget, so that node is pruned and must not be reused.
    trie = TokenTrie(max_bytes=64)
    tokens = (1, 2, 3)
    trie.put_logprobs(tokens, np.zeros(100, np.float32))
    assert trie.find(tokens) is None and trie.nbytes == 0
    trie.put_kv(tokens, FakeKV((1, 2, 3)), 0)
    assert [(s.start, s.end) for s in trie.longest_kv(tokens)] == [(0, 3)] and trie.nbytes == FakeKV((1, 2, 3)).nbytes
