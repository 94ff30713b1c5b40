"""Lazy DFA over a byte-level `Grammar`, determinized one row at a time.

A DFA state is an interned sorted tuple of NFA *configurations*: a byte-consuming
NFA state plus a stack of frames (stacks are interned as parent-pointer ids,
so a configuration is one int `stack * N + state`). A frame is a return state
(a rule or subroutine call), the value of a counter loop (see `grammars.nfa`:
`x{0,1000}` is one loop whose count is a frame, never 1000 copies), or the
set of members an `AnyOrder` object has taken (a bit set, tested and updated
by PICK, CHECK, COUNT, LEAVE and CLEAR edges: `grammars.fragments`). The
number of nested rule calls is bounded by `max_depth`, which unrolls recursive
grammars to a fixed nesting depth; subroutines and counters cost no depth.

Rows are computed only when first asked for, per *byte class*: bytes that no
mask in the NFA tells apart share one class and always move alike.

`table` and `accepting` are views that are replaced when the arrays grow;
re-read them after expanding rows instead of keeping them.

Invariant: every state other than `DEAD` is live: some continuation reaches
acceptance (the only exception is `initial` of a grammar whose language is
empty, see `is_empty`). Configurations that cannot finish within their
remaining depth budget are dropped as soon as they appear (`NFA.need`).

Example:
    >>> from grammars.ast import Grammar, literal, star
    >>> dfa = LazyDFA(Grammar({"start": star(literal(b"ab"))}))
    >>> dfa.matches(b"abab"), dfa.matches(b"aba")
    (True, False)
    >>> dfa.walk(dfa.initial, b"b") == DEAD
    True
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from grammars.ast import Grammar
from grammars.errors import StateBudgetError
from grammars.byte_classes import byte_classes
from grammars.ast import COUNT_SHIFT
from grammars.nfa import CHECK, CLEAR, COUNT, ENTER, EXIT, FREE, GATE, HEAD, INC, LEAVE, NFA, PICK, REG, TICK

__all__ = ["LazyDFA", "compile_dfa", "DEAD", "UNEXPANDED"]

DEAD = -1
UNEXPANDED = -2
_ACCEPT = -1  # the configuration "start rule finished with an empty stack"


class LazyDFA:
    """Deterministic automaton of a grammar, built lazily.

    Args:
        grammar: the grammar; its `start` rule must derive the whole input.
        max_states: budget of DFA states; exceeding it raises
            `StateBudgetError`.
        max_depth: maximum number of nested rule calls (`Ref`s) on the
            stack; every `Ref` counts, so a JSON value nested k levels deep
            through `value -> array -> value` uses about 2k. Derivations that
            need more are excluded from the language (and never offered).

    Example:
        >>> from grammars.ast import Grammar, byte_range, plus
        >>> dfa = LazyDFA(Grammar({"start": plus(byte_range(48, 57))}))
        >>> s = dfa.walk(dfa.initial, b"42")
        >>> dfa.is_accepting(s), dfa.num_classes
        (True, 2)
    """

    # Whether the NFA may leave subschemas to be built when first reached (`NFA.build_lazy`):
    # only `constrained.dfa_jit.JitDFA` builds them; here the NFA is built whole.
    lazy_nfa = False

    def __init__(self, grammar: Grammar, *, max_states: int = 100_000, max_depth: int = 64) -> None:
        nfa = self._init_nfa(grammar, max_states, max_depth)
        need = nfa.need                 # a list, or int64 from the compiled kernel: Python ints index faster
        self._need = need.tolist() if isinstance(need, np.ndarray) else need
        self._is_end: list[bool] = nfa.is_end.tolist()
        self._eclose: list[tuple | None] = [None] * self._n
        self._moves: list[tuple | None] = [None] * self._n
        # Stacks: id 0 is empty; id -> (frame, parent id), depth per id. A frame is a
        # return state, or -2 - count for a counter loop's frame.
        self._stack_ids: dict[tuple[int, int, int], int] = {}
        self._stacks: list[tuple[int, int]] = [(-1, -1)]
        self._depth: list[int] = [0]
        # Configuration sets are sorted tuples of ints, not frozensets: the cyclic GC
        # stops tracking such tuples, and a DFA keeps thousands of them alive.
        self._ids: dict[tuple[int, ...], int] = {}
        self._configs: list[tuple[int, ...]] = []
        self._rows: list[tuple[int, ...] | None] = []
        self._seed_memo: dict[tuple[int, ...], int] = {}
        self._table = np.full((16, self.num_classes), UNEXPANDED, dtype=np.int32)
        self._accepting = np.zeros(16, dtype=bool)
        # (a flag, not `self._close = self._close_flat`: a bound method kept on its own object is
        # a reference cycle, and the DFA with its NFA would wait for the GC's next pass to go)
        self._flat = not any(nfa.calls)
        start = nfa.rule_start[0]
        configs = self._close([start]) if nfa.need[start] <= max_depth else ()
        self.initial: int = self._intern(configs)

    def _init_nfa(self, grammar: Grammar, max_states: int, max_depth: int) -> NFA:
        """The NFA and byte classes (shared with subclasses that determinize differently)."""
        if max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {max_depth}")
        # (the grammar is not kept: a cached FSM would hold its whole syntax tree,
        # thousands of objects that every full GC collection walks)
        self.max_states = max_states
        self.max_depth = max_depth
        self.nfa = nfa = NFA(grammar, max_depth=max_depth, lazy=self.lazy_nfa)
        self._n = nfa.num_states
        self._init_classes(nfa.masks())
        self._trans: dict[int, np.ndarray] = {}
        return nfa

    # -- public API -----------------------------------------------------------

    @property
    def num_states(self) -> int:
        """Number of DFA states discovered so far (rows may be unexpanded)."""
        return len(self._configs)

    @property
    def table(self) -> np.ndarray:
        """int32[num_states, num_classes]; unexpanded rows hold `UNEXPANDED`."""
        return self._table[: self.num_states]

    @property
    def accepting(self) -> np.ndarray:
        """bool[num_states]: whether each known state accepts."""
        return self._accepting[: self.num_states]

    @property
    def is_empty(self) -> bool:
        """True when the grammar (at this depth) matches no byte string at all."""
        return not self._configs[self.initial]

    @property
    def nbytes(self) -> int:
        """Approximate memory held by the DFA (tables, interned states, NFA)."""
        configs = sum(len(c) for c in self._configs)
        rows = sum(1 for r in self._rows if r is not None) * self.num_classes
        return int(
            self._table.nbytes + self._accepting.nbytes + 60 * configs + 36 * rows
            + 120 * self._n + 64 * len(self._stacks) + 2100 * len(self._trans)
        )

    def is_accepting(self, state: int) -> bool:
        return state >= 0 and bool(self._accepting[state])

    def next_state(self, state: int, byte: int) -> int:
        """The state after reading `byte` in `state` (DEAD if none)."""
        row = self._rows[state] or self._expand_one(state)
        return row[self._bc[byte]]

    def row(self, state: int) -> tuple[int, ...]:
        """The next state per byte class (DEAD where none), expanding the row if needed."""
        return self._rows[state] or self._expand_one(state)

    def transitions(self, state: int) -> np.ndarray:
        """int32[256]: next state per byte value (memoized)."""
        out = self._trans.get(state)
        if out is None:
            row = self._rows[state] or self._expand_one(state)
            out = np.asarray(row, dtype=np.int32)[self.byte_class]
            out.flags.writeable = False
            self._trans[state] = out
        return out

    def expand(self, states: Iterable[int] | np.ndarray) -> None:
        """Make sure the rows of `states` are computed."""
        rows = self._rows
        for s in np.asarray(states, dtype=np.int64).ravel().tolist():
            if s >= 0 and rows[s] is None:
                self._expand_one(s)

    def walk(self, state: int, data: bytes) -> int:
        """Run `data` from `state`; DEAD as soon as a byte has no move."""
        rows, bc = self._rows, self._bc
        for byte in data:
            if state < 0:
                return DEAD
            row = rows[state] or self._expand_one(state)
            state = row[bc[byte]]
        return state

    def matches(self, data: bytes) -> bool:
        """Whether the grammar derives exactly `data`."""
        return self.is_accepting(self.walk(self.initial, data))

    def explore(self) -> int:
        """Expand every reachable state (bounded by `max_states`); return their count."""
        todo = [self.initial]
        seen = {self.initial}
        while todo:
            s = todo.pop()
            for t in self._rows[s] or self._expand_one(s):
                if t >= 0 and t not in seen:
                    seen.add(t)
                    todo.append(t)
        return len(seen)

    # -- byte classes ------------------------------------------------------------

    def _init_classes(self, masks: set[int]) -> None:
        classes = byte_classes(masks)
        self.byte_class: np.ndarray = classes
        self.byte_class.flags.writeable = False
        self.num_classes: int = int(classes.max()) + 1
        self._bc: list[int] = classes.tolist()
        rep = [0] * self.num_classes
        for b in range(255, -1, -1):
            rep[self._bc[b]] = b
        self._class_rep = rep
        self._mask_classes: dict[int, tuple[int, ...]] = {}

    def _classes_of(self, mask: int) -> tuple[int, ...]:
        out = self._mask_classes.get(mask)
        if out is None:
            out = tuple(c for c, b in enumerate(self._class_rep) if mask >> b & 1)
            self._mask_classes[mask] = out
        return out

    # -- determinization -----------------------------------------------------

    def _eclose_of(self, s: int) -> tuple:
        """Stack-free epsilon closure of s: (byte states, call edges, reaches end)."""
        nfa = self.nfa
        seen = {s}
        todo = [s]
        byte_states: list[int] = []
        calls: list[tuple[int, int]] = []
        end = False
        while todo:
            u = todo.pop()
            if nfa.edges[u] and self._need[u] <= self.max_depth:
                byte_states.append(u)
            for op, to, t, lo, hi in nfa.calls[u]:
                calls.append((op, to, nfa.forward(t) if op <= FREE else t, lo, hi))
            end = end or self._is_end[u]
            for v in nfa.eps[u]:
                if v not in seen:
                    seen.add(v)
                    todo.append(v)
        out = (tuple(byte_states), tuple(calls), end)
        self._eclose[s] = out
        return out

    def _push(self, k: int, frame: int, op: int) -> int:
        """Stack id of `frame` pushed on stack `k` by a call edge of kind `op`
        (only rule calls, `REG`, count towards the depth)."""
        key = (frame, k, op)
        sid = self._stack_ids.get(key)
        if sid is None:
            sid = len(self._stacks)
            self._stack_ids[key] = sid
            self._stacks.append((frame, k))
            self._depth.append(self._depth[k] + (op == REG))
        return sid

    def _close_flat(self, seeds: Iterable[int]) -> tuple[int, ...]:
        """`_close` for grammars without calls: stacks are always empty and
        `need` is 0 or INF, so closures are unions of precomputed ones."""
        eclose = self._eclose
        out: set[int] = set()
        accept = False
        for s in seeds:
            byte_states, _, end = eclose[s] or self._eclose_of(s)
            out.update(byte_states)
            accept = accept or end
        if accept:
            out.add(_ACCEPT)
        return tuple(sorted(out))

    def _close(self, seeds: Iterable[int]) -> tuple[int, ...]:
        """Closure of configurations `seeds` (ints stack*N + state), pruned to
        those that can still finish; includes `_ACCEPT` when accepting."""
        if self._flat:
            return self._close_flat(seeds)
        n, need, maxd, depth = self._n, self._need, self.max_depth, self._depth
        eclose = self._eclose
        out: set[int] = set()
        seen: set[int] = set()
        todo = list(seeds)
        while todo:
            cfg = todo.pop()
            if cfg in seen:
                continue
            seen.add(cfg)
            k, s = divmod(cfg, n)
            budget = maxd - depth[k]
            if need[s] > budget:
                continue
            byte_states, calls, end = eclose[s] or self._eclose_of(s)
            base = k * n
            for b in byte_states:
                if need[b] <= budget:
                    out.add(base + b)
            for op, to, ret, lo, hi in calls:
                if op == REG or op == FREE:
                    if need[to] < budget + (op == FREE) and need[ret] <= budget:
                        todo.append(self._push(k, ret, op) * n + to)
                    continue
                frame, parent = self._stacks[k]
                count = -2 - frame                # the loop's counter frame is on top (HEAD, INC)
                if op == ENTER:
                    todo.append(self._push(k, -2, ENTER) * n + to)
                elif op == HEAD:
                    if hi < 0 or count < hi:
                        todo.append(base + to)    # once more (dropped above if the item cannot finish)
                    if count >= lo:
                        todo.append(parent * n + ret)
                elif op == INC:
                    count = count + 1 if hi >= 0 else min(count + 1, lo)
                    todo.append(self._push(parent, -2 - count, ENTER) * n + to)
                else:
                    self._any_order(op, to, lo, hi, count, parent, base, todo)
            if end:
                if k == 0:
                    out.add(_ACCEPT)
                else:
                    ret, parent = self._stacks[k]
                    todo.append(parent * n + ret)
        return tuple(sorted(out))

    def _any_order(self, op: int, to: int, lo: int, hi: int, bits: int, parent: int, base: int,
                   todo: list[int]) -> None:
        """An `AnyOrder`'s or a `Counted`'s frame edge (see `grammars.fragments`); the set taken `bits`
        (the count of a `Counted`) is on top."""
        n = self._n
        if op == PICK:
            if not bits & hi:
                todo.append(self._push(parent, -2 - (bits | 1 << lo), ENTER) * n + to)
        elif op == CHECK:
            if (lo >= 0 and not bits >> lo & 1) or bits & hi == hi:
                todo.append(base + to)
        elif op == COUNT:
            count = bits >> COUNT_SHIFT
            if hi < 0 or count < hi:
                bits = (bits & ((1 << COUNT_SHIFT) - 1)) | min(count + 1, lo) << COUNT_SHIFT
                todo.append(self._push(parent, -2 - bits, ENTER) * n + to)
        elif op == LEAVE:
            if bits >> COUNT_SHIFT >= lo:
                todo.append(parent * n + to)
        elif op == CLEAR:
            if not bits & hi and (lo < 0 or bits >> COUNT_SHIFT < lo):
                todo.append(base + to)
        elif op == GATE:                          # a `Counted` frame: `bits` is the characters read
            if lo <= bits and (hi < 0 or bits <= hi):
                todo.append(base + to)
        elif op == TICK:
            if lo <= bits + 1 and (hi < 0 or bits + 1 <= hi):
                todo.append(self._push(parent, -2 - (bits + 1), ENTER) * n + to)
        elif op == EXIT:
            if bits >= lo:
                todo.append(parent * n + to)

    def _intern(self, configs: tuple[int, ...]) -> int:
        sid = self._ids.get(configs)
        if sid is not None:
            return sid
        sid = len(self._configs)
        if sid >= self.max_states:
            raise self._budget_error(configs)
        self._ids[configs] = sid
        self._configs.append(configs)
        self._rows.append(None)
        if sid >= len(self._accepting):
            self._grow()
        self._accepting[sid] = _ACCEPT in configs
        return sid

    def _frame(self, k: int) -> tuple[int, int]:
        """(frame, parent) of stack `k` (see `_stacks`)."""
        return self._stacks[k]

    def _budget_error(self, configs: Iterable[int]) -> StateBudgetError:
        """The state budget error, naming the part of the constraint that `configs` are in."""
        n, states = self._n, []
        for cfg in list(configs)[:64]:
            if cfg < 0:
                continue
            k, s = divmod(int(cfg), n)
            states.append(s)
            while k > 0:                          # and the calls they return to
                frame, k = self._frame(k)
                if frame >= 0:
                    states.append(frame)
        return StateBudgetError(self.max_states, "the automaton", where=self.nfa.origin(states))

    def _grow(self) -> None:
        cap = 2 * len(self._accepting)
        table = np.full((cap, self.num_classes), UNEXPANDED, dtype=np.int32)
        table[: len(self._table)] = self._table
        acc = np.zeros(cap, dtype=bool)
        acc[: len(self._accepting)] = self._accepting
        self._table, self._accepting = table, acc

    def _moves_of(self, b: int) -> tuple:
        out = tuple((self._classes_of(mask), t) for mask, t in self.nfa.edges[b])
        self._moves[b] = out
        return out

    def _expand_one(self, state: int) -> tuple[int, ...]:
        """Compute (and memoize) the row of `state`.

        Seeds are grouped by the class set of their move first (a state's
        configurations mostly move on a few shared sets, e.g. "any string
        character"), so the per-class work is over groups, not configurations.
        """
        n = self._n
        moves = self._moves
        groups: dict[tuple[int, ...], list[int]] = {}
        for cfg in self._configs[state]:
            if cfg < 0:
                continue
            k, b = divmod(cfg, n)
            base = k * n
            for classes, t in moves[b] or self._moves_of(b):
                seeds = groups.get(classes)
                if seeds is None:
                    groups[classes] = [base + t]
                else:
                    seeds.append(base + t)
        row = [DEAD] * self.num_classes
        if len(groups) == 1:
            ((classes, seeds),) = groups.items()
            sid = self._target(tuple(sorted(set(seeds))))
            for c in classes:
                row[c] = sid
        elif groups:
            # class -> indices of the groups moving on it; classes with equal index sets share a target
            members: dict[int, list[int]] = {}
            for gi, classes in enumerate(groups):
                for c in classes:
                    hit = members.get(c)
                    if hit is None:
                        members[c] = [gi]
                    else:
                        hit.append(gi)
            seed_lists = list(groups.values())
            targets: dict[tuple[int, ...], int] = {}
            for c, gis in members.items():
                key = tuple(gis)
                sid = targets.get(key)
                if sid is None:
                    if len(gis) == 1:
                        sid = self._target(tuple(sorted(set(seed_lists[gis[0]]))))
                    else:
                        sid = self._target(tuple(sorted(set().union(*(seed_lists[g] for g in gis)))))
                    targets[key] = sid
                row[c] = sid
        out = tuple(row)                   # a tuple of ints: the GC stops tracking it
        self._rows[state] = out
        self._table[state] = out
        return out

    def _target(self, seeds: tuple[int, ...]) -> int:
        """The state reached from configuration `seeds` (memoized), DEAD when none can finish."""
        sid = self._seed_memo.get(seeds)
        if sid is None:
            configs = self._close(seeds)
            sid = self._intern(configs) if configs else DEAD
            self._seed_memo[seeds] = sid
        return sid


def compile_dfa(grammar: Grammar, **options: int) -> LazyDFA:
    """Build the lazy DFA of `grammar` (options: `max_states`, `max_depth`).

    Example:
        >>> from grammars.ast import Grammar, literal
        >>> compile_dfa(Grammar({"start": literal(b"ok")})).matches(b"ok")
        True
    """
    return LazyDFA(grammar, **options)
