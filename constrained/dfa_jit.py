"""The lazy DFA with its rows computed by compiled code (numba), when available.

`grammars.dfa.LazyDFA` determinizes one row at a time in Python, ~20 us a row;
a schema's first masks reach a few hundred rows, so that was the largest cost
of a state's first visit.  `JitDFA` is the same automaton (same NFA, byte
classes, pruning and language; state ids may be numbered differently) whose
rows are computed by the kernels of `constrained.dfa_kernels`, and whose trie
walk (`constrained.walk_kernels`) computes the rows it meets in place instead
of returning to Python.

Its NFA is made lazy (see `grammars.nfa`): a closure that calls a rule whose
body is not built yet returns `BUILD_RULE`, and `_build_rule` builds it and
takes in the grown NFA. Configurations are `stack * base + NFA state` with a
base fixed past any NFA size, per-NFA-state arrays are extended, and where
the new body's byte masks split a byte class, the table's columns are split
with it (`_reclassify`).

numba is optional (``pip install constrained[fast]``); `native_dfa_class()`
returns None without it or with ``CONSTRAINED_JIT=0``, and `LazyDFA` is used.

Example:
    >>> from grammars.ast import Grammar, literal, star
    >>> cls = native_dfa_class() or LazyDFA
    >>> dfa = cls(Grammar({"start": star(literal(b"ab"))}))
    >>> dfa.matches(b"abab"), dfa.matches(b"aba")
    (True, False)
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from constrained.dfa_buffers import NO_WORDS, filled, grown, raw_masks, walk_buffers
from constrained.dfa_loader import load_kernels
from constrained.fsm_jit import FALLBACK as _FALLBACK
from constrained.fsm_jit import META_SIZE as _META_SIZE
from constrained.fsm_jit import NEED as _NEED
from constrained.fsm_jit import NEED_ROW as _NEED_ROW
from constrained.fsm_jit import OK as _OK
from constrained.fsm_jit import TAIL as _TAIL
from grammars.deep import deep_call
from grammars.dfa import DEAD, UNEXPANDED, LazyDFA
from grammars.nfa import FREE, NFA

__all__ = ["JitDFA", "ProductDFA", "load_kernels", "native_dfa_class", "product_dfa_class"]

# the configuration base of a DFA over a lazy NFA (see `JitDFA.__init__`): stacks * 2^32 fit int64
_LAZY_BASE = 1 << 32
def native_dfa_class() -> type[LazyDFA] | None:
    """`JitDFA` when its kernels load, else None."""
    return JitDFA if load_kernels() is not None else None


def product_dfa_class() -> type[LazyDFA] | None:
    """`ProductDFA` when the kernels load, else None (see `grammars.json_string_sets.use_dfa_class`)."""
    return ProductDFA if load_kernels() is not None else None


class JitDFA(LazyDFA):
    """`LazyDFA` whose rows are computed natively (see the module docstring).

    Args:
        grammar, max_states, max_depth: as for `LazyDFA`.

    Example:
        >>> from grammars.ast import Grammar, byte_range, plus
        >>> dfa = JitDFA(Grammar({"start": plus(byte_range(48, 57))}))
        >>> s = dfa.walk(dfa.initial, b"42")
        >>> dfa.is_accepting(s), dfa.num_classes
        (True, 2)
    """

    lazy_nfa = True

    def __init__(self, grammar, *, max_states: int = 100_000, max_depth: int = 64) -> None:
        self._k = load_kernels()
        if self._k is None:
            raise ImportError("JitDFA needs numba: pip install 'constrained[fast]'")
        nfa = self._init_nfa(grammar, max_states, max_depth)
        if nfa.unbuilt:
            # configurations are `stack * base + NFA state`: with lazy rules the NFA grows
            # while the DFA lives, so the base is fixed past any size it can reach
            self._n = _LAZY_BASE
        self._nbytes_of: tuple | None = None
        self._N = self._nfa_arrays(nfa)
        # the per-state lists become the kernels' arrays: a list of n ints is n references
        # for every full GC collection to walk, and the compile cache keeps many NFAs
        nfa.need, nfa.is_end = self._N[0], self._N[6].view(np.bool_)
        self._alloc()
        self.initial: int = self._run(self._k.start_state, nfa.rule_start[0])

    # -- arrays ---------------------------------------------------------------

    def _init_classes(self, masks: set[int]) -> None:
        """`LazyDFA._init_classes` in one kernel, which also gives the mask x class table and, where
        the NFA has call edges, their return states for `_nfa_arrays` (one kernel call less: each
        costs 15-40 us after other work, whatever it computes)."""
        nfa = self.nfa
        a = nfa.arrays
        if not len(a.call_dst):
            self._set_classes(*self._classes_of(a.masks))   # `masks` in the order of the NFA's mask ids
            return
        classes, rep, self._mask_cls, self._call_ret = self._k.classes_and_returns(
            raw_masks(a.masks), a.call_dst, a.call_op, FREE, a.eps_ptr, a.eps_dst, a.edge_ptr, a.call_ptr, nfa.is_end)
        self._mask_order = a.masks
        self._set_classes(classes, rep)

    def _classes_of(self, masks: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The byte classes of the NFA's `masks` (class per byte, least byte per class); keeps the
        mask x class table of the kernels."""
        classes, rep, self._mask_cls = self._k.byte_classes(raw_masks(masks))
        self._mask_order = masks
        return classes, rep

    def _set_classes(self, classes: np.ndarray, rep: np.ndarray) -> None:
        classes.flags.writeable = False
        self.byte_class = classes
        self.num_classes = len(rep)
        # bytes, not lists (class ids < 256): indexed as fast, and nothing for the cyclic GC
        # to walk in every cached DFA
        self._bc = classes.astype(np.uint8).tobytes()
        self._class_rep = rep.astype(np.uint8).tobytes()
        self._mask_classes = {}

    def _nfa_arrays(self, nfa: NFA) -> tuple:
        a = nfa.arrays
        mask_cls = self._mask_cls                      # a class is in a mask iff its bytes are
        if not nfa.unbuilt:
            del self._mask_cls
        # return states are canonicalized as in LazyDFA (see `NFA.forward`); loop exits are kept
        call_ret = self.__dict__.pop("_call_ret", None)      # `_init_classes` gave them, for this NFA
        if call_ret is None:
            call_ret = a.call_dst
            if len(call_ret):
                call_ret = self._k.call_returns(a.call_dst, a.call_op, FREE, a.eps_ptr, a.eps_dst, a.edge_ptr,
                                                a.call_ptr, nfa.is_end)
        params = np.array([self._n, self.max_depth, self.max_states, self.num_classes], dtype=np.int64)
        arrays = (
            np.asarray(nfa.need, dtype=np.int64), a.eps_ptr, a.eps_dst, a.call_ptr, a.call_to,
            call_ret, nfa.is_end.view(np.uint8), a.edge_ptr, a.edge_dst, a.edge_mask, mask_cls, params,
            a.call_op, a.call_lo, a.call_hi,
        )
        # one layout and dtype for every grammar (C-contiguous int64, uint8 for flags), as the
        # NFA's kernels make them, so that the kernels are compiled (loaded) once
        return arrays

    def _alloc(self) -> None:
        # dev corpus after the first mask: 8 DFA states at the median, 14 at p90, 84 at most; tables for
        # 256 states cost every compile 1-2% after an idle wait, more than the growth (bench/README)
        states, ints, slots, stacks = 32, 512, 128, 64
        self._table = filled((states, self.num_classes), UNEXPANDED, np.int32)
        self._accepting = np.zeros(states, dtype=np.bool_)
        self._cfg_ptr = np.zeros(states + 1, dtype=np.int64)
        self._cfg_data = np.empty(ints, dtype=np.int64)
        self._cfg_keys = np.zeros(slots, dtype=np.int64)
        self._cfg_vals = filled(slots, -1, np.int32)
        self._next_same = filled(states, -1, np.int32)
        self._stk_ret = filled(stacks, -1, np.int64)
        self._stk_parent = filled(stacks, -1, np.int64)
        self._stk_depth = np.zeros(stacks, dtype=np.int64)
        self._stk_keys = np.zeros(4 * stacks, dtype=np.int64)
        self._stk_vals = filled(4 * stacks, -1, np.int32)
        self._ecl_off = filled(self.nfa.num_states, -1, np.int64)
        self._ecl_data = np.empty(1024, dtype=np.int64)
        self._counts = np.array([0, 0, 1, 0, 0, 0, 0], dtype=np.int64)   # stack 0 is the empty stack
        self._allocwalk_buffers(128)
        self._pack()

    def _allocwalk_buffers(self, size: int) -> None:
        """Kernel scratch (see `dfa_kernels`), `size` configurations per closure and moves per row."""
        c = self.num_classes
        self._W = (np.empty(4 * size, np.int64), np.zeros(4 * size, np.int64), np.zeros(4 * size, np.int64),
                   np.zeros(2, np.int64), np.empty(size + 1, np.int64), np.empty(size, np.int64),
                   np.empty(size, np.int64), np.empty(size, np.int64), np.empty(c, np.int32),
                   np.empty(c, np.int64), np.empty(c, np.int32), np.zeros(self.nfa.num_states, np.int64),
                   np.empty(self.nfa.num_states, np.int64), np.empty(c + 1, np.int64))

    def _pack(self) -> None:
        self._S = (self._table, self._accepting, self._cfg_ptr, self._cfg_data, self._cfg_keys, self._cfg_vals,
                   self._next_same, self._stk_ret, self._stk_parent, self._stk_depth, self._stk_keys,
                   self._stk_vals, self._counts, self._ecl_off, self._ecl_data)

    def _grow(self, status: int) -> None:
        k = self._k
        if status >= k.BUILD_RULE:
            self._build_rule(status - k.BUILD_RULE)
            return
        if status == k.BUDGET:                  # name the part of the constraint the newest state is in
            last = int(self._counts[0]) - 1
            raise self._budget_error(self._cfg_data[self._cfg_ptr[last]:self._cfg_ptr[last + 1]].tolist()
                                     if last >= 0 else [])
        if status == k.GROW_STATES:
            cap = 2 * len(self._table)
            table = np.full((cap, self.num_classes), UNEXPANDED, dtype=np.int32)
            table[: len(self._table)] = self._table
            self._table = table
            self._accepting = grown(self._accepting, cap, False)
            self._cfg_ptr = grown(self._cfg_ptr, cap + 1, 0)
            self._next_same = grown(self._next_same, cap, -1)
        elif status == k.GROW_CFG:
            self._cfg_data = grown(self._cfg_data, 2 * len(self._cfg_data), 0)
        elif status == k.GROW_STACKS:
            cap = 2 * len(self._stk_ret)
            self._stk_ret = grown(self._stk_ret, cap, -1)
            self._stk_parent = grown(self._stk_parent, cap, -1)
            self._stk_depth = grown(self._stk_depth, cap, 0)
        elif status == k.GROW_CFG_HT:
            self._cfg_keys, self._cfg_vals = self._rehashed(self._cfg_keys, self._cfg_vals)
        elif status == k.GROW_STACK_HT:
            self._stk_keys, self._stk_vals = self._rehashed(self._stk_keys, self._stk_vals)
        elif status == k.GROW_ECLOSE:
            self._ecl_data = grown(self._ecl_data, 2 * len(self._ecl_data), 0)
        elif status == k.GROW_SCRATCH:
            self._allocwalk_buffers(2 * len(self._W[5]))
        else:
            raise RuntimeError(f"unknown DFA kernel status {status}")
        self._pack()

    def _build_rule(self, edge: int) -> None:
        """Make the body of the lazy rule that call edge `edge` goes to, and take in the grown NFA.

        The NFA only appends (states, edges; its masks were registered before),
        so every DFA state, stack and memoized closure stays as it is; the
        per-NFA-state arrays are extended.
        """
        nfa = self.nfa
        deep_call(nfa.build_lazy, int(nfa.arrays.call_rule[edge]))
        if nfa.arrays.masks != self._mask_order:
            self._reclassify(nfa.arrays.masks)
        self._N = self._nfa_arrays(nfa)
        nfa.need, nfa.is_end = self._N[0], self._N[6].view(np.bool_)
        self._ecl_off = grown(self._ecl_off, nfa.num_states, -1)
        self._allocwalk_buffers(len(self._W[5]))
        self._pack()

    def _reclassify(self, masks: tuple[int, ...]) -> None:
        """Byte classes for the NFA's masks `masks` (a superset of those it had).

        The new classes refine the old ones, so each row computed so far holds
        for every byte of an old class: its column is copied to each class it
        split into. The rows were computed on NFA states whose masks are all
        unions of the old classes, the only states their DFA states contain.
        """
        old = self.byte_class
        classes, rep = self._classes_of(masks)
        parent = old[rep]                               # the old class of each new class
        if not np.array_equal(parent[classes], old):
            raise RuntimeError("the byte classes of a grown NFA do not refine the old ones")
        if len(rep) == self.num_classes and np.array_equal(classes, old):
            return
        used = int(self._counts[0])
        table = np.full((max(256, 2 * used), len(rep)), UNEXPANDED, dtype=np.int32)   # the used rows only
        # the columns of the new classes, written in place (mode "clip": no buffered copy); the fancy
        # index `self._table[:used, parent]` and a copy took 1.45x as long over the dev corpus' builds
        np.take(self._table[:used], parent, axis=1, out=table[:used], mode="clip")
        self._table = table
        self._accepting = grown(self._accepting[:used], len(table), False)
        self._cfg_ptr = grown(self._cfg_ptr[:used + 1], len(table) + 1, 0)
        self._next_same = grown(self._next_same[:used], len(table), -1)
        self._set_classes(classes, rep)

    def _frame(self, k: int) -> tuple[int, int]:
        return int(self._stk_ret[k]), int(self._stk_parent[k])

    def _rehashed(self, keys: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        new_keys = np.zeros(4 * len(keys), dtype=keys.dtype)
        new_vals = np.full(4 * len(keys), -1, dtype=vals.dtype)
        self._k.rehash(keys, vals, new_keys, new_vals)
        return new_keys, new_vals

    def _run(self, kernel, *args) -> int:
        """Call a kernel returning (status, value), growing the arrays until it succeeds."""
        while True:
            status, value = kernel(self._N, self._S, self._W, *args)
            if status == 0:
                return int(value)
            self._grow(int(status))

    # -- the LazyDFA interface -------------------------------------------------

    @property
    def num_states(self) -> int:
        return int(self._counts[0])

    @property
    def is_empty(self) -> bool:
        return self._cfg_ptr[self.initial + 1] == self._cfg_ptr[self.initial]

    @property
    def nbytes(self) -> int:
        # O(1) unless the arrays were replaced (they only grow): the compile cache
        # asks every cached FSM for its size on each compile
        S, N, W = self._S, self._N, self._W
        known = self._nbytes_of
        if known is None or known[0] is not S or known[1] is not N or known[2] is not W:
            known = self._nbytes_of = (S, N, W, sum(a.nbytes for a in S + N + W))
        return int(known[3] + 120 * self.nfa.num_states + 2100 * len(self._trans))

    def expand(self, states: Iterable[int] | np.ndarray) -> None:
        todo = np.asarray(states, dtype=np.int64).ravel()
        if len(todo) == 1:                       # the common call: one state, often already known
            s = int(todo[0])
            if s < 0 or self._table[s, 0] != UNEXPANDED:
                return
        else:
            todo = todo[todo >= 0]
            if not len(todo) or (self._table[todo, 0] != UNEXPANDED).all():
                return
            todo = np.ascontiguousarray(todo)
        while len(todo):
            status, done = self._k.expand_rows(self._N, self._S, self._W, todo)
            if status == 0:
                return
            self._grow(int(status))
            todo = todo[done:]

    def _expand_one(self, state: int) -> tuple[int, ...]:
        if self._table[state, 0] == UNEXPANDED:
            self.expand(np.array([state], dtype=np.int64))
        return tuple(self._table[state].tolist())

    def row(self, state: int) -> tuple[int, ...]:
        return self._expand_one(state)

    def next_state(self, state: int, byte: int) -> int:
        if self._table[state, 0] == UNEXPANDED:
            self._expand_one(state)
        return int(self._table[state, self._bc[byte]])

    def transitions(self, state: int) -> np.ndarray:
        out = self._trans.get(state)
        if out is None:
            if self._table[state, 0] == UNEXPANDED:
                self._expand_one(state)
            out = self._table[state][self.byte_class]
            out.flags.writeable = False
            self._trans[state] = out
        return out

    def walk(self, state: int, data: bytes) -> int:
        for byte in data:
            if state < 0:
                return DEAD
            # `_bc` read each time: computing a row may build a lazy rule and split the classes
            state = self.next_state(state, byte) if self._table[state, 0] == UNEXPANDED \
                else int(self._table[state, self._bc[byte]])
        return state

    def intern_frames(self, accept: bool, configs: list[tuple[int, list[tuple[int, int]]]]) -> int:
        """The DFA state of `configs` (each an NFA state and its stack's frames, bottom first, as
        (frame, call edge kind)), accepting if `accept`; made without a closure (`constrained.twins`)."""
        states = np.array([p for p, _ in configs], dtype=np.int64)
        frames = [f for _, fs in configs for f in fs]
        rets = np.array([r for r, _ in frames], dtype=np.int64)
        ops = np.array([o for _, o in frames], dtype=np.int64)
        ptr = np.zeros(len(configs) + 1, dtype=np.int64)
        np.cumsum([len(fs) for _, fs in configs], out=ptr[1:])
        out = np.empty(len(configs) + 1, dtype=np.int64)
        while True:
            status, sid = self._k.intern_frames(self._S, self.max_states, self._n, accept, states, rets, ops, ptr, out)
            if status == 0:
                return int(sid)
            self._grow(int(status))

    def explore(self) -> int:
        todo = [self.initial]
        seen = {self.initial}
        while todo:
            s = todo.pop()
            self._expand_one(s)
            for t in set(self._table[s].tolist()):
                if t >= 0 and t not in seen:
                    seen.add(t)
                    todo.append(t)
        return len(seen)

    def equivalent(self, a: int, b: int, max_pairs: int = 256) -> bool:
        """Whether `a` and `b` accept the same language (bounded product walk; False if unsure)."""
        size = 1 << (4 * max_pairs + 4).bit_length()   # the seen pairs' hash table: a power of two
        return bool(self._run(self._k.equivalent, int(a), int(b), np.empty(size, np.int64),
                              np.empty(max_pairs + 1, np.int64), np.empty(max_pairs + 1, np.int64)))

    def level_check(self, q: int, lenient: bool, max_excluded: int, moves: np.ndarray, first_bytes: np.ndarray,
                    work: np.ndarray) -> int | None:
        """`fsm_jit`'s level check of `q` (see `slice_view._level`), rows computed in place
        (`walk_kernels.level_native`), resumed from `work` after a table grew; None where the
        slice kernels did not load (the caller runs them itself)."""
        if self._k.level_native is None:
            return None
        while True:
            out = self._k.level_native(int(q), bool(lenient), int(max_excluded), moves, first_bytes, self.byte_class,
                                       self._N, self._S, self._W, work)
            if out != _NEED_ROW:
                return int(out)
            self.expand((int(work[2 * (moves[0] - 1) + 1 + _NEED]),))

    def view_rows(self, q: int, sl, max_excluded: int, buckets: tuple[int, ...]):
        """`slice_view.slice_view`'s chain of rows for state `q` and slice `sl` in one kernel
        call (`walk_kernels.view_native`): (rows, cycle, capacity, excluded), None where `q`
        has no view, False where the caller must take its Python path (an equivalence proof,
        or kernels that did not load)."""
        kernel = self._k.view_native
        if kernel is None:
            return False
        moves_all, moves_off, first_all, first_off, levels = sl.packed_levels(buckets)
        limit = len(sl.used_from) - 1
        n = len(sl.table)
        work = np.zeros(2 * n + 1 + _META_SIZE + _TAIL, np.int32)
        rows = np.empty((limit + 2, n), np.int32)
        seen, seen_row = np.empty(limit + 2, np.int64), np.empty(limit + 2, np.int64)
        excluded = np.zeros(256, np.bool_)
        while True:
            status, n_rows, start, period, capacity, has_excl = kernel(
                int(q), int(max_excluded), moves_all, moves_off, first_all, first_off, levels, limit, int(sl.max_started),
                self.byte_class, self._N, self._S, self._W, work, rows, seen, seen_row, excluded)
            if status != _NEED_ROW:
                break
            self.expand((int(work[2 * n + 1 + _NEED]),))
        if status == _OK:
            return (rows[:n_rows].copy(), (int(start), int(period)) if start >= 0 else None, int(capacity),
                    excluded if has_excl else None)
        return False if status == _FALLBACK else None

    # -- the trie walk ----------------------------------------------------------

    def walk_tokens(self, trie, nodes: np.ndarray, states: np.ndarray,
                    emit_first: int, words: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Tokens readable from (trie node, DFA state) pairs, and their next states.

        `emit_first` as in `dfa_kernels.walk_native`: 0, the walk starts below
        the nodes; 1, the nodes' own tokens count too; 2, likewise, with each
        state taken *before* its node's byte. Rows are computed in place.
        `words` (uint32, one bit per token id), when given, gets the tokens' bits set.
        """
        if words is None:
            words = NO_WORDS
        nodes = np.ascontiguousarray(nodes, dtype=np.int32)
        states = np.ascontiguousarray(states, dtype=np.int32)
        out_ids, out_next, pend_nodes, pend_states, stack_n, stack_s = walk_buffers(trie, len(nodes))
        ids_buf, next_buf = out_ids, out_next
        got = 0
        while True:
            n_out, n_pend, status = self._k.walk_native(
                nodes, states, int(emit_first), trie.n_roots, trie.byte, trie.child_lo, trie.child_hi,
                trie.term_lo, trie.term_hi, trie.term_ids, self.byte_class, self._N, self._S, self._W,
                out_ids, out_next, pend_nodes, pend_states, stack_n, stack_s, words)
            if not n_pend:
                break
            self._grow(int(status))
            if n_pend < 0:
                continue                           # nothing was done: redo the call
            out_ids, out_next = out_ids[n_out:], out_next[n_out:]
            got += n_out
            nodes, states = pend_nodes[:n_pend].copy(), pend_states[:n_pend].copy()
            emit_first = 0
        total = got + n_out
        return ids_buf[:total].copy(), next_buf[:total].copy()


class ProductDFA(JitDFA):
    """A `JitDFA` whose NFA is built whole, so that its byte classes never change: the automata
    of the string-set products (`grammars.json_string_sets`), which read the classes once."""

    lazy_nfa = False

    def __init__(self, grammar, **options: Any) -> None:
        self._rows_made: dict[int, tuple[int, ...]] = {}   # a product reads a row once per pair
        super().__init__(grammar, **options)

    def row(self, state: int) -> tuple[int, ...]:
        row = self._rows_made.get(state)
        if row is None:
            row = self._rows_made[state] = self._expand_one(state)
        return row
