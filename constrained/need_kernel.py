"""numba kernels that finish an NFA for the DFA; imported only when numba is.

- `compute_need_native` (`grammars.need.compute_need`: finishability of NFA
  states), and `need_from_columns`, which derives its inputs from the NFA's
  edge columns itself;
- `csr_from_columns`: the columns grouped per state (`NFA._csr`), and
  `finish_from_columns`, both of them and the rule ends' flags in one call;
- `byte_classes_native` and `call_returns_native` (`classes_and_returns_native`
  both in one call): the byte classes with their mask table, and the call
  edges' canonical return states (`grammars.nfa.NFA.forward`), for
  `constrained.dfa_jit.JitDFA`.

`constrained.dfa_loader.load_kernels` installs them as `grammars.nfa.NFA`'s
`need_kernel`, `need_columns_kernel`, `csr_kernel` and `finish_kernel` (and in the JitDFA's
kernels), so that every NFA built afterwards uses them; `grammars` itself
never imports numba or this package. Each gives what the Python version gives
(the differential tests in tests/test_nfa.py and tests/test_lazy_compile.py).
Why kernels for such small steps: each was a dozen numpy calls of a few
microseconds, fixed per compile whatever the schema's size; on the median
dev schema they were a third of the time to first mask (490 of 1,480 us).
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["compute_need_native", "need_from_columns", "csr_from_columns", "finish_from_columns", "byte_classes_native",
           "call_returns_native", "classes_and_returns_native"]

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


# -- an NFA's columns, straight to CSR arrays and `need` ---------------------------
# `compute_need_native` takes the edges `NFA._compute_need` derives from the
# columns with about 25 numpy calls, and groups them with 4 more argsorts: at the
# median dev schema that fixed numpy cost was 120 us of a 675 us NFA, and grouping
# the columns per state (`NFA._csr`) another 80. These kernels do both in one
# pass each (counting sorts), from the columns as `NFA._columns` gives them.

REG, FREE, ENTER, HEAD, INC, SPLICE, PICK = range(7)     # `grammars.fragments` call edge kinds (PICK and after:
                                                         # an `AnyOrder`'s frame tests, epsilon moves here)


@njit(cache=True, nogil=True)
def _group(keys, n):  # pragma: no cover - compiled
    """Counting sort of `keys` (each in 0..n-1), stable: (ptr[n + 1], order)."""
    ptr = np.zeros(n + 1, np.int64)
    for k in keys:
        ptr[k + 1] += 1
    for i in range(n):
        ptr[i + 1] += ptr[i]
    fill = ptr[:-1].copy()
    order = np.empty(len(keys), np.int64)
    for j in range(len(keys)):
        k = keys[j]
        order[fill[k]] = j
        fill[k] += 1
    return ptr, order


@njit(cache=True, nogil=True)
def need_from_columns(n, rule_start, rule_end, eps, byte, call, max_depth):  # pragma: no cover - compiled
    """`NFA._compute_need` (its general case) on `NFA._columns`: a counter loop's item is a
    pseudo-rule from the loop's body to the state with its INC edge, which the loop head
    calls; ENTER, an `AnyOrder`'s frame tests and a head with lower bound 0 are epsilon
    moves. Returns need (int64[n])."""
    c_src, c_rule, c_dst, c_op, c_to, c_lo = call[0], call[1], call[2], call[3], call[4], call[5]
    nc = c_src.shape[0]
    n_rules = rule_start.shape[0]
    inc_src = np.full(n, -1, np.int64)       # loop head -> the first INC edge's source back to it
    n_head = 0
    n_extra = 0
    n_keep = 0
    for j in range(nc):
        op = c_op[j]
        if op == INC:
            if inc_src[c_to[j]] == -1:
                inc_src[c_to[j]] = c_src[j]
        else:
            if op == HEAD:
                n_head += 1
                if c_lo[j] == 0:
                    n_extra += 1
            if op == ENTER or op == SPLICE or op >= PICK:
                n_extra += 1
            else:
                n_keep += 1
    total = n_rules + n_head
    starts = np.empty(total, np.int64)
    ends = np.empty(total, np.int64)
    starts[:n_rules] = rule_start
    ends[:n_rules] = rule_end
    ne, nb = eps.shape[1], byte.shape[1]
    src = np.empty(ne + nb + n_extra, np.int64)
    dst = np.empty(ne + nb + n_extra, np.int64)
    src[:ne] = eps[0]
    dst[:ne] = eps[1]
    src[ne:ne + nb] = byte[0]
    dst[ne:ne + nb] = byte[1]
    ks = np.empty(n_keep, np.int64)          # kept calls: source, rule, return, free
    kr = np.empty(n_keep, np.int64)
    kd = np.empty(n_keep, np.int64)
    kf = np.empty(n_keep, np.int64)
    h, i, k = n_rules, ne + nb, 0
    for j in range(nc):
        op = c_op[j]
        if op == INC:
            continue
        if op == ENTER or op == SPLICE or op >= PICK:      # epsilon moves
            src[i] = c_src[j]
            dst[i] = c_to[j]
            i += 1
            continue
        r = c_rule[j]
        if op == HEAD:
            starts[h] = c_to[j]
            ends[h] = inc_src[c_src[j]]
            r = h
            h += 1
            if c_lo[j] == 0:
                src[i] = c_src[j]
                dst[i] = c_dst[j]
                i += 1
        ks[k] = c_src[j]
        kr[k] = r
        kd[k] = c_dst[j]
        kf[k] = 1 if op != REG else 0
        k += 1
    rev_ptr, o = _group(dst, n)
    rev_src = src[o]
    rc_ptr, o = _group(kd, n)
    rc_p, rc_r, rc_f = ks[o], kr[o], kf[o]
    st_ptr, st_rule = _group(starts, n)
    s_ptr, o = _group(kr * 2 + kf, 2 * total)
    s_p, s_t = ks[o], kd[o]
    need = np.full(n, INF, np.int64)
    _need(total, ends, max_depth, rev_ptr, rev_src, rc_ptr, rc_p, rc_r, rc_f, st_ptr, st_rule, s_ptr, s_p, s_t,
          need)
    return need


@njit(cache=True, nogil=True)
def csr_from_columns(n, eps, byte, call, rule_start):  # pragma: no cover - compiled
    """`NFA._csr`: the columns grouped per source state, order kept, and rule calls
    going to their rule's start."""
    eps_ptr, o = _group(eps[0], n)
    eps_dst = eps[1][o]
    edge_ptr, o = _group(byte[0], n)
    edge_dst = byte[1][o]
    edge_mask = byte[2][o]
    call_ptr, o = _group(call[0], n)
    call_rule, call_dst, call_op = call[1][o], call[2][o], call[3][o]
    call_to, call_lo, call_hi = call[4][o], call[5][o], call[6][o]
    for j in range(len(o)):
        if call_rule[j] >= 0:
            call_to[j] = rule_start[call_rule[j]]
    return eps_ptr, eps_dst, edge_ptr, edge_dst, edge_mask, call_ptr, call_rule, call_dst, call_op, call_to, \
        call_lo, call_hi


@njit(cache=True, nogil=True)
def finish_from_columns(n, rule_start, need_start, rule_end, eps, byte, call, max_depth,
                        fast):  # pragma: no cover - compiled
    """`NFA._finish`'s arrays in one call: (need, is_end, the CSR columns of `csr_from_columns`).
    `need` is `need_from_columns` from `need_start` (rule starts, a lazy rule's placeholder
    for one without its body), or all 0 when `fast` (see `NFA._compute_need`); `is_end` flags
    `rule_end`. One call instead of two and the numpy around them: ~25 us less a compile."""
    if fast:
        need = np.zeros(n, np.int64)
    else:
        need = need_from_columns(n, need_start, rule_end, eps, byte, call, max_depth)
    is_end = np.zeros(n, np.bool_)
    for e in rule_end:
        is_end[e] = True
    eps_ptr, eps_dst, edge_ptr, edge_dst, edge_mask, call_ptr, call_rule, call_dst, call_op, call_to, call_lo, \
        call_hi = csr_from_columns(n, eps, byte, call, rule_start)
    return need, is_end, eps_ptr, eps_dst, edge_ptr, edge_dst, edge_mask, call_ptr, call_rule, call_dst, call_op, \
        call_to, call_lo, call_hi


@njit(cache=True, nogil=True)
def _lex_order(keys):  # pragma: no cover - compiled
    """The columns of `keys` (words x n, word 0 the most significant) in ascending
    lexicographic order, stable: a bottom-up merge sort (n log n compares; a radix
    pass of `np.argsort` per word cost 6 us each on 256 columns)."""
    nw, n = keys.shape
    order = np.arange(n)
    tmp = np.empty(n, np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, t = lo, mid, lo
            while i < mid and j < hi:
                a, b = order[i], order[j]
                take_b = False
                for w in range(nw):
                    if keys[w, a] != keys[w, b]:
                        take_b = keys[w, b] < keys[w, a]
                        break
                if take_b:
                    tmp[t] = b
                    j += 1
                else:
                    tmp[t] = a
                    i += 1
                t += 1
            while i < mid:
                tmp[t] = order[i]
                i += 1
                t += 1
            while j < hi:
                tmp[t] = order[j]
                j += 1
                t += 1
        order, tmp = tmp, order
        width *= 2
    return order


@njit(cache=True, nogil=True)
def byte_classes_native(mask_bytes):  # pragma: no cover - compiled
    """`grammars.byte_classes.byte_classes` of the masks given as little-endian bytes
    (k x 32, distinct masks in any order: an NFA's, in order of first use), with what
    the DFA derives from it: (class per byte (int32[256]), least byte of each class,
    mask x class membership (uint8, a row per mask as given)).

    The masks are ranked in ascending order first. Each byte's membership column is
    packed into 64-bit words, the least mask in the top bit of the first word; bytes
    with equal columns are one class (found by hashing the columns, bytes in
    ascending order, so each class's first byte is its least), and the classes are
    numbered in the lexicographic order of their columns, as there, whatever order
    the masks come in. Only the set bytes of each mask are visited (most masks are
    a byte or a range), not all 256 per mask (3-4x faster on schemas); only the
    distinct columns are sorted, not all 256 (27 -> ~8 us on the median dev schema).
    """
    k = mask_bytes.shape[0]
    keys = np.zeros((4, k), np.uint64)        # keys[0]: bytes 31..24 of each mask, the most significant
    for m in range(k):
        for w in range(4):
            v = np.uint64(0)
            for j in range(8):
                v = (v << np.uint64(8)) | np.uint64(mask_bytes[m, 31 - 8 * w - j])
            keys[w, m] = v
    order = _lex_order(keys)
    rank = np.empty(k, np.int64)
    for i in range(k):
        rank[order[i]] = i
    nw = max((k + 63) // 64, 1)
    sig = np.zeros((nw, 256), np.uint64)
    for m in range(k):
        r = rank[m]
        w = r >> 6
        bit = np.uint64(1) << np.uint64(63 - (r & 63))
        for j in range(32):
            v = mask_bytes[m, j]
            if v:
                for t in range(8):
                    if (v >> t) & 1:
                        sig[w, 8 * j + t] |= bit
    # distinct columns, in order of their least byte: an open-addressing table of 512 slots
    slot_of = np.full(512, -1, np.int64)
    first = np.empty(256, np.int64)           # per distinct column, its least byte
    found = np.empty(256, np.int64)           # per byte, its column's number in that order
    n_ids = 0
    for b in range(256):
        h = np.uint64(0x9E3779B97F4A7C15)
        for w in range(nw):
            h = (h ^ sig[w, b]) * np.uint64(0xBF58476D1CE4E5B9)
        at = np.int64(h >> np.uint64(55))     # 9 bits
        while True:
            c = slot_of[at]
            if c < 0:
                slot_of[at] = n_ids
                first[n_ids] = b
                found[b] = n_ids
                n_ids += 1
                break
            same = True
            f = first[c]
            for w in range(nw):
                if sig[w, f] != sig[w, b]:
                    same = False
                    break
            if same:
                found[b] = c
                break
            at = (at + 1) & 511
    cols = np.empty((nw, n_ids), np.uint64)
    for c in range(n_ids):
        for w in range(nw):
            cols[w, c] = sig[w, first[c]]
    order = _lex_order(cols)
    number = np.empty(n_ids, np.int64)
    rep = np.empty(n_ids, np.int64)
    for i in range(n_ids):
        number[order[i]] = i
        rep[i] = first[order[i]]
    classes = np.empty(256, np.int32)
    for b in range(256):
        classes[b] = number[found[b]]
    mask_cls = np.zeros((max(k, 1), n_ids), np.uint8)
    for m in range(k):                        # a mask holds the classes of its bytes
        for j in range(32):
            v = mask_bytes[m, j]
            if v:
                for t in range(8):
                    if (v >> t) & 1:
                        mask_cls[m, classes[8 * j + t]] = 1
    return classes, rep, mask_cls


@njit(cache=True, nogil=True)
def call_returns_native(call_dst, call_op, forwarded, eps_ptr, eps_dst, edge_ptr, call_ptr,
                        is_end):  # pragma: no cover - compiled
    """The return state of each call edge as the DFA keeps it: where its `call_op` is at most
    `forwarded` (rule calls), `grammars.nfa.NFA.forward` of its `call_dst` (follow pure epsilon
    hops: one epsilon edge, nothing else, not a rule's end, until one would revisit a state);
    else `call_dst` (loop exits)."""
    n = len(is_end)
    stamp = np.full(n, -1, np.int64)
    out = np.empty(len(call_dst), np.int64)
    for j in range(len(call_dst)):
        s = call_dst[j]
        if call_op[j] > forwarded:
            out[j] = s
            continue
        stamp[s] = j
        while (eps_ptr[s + 1] - eps_ptr[s] == 1 and edge_ptr[s + 1] == edge_ptr[s] and call_ptr[s + 1] == call_ptr[s]
               and not is_end[s]):
            t = eps_dst[eps_ptr[s]]
            if stamp[t] == j:
                break
            stamp[t] = j
            s = t
        out[j] = s
    return out


@njit(cache=True, nogil=True)
def classes_and_returns_native(mask_bytes, call_dst, call_op, forwarded, eps_ptr, eps_dst, edge_ptr, call_ptr,
                               is_end):  # pragma: no cover - compiled
    """`byte_classes_native` and `call_returns_native` in one call, as a new DFA needs both."""
    classes, rep, mask_cls = byte_classes_native(mask_bytes)
    return classes, rep, mask_cls, call_returns_native(call_dst, call_op, forwarded, eps_ptr, eps_dst, edge_ptr,
                                                       call_ptr, is_end)
