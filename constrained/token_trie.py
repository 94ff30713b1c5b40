"""A token trie caching, per prompt prefix, next-token logprobs, KV segments and FSM states.

Every node stands for one token prefix. A node may hold:

- ``logprobs``: the next-token log-probabilities after its prefix (a numpy array);
- a KV *segment*: an opaque handle from the backend covering the prefix's
  positions ``[kv_start, depth)``. The rest, ``[0, kv_start)``, is covered by
  the segment of the ancestor at depth ``kv_start`` (its *base*), recursively,
  so the full KV of a prefix is the concatenation of a short chain of
  contiguous segments. A backend that computes a multi-token extension stores
  ONE segment for all its tokens, and may store a full segment
  (``kv_start == 0``) to cut the chain short. A segment can also be *split*
  (`split_kv`): a new prompt that branches inside it, past a shared system
  prompt, gets the shared part as a segment of its own, cut out of the
  stored one by the backend instead of computed again;
- ``states``: a small dict constraint-key -> FSM state, for token-FSM guides.

The trie never looks inside a handle; it sizes it by ``handle.nbytes``, like
mlx-lm's ``LRUPromptCache``. Memory is bounded by ``max_bytes`` (logprobs plus
KV) with least-recently-used eviction. Consistency rule: a segment that other
segments build on (a base with dependents) is never evicted; only segments no
one depends on are, so every remaining chain stays complete back to position
0. Touching a chain touches its bases too, so bases are never older than their
users and eviction proceeds from the leaves inwards.

Not thread-safe: a backend owns one trie and uses it from its worker thread.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = ["KVHandle", "KVSegment", "TokenTrie", "TrieNode"]


class KVHandle(Protocol):
    """What the trie needs from a backend's KV value: its size in bytes."""

    @property
    def nbytes(self) -> int: ...


@dataclass(frozen=True)
class KVSegment:
    """A stored KV segment covering token positions ``[start, end)`` of a prefix."""

    start: int
    end: int
    handle: Any


class TrieNode:
    """One token prefix. Use `TokenTrie` methods rather than mutating nodes."""

    __slots__ = ("token", "parent", "children", "depth", "logprobs", "kv", "kv_base", "dependents", "states")

    def __init__(self, token: int, parent: TrieNode | None, depth: int) -> None:
        self.token = token
        self.parent = parent
        self.depth = depth
        self.children: dict[int, TrieNode] = {}
        self.logprobs: np.ndarray | None = None
        self.kv: Any = None  # handle covering [kv_base.depth (or 0), depth)
        self.kv_base: TrieNode | None = None
        self.dependents = 0  # segments stored on descendants whose base is this node
        self.states: dict[Hashable, Any] = {}

    @property
    def kv_start(self) -> int:
        return self.kv_base.depth if self.kv_base is not None else 0

    def tokens(self) -> list[int]:
        """The prefix this node stands for (walks up to the root)."""
        out: list[int] = []
        node: TrieNode | None = self
        while node is not None and node.parent is not None:
            out.append(node.token)
            node = node.parent
        return out[::-1]


_LP, _KV = 0, 1  # kinds of LRU entries: a node's logprobs or its KV segment


class TokenTrie:
    """Prefix cache of logprobs / KV segments / FSM states, bounded by a byte budget.

    Args:
        max_bytes: evict least-recently-used payloads above this many bytes
            (``None`` = unbounded).

    Example:
        >>> import numpy as np
        >>> class KV:  # any object with `nbytes`
        ...     nbytes = 100
        >>> trie = TokenTrie(max_bytes=1000)
        >>> trie.put_kv([1, 2, 3], KV(), start=0)
        >>> trie.put_logprobs([1, 2, 3], np.zeros(4, np.float32))
        >>> [(s.start, s.end) for s in trie.longest_kv([1, 2, 3, 4])]
        [(0, 3)]
        >>> trie.get_logprobs([1, 2, 3]).shape, trie.nbytes
        ((4,), 116)
    """

    def __init__(self, max_bytes: int | None = None) -> None:
        if max_bytes is not None and max_bytes < 0:
            raise ValueError(f"`max_bytes` must be a non-negative integer or None, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self.root = TrieNode(-1, None, 0)
        self._lru: OrderedDict[tuple[int, int], TrieNode] = OrderedDict()
        self._nbytes = 0
        self.n_nodes = 0
        self.evictions = 0
        self._last_path: tuple[tuple[int, ...], TrieNode] | None = None

    # ------------------------------------------------------------------ lookup

    @property
    def nbytes(self) -> int:
        """Bytes held: logprobs arrays plus KV handles' ``nbytes``."""
        return self._nbytes

    def find(self, tokens: Sequence[int]) -> TrieNode | None:
        """The node for exactly `tokens`, or None."""
        node = self.root
        for tok in tokens:
            nxt = node.children.get(tok)
            if nxt is None:
                return None
            node = nxt
        return node

    def shared_depth(self, tokens: Sequence[int], max_depth: int | None = None) -> int:
        """How many leading tokens of `tokens` (at most `max_depth`) lie on a path already in the trie.

        A new prompt that shares a system prompt with an earlier one shares
        its path, though the earlier KV segment runs past the point where
        they part (so `longest_kv` cannot hand it out).
        """
        limit = len(tokens) if max_depth is None else min(max_depth, len(tokens))
        node, depth = self.root, 0
        for tok in tokens[:limit]:
            node = node.children.get(tok)  # type: ignore[assignment]
            if node is None:
                break
            depth += 1
        return depth

    def get_logprobs(self, tokens: Sequence[int]) -> np.ndarray | None:
        """Cached next-token logprobs after `tokens` (marks them recently used)."""
        node = self.find(tokens)
        if node is None or node.logprobs is None:
            return None
        self._lru.move_to_end((_LP, id(node)))
        return node.logprobs

    def longest_kv(self, tokens: Sequence[int], max_depth: int | None = None) -> list[KVSegment]:
        """The segment chain of the longest prefix of `tokens` (at most `max_depth` long) with KV.

        Returns the segments root-first; they tile ``[0, depth)`` contiguously.
        An empty list means nothing is cached. The whole chain is marked used.
        """
        limit = len(tokens) if max_depth is None else min(max_depth, len(tokens))
        node, best = self.root, None
        for tok in tokens[:limit]:
            node = node.children.get(tok)  # type: ignore[assignment]
            if node is None:
                break
            if node.kv is not None:
                best = node
        return [] if best is None else self._chain(best)

    def kv_chain(self, tokens: Sequence[int]) -> list[KVSegment]:
        """The segment chain for exactly `tokens` (empty if that prefix holds no KV)."""
        node = self.find(tokens)
        return [] if node is None or node.kv is None else self._chain(node)

    def _chain(self, node: TrieNode) -> list[KVSegment]:
        chain = []
        cur: TrieNode | None = node
        while cur is not None:
            self._lru.move_to_end((_KV, id(cur)))
            chain.append(KVSegment(cur.kv_start, cur.depth, cur.kv))
            cur = cur.kv_base
        return chain[::-1]

    # ------------------------------------------------------------------ insert

    def put_logprobs(self, tokens: Sequence[int], logprobs: np.ndarray) -> None:
        """Cache the next-token logprobs after `tokens`."""
        node = self._path(tokens)
        if node.logprobs is not None:
            self._nbytes -= node.logprobs.nbytes
        node.logprobs = logprobs
        self._nbytes += logprobs.nbytes
        self._lru[(_LP, id(node))] = node
        self._lru.move_to_end((_LP, id(node)))
        self._enforce_budget()

    def put_kv(self, tokens: Sequence[int], handle: Any, start: int) -> None:
        """Store a KV segment for positions ``[start, len(tokens))`` of `tokens`.

        Args:
            tokens: the prefix the segment ends at.
            handle: opaque backend value with an ``nbytes`` attribute.
            start: 0 for a full segment, else the length of a prefix of
                `tokens` that already holds KV (the segment's base).

        Raises:
            ValueError: `start` is out of range or its prefix holds no KV.
        """
        if not 0 <= start < len(tokens):
            raise ValueError(f"KV segment start must be in [0, {len(tokens)}) for a {len(tokens)}-token prefix, got {start}")
        node = self._path(tokens)
        base = None
        if start > 0:
            base = node
            while base.depth > start:
                base = base.parent  # type: ignore[assignment]
            if base.kv is None:
                raise ValueError(f"cannot store a KV segment starting at {start}: that prefix holds no KV")
        self._drop_kv(node)
        node.kv, node.kv_base = handle, base
        if base is not None:
            base.dependents += 1
        self._nbytes += int(handle.nbytes)
        self._lru[(_KV, id(node))] = node
        self._enforce_budget()

    def split_kv(self, tokens: Sequence[int], cut: Callable[[Any, int], tuple[Any, Any]], max_visits: int = 4096) -> bool:
        """Give the prefix `tokens` KV of its own by cutting a stored segment that runs through it.

        A prompt stored whole holds its KV on one node, so a later prompt that
        shares only its first part (the system prompt, not the question) finds
        no node with KV where they part, though the KV is there, inside the
        segment. The nearest segment below `tokens` covers ``[start, end)``
        with ``start < len(tokens) < end``; ``cut(handle, n)`` returns handles
        for its first ``n = len(tokens) - start`` positions and for the rest.
        The head goes on `tokens` (on the segment's old base), the tail stays
        where it was, now based on `tokens`: nothing is computed again, and
        the halves hold what the segment held.

        Only a backend whose KV for a prefix is exactly the first positions of
        a longer sequence's KV (plain attention caches) may pass a `cut`.

        Args:
            tokens: the prefix that should hold KV.
            cut: ``(handle, n) -> (head, tail)``, the backend's slicer.
            max_visits: most trie nodes searched below `tokens` for a segment.

        Returns:
            True if `tokens` holds KV now; False if no stored segment runs
            through it (or none was found within `max_visits` nodes).

        Example:
            >>> class KV(tuple):
            ...     nbytes = property(len)
            >>> trie = TokenTrie()
            >>> trie.put_kv([1, 2, 3, 4], KV([1, 2, 3, 4]), start=0)
            >>> trie.split_kv([1, 2], lambda kv, n: (KV(kv[:n]), KV(kv[n:])))
            True
            >>> [(s.start, s.end, s.handle) for s in trie.kv_chain([1, 2, 3, 4])]
            [(0, 2, (1, 2)), (2, 4, (3, 4))]
        """
        node = self.find(tokens)
        if node is None or node.parent is None:
            return False
        if node.kv is not None:
            return True
        below = _first_kv_below(node, max_visits)
        if below is None:
            return False
        # `below` is the first node with KV on its path down from `node`, so its
        # base lies above `node`: its segment runs through `node`.
        base = below.kv_base
        head, tail = cut(below.kv, node.depth - below.kv_start)
        self._nbytes += int(head.nbytes) + int(tail.nbytes) - int(below.kv.nbytes)
        node.kv, node.kv_base = head, base  # the base loses `below` and gains `node`: same dependents
        below.kv, below.kv_base = tail, node
        node.dependents += 1
        self._lru[(_KV, id(node))] = node
        self._enforce_budget()
        return True

    def get_state(self, tokens: Sequence[int], key: Hashable) -> Any:
        """The FSM state stored under `key` for `tokens`, or None."""
        node = self.find(tokens)
        return None if node is None else node.states.get(key)

    def set_state(self, tokens: Sequence[int], key: Hashable, state: Any) -> None:
        """Remember FSM state `state` under `key` for `tokens` (not counted in `nbytes`)."""
        self._path(tokens).states[key] = state

    def _path(self, tokens: Sequence[int]) -> TrieNode:
        # A backend stores a row's logprobs and then its KV under the same tuple:
        # reuse the node the first call walked to, if it is still in the trie.
        last = self._last_path
        if last is not None and last[0] is tokens and last[1].parent is not None and last[1].parent.children.get(last[1].token) is last[1]:
            return last[1]
        node = self.root
        for tok in tokens:
            nxt = node.children.get(tok)
            if nxt is None:
                nxt = node.children[tok] = TrieNode(tok, node, node.depth + 1)
                self.n_nodes += 1
            node = nxt
        if type(tokens) is tuple:  # immutable, so identity means same tokens
            self._last_path = (tokens, node)
        return node

    # ------------------------------------------------------------------ eviction

    def clear(self) -> None:
        """Drop everything."""
        self.root = TrieNode(-1, None, 0)
        self._lru.clear()
        self._nbytes = 0
        self.n_nodes = 0
        self._last_path = None

    def clear_kv(self) -> None:
        """Drop every KV segment, keeping logprobs and FSM states."""
        for key in [k for k in self._lru if k[0] == _KV]:
            node = self._lru.pop(key)
            self._nbytes -= int(node.kv.nbytes)
            node.kv, node.kv_base, node.dependents = None, None, 0
        self._prune_all()

    def evict_to(self, max_bytes: int) -> int:
        """Evict least-recently-used payloads until at most `max_bytes` are held; returns bytes freed.

        O(what it evicts), amortized: it pops from the old end of the LRU. A KV
        segment other segments build on is evicted after them: met first, it
        goes to the recent end (it is in use through its dependents).
        """
        before = self._nbytes
        lru = self._lru
        skipped = 0
        while self._nbytes > max_bytes and lru and skipped <= len(lru):
            key, node = next(iter(lru.items()))
            if key[0] == _KV and node.dependents > 0:
                lru.move_to_end(key)
                skipped += 1
                continue
            self._evict(key, node)
            skipped = 0
        return before - self._nbytes

    def _enforce_budget(self) -> None:
        if self.max_bytes is not None and self._nbytes > self.max_bytes:
            self.evict_to(self.max_bytes)

    def _evict(self, key: tuple[int, int], node: TrieNode) -> None:
        self.evictions += 1
        if key[0] == _LP:
            del self._lru[key]
            self._nbytes -= node.logprobs.nbytes  # type: ignore[union-attr]
            node.logprobs = None
        else:
            self._drop_kv(node)
        self._prune(node)

    def _drop_kv(self, node: TrieNode) -> None:
        if node.kv is None:
            return
        self._lru.pop((_KV, id(node)), None)
        self._nbytes -= int(node.kv.nbytes)
        if node.kv_base is not None:
            node.kv_base.dependents -= 1
        node.kv, node.kv_base = None, None

    def _prune(self, node: TrieNode) -> None:
        """Unlink empty leaves upwards so the trie does not keep payload-less paths."""
        while node.parent is not None and not node.children and node.logprobs is None and node.kv is None and not node.states:
            del node.parent.children[node.token]
            self.n_nodes -= 1
            node = node.parent

    def _prune_all(self) -> None:
        stack, leaves = [self.root], []
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            if not node.children:
                leaves.append(node)
        for leaf in leaves:
            self._prune(leaf)


def _first_kv_below(node: TrieNode, max_visits: int) -> TrieNode | None:
    """A descendant of `node` holding KV with none between them (depth first), or None."""
    stack = list(node.children.values())
    while stack and max_visits > 0:
        cur = stack.pop()
        max_visits -= 1
        if cur.kv is not None:
            return cur
        stack.extend(cur.children.values())
    return None
