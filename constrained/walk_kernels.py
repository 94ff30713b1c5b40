"""numba kernels that walk the native lazy DFA, computing its rows as they meet them.

`walk_native` is the trie walk of a state's first mask; `equivalent` the
bounded product walk that proves two states equivalent; `level_native` and
`view_native` a slice view's level check (`constrained.fsm_jit`) and its whole
chain of rows (`constrained.slice_view`). They take the DFA's
argument tuples (``N``, ``S``, ``W``: see `constrained.dfa_kernels`) and
compute missing rows in place with `dfa_kernels.expand_row`; when a table must
grow first, or a lazy rule must be built (`dfa_kernels.BUILD_RULE`), they
return that status and the caller (`JitDFA`) grows the arrays or the NFA and
resumes or retries. Imported only when numba is.

numba's on-disk cache of these kernels is keyed on this file alone (its time
and size), not on the `dfa_kernels` functions compiled into them: a checkout
that changed only those would load the old code. So `DFA_KERNELS_SHA256`
holds the start of `dfa_kernels.py`'s hash, and a test fails until it is
updated, which changes this file too; `FSM_JIT_SHA256` likewise for
`fsm_jit.py`, whose level check `level_native` runs over the native DFA with
its rows computed in place.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from constrained import fsm_jit
from constrained.dfa_kernels import OK, UNEXPANDED, mix, expand_row

__all__ = ["walk_native", "equivalent", "level_native", "view_native", "DFA_KERNELS_SHA256", "FSM_JIT_SHA256"]

# sha256 of constrained/dfa_kernels.py and constrained/fsm_jit.py (whose `level` kernel
# `level_native` calls), first 16 hex digits (see the module docstring)
DFA_KERNELS_SHA256 = "72da0eeae877b13e"
FSM_JIT_SHA256 = "20ac15f236f5026f"

_fsm_kernels = fsm_jit.load_kernels()
_level = _fsm_kernels.level if _fsm_kernels is not None else None
_NEED_ROW, _NEED, _META_SIZE = fsm_jit.NEED_ROW, fsm_jit.NEED, fsm_jit.META_SIZE
_OK_LEVEL, _CLOSED_LEVEL, _SUCC, _STAGE, _EXCL = fsm_jit.OK, fsm_jit.CLOSED, fsm_jit.SUCC, fsm_jit.STAGE, fsm_jit.EXCL


@njit(cache=True, nogil=True, _nrt=False)
def walk_native(nodes, states, emit_first, n_roots, byte, child_lo, child_hi, term_lo, term_hi, term_ids,
                byte_class, N, S, W, out_ids, out_next, pend_nodes, pend_states, stack_n, stack_s,
                words):  # pragma: no cover
    """The trie walk of a state's first mask, computing missing DFA rows in place.

    Depth first from (node, state) pairs; node -1 is the virtual root (its
    children are the roots). Each alive (node, state) pair is visited once: a
    DFA-rejected prefix prunes its whole subtree.

    `emit_first`: 0, visit the start nodes' children (their states are after
    their byte); 1, also emit the start nodes' own tokens; 2, as 1 but the
    states are *before* each start node's byte (the kernel takes that step).
    Pairs whose row could not be computed (a table must grow first) are
    handed back in `pend_*`, or, in mode 2 before anything was emitted, the
    whole call is to be redone (pairs pending -1). `stack_*` are scratch
    (n_nodes + len(nodes) + 1 each). Returns (tokens written, pairs pending, status).
    Unless `words` is empty, each token written also sets its bit there (uint32, bit
    `i % 32` of word `i // 32`): the packed mask, without another kernel call.
    """
    table = S[0]
    set_bits = len(words) > 0
    sp = 0
    n_out = 0
    n_pend = 0
    status = OK
    if emit_first == 2:
        for i in range(len(nodes)):
            s = states[i]
            if s >= 0 and table[s, 0] == UNEXPANDED:
                status = expand_row(N, S, W, s)
                if status != OK:
                    return 0, -1, status
    for i in range(len(nodes)):
        node = nodes[i]
        s = states[i]
        if s < 0:
            continue
        if emit_first == 2:
            s = table[s, byte_class[byte[node]]]
            if s < 0:
                continue
        if emit_first and node >= 0:
            for k in range(term_lo[node], term_hi[node]):
                out_ids[n_out] = term_ids[k]
                out_next[n_out] = s
                n_out += 1
                if set_bits:
                    words[term_ids[k] >> 5] |= np.uint32(1) << np.uint32(term_ids[k] & 31)
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
                status = expand_row(N, S, W, s)
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
                    if set_bits:
                        words[term_ids[k] >> 5] |= np.uint32(1) << np.uint32(term_ids[k] & 31)
                stack_n[sp] = c
                stack_s[sp] = t
                sp += 1
    return n_out, n_pend, status


@njit(cache=True, nogil=True, _nrt=False)
def equivalent(N, S, W, a, b, seen, todo_a, todo_b):  # pragma: no cover - compiled
    """Whether states `a` and `b` accept the same language, by a bounded product walk.

    `seen` (a power of two long) and `todo_*` (max_pairs + 1 long) are the
    caller's scratch. Breadth first, and a byte that one state reads and the
    other rejects fails at once, as `equivalence.equivalent_py` does, so both give
    the same answers. Returns (status, 1 equivalent / 0 not or unsure after
    max_pairs pairs). Rows met are computed in place.
    """
    table, accepting = S[0], S[1]
    n_classes = N[11][3]
    max_pairs = len(todo_a) - 1
    mask = len(seen) - 1
    for i in range(len(seen)):                  # a retry after growing starts clean
        seen[i] = -1
    todo_a[0] = a
    todo_b[0] = b
    head = 0
    n_todo = 1
    seen[mix(a * 0x100000000 + b) & mask] = a * 0x100000000 + b
    while head < n_todo:
        x, y = todo_a[head], todo_b[head]
        head += 1
        if x == y:
            continue
        if x < 0 or y < 0 or accepting[x] != accepting[y]:
            return OK, 0
        for s in (x, y):
            if table[s, 0] == UNEXPANDED:
                status = expand_row(N, S, W, s)
                if status != OK:
                    return status, 0
        for c in range(n_classes):
            p, q = table[x, c], table[y, c]
            if p != q and (p < 0 or q < 0):
                return OK, 0
        for c in range(n_classes):
            p, q = table[x, c], table[y, c]
            if p == q:
                continue
            key = p * 0x100000000 + (q & 0xFFFFFFFF)
            slot = mix(key) & mask
            dup = False
            while seen[slot] != -1:
                if seen[slot] == key:
                    dup = True
                    break
                slot = (slot + 1) & mask
            if dup:
                continue
            if n_todo >= max_pairs:
                return OK, 0
            seen[slot] = key
            todo_a[n_todo] = p
            todo_b[n_todo] = q
            n_todo += 1
    return OK, 1


def _level_native(q, lenient, max_excluded, moves, first_bytes, byte_class, N, S, W, work):  # pragma: no cover
    """`fsm_jit`'s level check (`slice_view._level`) over the native DFA, its missing rows
    computed in place (`expand_row`), in the order the check meets them, as a driver would.
    Returns NEED_ROW (work[meta + NEED]: the state) only when a table must grow or a lazy rule
    be built first: the caller does that (`JitDFA.expand`) and calls again, which resumes."""
    meta = 2 * (moves[0] - 1) + 1
    table = S[0]
    while True:
        out = _level(q, lenient, max_excluded, moves, first_bytes, byte_class, table, work)
        if out != _NEED_ROW:
            return out
        if expand_row(N, S, W, work[meta + _NEED]) != OK:
            return out


level_native = njit(cache=True, nogil=True, _nrt=False)(_level_native) if _level is not None else None
_level_native = level_native              # (called by `view_native` under this name)


def _view_native(q, max_excluded, moves_all, moves_off, first_all, first_off, levels, limit, max_started,
                 byte_class, N, S, W, work, rows, seen, seen_row, excluded):  # pragma: no cover
    """`slice_view.slice_view`'s chain of rows in one call: the lenient first character from
    `q`, then one character at a time until the rows loop, a counter closes or `limit`.

    `moves_all`/`first_all` hold each level bucket's moves and first bytes (`Slice.packed_levels`,
    bucket i from `levels[i]` characters on, at `moves_off[i]`/`first_off[i]`). Fills `rows`
    (its last row all -1) and, when the first character excludes bytes, `excluded`. Returns
    (status, rows, cycle start (-1: none), cycle period, capacity, whether bytes are excluded):
    OK; NONE or CLOSED from the first character (no view) or NONE later; FALLBACK (an
    equivalence proof is needed: the caller's Python path); NEED_ROW (a table must grow
    first, work[meta + NEED] the state: grow and call again)."""
    n = moves_all[0] - 1
    meta = 2 * n + 1
    excl = meta + _META_SIZE
    for i in range(len(work)):
        work[i] = 0
    out = _level_native(q, True, max_excluded, moves_all[moves_off[0]:moves_off[1]],
                        first_all[first_off[0]:first_off[1]], byte_class, N, S, W, work)
    if out != _OK_LEVEL:
        return out, 0, -1, 0, 0, False
    has_excl = work[meta + _EXCL] != 0
    if has_excl:
        for b in range(256):
            excluded[b] = work[excl + b] != 0
    for a in range(n):
        rows[0, a] = work[a]
    succ = work[meta + _SUCC]
    n_seen = 0
    if not has_excl:                      # row 0 may exclude first bytes: then it is no loop target
        seen[0] = q
        seen_row[0] = 0
        n_seen = 1
    n_rows = 1
    start, period, capacity = -1, 0, max_started
    while n_rows <= limit:
        found = -1
        for i in range(n_seen):
            if seen[i] == succ:
                found = seen_row[i]
                break
        if found >= 0:                    # back to an earlier row: a loop
            start, period = found, n_rows - found
            break
        seen[n_seen] = succ
        seen_row[n_seen] = n_rows
        n_seen += 1
        b = 0
        while b + 1 < len(levels) and levels[b + 1] <= n_rows:
            b += 1
        work[meta + _STAGE] = 0
        out = _level_native(succ, False, max_excluded, moves_all[moves_off[b]:moves_off[b + 1]],
                            first_all[first_off[b]:first_off[b + 1]], byte_class, N, S, W, work)
        if out == _CLOSED_LEVEL:          # a counter ran out: nothing more fits
            for a in range(n):
                rows[n_rows, a] = -1
            rows[n_rows, 0] = succ
            n_rows += 1
            capacity = n_rows - 1
            break
        if out != _OK_LEVEL:
            return out, 0, -1, 0, 0, False
        for a in range(n):
            rows[n_rows, a] = work[a]
        n_rows += 1
        succ = work[meta + _SUCC]
    for a in range(n):
        rows[n_rows, a] = -1
    return _OK_LEVEL, n_rows + 1, start, period, capacity, has_excl


view_native = njit(cache=True, nogil=True, _nrt=False)(_view_native) if _level is not None else None
