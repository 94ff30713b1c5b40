"""How one DFA state sees a slice: the state after each character, and the capacity.

From a DFA state `q` inside a JSON string, each slice character leads to the
same next state (up to equivalence), and so on: `q -> q1 -> q2 ...`.  Plain
strings loop (`q1 == q`); `minLength` enters a loop after a few characters;
`maxLength` counts until a state where *every* slice character is rejected
(the capacity).  A `SliceView` records that chain, one row of DFA states per
character count (column 0: between characters, column a: inside a character
in slice state a), so that every slice token's next state is a lookup and its
permission a comparison of its character count with the capacity.

The first character may also be irregular on a few ASCII bytes: the start of
a JSON key that must differ from the declared property names sends `n` of
`"name"` elsewhere.  Tokens starting with such *excluded* bytes are walked
normally instead.

Example:
    >>> from grammars.regex import regex_grammar
    >>> from grammars.dfa import LazyDFA
    >>> from constrained.vocab_trie import VocabTrie
    >>> from constrained.slices import build_slice, byteset_table
    >>> dfa = LazyDFA(regex_grammar("[a-z]{0,3}"))
    >>> trie = VocabTrie.build([b"ab", b"abcd", b"x"])
    >>> sl = build_slice("az", byteset_table(sum(1 << b for b in range(97, 123))), trie, np.ones(3, bool), 1)
    >>> view = slice_view(dfa, dfa.initial, sl, {}, np.frombuffer(b"aax", np.uint8))
    >>> view.capacity, view.allows(0), view.allows(1)
    (3, True, False)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from constrained import fsm_jit
from constrained.equivalence import equivalent
from constrained.slices import Slice, follows_utf8
from constrained.untracked import untrack

__all__ = ["SliceView", "find_view", "slice_view", "MAX_EXCLUDED"]

# At most this many irregular ASCII first bytes are walked instead of sliced.
MAX_EXCLUDED = 40
_CLOSED = "closed"
_MISSING = object()
# Character levels at which the set of checked slice moves may shrink.
_BUCKETS = (0, 1, 8, 24, 48, 96)


def _bucket(level: int) -> int:
    """The deepest bucket boundary <= `level` (its move set includes the level's)."""
    out = 0
    for b in _BUCKETS:
        if b <= level:
            out = b
    return out


@dataclass(eq=False)
class SliceView:
    """The chain of DFA states one state `q` follows through a slice (see module docstring).

    Attributes:
        slice: the slice.
        rows: int32[n_rows + 1, n_slice_states]; row j holds the states after
            j complete characters; the last row is all -1 (past the capacity).
        cycle: (start, period) when rows repeat from `start` on, else None.
        capacity: most characters a token may start (>= slice.max_started: no limit).
        excluded: bool[256] first bytes walked normally, or None.
        first: uint8[vocab size], each token's first byte.
    """

    slice: Slice
    rows: np.ndarray
    cycle: tuple[int, int] | None
    capacity: int
    excluded: np.ndarray | None
    first: np.ndarray

    def row_index(self, level: np.ndarray) -> np.ndarray:
        """Row of `rows` for each count of complete characters."""
        if self.cycle is not None:
            start, period = self.cycle
            return np.where(level < start, level, start + (level - start) % period)
        return np.minimum(level, len(self.rows) - 1)

    def allows(self, token: int) -> bool:
        sl = self.slice
        if not sl.member[token] or sl.started[token] > self.capacity:
            return False
        return self.excluded is None or not self.excluded[self.first[token]]

    def bitmask(self) -> np.ndarray:
        """Packed mask of the slice tokens this view allows."""
        return self.slice.member_bitmask(self.capacity, self.excluded, self.first)

    def next_state(self, token: int) -> int:
        """DFA state after slice token `token` (call only when `allows(token)`)."""
        sl = self.slice
        row = int(self.row_index(np.array(sl.complete[token])))
        return int(self.rows[row, sl.end[token]])

    def exit_frontier(self) -> tuple[np.ndarray, np.ndarray]:
        """(exit nodes, DFA state just before each exit's byte), dead ones dropped."""
        sl = self.slice
        states = self.rows.ravel()[sl.exit_cells(self.cycle, len(self.rows), self.row_index)]
        if self.excluded is not None:
            states = np.where(self.excluded[sl.exit_first], -1, states)
        keep = states >= 0
        return sl.exits[keep], states[keep]

    def __post_init__(self) -> None:
        untrack(self)             # it refers to arrays and its slice only (see `constrained.untracked`)

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + (self.excluded.nbytes if self.excluded is not None else 0)


def slice_view(dfa, q: int, sl: Slice, memo: dict, first: np.ndarray) -> SliceView | None:
    """The `SliceView` of state `q`, or None when `q` does not follow the slice regularly.

    `memo` caches per-state character steps across calls (one dict per FSM);
    `first` holds each token's first byte. The native DFA computes the whole chain in
    one kernel call (`JitDFA.view_rows`), without the memo.
    """
    native = getattr(dfa, "view_rows", None)
    if native is not None and fsm_jit.load_kernels() is not None:
        got = native(q, sl, MAX_EXCLUDED, _BUCKETS)
        if got is None:
            return None
        if got is not False:
            rows, cycle, capacity, excluded = got
            return SliceView(sl, rows, cycle, capacity, excluded, first)
    key = (q, sl.name, "first")
    level0 = memo.get(key, _MISSING)
    if level0 is _MISSING:
        level0 = memo[key] = _level(dfa, q, sl, 0, lenient=True)
    if level0 is None or level0 is _CLOSED:
        return None
    reps, succ, excluded = level0
    rows = [reps]
    # row 0 may exclude first bytes; later characters must not, so then it is no loop target
    index = {q: 0} if excluded is None else {}
    cycle, capacity = None, sl.max_started
    limit = len(sl.used_from) - 1                       # deeper levels see no slice move
    while len(rows) <= limit:
        if succ in index:                               # back to an earlier row: a loop
            start = index[succ]
            cycle = (start, len(rows) - start)
            break
        index[succ] = len(rows)
        # checked with the moves of a few level buckets, so that the same state met
        # at a slightly different depth (next token, next request) reuses the step
        bucket = _bucket(len(rows))
        key = (succ, sl.name, bucket)
        step = memo.get(key, _MISSING)
        if step is _MISSING:
            step = memo[key] = _level(dfa, succ, sl, bucket, lenient=False)
        if step is None:
            return None
        if step is _CLOSED:                             # a counter ran out: nothing more fits
            closed = np.full(len(sl.table), -1, dtype=np.int32)
            closed[0] = succ
            rows.append(closed)
            capacity = len(rows) - 1
            break
        rows.append(step[0])
        succ = step[1]
    rows.append(np.full(len(sl.table), -1, dtype=np.int32))
    return SliceView(sl, np.array(rows, dtype=np.int32), cycle, capacity, excluded, first)


def _level(dfa, q: int, sl: Slice, level: int, lenient: bool):
    """One character from `q`: (states inside the character, next state, excluded first bytes).

    Only the slice moves tokens make at character level >= `level` are
    checked.  Returns `_CLOSED` when every such first byte is rejected, None
    when the slice is followed irregularly.  `lenient` lets single-byte
    characters that go elsewhere be excluded (only for the token's first character).
    """
    kernels = fsm_jit.load_kernels()
    if kernels is not None:
        out = _level_jit(kernels.level, dfa, q, sl, level, lenient)
        if out is not _FALLBACK:
            return out
    return _level_numpy(dfa, q, sl, level, lenient)


_FALLBACK = object()


def _level_jit(kernel, dfa, q: int, sl: Slice, level: int, lenient: bool):
    """`_level` by the compiled kernel; `_FALLBACK` when an equivalence proof is needed."""
    moves = sl.flat_moves_at(level)
    n = len(sl.table)
    work = np.zeros(2 * n + 1 + fsm_jit.META_SIZE + fsm_jit.TAIL, dtype=np.int32)
    first_bytes = sl.first_bytes_at(level)
    check = getattr(dfa, "level_check", None)      # the native DFA computes its rows in the kernel
    out = check(q, lenient, MAX_EXCLUDED, moves, first_bytes, work) if check is not None else None
    while out is None or out == fsm_jit.NEED_ROW:
        # both read again after each row: a row that builds a lazy rule may split the byte classes
        out = kernel(q, lenient, MAX_EXCLUDED, moves, first_bytes, dfa.byte_class, dfa.table, work)
        if out != fsm_jit.NEED_ROW:
            break
        # computed in the order the numpy check computes rows, so state ids agree
        dfa.expand((int(work[2 * n + 1 + fsm_jit.NEED]),))
    if out == fsm_jit.OK:
        meta = 2 * n + 1
        excluded = None
        if work[meta + fsm_jit.EXCL]:
            excluded = work[meta + fsm_jit.META_SIZE:meta + fsm_jit.META_SIZE + 256].astype(bool)
        return work[:n].copy(), int(work[meta + fsm_jit.SUCC]), excluded
    if out == fsm_jit.CLOSED:
        return _CLOSED
    return None if out == fsm_jit.NONE else _FALLBACK


def _level_numpy(dfa, q: int, sl: Slice, level: int, lenient: bool):
    """`_level` in numpy (see there)."""
    moves = sl.moves_at(level)
    row = dfa.transitions(q)                            # int32[256], memoized by the DFA
    if (row[sl.first_bytes_at(level)] < 0).all():
        return _CLOSED
    reps = np.full(len(sl.table), -1, dtype=np.int32)
    reps[0] = q
    succ, excluded = -1, None
    todo = [0]
    while todo:
        a = todo.pop()
        row = dfa.transitions(int(reps[a]))
        for b, byte_ids in moves[a]:
            targets = row[byte_ids]
            if b == 0 and a == 0 and lenient:
                if targets[0] >= 0 and (targets == targets[0]).all():
                    majority = int(targets[0])          # the common case: no odd first byte
                else:
                    if (targets < 0).sum() > MAX_EXCLUDED:
                        return None                     # e.g. a structural state: few bytes live
                    values, counts = np.unique(targets[targets >= 0], return_counts=True)
                    if not len(values):
                        return None
                    majority = int(values[counts.argmax()])
                odd = byte_ids[targets != majority]
                if len(odd) > MAX_EXCLUDED or (succ >= 0 and not _same(dfa, succ, majority)):
                    return None
                succ = majority
                if len(odd):
                    excluded = np.zeros(256, dtype=bool)
                    excluded[odd] = True
                continue
            if targets.min() < 0:
                return None
            if b == 0:
                if succ < 0:
                    succ = int(targets[0])
                if not _all_same(dfa, targets, succ):
                    return None
                continue
            if reps[b] < 0:
                reps[b] = targets[0]
                todo.append(b)
            if not _all_same(dfa, targets, int(reps[b])):
                return None
    if succ < 0:
        return None
    return reps, succ, excluded


def _same(dfa, a: int, b: int) -> bool:
    return a == b or equivalent(dfa, a, b)


def _all_same(dfa, targets: np.ndarray, rep: int) -> bool:
    if (targets == rep).all():
        return True
    return all(equivalent(dfa, rep, other) for other in set(targets.tolist()) - {rep})


# A byte-set slice needs at least this many ASCII bytes going to one state
# (fewer: the plain walk is cheap, and building a new slice costs 1-3 ms).
_MIN_BYTESET_SLICE = 8


def find_view(dfa, index, state: int, steps: dict) -> SliceView | None:
    """The first slice `state` of `dfa` follows regularly (UTF-8 slices, then its ASCII byte set),
    over the `VocabIndex` `index`; `steps` memoizes the levels walked (`slice_view`'s `memo`)."""
    first = index.first_byte
    dead = dfa.transitions(state) < 0
    live_ascii = 128 - int(np.count_nonzero(dead[:128]))
    if live_ascii < _MIN_BYTESET_SLICE:       # e.g. a structural state, a few bytes live: when every
        live = 256 - int(np.count_nonzero(dead))                  # check below fails, say so at once
        if all(len(sl.first_ascii) - live > MAX_EXCLUDED for sl in index.slices):
            return None
    for sl in index.slices:
        if np.count_nonzero(dead[sl.first_ascii]) > MAX_EXCLUDED:
            continue                          # e.g. a structural state: `slice_view` says None
        view = slice_view(dfa, state, sl, steps, first)
        if view is not None:
            return view
    # the ASCII bytes leading to the most common next state, e.g. `[a-z]` in `[a-z]+`
    row = dfa.transitions(state)[:128]
    live = row[row >= 0]
    if len(live) < _MIN_BYTESET_SLICE:
        return None
    target, count = _majority(live)
    if count < _MIN_BYTESET_SLICE:
        return None
    inner = row == target
    mask = int.from_bytes(np.packbits(inner, bitorder="little").tobytes(), "little")
    def pays() -> bool:
        # a new slice costs 0.3-1 ms: worth it only if a second character may follow
        # (a loop or a long counter), not for a single digit the walk reads in microseconds
        return not (dfa.transitions(int(target))[:128][inner] < 0).any()

    if follows_utf8(dfa, state, int(target)):
        # every character but a few ASCII ones (a search pattern's first byte): a UTF-8
        # slice covers the ~30k non-ASCII tokens too, which the byte set leaves to the walk
        sl = index.cached_utf8_slice(mask) or (index.utf8_slice(mask) if pays() else None)
        view = slice_view(dfa, state, sl, steps, first) if sl is not None else None
        if view is not None:
            return view
    sl = index.cached_byteset_slice(mask)
    if sl is None:
        if not pays():
            return None
        sl = index.byteset_slice(mask)
    return slice_view(dfa, state, sl, steps, first)


def _majority(values: np.ndarray) -> tuple[int, int]:
    """The most frequent of `values` (the smallest on ties) and its count; (-1, 0) if empty."""
    if not len(values):
        return -1, 0
    lo = int(values.min())
    if int(values.max()) - lo > 4096:
        uniq, counts = np.unique(values, return_counts=True)
        return int(uniq[counts.argmax()]), int(counts.max())
    counts = np.bincount(values - lo)                 # cheaper than np.unique on a few states
    i = int(counts.argmax())
    return lo + i, int(counts[i])
