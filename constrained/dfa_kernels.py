"""numba kernels of the native lazy DFA (see `constrained.dfa_jit`); imported only when numba is.

The algorithm is `grammars.dfa.LazyDFA`'s, written over flat arrays so that a
row costs about a microsecond instead of ~20 us of Python:

- a configuration is one int64 `stack * n + nfa_state`; a DFA state is the
  sorted array of its configurations (`-1` first when accepting), stored in
  `cfg_data[cfg_ptr[s]:cfg_ptr[s + 1]]` and interned through an open-addressing
  table keyed by the array's hash (states with the same hash are chained);
- call stacks are interned `(return state, parent stack)` pairs;
- a row groups the state's byte moves by *signature* (which moves a byte
  class takes) so that classes moving alike share one closure.

Nothing here allocates persistent memory: when a table is full a kernel
returns a GROW_* status *before* changing anything that a retry would not
redo identically (interning is idempotent), the caller grows the arrays and
calls again.

Arguments are bundled in two tuples, built by `JitDFA`:

- ``N`` (the NFA, read-only): need, eps_ptr, eps_dst, call_ptr, call_start,
  call_ret, is_end, edge_ptr, edge_dst, edge_mask, mask_cls, params; `params` is
  int64[4]: (n, max_depth, max_states, num_classes);
- ``S`` (the DFA, grown by the caller): table, accepting, cfg_ptr, cfg_data,
  cfg_keys, cfg_vals, next_same, stk_ret, stk_parent, stk_depth, stk_keys,
  stk_vals, counts; `counts` is int64[5]: (states, cfg ints, stacks, cfg slots
  used, stack slots used).
"""

from __future__ import annotations

import numpy as np
from numba import njit

OK = 0
GROW_STATES = 1
GROW_CFG = 2
GROW_STACKS = 3
GROW_CFG_HT = 4
GROW_STACK_HT = 5
BUDGET = 6

DEAD = -1
UNEXPANDED = -2
_SLOT_EMPTY = -1


@njit(cache=True, nogil=True)
def _mix(h):  # pragma: no cover - compiled
    h ^= h >> 31
    h *= 0x7FB5D329728EA185
    h ^= h >> 27
    return h


@njit(cache=True, nogil=True)
def _hash_cfgs(buf, m):  # pragma: no cover - compiled
    h = 0x1F3D5B79 + m
    for i in range(m):
        h = (h ^ buf[i]) * 0x100000001B3
    return _mix(h)


@njit(cache=True, nogil=True)
def _push(S, k, ret):  # pragma: no cover - compiled
    """Stack id of `ret` pushed on stack `k` (interned); < 0: a GROW status, negated."""
    stk_ret, stk_parent, stk_depth, keys, vals, counts = S[7], S[8], S[9], S[10], S[11], S[12]
    key = ret * 0x80000000 + k
    mask = len(keys) - 1
    slot = _mix(key) & mask
    while vals[slot] != _SLOT_EMPTY:
        if keys[slot] == key:
            return vals[slot]
        slot = (slot + 1) & mask
    if (counts[4] + 1) * 2 > len(keys):
        return -GROW_STACK_HT
    sid = counts[2]
    if sid >= len(stk_ret):
        return -GROW_STACKS
    stk_ret[sid] = ret
    stk_parent[sid] = k
    stk_depth[sid] = stk_depth[k] + 1
    keys[slot] = key
    vals[slot] = sid
    counts[2] += 1
    counts[4] += 1
    return sid


@njit(cache=True, nogil=True)
def _close(N, S, seeds, n_seeds):  # pragma: no cover - compiled
    """Closure of configurations `seeds[:n_seeds]`, pruned to those that can finish.

    Returns (status, sorted configurations; -1 first when the start rule can end).
    """
    need, eps_ptr, eps_dst, call_ptr, call_start, call_ret, is_end, edge_ptr = N[0], N[1], N[2], N[3], N[4], N[5], N[6], N[7]
    n, maxd = N[11][0], N[11][1]
    stk_ret, stk_parent, stk_depth = S[7], S[8], S[9]
    todo = np.empty(max(16, 2 * n_seeds), np.int64)
    n_todo = 0
    for i in range(n_seeds):
        todo[n_todo] = seeds[i]
        n_todo += 1
    seen = np.full(64, -1, np.int64)
    n_seen = 0
    out = np.empty(16, np.int64)
    n_out = 0
    accept = False
    while n_todo:
        n_todo -= 1
        cfg = todo[n_todo]
        # seen-set insert (open addressing over cfg >= 0)
        mask = len(seen) - 1
        slot = _mix(cfg) & mask
        dup = False
        while seen[slot] != -1:
            if seen[slot] == cfg:
                dup = True
                break
            slot = (slot + 1) & mask
        if dup:
            continue
        seen[slot] = cfg
        n_seen += 1
        if n_seen * 2 > len(seen):
            bigger = np.full(len(seen) * 4, -1, np.int64)
            bmask = len(bigger) - 1
            for x in seen:
                if x != -1:
                    j = _mix(x) & bmask
                    while bigger[j] != -1:
                        j = (j + 1) & bmask
                    bigger[j] = x
            seen = bigger
        k = cfg // n
        s = cfg - k * n
        budget = maxd - stk_depth[k]
        if need[s] > budget:
            continue
        base = k * n
        if edge_ptr[s + 1] > edge_ptr[s]:
            if n_out == len(out):
                out = np.concatenate((out, np.empty(len(out), np.int64)))
            out[n_out] = base + s
            n_out += 1
        grow = n_todo + (call_ptr[s + 1] - call_ptr[s]) + (eps_ptr[s + 1] - eps_ptr[s]) + 1
        if grow > len(todo):
            todo = np.concatenate((todo, np.empty(max(grow, len(todo)), np.int64)))
        for j in range(call_ptr[s], call_ptr[s + 1]):
            start, ret = call_start[j], call_ret[j]
            if need[start] < budget and need[ret] <= budget:
                sid = _push(S, k, ret)
                if sid < 0:
                    return -sid, np.empty(0, np.int64)
                todo[n_todo] = sid * n + start
                n_todo += 1
        if is_end[s]:
            if k == 0:
                accept = True
            else:
                todo[n_todo] = stk_parent[k] * n + stk_ret[k]
                n_todo += 1
        for j in range(eps_ptr[s], eps_ptr[s + 1]):
            todo[n_todo] = base + eps_dst[j]
            n_todo += 1
    res = np.empty(n_out + (1 if accept else 0), np.int64)
    off = 0
    if accept:
        res[0] = -1
        off = 1
    res[off:] = np.sort(out[:n_out])
    return OK, res


@njit(cache=True, nogil=True)
def _intern(N, S, cfgs):  # pragma: no cover - compiled
    """Id of the DFA state with configurations `cfgs` (created if new). Returns (status, id)."""
    table, accepting, cfg_ptr, cfg_data, keys, vals, next_same, counts = S[0], S[1], S[2], S[3], S[4], S[5], S[6], S[12]
    m = len(cfgs)
    h = _hash_cfgs(cfgs, m)
    mask = len(keys) - 1
    slot = _mix(h) & mask
    head = -1
    while vals[slot] != _SLOT_EMPTY:
        if keys[slot] == h:
            head = vals[slot]
            sid = head
            while sid != -1:
                lo, hi = cfg_ptr[sid], cfg_ptr[sid + 1]
                if hi - lo == m:
                    same = True
                    for i in range(m):
                        if cfg_data[lo + i] != cfgs[i]:
                            same = False
                            break
                    if same:
                        return OK, sid
                sid = next_same[sid]
            break
        slot = (slot + 1) & mask
    sid = counts[0]
    if sid >= N[11][2]:
        return BUDGET, -1
    if sid >= len(table):
        return GROW_STATES, -1
    if counts[1] + m > len(cfg_data):
        return GROW_CFG, -1
    if head == -1 and (counts[3] + 1) * 2 > len(keys):
        return GROW_CFG_HT, -1
    lo = counts[1]
    cfg_data[lo:lo + m] = cfgs
    cfg_ptr[sid + 1] = lo + m
    counts[1] = lo + m
    accepting[sid] = m > 0 and cfgs[0] == -1
    next_same[sid] = head
    if head == -1:
        keys[slot] = h
        counts[3] += 1
    vals[slot] = sid
    counts[0] = sid + 1
    return OK, sid


@njit(cache=True, nogil=True)
def _target(N, S, seeds, n_seeds):  # pragma: no cover - compiled
    """(status, state reached from `seeds`), DEAD when no configuration can finish."""
    status, cfgs = _close(N, S, seeds, n_seeds)
    if status != OK:
        return status, -1
    if len(cfgs) == 0:
        return OK, DEAD
    return _intern(N, S, cfgs)


@njit(cache=True, nogil=True)
def expand_row(N, S, s):  # pragma: no cover - compiled
    """Compute the row of state `s` (no-op when known); returns a status."""
    table, cfg_ptr, cfg_data = S[0], S[2], S[3]
    if table[s, 0] != UNEXPANDED:
        return OK
    edge_ptr, edge_dst, edge_mask, mask_cls = N[7], N[8], N[9], N[10]
    n, n_classes = N[11][0], N[11][3]
    lo, hi = cfg_ptr[s], cfg_ptr[s + 1]
    n_pairs = 0
    for i in range(lo, hi):
        cfg = cfg_data[i]
        if cfg >= 0:
            b = cfg % n
            n_pairs += edge_ptr[b + 1] - edge_ptr[b]
    seed = np.empty(n_pairs, np.int64)
    mid = np.empty(n_pairs, np.int64)
    p = 0
    for i in range(lo, hi):
        cfg = cfg_data[i]
        if cfg < 0:
            continue
        k = cfg // n
        b = cfg - k * n
        for e in range(edge_ptr[b], edge_ptr[b + 1]):
            seed[p] = k * n + edge_dst[e]
            mid[p] = edge_mask[e]
            p += 1
    row = np.full(n_classes, DEAD, np.int32)
    buf = np.empty(max(n_pairs, 1), np.int64)
    if n_pairs <= 63:
        # signature of a class: the bit set of the moves it takes; equal signatures share a target
        sig_keys = np.empty(n_classes, np.int64)
        sig_vals = np.empty(n_classes, np.int32)
        n_sigs = 0
        for c in range(n_classes):
            sig = 0
            for j in range(n_pairs):
                if mask_cls[mid[j], c]:
                    sig |= 1 << j
            if sig == 0:
                continue
            t = -3
            for q in range(n_sigs):
                if sig_keys[q] == sig:
                    t = sig_vals[q]
                    break
            if t == -3:
                m = 0
                for j in range(n_pairs):
                    if sig >> j & 1:
                        buf[m] = seed[j]
                        m += 1
                status, t = _target(N, S, buf, m)
                if status != OK:
                    return status
                sig_keys[n_sigs] = sig
                sig_vals[n_sigs] = t
                n_sigs += 1
            row[c] = t
    else:
        for c in range(n_classes):
            m = 0
            for j in range(n_pairs):
                if mask_cls[mid[j], c]:
                    buf[m] = seed[j]
                    m += 1
            if m:
                status, t = _target(N, S, buf, m)
                if status != OK:
                    return status
                row[c] = t
    table[s, :] = row
    return OK


@njit(cache=True, nogil=True)
def expand_rows(N, S, states):  # pragma: no cover - compiled
    """Expand the rows of `states` in order; returns (status, index of the first not done)."""
    for i in range(len(states)):
        s = states[i]
        if s >= 0:
            status = expand_row(N, S, s)
            if status != OK:
                return status, i
    return OK, len(states)


@njit(cache=True, nogil=True)
def start_state(N, S, start):  # pragma: no cover - compiled
    """(status, id) of the closure of the start rule's entry (the initial state)."""
    seeds = np.empty(1, np.int64)
    seeds[0] = start
    if N[0][start] > N[11][1]:
        return _intern(N, S, np.empty(0, np.int64))
    status, cfgs = _close(N, S, seeds, 1)
    if status != OK:
        return status, -1
    return _intern(N, S, cfgs)


@njit(cache=True, nogil=True)
def rehash(keys, vals, new_keys, new_vals):  # pragma: no cover - compiled
    """Move every occupied slot of (keys, vals) into the larger empty table."""
    mask = len(new_keys) - 1
    for i in range(len(keys)):
        if vals[i] != _SLOT_EMPTY:
            slot = _mix(keys[i]) & mask
            while new_vals[slot] != _SLOT_EMPTY:
                slot = (slot + 1) & mask
            new_keys[slot] = keys[i]
            new_vals[slot] = vals[i]


@njit(cache=True, nogil=True)
def walk_native(nodes, states, emit_first, n_roots, byte, child_lo, child_hi, term_lo, term_hi, term_ids,
                byte_class, N, S, out_ids, out_next, pend_nodes, pend_states, stack_n, stack_s):  # pragma: no cover
    """`walk_jit`'s trie walk, computing missing DFA rows in place.

    Pairs whose row could not be computed (a table must grow first) are
    handed back in `pend_*`; `stack_*` are scratch (n_nodes + len(nodes) + 1
    each). Returns (tokens written, pairs pending, status).
    """
    table = S[0]
    sp = 0
    n_out = 0
    n_pend = 0
    status = OK
    for i in range(len(nodes)):
        node = nodes[i]
        s = states[i]
        if s < 0:
            continue
        if emit_first and node >= 0:
            for k in range(term_lo[node], term_hi[node]):
                out_ids[n_out] = term_ids[k]
                out_next[n_out] = s
                n_out += 1
        stack_n[sp] = node
        stack_s[sp] = s
        sp += 1
    while sp > 0:
        sp -= 1
        node = stack_n[sp]
        s = stack_s[sp]
        if node < 0:
            lo, hi = 0, n_roots
        else:
            lo, hi = child_lo[node], child_hi[node]
        if lo == hi:
            continue
        if table[s, 0] == UNEXPANDED:
            if status == OK:
                status = expand_row(N, S, s)
            if status != OK:
                pend_nodes[n_pend] = node
                pend_states[n_pend] = s
                n_pend += 1
                continue
        for c in range(lo, hi):
            t = table[s, byte_class[byte[c]]]
            if t >= 0:
                for k in range(term_lo[c], term_hi[c]):
                    out_ids[n_out] = term_ids[k]
                    out_next[n_out] = t
                    n_out += 1
                stack_n[sp] = c
                stack_s[sp] = t
                sp += 1
    return n_out, n_pend, status


@njit(cache=True, nogil=True)
def equivalent(N, S, a, b, max_pairs):  # pragma: no cover - compiled
    """Whether states `a` and `b` accept the same language, by a bounded product walk.

    Returns (status, 1 equivalent / 0 not or unsure after `max_pairs` pairs).
    Rows met are computed in place (the same as `slices.equivalent`, natively).
    """
    table, accepting = S[0], S[1]
    n_classes = N[11][3]
    size = 1                                   # a power-of-two table of the pairs seen
    while size < 4 * max_pairs + 4:
        size *= 2
    seen = np.full(size, -1, np.int64)
    mask = size - 1
    todo_a = np.empty(max_pairs + 1, np.int64)
    todo_b = np.empty(max_pairs + 1, np.int64)
    todo_a[0] = a
    todo_b[0] = b
    n_todo = 1
    n_seen = 1
    seen[_mix(a * 0x100000000 + b) & mask] = a * 0x100000000 + b
    while n_todo:
        n_todo -= 1
        x, y = todo_a[n_todo], todo_b[n_todo]
        if x == y:
            continue
        if x < 0 or y < 0 or accepting[x] != accepting[y]:
            return OK, 0
        for s in (x, y):
            if table[s, 0] == UNEXPANDED:
                status = expand_row(N, S, s)
                if status != OK:
                    return status, 0
        for c in range(n_classes):
            p, q = table[x, c], table[y, c]
            if p == q:
                continue
            key = p * 0x100000000 + (q & 0xFFFFFFFF)
            slot = _mix(key) & mask
            dup = False
            while seen[slot] != -1:
                if seen[slot] == key:
                    dup = True
                    break
                slot = (slot + 1) & mask
            if dup:
                continue
            if n_seen >= max_pairs:
                return OK, 0
            seen[slot] = key
            n_seen += 1
            todo_a[n_todo] = p
            todo_b[n_todo] = q
            n_todo += 1
    return OK, 1
