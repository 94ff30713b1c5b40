"""Optional compiled trie walk (numba), the hot loop of a state's first mask.

`VocabTrie.walk` visits every alive (trie node, DFA state) pair once.  In
numpy that costs a dozen array calls per trie level, tens of microseconds
each, whatever the frontier size; compiled, a visit is a few nanoseconds.
numba is optional (`pip install constrained[fast]`): without it, or with
``CONSTRAINED_JIT=0`` in the environment, the numpy walk runs instead and
gives the same answers (tests check both).

The DFA is lazy, so the kernel may reach a state whose row is not computed
yet: it then stops descending there and hands the (node, state) pair back;
the driver computes those rows in Python and resumes from the handed-back
pairs only, so no node is visited twice.

Example:
    >>> kernel = load_kernel()
    >>> kernel is None or callable(kernel)
    True
"""

from __future__ import annotations

import os
import threading
from typing import Callable

import numpy as np

__all__ = ["load_kernel", "jit_enabled", "UNEXPANDED"]

UNEXPANDED = -2
_lock = threading.Lock()
_kernel: Callable | None = None
_loaded = False


def jit_enabled() -> bool:
    """Whether the compiled walk is in use (numba importable and not disabled)."""
    return load_kernel() is not None


def load_kernel() -> Callable | None:
    """The compiled walk kernel, or None (numba missing, or ``CONSTRAINED_JIT=0``)."""
    global _kernel, _loaded
    if _loaded:
        return _kernel
    with _lock:
        if not _loaded:
            _kernel = _compile() if os.environ.get("CONSTRAINED_JIT", "1") != "0" else None
            _loaded = True
    return _kernel


def _compile() -> Callable | None:
    try:
        from numba import njit
    except ImportError:
        return None
    return njit(cache=True, nogil=True)(_walk_kernel)


def _walk_kernel(nodes, states, emit_first, n_roots, byte, child_lo, child_hi, term_lo, term_hi,
                 term_ids, byte_class, table, out_ids, out_next, pend_nodes, pend_states):  # pragma: no cover
    """Depth-first walk from (node, state) pairs; node -1 is the virtual root (children: the roots).

    With `emit_first`, the start nodes' own tokens are emitted (their state is
    the one after their byte); otherwise only their children are visited.
    Writes tokens and their next states to `out_*` and the pairs whose row is
    unexpanded to `pend_*`; returns (tokens written, pairs pending).
    """
    stack_n = np.empty(len(byte) + len(nodes) + 1, np.int32)
    stack_s = np.empty(len(byte) + len(nodes) + 1, np.int32)
    sp = 0
    n_out = 0
    n_pend = 0
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
        if table[s, 0] == -2:
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
    return n_out, n_pend


def walk(trie, kernel: Callable, nodes: np.ndarray, states: np.ndarray, emit_first: bool,
         byte_class: np.ndarray, get_table: Callable[[], np.ndarray],
         expand: Callable[[np.ndarray], None]) -> tuple[np.ndarray, np.ndarray]:
    """Run `kernel` over `trie` from (nodes, states), computing missing DFA rows between rounds.

    Returns (token ids, next states), unordered.
    """
    out_ids = np.empty(trie.n_tokens, np.int32)
    out_next = np.empty(trie.n_tokens, np.int32)
    pend_nodes = np.empty(trie.n_nodes + len(nodes) + 1, np.int32)
    pend_states = np.empty(trie.n_nodes + len(nodes) + 1, np.int32)
    nodes = np.ascontiguousarray(nodes, dtype=np.int32)
    states = np.ascontiguousarray(states, dtype=np.int32)
    byte_class = np.ascontiguousarray(byte_class, dtype=np.int32)
    ids_buf, next_buf = out_ids, out_next
    got = 0
    while True:
        n_out, n_pend = kernel(nodes, states, emit_first, trie.n_roots, trie.byte, trie.child_lo, trie.child_hi,
                               trie.term_lo, trie.term_hi, trie.term_ids, byte_class, get_table(),
                               out_ids, out_next, pend_nodes, pend_states)
        if not n_pend:
            break
        # later rounds write after this one's tokens; the pending pairs are copied
        # out because the next round reuses the buffers
        out_ids, out_next = out_ids[n_out:], out_next[n_out:]
        got += n_out
        nodes, states = pend_nodes[:n_pend].copy(), pend_states[:n_pend].copy()
        expand(states)                   # duplicates are cheap: expand skips computed rows
        emit_first = False
    total = got + n_out
    return ids_buf[:total], next_buf[:total]
