"""A flattened, level-ordered trie of token byte strings, walked with numpy.

The token FSM asks one question per DFA state: *which tokens can be read from
this state, and where does each one lead?*  Answering it token by token in
Python would cost ~100 ms on a 128k vocabulary, so the tokens are stored as a
trie whose nodes are numbered level by level (all depth-0 nodes, then all
depth-1 nodes, ...), with each node's children forming one contiguous range of
the next level.  One level of the walk is then a handful of numpy gathers over
the *alive* nodes only: a prefix that the DFA rejects prunes its whole subtree.

Example:
    >>> trie = VocabTrie.build([b"a", b"ab", None, b"b"])
    >>> trie.n_nodes, trie.n_tokens
    (3, 3)
    >>> table = np.array([[1, 0], [1, -1]], dtype=np.int32)  # "b" is dead after "a"
    >>> classes = np.zeros(256, dtype=np.int32); classes[ord("b")] = 1
    >>> ids, states = trie.walk(0, classes, lambda: table, lambda s: None)
    >>> sorted(zip(ids.tolist(), states.tolist()))
    [(0, 1), (3, 0)]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Sequence

import numpy as np


__all__ = ["VocabTrie", "expand_ranges"]

# Byte comparisons for the longest-common-prefix pass are vectorized over this
# many leading bytes; the rare longer ties are finished in Python.
_LCP_WIDTH = 32
# Frontiers up to this many nodes are stepped in Python (see `VocabTrie.walk`).
_SMALL_FRONTIER = 24
# ... visiting at most this many nodes per round, and leaving the children of
# nodes with more than _WIDE_NODE children to numpy.
_DFS_BUDGET = 256
_WIDE_NODE = 16


def expand_ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the integer ranges [lo[i], hi[i]); also return i for each element.

    Example:
        >>> idx, owner = expand_ranges(np.array([2, 7]), np.array([4, 8]))
        >>> idx.tolist(), owner.tolist()
        ([2, 3, 7], [0, 0, 1])
    """
    counts = hi - lo
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(lo), dtype=np.int32), counts)
    if total == 0:
        return np.empty(0, dtype=np.int32), owner
    # element k of range i is lo[i] + (k - start_of_range_i)
    starts = np.cumsum(counts) - counts
    idx = np.arange(total, dtype=np.int32) + np.repeat((lo - starts).astype(np.int32), counts)
    return idx, owner


@dataclass(frozen=True, eq=False)
class VocabTrie:
    """Tokens as a level-ordered trie (see the module docstring).

    Attributes:
        byte: uint8[n_nodes], the byte labelling the edge into each node.
        child_lo, child_hi: int32[n_nodes], the node's children (global node ids).
        term_lo, term_hi: int32[n_nodes], range of `term_ids` ending at the node
            (several ids when a vocabulary spells the same bytes twice).
        term_ids: int32, token ids grouped by their final node.
        n_roots: number of depth-0 nodes (they are nodes 0..n_roots-1).
        n_tokens: number of tokens stored.
        level_lo: int32[depth + 1], first node of each level (and n_nodes).
    """

    byte: np.ndarray
    child_lo: np.ndarray
    child_hi: np.ndarray
    term_lo: np.ndarray
    term_hi: np.ndarray
    term_ids: np.ndarray
    n_roots: int
    n_tokens: int
    level_lo: np.ndarray

    @property
    def n_nodes(self) -> int:
        return len(self.byte)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.byte, self.child_lo, self.child_hi,
                                      self.term_lo, self.term_hi, self.term_ids))

    @classmethod
    def build(cls, token_bytes: Sequence[bytes | None], ids: Sequence[int] | None = None) -> "VocabTrie":
        """Trie of `token_bytes[i]` for i in `ids` (default: all); None and b"" are skipped."""
        if ids is None:
            ids = range(len(token_bytes))
        pairs = sorted((token_bytes[i], i) for i in ids if token_bytes[i])
        toks = [p[0] for p in pairs]
        tok_ids = np.array([p[1] for p in pairs], dtype=np.int32)
        return _build_sorted(cls, toks, tok_ids)

    def walk(
        self,
        start: int,
        byte_class: np.ndarray,
        get_table: Callable[[], np.ndarray],
        expand: Callable[[np.ndarray], None],
        native: Callable | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """All tokens readable from DFA state `start`, with the state each leads to.

        `get_table()` returns the current transition table (rows not yet
        computed hold -2; `expand(states)` computes them, possibly reallocating
        the table).  Returns (token ids, next states), unordered.  `native`, a
        `JitDFA.walk_tokens`, walks and computes rows in one compiled call.

        Wide levels are stepped with numpy; narrow ones (deep chains such as
        runs of 128 spaces) in plain Python, where a level costs ~1 us per
        node instead of ~30 us of numpy call overhead.
        """
        if native is not None:
            return native(self, np.array([-1], np.int32), np.array([start], np.int32), 0)
        nodes = np.arange(self.n_roots, dtype=np.int32)
        states = self.step(np.full(self.n_roots, start, dtype=np.int32), nodes,
                           byte_class, get_table, expand)
        return self.walk_from(nodes, states, byte_class, get_table, expand)

    def walk_from(self, nodes: np.ndarray, states: np.ndarray, byte_class: np.ndarray,
                  get_table: Callable[[], np.ndarray], expand: Callable[[np.ndarray], None],
                  native: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Like `walk`, from given nodes whose DFA states (after their byte) are known (-1: dead)."""
        if native is not None:
            return native(self, nodes, states, 1)
        # alive (node, state) pairs; their tokens are gathered once at the end
        alive_nodes: list[np.ndarray] = []
        alive_states: list[np.ndarray] = []
        small = _SmallWalker(self, byte_class, get_table, expand)
        while len(nodes):
            if len(nodes) <= _SMALL_FRONTIER:
                # Python depth-first walk; it hands back what is too wide for it.
                (nodes, states), (wide, wide_states) = small.walk(nodes, states)
                if len(wide):
                    children, owner = expand_ranges(self.child_lo[wide], self.child_hi[wide])
                    child_states = self.step(wide_states[owner], children, byte_class, get_table, expand)
                    nodes = np.concatenate((nodes, children))
                    states = np.concatenate((states, child_states))
                continue
            keep = states >= 0                      # prune dead prefixes
            nodes, states = nodes[keep], states[keep]
            alive_nodes.append(nodes)
            alive_states.append(states)
            children, owner = expand_ranges(self.child_lo[nodes], self.child_hi[nodes])
            nodes = children
            states = self.step(states[owner], children, byte_class, get_table, expand)
        alive_nodes.append(np.array(small.nodes, dtype=np.int32))
        alive_states.append(np.array(small.states, dtype=np.int32))
        nodes, states = np.concatenate(alive_nodes), np.concatenate(alive_states)
        tok_idx, owner = expand_ranges(self.term_lo[nodes], self.term_hi[nodes])
        return self.term_ids[tok_idx], states[owner]

    def step(self, states: np.ndarray, nodes: np.ndarray, byte_class: np.ndarray,
             get_table: Callable[[], np.ndarray], expand: Callable[[np.ndarray], None]) -> np.ndarray:
        """DFA transition from each state on the byte of the matching node; computes missing rows."""
        classes = byte_class[self.byte[nodes]]
        nxt = get_table()[states, classes]
        missing = nxt == -2
        if missing.any():
            # Only rows never needed before are computed; most steps skip this.
            expand(np.unique(states[missing]))
            nxt[missing] = get_table()[states[missing], classes[missing]]
        return nxt

    @cached_property
    def parents(self) -> np.ndarray:
        """int32[n_nodes]: parent of each node, -1 for roots."""
        parent = np.full(self.n_nodes, -1, dtype=np.int32)
        parent[self.n_roots:] = np.repeat(np.arange(self.n_nodes, dtype=np.int32), self.child_hi - self.child_lo)
        return parent

    @cached_property
    def term_nodes(self) -> np.ndarray:
        """int32[len(term_ids)]: the node each entry of `term_ids` ends at."""
        return np.repeat(np.arange(self.n_nodes, dtype=np.int32), self.term_hi - self.term_lo)

    def node_states(self, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Run a small automaton (`table[state, byte]`, start 0) down the trie.

        Returns int32[n_nodes] states after each node's prefix (-1: rejected)
        and int16[n_nodes] counts of the times the prefix entered state 0
        (for a UTF-8 slice automaton: the complete characters in the prefix).
        """
        parent = self.parents
        out = np.full(self.n_nodes, -1, dtype=np.int32)
        count = np.zeros(self.n_nodes, dtype=np.int16)
        out[: self.n_roots] = table[0, self.byte[: self.n_roots]]
        count[: self.n_roots] = out[: self.n_roots] == 0
        for lo, hi in zip(self.level_lo[1:-1].tolist(), self.level_lo[2:].tolist()):
            ps = out[parent[lo:hi]]
            out[lo:hi] = np.where(ps >= 0, table[np.maximum(ps, 0), self.byte[lo:hi]], -1)
            count[lo:hi] = count[parent[lo:hi]] + (out[lo:hi] == 0)
        return out, count

    @cached_property
    def depth(self) -> np.ndarray:
        """int16[n_nodes]: depth of each node (roots are 0)."""
        return np.repeat(np.arange(len(self.level_lo) - 1, dtype=np.int16), np.diff(self.level_lo))

    @cached_property
    def ascii_paths(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(uint64 lo, uint64 hi, bool wide)[n_nodes]: the ASCII bytes in each node's prefix
        (bits of bytes 0-63 and 64-127) and whether it holds a non-ASCII byte.

        With them, "is this prefix made only of bytes in S" is three vector ops
        for any ASCII byte set S (see `slices.build_byteset_slice`).
        """
        byte = self.byte.astype(np.uint64)
        lo = np.where(byte < 64, np.left_shift(np.uint64(1), byte % np.uint64(64)), np.uint64(0))
        hi = np.where((byte >= 64) & (byte < 128), np.left_shift(np.uint64(1), byte % np.uint64(64)), np.uint64(0))
        wide = self.byte >= 128
        parent = self.parents
        for a, b in zip(self.level_lo[1:-1].tolist(), self.level_lo[2:].tolist()):
            p = parent[a:b]
            lo[a:b] |= lo[p]
            hi[a:b] |= hi[p]
            wide[a:b] |= wide[p]
        return lo, hi, wide

    @cached_property
    def token_paths(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`ascii_paths` and `depth + 1` of each token's final node, and its token ids.

        Returns (ids, lo, hi, wide, length), one entry per stored token.
        """
        lo, hi, wide = self.ascii_paths
        nodes = self.term_nodes
        return self.term_ids, lo[nodes], hi[nodes], wide[nodes], (self.depth[nodes] + 1).astype(np.int16)

    @cached_property
    def root_byte(self) -> np.ndarray:
        """uint8[n_nodes]: first byte of each node's prefix."""
        out = self.byte.copy()
        parent = self.parents
        for lo, hi in zip(self.level_lo[1:-1].tolist(), self.level_lo[2:].tolist()):
            out[lo:hi] = out[parent[lo:hi]]
        return out

    @cached_property
    def root_of_byte(self) -> np.ndarray:
        """int32[256]: the root node spelling each byte, -1 if none."""
        out = np.full(256, -1, dtype=np.int32)
        out[self.byte[: self.n_roots]] = np.arange(self.n_roots, dtype=np.int32)
        return out

    @cached_property
    def _views(self) -> tuple[memoryview, ...]:
        # memoryview indexing yields Python ints ~3x faster than numpy scalar indexing
        return tuple(memoryview(a) for a in (self.byte, self.child_lo, self.child_hi,
                                             self.term_lo, self.term_hi, self.term_ids))

    def longest_prefix_token(self, data: bytes, allowed: Callable[[int], bool] | None = None) -> tuple[int, int]:
        """(token id, length) of the longest token that is a prefix of `data`; (-1, 0) if none."""
        best = (-1, 0)
        lo, hi = 0, self.n_roots
        for depth, b in enumerate(data):
            node = _find_child(self.byte, lo, hi, b)
            if node < 0:
                break
            for k in range(self.term_lo[node], self.term_hi[node]):
                tok = int(self.term_ids[k])
                if allowed is None or allowed(tok):
                    best = (tok, depth + 1)
                    break
            lo, hi = int(self.child_lo[node]), int(self.child_hi[node])
        return best


class _SmallWalker:
    """Walks narrow parts of the trie depth-first in Python, recording alive nodes."""

    def __init__(self, trie: VocabTrie, byte_class, get_table, expand) -> None:
        self.trie, self.get_table, self.expand = trie, get_table, expand
        self.byte_class = byte_class.tolist()
        self.rows: dict[int, list[int]] = {}
        self.nodes: list[int] = []
        self.states: list[int] = []

    def row(self, state: int) -> list[int]:
        table = self.get_table()
        if table[state, 0] == -2:
            self.expand(np.array([state], dtype=np.int32))
            table = self.get_table()
        row = self.rows[state] = table[state].tolist()
        return row

    def walk(self, nodes: np.ndarray, states: np.ndarray):
        """Depth-first walk from (node, state) pairs whose state is already computed.

        Returns ((nodes, states) left unvisited when the node budget ran out,
        (wide nodes, their states)): wide nodes' children are left to numpy.
        """
        byte, clo, chi = self.trie._views[:3]
        cls, rows = self.byte_class, self.rows
        out_nodes, out_states = self.nodes, self.states
        stack = [(n, s) for n, s in zip(nodes.tolist(), states.tolist()) if s >= 0]
        wide: list[int] = []
        wide_states: list[int] = []
        budget = _DFS_BUDGET
        while stack and budget:
            budget -= 1
            node, s = stack.pop()
            out_nodes.append(node)
            out_states.append(s)
            lo, hi = clo[node], chi[node]
            if hi - lo > _WIDE_NODE:
                wide.append(node)
                wide_states.append(s)
            elif lo < hi:
                row = rows.get(s) or self.row(s)
                for c in range(lo, hi):
                    t = row[cls[byte[c]]]
                    if t >= 0:
                        stack.append((c, t))
        left = np.array(stack, dtype=np.int32).reshape(-1, 2)
        return ((left[:, 0].copy(), left[:, 1].copy()),
                (np.array(wide, dtype=np.int32), np.array(wide_states, dtype=np.int32)))


def _find_child(byte: np.ndarray, lo: int, hi: int, b: int) -> int:
    # children are sorted by byte: binary search the range
    i = lo + int(np.searchsorted(byte[lo:hi], b))
    return i if i < hi and byte[i] == b else -1


def _lcp(toks: list[bytes]) -> np.ndarray:
    """Longest common prefix of each sorted token with its predecessor (0 for the first)."""
    n = len(toks)
    lens = np.fromiter((len(t) for t in toks), dtype=np.int64, count=n)
    pad = np.full((n, _LCP_WIDTH), -1, dtype=np.int16)
    head = b"".join(t[:_LCP_WIDTH].ljust(_LCP_WIDTH, b"\0") for t in toks)
    raw = np.frombuffer(head, dtype=np.uint8).reshape(n, _LCP_WIDTH)
    cols = np.arange(_LCP_WIDTH)
    # (an int16 -1: numpy 2.5 refuses a Python -1 beside uint8 bytes, as NEP 50 says)
    pad[:] = np.where(cols[None, :] < lens[:, None], raw, np.int16(-1))
    lcp = np.zeros(n, dtype=np.int64)
    if n > 1:
        diff = pad[1:] != pad[:-1]
        first = np.where(diff.any(axis=1), diff.argmax(axis=1), _LCP_WIDTH)
        lcp[1:] = np.minimum(first, np.minimum(lens[1:], lens[:-1]))
        for i in np.flatnonzero(lcp == _LCP_WIDTH):
            a, b = toks[i - 1], toks[i]
            k = _LCP_WIDTH
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            lcp[i] = k
    return lcp


def _build_sorted(cls, toks: list[bytes], tok_ids: np.ndarray) -> VocabTrie:
    """Build from lexicographically sorted tokens.

    Sorted token i creates the nodes at depths lcp_i..len_i-1 (the prefixes its
    predecessor does not share).  Ordering nodes by (depth, creating token)
    gives level order with each parent's children contiguous and byte-sorted.
    """
    n = len(toks)
    if n == 0:
        z = np.zeros(0, dtype=np.int32)
        return cls(np.zeros(0, np.uint8), z, z, z, z, z, 0, 0, np.zeros(1, np.int32))
    lens = np.fromiter((len(t) for t in toks), dtype=np.int64, count=n)
    lcp = _lcp(toks)
    offs = np.concatenate(([0], np.cumsum(lens)[:-1]))
    buf = np.frombuffer(b"".join(toks), dtype=np.uint8)
    # one entry per created node: (creator token, depth)
    creator = np.repeat(np.arange(n), lens - lcp)
    depth = np.arange(len(creator)) - np.repeat(np.cumsum(lens - lcp) - (lens - lcp), lens - lcp) + lcp[creator]
    order = np.argsort(depth, kind="stable")      # stable: keeps creator order inside a level
    creator, depth = creator[order], depth[order]
    byte = buf[offs[creator] + depth]
    n_nodes = len(creator)
    level_lo = np.searchsorted(depth, np.arange(depth.max() + 2))
    # parent of (token i, depth d): last node of level d-1 created by a token <= i
    parent = np.full(n_nodes, -1, dtype=np.int64)
    for d in range(1, len(level_lo) - 1):
        a, b = level_lo[d], level_lo[d + 1]
        pa, pb = level_lo[d - 1], level_lo[d]
        parent[a:b] = pa + np.searchsorted(creator[pa:pb], creator[a:b], side="right") - 1
    child_lo = np.zeros(n_nodes, dtype=np.int32)
    child_hi = np.zeros(n_nodes, dtype=np.int32)
    has_parent = np.flatnonzero(parent >= 0)
    counts = np.bincount(parent[has_parent], minlength=n_nodes)
    first_child = np.searchsorted(parent[has_parent], np.arange(n_nodes)) + len(parent) - len(has_parent)
    child_lo[:] = first_child
    child_hi[:] = first_child + counts
    # final node of token i: last node of level len_i-1 created by a token <= i
    term_node = np.empty(n, dtype=np.int64)
    for d in np.unique(lens - 1):
        sel = np.flatnonzero(lens - 1 == d)
        a, b = level_lo[d], level_lo[d + 1]
        term_node[sel] = a + np.searchsorted(creator[a:b], sel, side="right") - 1
    by_node = np.argsort(term_node, kind="stable")
    term_ids = tok_ids[by_node]
    term_lo = np.searchsorted(term_node[by_node], np.arange(n_nodes)).astype(np.int32)
    term_hi = np.searchsorted(term_node[by_node], np.arange(n_nodes), side="right").astype(np.int32)
    return cls(byte.astype(np.uint8), child_lo, child_hi, term_lo, term_hi,
               term_ids.astype(np.int32), int(level_lo[1]), n, level_lo.astype(np.int32))
