"""Thompson NFA over bytes, with rule calls, built from a `Grammar`.

Every rule of the grammar becomes a fragment `start -> ... -> end` of NFA
states. States carry three kinds of edges:

- byte edges `(mask, target)`: consume one byte whose bit is set in `mask`;
- epsilon edges: move without consuming;
- call edges `(rule, ret)`: run `rule` from its start; when it reaches its end,
  continue at `ret` (the lazy DFA keeps the return states on a stack).

Construction is linear in the size of the IR *without* expanding counted
repeats: it never unrolls a bound. `Repeat(x, m, n)` with small bounds is
copied (`x{0,1}`, `x{2}`, a byte class up to 64 times); past that it becomes
a *counter loop*: an ENTER edge pushes a counter frame holding 0 on the
configuration's stack, the loop HEAD either runs `x` again (count < n) or pops
the frame and leaves (count >= m), and an INC edge after `x` bumps the count.
So `x{0,1000000}` costs four states, and the counter values live in the lazy
DFA's configurations, created only when generation reaches them. A large
node used again (a `$ref`'d definition, a shared object layout) becomes a
subroutine: a FREE call, which returns like a `Ref` but costs no nesting
depth, instead of another copy; small ones are copied from the edges
recorded for their first build. Alternatives that end in the same items
share one copy of that suffix, so "the first present member is i, then the
optional rest" layouts of JSON objects stay linear instead of quadratic.

Why counters rather than symbolic derivatives (llguidance's derivre): the
lazy subset construction over Thompson NFAs, its compiled kernels, the
vocabulary-trie walks and the slice machinery all work on configurations
`stack * N + state`; a counter is one more kind of stack frame, so every
one of them carries over unchanged, and the NFA stays O(size of the schema).

`need[s]` is the least call-nesting budget with which state `s` can still reach
the end of its own rule (`INF` if it never can). The DFA uses it to keep only
configurations that can finish, so every DFA state it builds is live.

Example:
    >>> from grammars.ast import Grammar, literal, star
    >>> nfa = NFA(Grammar({"start": star(literal(b"ab"))}))
    >>> nfa.need[nfa.rule_start[0]]
    0
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

import numpy as np

from grammars.ast import Alt, ByteSet, Grammar, Node, Ref, Repeat, Seq
from grammars.need import INF, compute_need

__all__ = ["NFA", "NFAArrays", "INF", "gc_paused", "share", "REG", "FREE", "ENTER", "HEAD", "INC", "UNROLL_LIMIT",
           "SUBROUTINE_MIN"]

# Kinds of call edge (`NFAArrays.call_op`). REG: a rule call (`Ref`), one level of
# nesting depth; FREE: a subroutine call, no depth; ENTER: push a counter frame
# holding 0, go to the loop head; HEAD: count < hi: enter the item, count >= lo:
# pop the frame and go to the loop exit (`call_dst`); INC: count + 1, back to the head.
REG, FREE, ENTER, HEAD, INC = range(5)
# A repeat is copied when its bound is at most this (a byte class: 8); else a counter loop.
UNROLL_LIMIT = 4
_BYTE_UNROLL_LIMIT = 8
# A node built again whose fragment has at least this many states becomes a subroutine.
SUBROUTINE_MIN = 16



@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: building 10^5 small lists/tuples otherwise triggers
    collections that rescan every live object (measured 2-3x slower)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(frozen=True, eq=False)
class NFAArrays:
    """An NFA's edges grouped per source state (CSR, in insertion order).

    Attributes:
        eps_ptr, eps_dst: epsilon edges of state s are eps_dst[eps_ptr[s]:eps_ptr[s + 1]].
        edge_ptr, edge_dst, edge_mask: byte edges; `edge_mask` indexes `masks`.
        masks: the distinct byte masks, ascending.
        call_ptr, call_rule, call_dst: call edges (rule index or -1, return or exit state).
        call_op, call_to, call_lo, call_hi: per call edge its kind (`REG` ... `INC`),
            the state it goes to (a rule's start, a loop head or body), and a
            counter loop's bounds (hi -1: unbounded).
    """

    eps_ptr: np.ndarray
    eps_dst: np.ndarray
    edge_ptr: np.ndarray
    edge_dst: np.ndarray
    edge_mask: np.ndarray
    masks: tuple[int, ...]
    call_ptr: np.ndarray
    call_rule: np.ndarray
    call_dst: np.ndarray
    call_op: np.ndarray
    call_to: np.ndarray
    call_lo: np.ndarray
    call_hi: np.ndarray


def _per_state(ptr: np.ndarray, items: list) -> list[tuple]:
    """Split `items` into one tuple per state (the shared empty tuple where none)."""
    bounds = ptr.tolist()
    return [tuple(items[lo:hi]) if hi > lo else () for lo, hi in zip(bounds, bounds[1:])]


def _items(node: Node) -> tuple[Node, ...]:
    """A node as a sequence of items (an `Alt` branch flattened)."""
    return node.items if type(node) is Seq else (node,)


# Process-wide NFA fragments of nodes that many grammars contain (JSON
# whitespace, string characters, numbers): id(node) -> node, kept alive so
# that the id stays valid, and id(node) -> template (see `_template`).
_SHARED: dict[int, Node] = {}
_TEMPLATES: dict[int, tuple] = {}


def share(node: Node) -> Node:
    """Mark `node` (which must stay immutable, as all nodes are) as common to
    many grammars: its NFA fragment is then built once per process and copied
    into later NFAs. Returns `node`.

    Example:
        >>> from grammars.ast import byte_range, star
        >>> gap = share(star(byte_range(32, 32)))
        >>> NFA(Grammar({"start": gap})).num_states == NFA(Grammar({"start": gap})).num_states
        True
    """
    if type(node) in (Seq, Alt, Repeat) and id(node) not in _SHARED:
        if len(_SHARED) >= 4096:  # a bound for callers sharing per-request nodes
            _SHARED.clear()
            _TEMPLATES.clear()
        _SHARED[id(node)] = node
    return node


def _template(nfa: "NFA", s: int, c0: int, e0: int, b0: int, k0: int, t: int) -> tuple:
    """A just-built fragment (entry `s`, states from `c0`, edges from e0/b0,
    exit `t`) with states renumbered from 0 and the entry as -1."""
    def rel(x: int) -> int:
        return -1 if x == s else x - c0

    inv = {v: k for k, v in nfa._mask_id.items()}
    masks: list[int] = []
    local: dict[int, int] = {}
    idx = []
    for i in nfa._byte_mask[b0:]:
        j = local.get(i)
        if j is None:
            j = local[i] = len(masks)
            masks.append(inv[i])
        idx.append(j)
    # rule calls by name (rule numbers differ between grammars), counter edges as they are
    calls = [(rel(a), op, b - c0, to - c0 if to >= 0 else -1, lo, hi, nfa.rule_names[r] if r >= 0 else None)
             for a, op, b, to, lo, hi, r in zip(nfa._call_src[k0:], nfa._call_op[k0:], nfa._call_dst[k0:],
                                                nfa._call_to[k0:], nfa._call_lo[k0:], nfa._call_hi[k0:],
                                                nfa._call_rule[k0:])]
    return (nfa._count - c0, rel(t), [rel(a) for a in nfa._eps_src[e0:]], [b - c0 for b in nfa._eps_dst[e0:]],
            [rel(a) for a in nfa._byte_src[b0:]], [b - c0 for b in nfa._byte_dst[b0:]], masks, idx, nfa._dead, calls)


class NFA:
    """Byte-level NFA of a grammar; rule 0 is the start rule.

    Edges are kept as numpy CSR arrays (`arrays`); per-state adjacency as
    tuples (`eps`, `edges`, `calls`, the shared empty tuple for states without
    such edges) is built on first use, for the Python DFA.

    Example:
        >>> from grammars.ast import Grammar, literal
        >>> nfa = NFA(Grammar({"start": literal(b"hi")}))
        >>> [len(e) for e in nfa.edges]
        [1, 1, 0]
    """

    # Switches for differential tests: replay recorded fragments; skip the
    # finishability search when the structure guarantees its answer; call large
    # nodes built again as subroutines instead of copying them.
    replay = True
    fast_need = True
    subroutines = True
    # A compiled `compute_need` (same arguments and result), installed by `constrained.dfa_jit`
    # when numba is there; grammars itself stays free of numba.
    need_kernel = None

    def __init__(self, grammar: Grammar, *, max_depth: int = 64) -> None:
        with gc_paused():
            self._init(grammar, max_depth)

    def _init(self, grammar: Grammar, max_depth: int) -> None:
        names = [grammar.start] + [n for n in grammar.rules if n != grammar.start]
        self.rule_names: list[str] = names[:]   # subroutines get names "sub:<index>"
        self.rule_index: dict[str, int] = {n: i for i, n in enumerate(names)}
        # Edges are collected as flat int columns while building (no tuple per
        # edge), then grouped per state.
        self._count = 0
        self._eps_src: list[int] = []
        self._eps_dst: list[int] = []
        self._byte_src: list[int] = []
        self._byte_mask: list[int] = []  # mask ids, numbered in order of first use
        self._mask_id: dict[int, int] = {}
        self._byte_dst: list[int] = []
        self._call_src: list[int] = []
        self._call_rule: list[int] = []      # -1 for counter edges
        self._call_dst: list[int] = []
        self._call_op: list[int] = []
        self._call_to: list[int] = []        # counter edges: the state they go to (rule calls: -1)
        self._call_lo: list[int] = []
        self._call_hi: list[int] = []
        self._subs: dict[Node, int] = {}     # node -> its subroutine's rule index
        self._no_subs = 0                    # > 0 while recording a template (see `_build_shared`)
        self._pending: list[tuple[int, tuple[int, ...], Node]] = []   # subroutine bodies to make
        self._labels: dict[int, tuple[Node, str]] = dict(grammar.info.get("labels") or {})
        # (first state, end state, label): the states each labeled node built (see `origin`)
        self.origins: list[tuple[int, int, str]] = []
        # node -> (entry, first state, end state, exit, edge offsets) of its first build
        self._frags: dict[Node, tuple[int, ...]] = {}
        self._dead = False  # built a NOTHING (some states may not reach their rule's end)
        # grammar rules first; subroutines are appended while building them
        self.rule_start: list[int] = [-1] * len(names)
        self.rule_end: list[int] = [-1] * len(names)
        for i, name in enumerate(names):
            self.rule_start[i] = start = self._new()
            self.rule_end[i] = self._build(grammar.rules[name], start)
        for rule, frag, node in self._pending:      # subroutine bodies: copies, which make no new subroutines
            self.rule_start[rule] = start = self._new()
            self.rule_end[rule] = self._copy(frag, start)
            if id(node) in self._labels:
                self.origins.append((start, self._count, self._labels[id(node)][1]))
        self._masks = frozenset(self._mask_id)
        self.is_end: list[bool] = [False] * self._count
        for end in self.rule_end:
            self.is_end[end] = True
        self.max_depth = max_depth
        self.need: list[int] = self._compute_need(max_depth)
        self.arrays = self._csr()
        del self._frags, self._dead, self._mask_id, self._eps_src, self._eps_dst, self._byte_src, self._byte_mask, self._byte_dst
        del self._call_src, self._call_rule, self._call_dst, self._call_op, self._call_to, self._call_lo, self._call_hi
        del self._subs, self._pending, self._labels

    def _csr(self) -> "NFAArrays":
        """The flat edge columns grouped per source state, in numpy (order kept)."""
        n = self._count

        def group(src: list[int], *cols: list[int]) -> tuple[np.ndarray, ...]:
            ptr = np.zeros(n + 1, dtype=np.int64)
            if not src:  # e.g. no calls: skip the numpy calls, which dominate small NFAs
                return (ptr,) + tuple(np.zeros(0, dtype=np.int64) for _ in cols)
            table = np.array((src, *cols), dtype=np.int64)  # one conversion for all columns
            order = np.argsort(table[0], kind="stable")
            np.cumsum(np.bincount(table[0], minlength=n), out=ptr[1:])
            return (ptr, *table[1:, order])

        masks = tuple(sorted(self._masks))
        rank = {m: i for i, m in enumerate(masks)}
        # first-use ids -> ascending-mask ids, applied to the whole column at once
        remap = np.array([rank[m] for m in self._mask_id], dtype=np.int64)
        eps_ptr, eps_dst = group(self._eps_src, self._eps_dst)
        edge_ptr, edge_dst, edge_mask = group(self._byte_src, self._byte_dst, self._byte_mask)
        edge_mask = remap[edge_mask] if len(edge_mask) else edge_mask
        call_ptr, call_rule, call_dst, call_op, call_to, call_lo, call_hi = group(
            self._call_src, self._call_rule, self._call_dst, self._call_op, self._call_to, self._call_lo, self._call_hi)
        if len(call_rule):              # rule calls go to their rule's start
            starts = np.array(self.rule_start, dtype=np.int64)
            call_to = np.where(call_rule >= 0, starts[np.maximum(call_rule, 0)], call_to)
        return NFAArrays(eps_ptr, eps_dst, edge_ptr, edge_dst, edge_mask, masks, call_ptr, call_rule, call_dst,
                         call_op, call_to, call_lo, call_hi)

    # Per-state adjacency as tuples, for the Python DFA (built on first use).

    @cached_property
    def eps(self) -> list[tuple[int, ...]]:
        a = self.arrays
        return _per_state(a.eps_ptr, a.eps_dst.tolist())

    @cached_property
    def edges(self) -> list[tuple[tuple[int, int], ...]]:
        a = self.arrays
        masks = a.masks
        return _per_state(a.edge_ptr, [(masks[m], t) for m, t in zip(a.edge_mask.tolist(), a.edge_dst.tolist())])

    @cached_property
    def calls(self) -> list[tuple[tuple[int, int, int, int, int], ...]]:
        """Per state, its call edges as (op, to, dst, lo, hi) (see `REG` ... `INC`)."""
        a = self.arrays
        return _per_state(a.call_ptr, list(zip(a.call_op.tolist(), a.call_to.tolist(), a.call_dst.tolist(),
                                               a.call_lo.tolist(), a.call_hi.tolist())))

    @property
    def num_states(self) -> int:
        return self._count

    def forward(self, s: int) -> int:
        """Follow pure epsilon hops (one eps edge, nothing else) from `s`.

        Return states are canonicalized this way so that calls whose
        continuations coincide (`x ("," x)*`) push the same stack entry, which
        keeps the DFA of recursive grammars from splitting equivalent states.
        """
        a = self.arrays
        eps_ptr, edge_ptr, call_ptr = a.eps_ptr, a.edge_ptr, a.call_ptr
        seen = {s}
        while (eps_ptr[s + 1] - eps_ptr[s] == 1 and edge_ptr[s + 1] == edge_ptr[s] and call_ptr[s + 1] == call_ptr[s]
               and not self.is_end[s] and int(a.eps_dst[eps_ptr[s]]) not in seen):
            s = int(a.eps_dst[eps_ptr[s]])
            seen.add(s)
        return s

    def origin(self, states: list[int]) -> str | None:
        """The label (JSON path, regex) of the innermost labeled node that built one of
        `states`, the deepest of them; None if none is labeled. For error messages only."""
        best: tuple[int, str] | None = None
        for s in states:
            inner = min(((b - a, lab) for a, b, lab in self.origins if a <= s < b), default=None)
            if inner is not None and (best is None or len(inner[1]) > len(best[1])):
                best = inner
        return None if best is None else best[1]

    def forward_many(self, states: np.ndarray) -> np.ndarray:
        """`forward` of each of `states` (int64), vectorized: chains of pure epsilon hops are
        followed a step at a time for all of them at once; the few still moving after 32
        steps (long chains, cycles) take the plain `forward`."""
        a = self.arrays
        hop = ((np.diff(a.eps_ptr) == 1) & (np.diff(a.edge_ptr) == 0) & (np.diff(a.call_ptr) == 0)
               & ~np.asarray(self.is_end, dtype=bool))
        nxt = np.arange(self.num_states, dtype=np.int64)
        nxt[hop] = a.eps_dst[a.eps_ptr[:-1][hop]]
        cur = np.asarray(states, dtype=np.int64)
        for _ in range(32):
            moved = nxt[cur]
            if (moved == cur).all():
                return cur
            cur = moved
        out = np.asarray(states, dtype=np.int64).copy()
        done = nxt[cur] == cur
        out[done] = cur[done]
        out[~done] = [self.forward(int(t)) for t in out[~done]]
        return out

    def masks(self) -> set[int]:
        """All distinct byte masks on edges (they define the byte classes)."""
        return set(self._masks)

    # -- construction -------------------------------------------------------

    def _new(self) -> int:
        self._count += 1
        return self._count - 1

    def _eps(self, a: int, b: int) -> None:
        self._eps_src.append(a)
        self._eps_dst.append(b)

    def _build(self, node: Node, s: int) -> int:
        """Add `node` starting at state `s`; return its exit state.

        Fragments never add edges *into* `s`, so alternatives may share it.
        """
        kind = type(node)
        if kind is ByteSet:
            return self._byte(s, node.mask)
        if kind is Ref:
            t = self._new()
            self._call(s, REG, t, rule=self.rule_index[node.name])
            return t
        label = self._labels.get(id(node))
        if label is not None:
            c0 = self._count
            t = self._build_node(node, s)
            self.origins.append((c0, self._count, label[1]))
            return t
        return self._build_node(node, s)

    def _build_node(self, node: Node, s: int) -> int:
        kind = type(node)
        frag = self._frags.get(node) if self.replay else None
        if frag is not None:
            if frag[5] - frag[1] < SUBROUTINE_MIN or not self.subroutines or self._no_subs:
                return self._copy(frag, s)
            return self._subroutine(node, frag, s)
        mark = (s, self._count, len(self._eps_src), len(self._byte_src), len(self._call_src))
        if self.replay and id(node) in _SHARED:
            t = self._build_shared(node, s)
        elif kind is Seq:
            t = self._build_seq(node.items, 0, len(node.items), s)
        elif kind is Alt:
            if not node.items:
                self._dead = True  # NOTHING: its entry cannot reach its exit
            t = self._new()
            self._build_alt([_items(x) for x in node.items], s, t)
        elif kind is Repeat:
            t = self._build_repeat(node, s)
        else:
            raise TypeError(f"not a grammar node: {node!r}")
        self._frags[node] = (*mark, self._count, t, len(self._eps_src), len(self._byte_src), len(self._call_src))
        return t

    def _call(self, s: int, op: int, dst: int, *, rule: int = -1, to: int = -1, lo: int = 0, hi: int = -1) -> None:
        """A call edge from `s` (see `REG` ... `INC`)."""
        self._call_src.append(s)
        self._call_rule.append(rule)
        self._call_dst.append(dst)
        self._call_op.append(op)
        self._call_to.append(to)
        self._call_lo.append(lo)
        self._call_hi.append(hi)

    def _subroutine(self, node: Node, frag: tuple[int, ...], s: int) -> int:
        """A FREE call from `s` to the subroutine of `node`.

        Its body, a copy of the recorded fragment, is made after the grammar's
        rules (`_pending`): made now, it would lie inside the fragment being
        built, whose later copies would carry a dead copy of it.
        """
        rule = self._subs.get(node)
        if rule is None:
            rule = self._subs[node] = len(self.rule_start)
            self.rule_names.append(f"sub:{rule}")
            self.rule_start.append(-1)
            self.rule_end.append(-1)
            self._pending.append((rule, frag, node))
        t = self._new()
        self._call(s, FREE, t, rule=rule)
        return t

    def _build_shared(self, node: Node, s: int) -> int:
        """Build a `share`d node from its process-wide template (recorded on its
        first build in any NFA), on fresh states from entry `s`."""
        tpl = _TEMPLATES.get(id(node))
        if tpl is not None and not all(name is None or name in self.rule_index for *_, name in tpl[9]):
            tpl = None                        # it calls a rule this grammar lacks: build it here, unrecorded
            record = False
        else:
            record = True
        if tpl is None:
            was_dead, self._dead = self._dead, False
            c0, e0, b0, k0 = self._count, len(self._eps_src), len(self._byte_src), len(self._call_src)
            self._no_subs += 1                # nested nodes are copied: a template calls no subroutine
            try:
                kind = type(node)
                if kind is Seq:
                    t = self._build_seq(node.items, 0, len(node.items), s)
                elif kind is Alt:
                    t = self._new()
                    self._build_alt([_items(x) for x in node.items], s, t)
                else:
                    t = self._build_repeat(node, s)
            finally:
                self._no_subs -= 1
            if record and FREE not in self._call_op[k0:]:
                _TEMPLATES[id(node)] = _template(self, s, c0, e0, b0, k0, t)
            self._dead = was_dead or self._dead
            return t
        size, exit_, eps_src, eps_dst, byte_src, byte_dst, masks, mask_idx, dead, calls = tpl
        d = self._count
        self._count += size
        self._dead = self._dead or dead
        self._eps_src.extend([s if a < 0 else a + d for a in eps_src])
        self._eps_dst.extend([b + d for b in eps_dst])
        self._byte_src.extend([s if a < 0 else a + d for a in byte_src])
        self._byte_dst.extend([b + d for b in byte_dst])
        ids = []
        for m in masks:
            mid = self._mask_id.get(m)
            if mid is None:
                mid = self._mask_id[m] = len(self._mask_id)
            ids.append(mid)
        self._byte_mask.extend([ids[i] for i in mask_idx])
        for a, op, b, to, lo, hi, name in calls:
            self._call(s if a < 0 else a + d, op, b + d, rule=-1 if name is None else self.rule_index[name],
                       to=to + d if to >= 0 else -1, lo=lo, hi=hi)
        return s if exit_ < 0 else exit_ + d

    def _copy(self, frag: tuple[int, ...], s: int) -> int:
        """Replay a recorded fragment from entry `s`, on fresh states.

        The fragment's states are the contiguous range [c0, c1) and its edges
        the slices [e0, e1) of the columns; only its entry lies outside the
        range, and no edge enters it.
        """
        entry, c0, e0, b0, k0, c1, exit_, e1, b1, k1 = frag
        d = self._count - c0
        self._count += c1 - c0
        src = self._eps_src
        src.extend([s if a == entry else a + d for a in src[e0:e1]])
        self._eps_dst.extend([b + d for b in self._eps_dst[e0:e1]])
        src = self._byte_src
        src.extend([s if a == entry else a + d for a in src[b0:b1]])
        self._byte_mask.extend(self._byte_mask[b0:b1])
        self._byte_dst.extend([b + d for b in self._byte_dst[b0:b1]])
        if k1 > k0:
            src = self._call_src
            src.extend([s if a == entry else a + d for a in src[k0:k1]])
            self._call_rule.extend(self._call_rule[k0:k1])
            self._call_dst.extend([b + d for b in self._call_dst[k0:k1]])
            self._call_op.extend(self._call_op[k0:k1])
            self._call_to.extend([b + d if b >= 0 else b for b in self._call_to[k0:k1]])
            self._call_lo.extend(self._call_lo[k0:k1])
            self._call_hi.extend(self._call_hi[k0:k1])
        return s if exit_ == entry else exit_ + d

    def _build_alt(self, branches: list[tuple[Node, ...]], s: int, t: int) -> None:
        """Alternatives from `s` to `t`, sharing common suffixes and prefixes.

        Branches that end in the same items share one copy of them (built
        once, entered by epsilon from each branch); what remains of the
        branches is left-factored on leading byte sets by `_build_prefixes`.
        Iterative, so long shared suffixes cost no recursion depth.
        """
        leaves: list[tuple[tuple[Node, ...], int, int]] = []  # (items, stop, target)
        todo = [([(items, len(items)) for items in branches], t)]
        while todo:
            group, target = todo.pop()
            if len(group) == 1:
                leaves.append((group[0][0], group[0][1], target))
                continue
            by_last: dict[Node, list[tuple[tuple[Node, ...], int]]] = {}
            for items, stop in group:
                if stop == 0:
                    leaves.append((items, 0, target))
                else:
                    by_last.setdefault(items[stop - 1], []).append((items, stop - 1))
            for last, tails in by_last.items():
                if len(tails) == 1:
                    items, stop = tails[0]
                    leaves.append((items, stop + 1, target))
                    continue
                # several branches end in `last`: build it once, from a fresh entry h
                h = self._new()
                self._eps(self._build(last, h), target)
                todo.append((tails, h))
        self._build_prefixes(leaves, s)

    def _build_prefixes(self, leaves: list[tuple[tuple[Node, ...], int, int]], s: int) -> None:
        """Branch prefixes items[:stop] from `s` to their targets, left-factored.

        Prefixes that start with the same `ByteSet` share one edge (a trie);
        UTF-8 classes such as `\\w` have hundreds of branches with few distinct
        lead bytes, and this keeps the NFA and every DFA closure small.
        """
        todo = [([(items, 0, stop, target) for items, stop, target in leaves], s)]
        while todo:
            group, s = todo.pop()
            heads: dict[int, list[tuple[tuple[Node, ...], int, int, int]]] = {}
            for items, at, stop, target in group:
                if at < stop and type(items[at]) is ByteSet:
                    heads.setdefault(items[at].mask, []).append((items, at + 1, stop, target))
                else:
                    self._eps(self._build_seq(items, at, stop, s), target)
            for mask, tails in heads.items():
                u = self._byte(s, mask)
                if len(tails) == 1:
                    items, at, stop, target = tails[0]
                    self._eps(self._build_seq(items, at, stop, u), target)
                else:
                    todo.append((tails, u))

    def _byte(self, s: int, mask: int) -> int:
        """A byte edge from `s` to a fresh state; return that state."""
        mid = self._mask_id.get(mask)
        if mid is None:
            mid = self._mask_id[mask] = len(self._mask_id)
        t = self._count
        self._count = t + 1
        self._byte_src.append(s)
        self._byte_mask.append(mid)
        self._byte_dst.append(t)
        return t

    def _build_seq(self, items: tuple[Node, ...], at: int, stop: int, s: int) -> int:
        for i in range(at, stop):
            item = items[i]
            # byte sets inline: most items of literals and UTF-8 sequences are bytes
            s = self._byte(s, item.mask) if type(item) is ByteSet else self._build(item, s)
        return s

    def _build_repeat(self, node: Repeat, s: int) -> int:
        bound = node.max if node.max is not None else node.min
        if type(node.item) is ByteSet and node.max is not None and bound <= _BYTE_UNROLL_LIMIT:
            return self._byte_repeat(node.item.mask, node.min, node.max, s)
        if bound > UNROLL_LIMIT and not (type(node.item) is ByteSet and node.max is None and node.min <= _BYTE_UNROLL_LIMIT):
            return self._counter_loop(node, s)
        for _ in range(node.min):
            s = self._build(node.item, s)
        if node.max is None:
            # Loop through a fresh head so no back edge ever enters `s`.
            head = self._new()
            self._eps(s, head)
            self._eps(self._build(node.item, head), head)
            t = self._new()
            self._eps(head, t)
            return t
        t = self._new()
        for _ in range(node.max - node.min):
            self._eps(s, t)
            s = self._build(node.item, s)
        self._eps(s, t)
        return t

    def _counter_loop(self, node: Repeat, s: int) -> int:
        """`item{lo,hi}` as a counter loop: s -ENTER-> head -HEAD-> item ... -INC-> head; head -HEAD-> exit.

        Four states and three edges whatever the bounds; the counter lives on
        the DFA configuration's stack (see the module docstring).
        """
        hi = -1 if node.max is None else node.max
        head, body, t = self._new(), self._new(), self._new()
        self._call(s, ENTER, head, to=head)
        self._call(head, HEAD, t, to=body, lo=node.min, hi=hi)
        self._call(self._build(node.item, body), INC, head, to=head, lo=node.min, hi=hi)
        return t

    def _byte_repeat(self, mask: int, lo: int, hi: int, s: int) -> int:
        """`[mask]{lo,hi}` in bulk: the same edges, in the same column order, as
        the generic loop of `_build_repeat` (whitespace gaps are `[ \\t]{0,32}`)."""
        mid = self._mask_id.get(mask)
        if mid is None:
            mid = self._mask_id[mask] = len(self._mask_id)
        c = self._count
        # lo mandatory bytes: s -> c -> c+1 ... -> c+lo-1
        if lo:
            self._byte_src.append(s)
            self._byte_src.extend(range(c, c + lo - 1))
            s = c + lo - 1
        # then hi-lo optional ones, each skippable to t: s -> t+1 -> ... -> t+k
        t = c + lo
        k = hi - lo
        if k:
            self._byte_src.append(s)
            self._byte_src.extend(range(t + 1, t + k))
        self._byte_dst.extend(range(c, c + lo))
        self._byte_dst.extend(range(t + 1, t + k + 1))
        self._byte_mask.extend([mid] * (lo + k))
        self._eps_src.append(s)
        self._eps_src.extend(range(t + 1, t + k + 1))
        self._eps_dst.extend([t] * (k + 1))
        self._count = t + k + 1
        return t

    # -- finishability ------------------------------------------------------

    def _compute_need(self, max_depth: int) -> list[int]:
        """need[s]: least nesting budget with which s reaches its rule's end (see `grammars.need`).

        A counter loop's item is a pseudo-rule (from the loop's body to the
        state with its INC edge), and the loop head calls it like a subroutine,
        returning to the loop's exit: the exit needs at least one iteration
        when the lower bound is positive (the DFA checks the count itself);
        with a lower bound of 0 the head also reaches the exit directly. ENTER
        is an epsilon move; INC is not followed (the pseudo-rule ends there).
        """
        n = self.num_states
        ops = self._call_op
        if self.fast_need and REG not in ops and not self._dead and 0 not in self._masks:
            # Without rule calls and without dead parts (NOTHING, empty byte sets) every
            # Thompson fragment state reaches its fragment's exit, hence its rule's end.
            return [0] * n
        src, dst = self._eps_src + self._byte_src, self._eps_dst + self._byte_dst
        starts, ends = list(self.rule_start), list(self.rule_end)
        item_end = {to: a for a, op, to in zip(self._call_src, ops, self._call_to) if op == INC}  # head -> item's end
        calls: tuple[list[int], ...] = ([], [], [], [])
        for a, op, b, to, r, lo in zip(self._call_src, ops, self._call_dst, self._call_to, self._call_rule,
                                       self._call_lo):
            if op == HEAD:
                r = len(starts)
                starts.append(to)
                ends.append(item_end[a])
                if lo == 0:
                    src.append(a)
                    dst.append(b)
            elif op == ENTER:
                src.append(a)
                dst.append(to)
                continue
            elif op == INC:
                continue
            for col, v in zip(calls, (a, r, b, op != REG)):
                col.append(v)
        return (self.need_kernel or compute_need)(n, starts, ends, src, dst, *calls, max_depth=max_depth)
