"""numba kernels of the native lazy DFA (see `constrained.dfa_jit`); imported only when numba is.

The walks that use it (the trie walk, the equivalence proof) are in
`constrained.walk_kernels`.

The algorithm is `grammars.dfa.LazyDFA`'s, written over flat arrays so that a
row costs about a microsecond instead of ~20 us of Python:

- a configuration is one int64 `stack * n + nfa_state`; a DFA state is the
  sorted array of its configurations (`-1` first when accepting), stored in
  `cfg_data[cfg_ptr[s]:cfg_ptr[s + 1]]` and interned through an open-addressing
  table keyed by the array's hash (states with the same hash are chained);
- stacks are interned `(frame, parent stack)` pairs, a frame being a return
  state (rule and subroutine calls) or `-2 - count` (a counter loop's value,
  or an `AnyOrder`'s set of members taken, see `grammars.nfa`); only rule
  calls count towards `max_depth`;
- a row groups the state's byte moves by *signature* (which moves a byte
  class takes) so that classes moving alike share one closure.

Nothing here allocates, and the kernels are compiled without numba's
reference counting (`_nrt=False`): with it, every call that passed the
argument tuples on paid an atomic count per array (2 us of a 4 us row).
When a table is full, a kernel returns a GROW_* status *before* changing
anything that a retry would not redo identically (interning is idempotent);
the caller grows the arrays and calls again.

Arguments are bundled in three tuples, built by `JitDFA`:

- ``N`` (the NFA, read-only): need, eps_ptr, eps_dst, call_ptr, call_to,
  call_ret, is_end, edge_ptr, edge_dst, edge_mask, mask_cls, params, call_op,
  call_lo, call_hi; `params` is int64[4]: (n, max_depth, max_states,
  num_classes); call edges are as in `grammars.nfa.NFAArrays`;
- ``S`` (the DFA, grown by the caller): table, accepting, cfg_ptr, cfg_data,
  cfg_keys, cfg_vals, next_same, stk_ret, stk_parent, stk_depth, stk_keys,
  stk_vals, counts, ecl_off, ecl_data; `counts` is int64[7]: (states, cfg
  ints, stacks, cfg slots used, stack slots used, ecl_data ints used, the
  largest count an INC or TICK made: `constrained.twins` are built only once
  it passes a token's length, which an `AnyOrder`'s set frames never set);
  ecl_off/ecl_data memoize each NFA state's epsilon closure;
- ``W`` (scratch, grown by the caller on GROW_SCRATCH): todo, seen_keys,
  seen_gen, gen (2 counters: seen sets, epsilon-closure stamps), out, seed,
  mid, flat (int64), class_group/row, sig_keys, sig_vals (num_classes
  each), stamp and stack (one per NFA state), group_ptr (num_classes + 1).
  Reused by every call, so that a row allocates nothing.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["OK", "BUILD_RULE", "GROW_STATES", "GROW_CFG", "GROW_STACKS", "GROW_CFG_HT", "GROW_STACK_HT", "BUDGET",
           "GROW_SCRATCH", "GROW_ECLOSE", "DEAD", "UNEXPANDED", "expand_row", "expand_rows", "start_state", "rehash",
           "intern_frames"]

OK = 0
GROW_STATES = 1
GROW_CFG = 2
GROW_STACKS = 3
GROW_CFG_HT = 4
GROW_STACK_HT = 5
BUDGET = 6
GROW_SCRATCH = 7
GROW_ECLOSE = 8

# A closure met a call to a lazy rule without its body (`call_to` -1): the status is
# BUILD_RULE + the call edge's index; the caller builds it (`NFA.build_lazy`) and calls again.
BUILD_RULE = 1 << 20

DEAD = -1
UNEXPANDED = -2
_SLOT_EMPTY = -1
# call edge kinds (grammars.nfa)
REG, FREE, ENTER, HEAD, INC, SPLICE, PICK, CHECK, LEAVE, COUNT, CLEAR, GATE, TICK, EXIT = range(14)
COUNT_SHIFT = 55                        # grammars.ast: an `AnyOrder` frame's count, above its member bits
_LOW_BITS = (1 << COUNT_SHIFT) - 1


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def mix(h):  # pragma: no cover - compiled
    """A 64-bit finalizer (xorshift-multiply): spreads keys over hash table slots.

    In unsigned arithmetic: numba multiplies signed ints with LLVM's `nsw` flag (overflow
    is undefined), and a hash whose multiply overflowed was compiled to different values
    in different kernels, so a stack interned by one was not found by another, and was
    interned again (a duplicate stack, and a duplicate DFA state above it)."""
    x = np.uint64(h)
    x ^= x >> np.uint64(31)
    x *= np.uint64(0x7FB5D329728EA185)
    x ^= x >> np.uint64(27)
    return np.int64(x)


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def _hash_cfgs(buf, m):  # pragma: no cover - compiled
    h = np.uint64(0x1F3D5B79 + m)
    for i in range(m):
        h = (h ^ np.uint64(buf[i])) * np.uint64(0x100000001B3)     # unsigned: see `mix`
    return mix(h)


@njit(cache=True, nogil=True, _nrt=False)
def _push(stk_ret, stk_parent, stk_depth, keys, vals, counts, k, ret, op):  # pragma: no cover - compiled
    """Stack id of frame `ret` pushed on stack `k` by a call edge of kind `op` (interned;
    counter and `AnyOrder` frames are pushed with op ENTER); < 0: a GROW status, negated.

    The table's keys are hashes of (frame, parent, op), checked against the stack's own
    fields: a frame is any int64 (an `AnyOrder`'s bit set has up to 62 bits), no key
    packs all three."""
    depth = stk_depth[k] + (op == REG)
    key = mix(mix(np.uint64(ret) * np.uint64(4) + np.uint64(op)) ^ k)    # unsigned: see `mix`
    mask = len(keys) - 1
    slot = mix(key) & mask
    while vals[slot] != _SLOT_EMPTY:
        if keys[slot] == key:
            sid = vals[slot]
            if stk_ret[sid] == ret and stk_parent[sid] == k and stk_depth[sid] == depth:
                return sid
        slot = (slot + 1) & mask
    if (counts[4] + 1) * 2 > len(keys):
        return -GROW_STACK_HT
    sid = counts[2]
    if sid >= len(stk_ret):
        return -GROW_STACKS
    stk_ret[sid] = ret
    stk_parent[sid] = k
    stk_depth[sid] = depth
    keys[slot] = key
    vals[slot] = sid
    counts[2] += 1
    counts[4] += 1
    return sid


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def _sort_small(a, lo, hi):  # pragma: no cover - compiled
    """Sort a[lo:hi] in place: Shell sort, which is insertion sort (best for the handful
    of configurations of most closures) on a few coarser gaps first."""
    gap = 1
    while gap < (hi - lo) // 3:
        gap = 3 * gap + 1
    while gap >= 1:
        for i in range(lo + gap, hi):
            x = a[i]
            j = i - gap
            while j >= lo and a[j] > x:
                a[j + gap] = a[j]
                j -= gap
            a[j + gap] = x
        gap //= 3


@njit(cache=True, nogil=True, _nrt=False)
def _eclose(need, eps_ptr, eps_dst, call_ptr, is_end, edge_ptr, maxd, ecl_off, ecl_data, counts, stamp, stack,
            gen, s):  # pragma: no cover - compiled
    """Offset in `ecl_data` of the stack-free epsilon closure of NFA state `s` (computed, then memoized).

    Layout at the offset: n byte states, n calls, reaches end, the byte states
    (those that can finish within max_depth), the call edge indices.
    Returns (status, offset).
    """
    gen[1] += 1
    g = gen[1]
    # depth first over epsilon moves, like LazyDFA._eclose_of; visited states go to the far end
    n_stack = 1
    stack[0] = s
    stamp[s] = g
    n_seen = n_bytes = n_calls = end = 0
    while n_stack:
        n_stack -= 1
        u = stack[n_stack]
        stack[len(stack) - 1 - n_seen] = u
        n_seen += 1
        if edge_ptr[u + 1] > edge_ptr[u] and need[u] <= maxd:
            n_bytes += 1
        n_calls += call_ptr[u + 1] - call_ptr[u]
        if is_end[u]:
            end = 1
        for j in range(eps_ptr[u], eps_ptr[u + 1]):
            v = eps_dst[j]
            if stamp[v] != g:
                stamp[v] = g
                stack[n_stack] = v
                n_stack += 1
    size = 3 + n_bytes + n_calls
    off = counts[5]
    if off + size > len(ecl_data):
        return GROW_ECLOSE, 0
    ecl_data[off] = n_bytes
    ecl_data[off + 1] = n_calls
    ecl_data[off + 2] = end
    bi = off + 3
    ci = off + 3 + n_bytes
    for i in range(n_seen):
        u = stack[len(stack) - 1 - i]
        if edge_ptr[u + 1] > edge_ptr[u] and need[u] <= maxd:
            ecl_data[bi] = u
            bi += 1
        for j in range(call_ptr[u], call_ptr[u + 1]):
            ecl_data[ci] = j
            ci += 1
    counts[5] = off + size
    ecl_off[s] = off
    return OK, off


@njit(cache=True, nogil=True, _nrt=False)
def _intern(table, accepting, cfg_ptr, cfg_data, keys, vals, next_same, counts, max_states, cfgs):  # pragma: no cover
    """Id of the DFA state with configurations `cfgs` (created if new). Returns (status, id)."""
    m = len(cfgs)
    h = _hash_cfgs(cfgs, m)
    mask = len(keys) - 1
    slot = mix(h) & mask
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
    if sid >= max_states:
        return BUDGET, -1
    if sid >= len(table):
        return GROW_STATES, -1
    if counts[1] + m > len(cfg_data):
        return GROW_CFG, -1
    if head == -1 and (counts[3] + 1) * 2 > len(keys):
        return GROW_CFG_HT, -1
    lo = counts[1]
    for i in range(m):
        cfg_data[lo + i] = cfgs[i]
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


@njit(cache=True, nogil=True, _nrt=False)
def _targets(N, S, W, flat, group_ptr, n_groups, results):  # pragma: no cover - compiled
    """The state reached from each group of seed configurations (DEAD when none can finish).

    Group g is flat[group_ptr[g]:group_ptr[g + 1]]; its state goes to results[g].
    Each group's closure adds the memoized epsilon closure of each
    configuration's NFA state, pruned to what can finish within the stack's
    depth budget; only seeds, calls and returns go through the seen set.
    Every array is unpacked here once: passing the tuples on to a helper per
    configuration would cost a reference count per array per call.
    Returns a status.
    """
    need, eps_ptr, eps_dst, call_ptr = N[0], N[1], N[2], N[3]
    call_to, call_ret, is_end, edge_ptr = N[4], N[5], N[6], N[7]
    n, maxd, max_states = N[11][0], N[11][1], N[11][2]
    call_op, call_lo, call_hi = N[12], N[13], N[14]
    table, accepting, cfg_ptr, cfg_data, cfg_keys, cfg_vals, next_same = S[0], S[1], S[2], S[3], S[4], S[5], S[6]
    stk_ret, stk_parent, stk_depth, stk_keys, stk_vals, counts, ecl_off, ecl_data = (
        S[7], S[8], S[9], S[10], S[11], S[12], S[13], S[14])
    todo, seen_keys, seen_gen, gen, out, stamp, stack = W[0], W[1], W[2], W[3], W[4], W[11], W[12]
    mask = len(seen_keys) - 1
    for grp in range(n_groups):
        lo, hi = group_ptr[grp], group_ptr[grp + 1]
        if hi - lo > len(todo):
            return GROW_SCRATCH
        gen[0] += 1                                # a fresh seen set: stamps, no clearing
        g = gen[0]
        n_todo = 0
        for i in range(lo, hi):
            todo[n_todo] = flat[i]
            n_todo += 1
        n_seen = 0
        n_out = 1                                  # out[0] is kept for the accepting mark
        accept = False
        while n_todo:
            n_todo -= 1
            cfg = todo[n_todo]
            slot = mix(cfg) & mask
            dup = False
            while seen_gen[slot] == g:
                if seen_keys[slot] == cfg:
                    dup = True
                    break
                slot = (slot + 1) & mask
            if dup:
                continue
            n_seen += 1
            if n_seen * 2 > len(seen_keys):
                return GROW_SCRATCH
            seen_keys[slot] = cfg
            seen_gen[slot] = g
            k = cfg // n
            s = cfg - k * n
            budget = maxd - stk_depth[k]
            if need[s] > budget:
                continue
            off = ecl_off[s]
            if off < 0:
                status, off = _eclose(need, eps_ptr, eps_dst, call_ptr, is_end, edge_ptr, maxd, ecl_off, ecl_data,
                                      counts, stamp, stack, gen, s)
                if status != OK:
                    return status
            n_bytes, n_calls, end = ecl_data[off], ecl_data[off + 1], ecl_data[off + 2]
            base = k * n
            if n_out + n_bytes > len(out) or n_todo + 2 * n_calls + 1 > len(todo):
                return GROW_SCRATCH
            for i in range(off + 3, off + 3 + n_bytes):
                b = ecl_data[i]
                if need[b] <= budget:
                    out[n_out] = base + b
                    n_out += 1
            for i in range(off + 3 + n_bytes, off + 3 + n_bytes + n_calls):
                j = ecl_data[i]
                op, start, ret = call_op[j], call_to[j], call_ret[j]
                if op <= FREE:                     # a rule or subroutine call
                    if start < 0:                  # a lazy rule's body is made first
                        return BUILD_RULE + j
                    if need[start] < budget + op and need[ret] <= budget:
                        sid = _push(stk_ret, stk_parent, stk_depth, stk_keys, stk_vals, counts, k, ret, op)
                        if sid < 0:
                            return -sid
                        todo[n_todo] = sid * n + start
                        n_todo += 1
                    continue
                if op == SPLICE:                   # a built lazy rule's only call: no frame
                    todo[n_todo] = base + start
                    n_todo += 1
                    continue
                count = -2 - stk_ret[k]            # HEAD, INC: the loop's counter frame is on top
                lo, hi = call_lo[j], call_hi[j]
                if op == ENTER:
                    sid = _push(stk_ret, stk_parent, stk_depth, stk_keys, stk_vals, counts, k, -2, ENTER)
                    if sid < 0:
                        return -sid
                    todo[n_todo] = sid * n + start
                    n_todo += 1
                elif op == HEAD:
                    if hi < 0 or count < hi:       # once more (dropped above if the item cannot finish)
                        todo[n_todo] = base + start
                        n_todo += 1
                    if count >= lo:
                        todo[n_todo] = stk_parent[k] * n + ret
                        n_todo += 1
                elif op == CHECK:                  # `AnyOrder` frames: `count` is the set taken
                    if (lo >= 0 and (count >> lo) & 1 == 0) or count & hi == hi:
                        todo[n_todo] = base + start
                        n_todo += 1
                elif op == LEAVE:
                    if count >> COUNT_SHIFT >= lo:
                        todo[n_todo] = stk_parent[k] * n + start
                        n_todo += 1
                elif op == CLEAR:
                    if count & hi == 0 and (lo < 0 or count >> COUNT_SHIFT < lo):
                        todo[n_todo] = base + start
                        n_todo += 1
                elif op == GATE:                   # `Counted` frames: `count` is the characters read
                    if lo <= count and (hi < 0 or count <= hi):
                        todo[n_todo] = base + start
                        n_todo += 1
                elif op == EXIT:
                    if count >= lo:
                        todo[n_todo] = stk_parent[k] * n + start
                        n_todo += 1
                else:                              # INC, PICK, COUNT, TICK: the top frame's value changes
                    value = -1
                    if op == INC:
                        value = count + 1
                        if hi < 0 and value > lo:
                            value = lo
                    elif op == PICK:
                        if count & hi == 0:
                            value = count | (1 << lo)
                    elif op == TICK:
                        if lo <= count + 1 and (hi < 0 or count + 1 <= hi):
                            value = count + 1
                    else:
                        c = count >> COUNT_SHIFT
                        if hi < 0 or c < hi:
                            value = (count & _LOW_BITS) | (min(c + 1, lo) << COUNT_SHIFT)
                    if value >= 0:
                        if value > counts[6] and (op == INC or op == TICK):
                            counts[6] = value
                        sid = _push(stk_ret, stk_parent, stk_depth, stk_keys, stk_vals, counts, stk_parent[k],
                                    -2 - value, ENTER)
                        if sid < 0:
                            return -sid
                        todo[n_todo] = sid * n + start
                        n_todo += 1
            if end:
                if k == 0:
                    accept = True
                else:
                    todo[n_todo] = stk_parent[k] * n + stk_ret[k]
                    n_todo += 1
        # closures of several seeds overlap: sort, then drop repeats
        _sort_small(out, 1, n_out)
        w = 1
        for i in range(1, n_out):
            if i == 1 or out[i] != out[w - 1]:
                out[w] = out[i]
                w += 1
        first = 1
        if accept:
            out[0] = -1
            first = 0
        if w == first:
            results[grp] = DEAD
            continue
        status, sid = _intern(table, accepting, cfg_ptr, cfg_data, cfg_keys, cfg_vals, next_same, counts,
                              max_states, out[first:w])
        if status != OK:
            return status
        results[grp] = sid
    return OK


@njit(cache=True, nogil=True, inline="always", _nrt=False)
def _moves(cfg_data, lo, hi, edge_ptr, edge_dst, edge_mask, n, seed, mid):  # pragma: no cover - compiled
    """The byte moves of configurations cfg_data[lo:hi]: target configuration and mask id of each."""
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
    return p


@njit(cache=True, nogil=True, _nrt=False)
def expand_row(N, S, W, s):  # pragma: no cover - compiled
    """Compute the row of state `s` (no-op when known); returns a status.

    Classes that take the same set of the state's moves (the same signature)
    share one target, computed once.
    """
    table, cfg_ptr, cfg_data = S[0], S[2], S[3]
    if table[s, 0] != UNEXPANDED:
        return OK
    edge_ptr, edge_dst, edge_mask, mask_cls = N[7], N[8], N[9], N[10]
    n, n_classes = N[11][0], N[11][3]
    seed, mid, flat, group_ptr, class_group, sig_keys, sig_vals = W[5], W[6], W[7], W[13], W[8], W[9], W[10]
    lo, hi = cfg_ptr[s], cfg_ptr[s + 1]
    n_pairs = 0
    for i in range(lo, hi):
        cfg = cfg_data[i]
        if cfg >= 0:
            b = cfg % n
            n_pairs += edge_ptr[b + 1] - edge_ptr[b]
    if n_pairs > min(len(seed), 63):
        if n_pairs > len(seed):
            return GROW_SCRATCH
        return _expand_wide(N, S, W, s, n_pairs)
    _moves(cfg_data, lo, hi, edge_ptr, edge_dst, edge_mask, n, seed, mid)
    # signature of a class: the bit set of the moves it takes
    n_sigs = 0
    n_flat = 0
    group_ptr[0] = 0
    for c in range(n_classes):
        sig = 0
        for j in range(n_pairs):
            if mask_cls[mid[j], c]:
                sig |= 1 << j
        if sig == 0:
            class_group[c] = -1
            continue
        q = 0
        while q < n_sigs and sig_keys[q] != sig:
            q += 1
        if q == n_sigs:
            if n_flat + n_pairs > len(flat):
                return GROW_SCRATCH
            for j in range(n_pairs):
                if sig >> j & 1:
                    flat[n_flat] = seed[j]
                    n_flat += 1
            sig_keys[q] = sig
            n_sigs += 1
            group_ptr[n_sigs] = n_flat
        class_group[c] = q
    status = _targets(N, S, W, flat, group_ptr, n_sigs, sig_vals)
    if status != OK:
        return status
    for c in range(n_classes):
        q = class_group[c]
        table[s, c] = DEAD if q < 0 else sig_vals[q]
    return OK


@njit(cache=True, nogil=True, _nrt=False)
def _expand_wide(N, S, W, s, n_pairs):  # pragma: no cover - compiled
    """`expand_row` for states with more than 63 moves: one closure per class."""
    table, cfg_ptr, cfg_data = S[0], S[2], S[3]
    edge_ptr, edge_dst, edge_mask, mask_cls = N[7], N[8], N[9], N[10]
    n, n_classes = N[11][0], N[11][3]
    seed, mid, flat, row, group_ptr, results = W[5], W[6], W[7], W[8], W[13], W[10]
    _moves(cfg_data, cfg_ptr[s], cfg_ptr[s + 1], edge_ptr, edge_dst, edge_mask, n, seed, mid)
    if n_pairs > len(flat):
        return GROW_SCRATCH
    for c in range(n_classes):
        m = 0
        for j in range(n_pairs):
            if mask_cls[mid[j], c]:
                flat[m] = seed[j]
                m += 1
        row[c] = DEAD
        if m:
            group_ptr[0] = 0
            group_ptr[1] = m
            status = _targets(N, S, W, flat, group_ptr, 1, results)
            if status != OK:
                return status
            row[c] = results[0]
    for c in range(n_classes):                    # the row is stored only once complete
        table[s, c] = row[c]
    return OK


@njit(cache=True, nogil=True, _nrt=False)
def expand_rows(N, S, W, states):  # pragma: no cover - compiled
    """Expand the rows of `states` in order; returns (status, index of the first not done)."""
    for i in range(len(states)):
        s = states[i]
        if s >= 0:
            status = expand_row(N, S, W, s)
            if status != OK:
                return status, i
    return OK, len(states)


@njit(cache=True, nogil=True, _nrt=False)
def start_state(N, S, W, start):  # pragma: no cover - compiled
    """(status, id) of the closure of the start rule's entry (the initial state)."""
    S0, S1, S2, S3, S4, S5, S6, S12 = S[0], S[1], S[2], S[3], S[4], S[5], S[6], S[12]
    if N[0][start] > N[11][1]:
        return _intern(S0, S1, S2, S3, S4, S5, S6, S12, N[11][2], W[4][:0])
    flat, group_ptr, results = W[7], W[13], W[10]
    flat[0] = start
    group_ptr[0] = 0
    group_ptr[1] = 1
    status = _targets(N, S, W, flat, group_ptr, 1, results)
    if status != OK:
        return status, -1
    if results[0] == DEAD:                              # nothing can finish: the empty state
        return _intern(S0, S1, S2, S3, S4, S5, S6, S12, N[11][2], W[4][:0])
    return OK, results[0]


@njit(cache=True, nogil=True, _nrt=False)
def intern_frames(S, max_states, n, accept, states, rets, ops, ptr, out):  # pragma: no cover - compiled
    """(status, id) of the DFA state whose configurations are NFA `states[i]` on the stack of frames
    `rets[ptr[i]:ptr[i + 1]]` (bottom first, each pushed by a call edge of kind `ops[...]`), accepting
    if `accept`; `out` is scratch of len(states) + 1 ints. A state made by moving a twin's counts
    (`constrained.twins`), never by a closure: interning is idempotent, so a GROW status is retried."""
    stk_ret, stk_parent, stk_depth, stk_keys, stk_vals, counts = S[7], S[8], S[9], S[10], S[11], S[12]
    first = 0
    if accept:
        out[0] = -1
        first = 1
    m = first
    for i in range(len(states)):
        k = 0
        for f in range(ptr[i], ptr[i + 1]):
            sid = _push(stk_ret, stk_parent, stk_depth, stk_keys, stk_vals, counts, k, rets[f], ops[f])
            if sid < 0:
                return -sid, -1
            k = sid
        out[m] = k * n + states[i]
        m += 1
    _sort_small(out, first, m)
    w = first
    for i in range(first, m):                   # (drop repeats, as a closure does)
        if i == first or out[i] != out[w - 1]:
            out[w] = out[i]
            w += 1
    return _intern(S[0], S[1], S[2], S[3], S[4], S[5], S[6], counts, max_states, out[:w])


@njit(cache=True, nogil=True, _nrt=False)
def rehash(keys, vals, new_keys, new_vals):  # pragma: no cover - compiled
    """Move every occupied slot of (keys, vals) into the larger empty table."""
    mask = len(new_keys) - 1
    for i in range(len(keys)):
        if vals[i] != _SLOT_EMPTY:
            slot = mix(keys[i]) & mask
            while new_vals[slot] != _SLOT_EMPTY:
                slot = (slot + 1) & mask
            new_keys[slot] = keys[i]
            new_vals[slot] = vals[i]
