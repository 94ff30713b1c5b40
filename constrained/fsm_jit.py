"""Optional compiled kernels (numba) for a state's first visit outside the trie walk.

- `level`: `slice_view._level` checks that a DFA state follows a slice for
  one character: a few dozen byte groups, each a handful of numpy calls of a
  few microseconds whatever their size; compiled, a couple of microseconds.
- `set_bits`: a state's packed bitmask straight from its token ids (numpy
  needs a pass over the whole vocabulary).
- `byteset`: a new byte-set slice (`slices.build_byteset_slice`) in one pass
  over the part of the trie inside the set.

As in `dfa_jit`, numba is optional and ``CONSTRAINED_JIT=0`` turns it off;
the numpy code then runs and gives the same answers (tests check both).

The DFA is lazy: when the level check reaches a state whose row is not
computed, the kernel saves where it is and returns the state; the driver
computes the row and resumes, so rows are computed in the order the numpy
code computes them. Over the native DFA (`constrained.dfa_jit.JitDFA`),
`walk_kernels.level_native` computes the row in place and resumes in the same
call (a round trip through Python cost about 7 us; a first mask took dozens).  Checks that need an equivalence proof between two
different states return `FALLBACK`, and the caller reruns the numpy code,
which finds every row it needs computed.

Example:
    >>> kernels = load_kernels()
    >>> kernels is None or callable(kernels.level)
    True
"""

from __future__ import annotations

import os
import threading
import warnings
from types import SimpleNamespace

import numpy as np

__all__ = ["load_kernels", "flatten_moves", "OK", "NONE", "CLOSED", "NEED_ROW", "FALLBACK",
           "SP", "SUCC", "STAGE", "EXCL", "NEED", "META_SIZE", "TAIL"]

# Kernel outcomes of `level`.
OK, NONE, CLOSED, NEED_ROW, FALLBACK = 0, 1, 2, 3, 4
_UNEXPANDED = -2
# Layout of the `work` buffer after the slice states' reps and stack: these fields, then
# `TAIL` ints: the excluded first bytes' flags (256), and scratch (256).
SP, SUCC, STAGE, EXCL, NEED, META_SIZE = 0, 1, 2, 3, 4, 5
TAIL = 512

_lock = threading.Lock()
_first_group_jit = None
_kernels: SimpleNamespace | None = None
_loaded = False


def load_kernels() -> SimpleNamespace | None:
    """The compiled kernels (`level`, `set_bits`, `byteset`), or None (numba missing, or ``CONSTRAINED_JIT=0``)."""
    global _kernels, _loaded
    if _loaded:
        return _kernels
    with _lock:
        if not _loaded:
            _kernels = _compile() if os.environ.get("CONSTRAINED_JIT", "1") != "0" else None
            _loaded = True
    return _kernels


def _compile() -> SimpleNamespace | None:
    try:
        from numba import njit
    except ImportError:
        return None
    global _first_group_jit
    # the kernel calls the helper by this global name, so it must be compiled first
    # without numba's reference counting (nothing in them allocates), so that the native DFA's
    # level check (`walk_kernels.level_native`), which calls `level` with its rows computed in
    # place, passes its argument tuples on for free
    _first_group_jit = njit(cache=True, nogil=True, _nrt=False)(_first_group)
    jit = njit(cache=True, nogil=True)
    kernels = SimpleNamespace(level=njit(cache=True, nogil=True, _nrt=False)(_level_kernel),
                              set_bits=jit(_set_bits_kernel), byteset=jit(_byteset_kernel))
    try:
        _warm_up(kernels)
    except Exception as e:  # noqa: BLE001 - a kernel that fails to build must not break compiling
        warnings.warn(f"constrained: compiled slice kernels unavailable ({type(e).__name__}: {e}); using numpy",
                      RuntimeWarning, stacklevel=3)
        return None
    return kernels


def _warm_up(kernels: SimpleNamespace) -> None:
    """Load the kernels (from numba's on-disk cache) with the argument types used, now rather
    than in the middle of some request's first mask (~0.1 s)."""
    byte_class = np.zeros(256, np.int32)
    byte_class.flags.writeable = False              # DFAs hand out read-only byte classes
    moves = flatten_moves([[(0, np.array([97]))]])
    work = np.zeros(3 + META_SIZE + TAIL, np.int32)
    kernels.level(0, True, 40, moves, np.array([97], np.int64), byte_class, np.zeros((1, 1), np.int32), work)
    kernels.set_bits(np.zeros(1, np.uint32), np.array([3], np.int32))


def flatten_moves(moves: list[list[tuple[int, np.ndarray]]]) -> np.ndarray:
    """Slice moves (`Slice.moves_at`) as one int32 array for the kernel.

    Layout: n_states + 1 group offsets, then per group (target, first byte
    index, end byte index), then every group's bytes; offsets are absolute.

    Example:
        >>> flatten_moves([[(0, np.array([97, 98]))]]).tolist()
        [2, 5, 0, 5, 7, 97, 98]
    """
    n = len(moves)
    n_groups = sum(len(g) for g in moves)
    out = [0] * (n + 1 + 3 * n_groups)
    pos, data = n + 1, n + 1 + 3 * n_groups
    bytes_out: list[int] = []
    for a, groups in enumerate(moves):
        out[a] = pos
        for b, ids in groups:
            lo = data + len(bytes_out)
            bytes_out += ids.tolist()
            out[pos:pos + 3] = (b, lo, data + len(bytes_out))
            pos += 3
    out[n] = pos
    return np.array(out + bytes_out, dtype=np.int32)


def _level_kernel(q, lenient, max_excluded, moves, first_bytes, byte_class, table, work):  # pragma: no cover
    """Resumable `slice_view._level` without equivalence proofs (see module docstring).

    `work` (int32) holds reps[n], the stack[n + 1], the meta fields, then
    excluded flags[256] and scratch[256]; stage 0 starts a fresh check.  Returns an outcome;
    after NEED_ROW, work[meta + NEED] is the state whose row is missing.
    """
    n = moves[0] - 1                                # the first group offset is n + 1
    meta = 2 * n + 1
    excl = meta + META_SIZE
    if work[meta + STAGE] == 0:
        if table[q, 0] == _UNEXPANDED:
            work[meta + NEED] = q
            return NEED_ROW
        closed = True
        for i in range(len(first_bytes)):
            if table[q, byte_class[first_bytes[i]]] >= 0:
                closed = False
                break
        if closed:
            return CLOSED
        for a in range(n):
            work[a] = -1
        work[0] = q
        work[n] = 0                                 # the stack holds slice state 0
        work[meta + SP] = 1
        work[meta + SUCC] = -1
        work[meta + EXCL] = 0
        work[meta + STAGE] = 1
    while work[meta + SP] > 0:
        sp = work[meta + SP]
        a = work[n + sp - 1]
        s = work[a]
        if table[s, 0] == _UNEXPANDED:
            work[meta + NEED] = s
            return NEED_ROW
        work[meta + SP] = sp - 1
        for g in range(moves[a], moves[a + 1], 3):
            b, lo, hi = moves[g], moves[g + 1], moves[g + 2]
            if b == 0 and a == 0 and lenient:
                out = _first_group_jit(s, lo, hi, max_excluded, moves, byte_class, table, work, meta, excl)
                if out != OK:
                    return out
                continue
            first = table[s, byte_class[moves[lo]]]
            for i in range(lo, hi):
                t = table[s, byte_class[moves[i]]]
                if t < 0:
                    return NONE
            if b == 0:
                if work[meta + SUCC] < 0:
                    work[meta + SUCC] = first
                rep = work[meta + SUCC]
            else:
                if work[b] < 0:
                    work[b] = first
                    work[n + work[meta + SP]] = b
                    work[meta + SP] += 1
                rep = work[b]
            for i in range(lo, hi):
                if table[s, byte_class[moves[i]]] != rep:
                    return FALLBACK
    if work[meta + SUCC] < 0:
        return NONE
    return OK


def _set_bits_kernel(words, ids):  # pragma: no cover
    """Set bit `i % 32` of `words[i // 32]` (uint32) for each i in `ids`."""
    for k in range(len(ids)):
        i = ids[k]
        words[i >> 5] |= np.uint32(1) << np.uint32(i & 31)


def _byteset_kernel(in_mask, n_roots, byte, child_lo, child_hi, term_lo, term_hi, term_ids,
                    depth, usable, member, complete, exits, used):  # pragma: no cover
    """`slices._byteset_parts` in one pass: a node is inside iff its byte is in the set and
    its parent is inside, so only the inside subtree and its border are visited.
    Returns (exits written, levels of `used`, largest character count of a member)."""
    inside = np.zeros(len(byte), np.bool_)
    n_exits = 0
    deepest_parent = -1
    longest = 0
    # roots, then the children of each inside node in node order (the trie is level-ordered,
    # so exits come out sorted)
    for p in range(-1, len(byte)):
        if p >= 0 and not inside[p]:
            continue
        lo, hi = (0, n_roots) if p < 0 else (child_lo[p], child_hi[p])
        for c in range(lo, hi):
            if not in_mask[byte[c]]:
                exits[n_exits] = c
                n_exits += 1
                continue
            inside[c] = True
            d = depth[c]
            used[d, 0, byte[c]] = True
            if child_hi[c] > child_lo[c] and d > deepest_parent:
                deepest_parent = d
            for k in range(term_lo[c], term_hi[c]):
                tok = term_ids[k]
                if usable[tok]:
                    member[tok] = True
                    complete[tok] = d + 1
                    longest = max(longest, d + 1)
    return n_exits, deepest_parent + 3, longest


def _first_group(s, lo, hi, max_excluded, moves, byte_class, table, work, meta, excl):  # pragma: no cover
    """The lenient first character's one-byte group: the majority next state, odd bytes excluded."""
    first = table[s, byte_class[moves[lo]]]
    uniform = first >= 0
    n_dead = 0
    for i in range(lo, hi):
        t = table[s, byte_class[moves[i]]]
        if t != first:
            uniform = False
        if t < 0:
            n_dead += 1
    if uniform:
        majority = first
    else:
        if n_dead > max_excluded:
            return NONE                             # e.g. a structural state: few bytes live
        live = excl + 256                           # the live targets, sorted in `work`'s scratch
        k = 0
        for i in range(lo, hi):
            t = table[s, byte_class[moves[i]]]
            if t >= 0:
                work[live + k] = t
                k += 1
        if k == 0:
            return NONE
        gap = 1                                     # Shell sort in place: nothing is allocated
        while gap < k // 3:
            gap = 3 * gap + 1
        while gap >= 1:
            for i in range(live + gap, live + k):
                x = work[i]
                j = i - gap
                while j >= live and work[j] > x:
                    work[j + gap] = work[j]
                    j -= gap
                work[j + gap] = x
            gap //= 3
        # the most frequent value, the smallest one on ties (as np.unique + argmax)
        majority, best, run = work[live], 0, 0
        for i in range(live, live + k):
            run = run + 1 if i > live and work[i] == work[i - 1] else 1
            if run > best:
                best, majority = run, work[i]
    n_odd = 0
    for i in range(lo, hi):
        if table[s, byte_class[moves[i]]] != majority:
            n_odd += 1
    succ = work[meta + SUCC]
    if n_odd > max_excluded:
        return NONE
    if succ >= 0 and succ != majority:
        return FALLBACK
    work[meta + SUCC] = majority
    if n_odd:
        work[meta + EXCL] = 1
        for i in range(lo, hi):
            if table[s, byte_class[moves[i]]] != majority:
                work[excl + moves[i]] = 1
    return OK
