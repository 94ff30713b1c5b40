"""numba kernel of `grammars.need.compute_need` (finishability of NFA states); imported only when numba is.

`constrained.dfa_jit.load_kernels` installs `compute_need_native` as
`grammars.nfa.NFA.need_kernel`, so that every NFA built afterwards uses it;
`grammars` itself never imports numba or this package. Same algorithm and
result as the Python version (the differential test in tests/test_nfa.py):
a breadth-first search backwards from the rules' ends, level by level of
nesting budget, over CSR arrays.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["compute_need_native"]

INF = 1 << 30


def _csr(keys: np.ndarray, n: int, *cols: np.ndarray) -> tuple[np.ndarray, ...]:
    """Rows of `cols` grouped by `keys` (0..n-1), in a stable order: (ptr, *grouped cols)."""
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return (ptr, *(np.ascontiguousarray(c[order], dtype=np.int64) for c in cols))


def compute_need_native(n, rule_start, rule_end, edge_src, edge_dst, call_src, call_rule, call_dst, call_free=None,
                        *, max_depth):
    """`grammars.need.compute_need`, compiled (same arguments and result)."""
    i64 = np.int64
    n_rules = len(rule_start)
    src, dst = np.asarray(edge_src, dtype=i64), np.asarray(edge_dst, dtype=i64)
    cs, cr, cd = np.asarray(call_src, dtype=i64), np.asarray(call_rule, dtype=i64), np.asarray(call_dst, dtype=i64)
    cf = np.zeros(len(cs), dtype=i64) if call_free is None else np.asarray(call_free, dtype=i64)
    starts = np.asarray(rule_start, dtype=i64)
    rev_ptr, rev_src = _csr(dst, n, src)
    rc_ptr, rc_p, rc_r, rc_f = _csr(cd, n, cs, cr, cf)
    st_ptr, st_rule = _csr(starts, n, np.arange(n_rules, dtype=i64))
    site_key = cr * 2 + cf                               # per rule: rule-call sites, then subroutine sites
    s_ptr, s_p, s_t = _csr(site_key, 2 * n_rules, cs, cd)
    need = np.full(n, INF, dtype=i64)
    _need(n_rules, np.asarray(rule_end, dtype=i64), int(max_depth), rev_ptr, rev_src, rc_ptr, rc_p, rc_r, rc_f,
          st_ptr, st_rule, s_ptr, s_p, s_t, need)
    return need.tolist()


@njit(cache=True, nogil=True)
def _need(n_rules, rule_end, max_depth, rev_ptr, rev_src, rc_ptr, rc_p, rc_r, rc_f, st_ptr, st_rule,
          s_ptr, s_p, s_t, need):  # pragma: no cover - compiled
    n = len(need)
    frontier = np.empty(n, np.int64)
    settled = np.empty(n_rules + 1, np.int64)
    active = np.zeros(n_rules, np.uint8)
    free_active = np.zeros(n_rules, np.uint8)
    top = 0
    for e in rule_end:
        if need[e] == INF:
            need[e] = 0
            frontier[top] = e
            top += 1
    n_settled = 0
    d = 0
    while True:
        while top:
            top -= 1
            u = frontier[top]
            for j in range(st_ptr[u], st_ptr[u + 1]):          # rules starting here settle at level d
                r = st_rule[j]
                settled[n_settled] = r
                n_settled += 1
                free_active[r] = 1
                for k in range(s_ptr[2 * r + 1], s_ptr[2 * r + 2]):
                    p, t = s_p[k], s_t[k]
                    if need[t] != INF and need[p] == INF:
                        need[p] = d
                        frontier[top] = p
                        top += 1
            for j in range(rev_ptr[u], rev_ptr[u + 1]):
                p = rev_src[j]
                if need[p] == INF:
                    need[p] = d
                    frontier[top] = p
                    top += 1
            for j in range(rc_ptr[u], rc_ptr[u + 1]):
                r = rc_r[j]
                usable = free_active[r] if rc_f[j] else active[r]
                p = rc_p[j]
                if usable and need[p] == INF:
                    need[p] = d
                    frontier[top] = p
                    top += 1
        newly = 0
        for i in range(n_settled):
            r = settled[i]
            if not active[r]:
                settled[newly] = r
                newly += 1
        n_settled = 0
        if d >= max_depth or newly == 0:
            return
        d += 1
        for i in range(newly):
            r = settled[i]
            if active[r]:
                continue
            active[r] = 1
            for k in range(s_ptr[2 * r], s_ptr[2 * r + 1]):
                p, t = s_p[k], s_t[k]
                if need[t] != INF and need[p] == INF:
                    need[p] = d
                    frontier[top] = p
                    top += 1
