"""Finishability of NFA states: the least call-nesting budget that reaches a rule's end.

`need[s]` is the least nesting budget with which NFA state `s` can still reach
the end of its own rule (`INF` if it never can). The DFA keeps only
configurations that can finish within their remaining depth budget, so every
DFA state it builds is live.

Example:
    >>> # rule 0: state 0 -eps-> 1 (its end); rule 1: state 2 calls rule 0, returns to 3 (end)
    >>> compute_need(4, [0, 2], [1, 3], [0], [1], [2], [0], [3], max_depth=4)
    [0, 0, 1, 0]
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["INF", "compute_need"]

INF = 1 << 30


def compute_need(n: int, rule_start: Sequence[int], rule_end: Sequence[int], edge_src: list[int],
                 edge_dst: list[int], call_src: Sequence[int], call_rule: Sequence[int], call_dst: Sequence[int],
                 call_free: Sequence[bool] | None = None, *, max_depth: int) -> list[int]:
    """need[s] for the `n` states of an NFA (epsilon and byte edges alike in `edge_*`).

    A monotone fixpoint over the budget d = 0..max_depth, done incrementally:
    level d may use calls into rules whose start finishes within d - 1, and
    FREE calls (`call_free`, subroutines that cost no depth) into rules whose
    start finishes within d. Total work is linear in the NFA size.
    """
    free = list(call_free) if call_free is not None else [False] * len(call_src)
    # Reverse eps + byte edges as CSR (sources sorted by target), built in
    # numpy: per-state lists would be the largest allocation of the NFA.
    src = np.array(edge_src, dtype=np.int64)
    dst = np.array(edge_dst, dtype=np.int64)
    order = np.argsort(dst, kind="stable")
    rev = src[order].tolist()
    off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=off[1:])
    off_l = off.tolist()
    rev_call: dict[int, list[tuple[int, int, bool]]] = {}
    sites: list[list[tuple[int, int]]] = [[] for _ in rule_start]
    free_sites: list[list[tuple[int, int]]] = [[] for _ in rule_start]
    for p, r, t, f in zip(call_src, call_rule, call_dst, free):
        rev_call.setdefault(t, []).append((p, r, f))
        (free_sites if f else sites)[r].append((p, t))
    need = [INF] * n
    active = [False] * len(rule_start)        # rule calls usable (from the level after their start settles)
    free_active = [False] * len(rule_start)   # subroutine calls usable (from the level their start settles)
    starts_of: dict[int, list[int]] = {}
    for r, st in enumerate(rule_start):
        starts_of.setdefault(st, []).append(r)
    frontier = []
    for e in rule_end:
        if need[e] == INF:
            need[e] = 0
            frontier.append(e)
    settled: list[int] = []                   # rules whose start settled at this level
    d = 0
    while True:
        while frontier:
            u = frontier.pop()
            for r in starts_of.get(u, ()):
                # a rule's start settled: its subroutine calls finish at this same level
                settled.append(r)
                free_active[r] = True
                for p, t in free_sites[r]:
                    if need[t] != INF and need[p] == INF:
                        need[p] = d
                        frontier.append(p)
            for p in rev[off_l[u]:off_l[u + 1]]:
                if need[p] == INF:
                    need[p] = d
                    frontier.append(p)
            for p, r, f in rev_call.get(u, ()):
                if (free_active[r] if f else active[r]) and need[p] == INF:
                    need[p] = d
                    frontier.append(p)
        newly = [r for r in settled if not active[r]]
        settled = []
        if d >= max_depth or not newly:
            return need
        d += 1                                # rule calls into the rules that settled cost one more level
        for r in newly:
            active[r] = True
            for p, t in sites[r]:
                if need[t] != INF and need[p] == INF:
                    need[p] = d
                    frontier.append(p)
