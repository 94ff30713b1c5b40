"""Thompson NFA over bytes, with rule calls, built from a `Grammar`.

Every rule of the grammar becomes a fragment `start -> ... -> end` of NFA
states. States carry three kinds of edges:

- byte edges `(mask, target)`: consume one byte whose bit is set in `mask`;
- epsilon edges: move without consuming;
- call edges `(rule, ret)`: run `rule` from its start; when it reaches its end,
  continue at `ret` (the lazy DFA keeps the return states on a stack).

Construction is linear in the size of the IR after expanding counted repeats:
`Repeat(x, m, n)` copies `x` `n` times (or `m` times plus a loop).

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
from typing import Iterator

from grammars.ast import Alt, ByteSet, Grammar, Node, Ref, Repeat, Seq

__all__ = ["NFA", "INF", "gc_paused"]

INF = 1 << 30


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


def _items(node: Node) -> tuple[Node, ...]:
    """A node as a sequence of items (an `Alt` branch flattened)."""
    return node.items if type(node) is Seq else (node,)


class NFA:
    """Byte-level NFA of a grammar; rule 0 is the start rule.

    Example:
        >>> from grammars.ast import Grammar, literal
        >>> nfa = NFA(Grammar({"start": literal(b"hi")}))
        >>> [len(e) for e in nfa.edges]
        [1, 1, 0]
    """

    def __init__(self, grammar: Grammar, *, max_depth: int = 64) -> None:
        with gc_paused():
            self._init(grammar, max_depth)

    def _init(self, grammar: Grammar, max_depth: int) -> None:
        names = [grammar.start] + [n for n in grammar.rules if n != grammar.start]
        self.rule_names: list[str] = names
        self.rule_index: dict[str, int] = {n: i for i, n in enumerate(names)}
        # Edges are collected flat while building, then grouped per state.
        self._count = 0
        self._eps: list[tuple[int, int]] = []
        self._bytes: list[tuple[int, int, int]] = []
        self._calls: list[tuple[int, int, int]] = []
        self.rule_start: list[int] = []
        self.rule_end: list[int] = []
        for name in names:
            start = self._new()
            self.rule_start.append(start)
            self.rule_end.append(self._build(grammar.rules[name], start))
        n = self._count
        self.eps: list[list[int]] = [[] for _ in range(n)]
        self.edges: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        self.calls: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for a, b in self._eps:
            self.eps[a].append(b)
        for a, mask, b in self._bytes:
            self.edges[a].append((mask, b))
        for a, r, b in self._calls:
            self.calls[a].append((r, b))
        del self._eps, self._bytes, self._calls
        # tuples of ints (and of int pairs) are untracked by the cyclic GC once seen;
        # lists would keep ~3 tracked objects per NFA state alive and rescanned
        self.eps = [tuple(x) for x in self.eps]  # type: ignore[misc]
        self.edges = [tuple(x) for x in self.edges]  # type: ignore[misc]
        self.calls = [tuple(x) for x in self.calls]  # type: ignore[misc]
        self.is_end: list[bool] = [False] * n
        for end in self.rule_end:
            self.is_end[end] = True
        self.max_depth = max_depth
        self.need: list[int] = self._compute_need(max_depth)

    @property
    def num_states(self) -> int:
        return len(self.eps)

    def forward(self, s: int) -> int:
        """Follow pure epsilon hops (one eps edge, nothing else) from `s`.

        Return states are canonicalized this way so that calls whose
        continuations coincide (`x ("," x)*`) push the same stack entry, which
        keeps the DFA of recursive grammars from splitting equivalent states.
        """
        seen = {s}
        while (len(self.eps[s]) == 1 and not self.edges[s] and not self.calls[s]
               and not self.is_end[s] and self.eps[s][0] not in seen):
            s = self.eps[s][0]
            seen.add(s)
        return s

    def masks(self) -> set[int]:
        """All distinct byte masks on edges (they define the byte classes)."""
        return {m for es in self.edges for m, _ in es}

    # -- construction -------------------------------------------------------

    def _new(self) -> int:
        self._count += 1
        return self._count - 1

    def _build(self, node: Node, s: int) -> int:
        """Add `node` starting at state `s`; return its exit state.

        Fragments never add edges *into* `s`, so alternatives may share it.
        """
        if isinstance(node, ByteSet):
            t = self._new()
            self._bytes.append((s, node.mask, t))
            return t
        if isinstance(node, Seq):
            for item in node.items:
                s = self._build(item, s)
            return s
        if isinstance(node, Alt):
            t = self._new()
            self._build_alt([_items(x) for x in node.items], s, t)
            return t
        if isinstance(node, Repeat):
            return self._build_repeat(node, s)
        if isinstance(node, Ref):
            t = self._new()
            self._calls.append((s, self.rule_index[node.name], t))
            return t
        raise TypeError(f"not a grammar node: {node!r}")

    def _build_alt(self, branches: list[tuple[Node, ...]], s: int, t: int) -> None:
        """Alternatives from `s` to `t`, left-factored on leading byte sets.

        Branches that start with the same `ByteSet` share one edge (a trie);
        UTF-8 classes such as `\\w` have hundreds of branches with few distinct
        lead bytes, and this keeps the NFA and every DFA closure small.
        Iterative, with (items, offset) pairs, so long shared prefixes cost
        neither recursion depth nor tuple copies.
        """
        todo = [([(items, 0) for items in branches], s)]
        while todo:
            group, s = todo.pop()
            heads: dict[int, list[tuple[tuple[Node, ...], int]]] = {}
            for items, at in group:
                if at < len(items) and type(items[at]) is ByteSet:
                    heads.setdefault(items[at].mask, []).append((items, at + 1))
                else:
                    self._eps.append((self._build_seq(items, at, s), t))
            for mask, tails in heads.items():
                u = self._new()
                self._bytes.append((s, mask, u))
                if len(tails) == 1:
                    self._eps.append((self._build_seq(tails[0][0], tails[0][1], u), t))
                else:
                    todo.append((tails, u))

    def _build_seq(self, items: tuple[Node, ...], at: int, s: int) -> int:
        for i in range(at, len(items)):
            s = self._build(items[i], s)
        return s

    def _build_repeat(self, node: Repeat, s: int) -> int:
        for _ in range(node.min):
            s = self._build(node.item, s)
        if node.max is None:
            # Loop through a fresh head so no back edge ever enters `s`.
            head = self._new()
            self._eps.append((s, head))
            self._eps.append((self._build(node.item, head), head))
            t = self._new()
            self._eps.append((head, t))
            return t
        t = self._new()
        for _ in range(node.max - node.min):
            self._eps.append((s, t))
            s = self._build(node.item, s)
        self._eps.append((s, t))
        return t

    # -- finishability ------------------------------------------------------

    def _compute_need(self, max_depth: int) -> list[int]:
        """need[s]: least nesting budget with which s reaches its rule's end.

        A monotone fixpoint over the budget d = 0..max_depth, done
        incrementally: level d may use calls into rules whose start finishes
        within d - 1. Total work is linear in the NFA size.
        """
        n = self.num_states
        rev: list[list[int]] = [[] for _ in range(n)]
        rev_call: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        sites: list[list[tuple[int, int]]] = [[] for _ in self.rule_start]
        for s in range(n):
            for t in self.eps[s]:
                rev[t].append(s)
            for _, t in self.edges[s]:
                rev[t].append(s)
            for r, t in self.calls[s]:
                rev_call[t].append((s, r))
                sites[r].append((s, t))
        need = [INF] * n
        active = [False] * len(self.rule_start)
        frontier = [e for e in self.rule_end]
        for e in frontier:
            need[e] = 0
        d = 0
        while True:
            while frontier:
                u = frontier.pop()
                for p in rev[u]:
                    if need[p] == INF:
                        need[p] = d
                        frontier.append(p)
                for p, r in rev_call[u]:
                    if active[r] and need[p] == INF:
                        need[p] = d
                        frontier.append(p)
            if d >= max_depth:
                return need
            newly = [r for r, st in enumerate(self.rule_start) if not active[r] and need[st] <= d]
            if not newly:
                return need
            d += 1
            for r in newly:
                active[r] = True
                for p, t in sites[r]:
                    if need[t] != INF and need[p] == INF:
                        need[p] = d
                        frontier.append(p)
