"""What a `TokenFSM` memoizes per DFA state: allowed ids, their next states, the packed mask.

`StateMasks` holds one state's answer; `TwinMasks` and `KeyTwinMasks` hold a
state's whose mask is another state's (`constrained.twins`,
`constrained.key_twins`), sharing its arrays. All three are plain records: the
`TokenFSM` that made them computes what they do not hold (they keep no
reference to it, so the cyclic GC never has to visit them; see
`constrained.untracked`).

Example:
    >>> import numpy as np
    >>> m = StateMasks(np.array([5, 2], np.int32), np.array([7, 9], np.int32), None, False,
    ...                np.zeros(1, np.int32), sorted=False)
    >>> m.lookup(2), m.lookup(3), m.ids.tolist()
    (9, -1, [2, 5])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from constrained.untracked import untrack

if TYPE_CHECKING:
    from constrained.slice_view import SliceView

__all__ = ["EMPTY", "KeyTwinMasks", "StateMasks", "TwinMasks"]

EMPTY = np.empty(0, dtype=np.int32)
# Unsorted ids up to this many are scanned for a token (as fast as a binary search);
# longer ones are scanned on their first `_SCANS` lookups, then sorted: a sort cost 250 us
# on average (maskbench-dev), a scan 5-40 us, and most states are left by one token.
_MAX_SCAN = 4096
_SCANS = 2
# What a `TwinMasks` holds besides arrays (counted in `held_bytes`).
_TWIN_BYTES = 200
class StateMasks:
    """Everything the FSM knows about one DFA state (memoized on first visit).

    Attributes:
        ids: sorted allowed non-EOS ids *not* covered by `view`.
        next: next DFA state of each of `ids`.
        view: when set, the slice tokens it allows are allowed too, with
            next states it knows (see `slice_view`).
        accepting: the text so far is a complete match (EOS allowed).
        bitmask: packed int32 mask of every allowed id, EOS included.

    `ids` and `next` are sorted on first use: a mask needs only the bitmask,
    and a token lookup in a short list is as fast as a scan (see `lookup`).
    """

    __slots__ = ("_pairs", "_sorted", "_scans", "view", "accepting", "bitmask", "allowed", "forced")

    def __init__(self, ids: np.ndarray, next: np.ndarray, view: SliceView | None, accepting: bool,
                 bitmask: np.ndarray, allowed: np.ndarray | None = None,
                 forced: tuple[int, ...] | None = None, sorted: bool = True) -> None:
        self._pairs = (ids, next)                 # swapped as one reference: readers never see a mix
        self._sorted = sorted
        self._scans = 0                           # lookups of long unsorted ids so far
        self.view = view
        self.accepting = accepting
        self.bitmask = bitmask
        self.allowed = allowed                    # full sorted id list, built on demand
        self.forced = forced
        untrack(self)                             # no cycle passes through one (`constrained.untracked`)

    @property
    def ids(self) -> np.ndarray:
        return self._sorted_pairs()[0]

    @property
    def next(self) -> np.ndarray:
        return self._sorted_pairs()[1]

    def lookup(self, token: int) -> int:
        """Next state of `token`, one of `ids` (-1 if it is not)."""
        ids, nxt = self._pairs
        if not self._sorted and (len(ids) <= _MAX_SCAN or self._scans < _SCANS):
            if len(ids) > _MAX_SCAN:
                self._scans += 1
            hit = np.flatnonzero(ids == token)
            return int(nxt[hit[0]]) if len(hit) else -1
        ids, nxt = self._sorted_pairs()
        i = int(np.searchsorted(ids, token))
        return int(nxt[i]) if i < len(ids) and ids[i] == token else -1

    def _sorted_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._sorted:
            self._pairs = _sort_pairs(*self._pairs)
            self._sorted = True
        return self._pairs

    @property
    def can_continue(self) -> bool:
        return len(self._pairs[0]) > 0 or (self.view is not None and bool(self.view.bitmask().any()))

    @property
    def nbytes(self) -> int:
        ids, nxt = self._pairs
        n = ids.nbytes + nxt.nbytes + self.bitmask.nbytes
        n += self.view.nbytes if self.view is not None else 0
        return n + (self.allowed.nbytes if self.allowed is not None else 0)


def _sort_pairs(ids: np.ndarray, nxt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ids, next states) ordered by id (ids are distinct)."""
    top = int(ids.max()) + 1 if len(ids) else 0
    if len(ids) * 16 < top:
        order = np.argsort(ids, kind="stable")
        return ids[order].astype(np.int32, copy=False), nxt[order].astype(np.int32, copy=False)
    # large sets: scatter into a dense row (O(vocab)) beats an O(n log n) sort
    dense = np.full(top, -1, dtype=np.int32)
    dense[ids] = nxt
    sorted_ids = np.flatnonzero(dense >= 0).astype(np.int32)
    return sorted_ids, dense[sorted_ids]


class TwinMasks(StateMasks):
    """The `StateMasks` of a state whose mask is its twin's (see `constrained.twins`).

    The bitmask, the allowed ids and `accepting` are the twin's, shared (never
    copied); a token's next state is the twin's with the counts moved, exact
    (`TokenFSM._twin_next`). Every allowed token's next state at once
    (`TokenFSM.transitions`) is computed from the state itself. It holds no
    reference to its `TokenFSM` (it is untracked by the cyclic GC, which would
    then never free the FSM): the FSM asks it.
    """

    __slots__ = ("state", "_twin", "source", "shift")

    def __init__(self, twin: StateMasks, source: int, state: int) -> None:
        super().__init__(EMPTY, EMPTY, None, twin.accepting, twin.bitmask, allowed=twin.allowed)
        self.state, self._twin = state, twin
        self.source = source                      # the twin's state (see `TokenFSM.mask_key`)
        # (the `CounterTwins` it was found with, `CounterTwins.shift` from the twin), once asked
        self.shift: tuple | bool = False
        self._sorted = False                      # `_pairs`: not computed yet (`TokenFSM._all_pairs`)

    def lookup(self, token: int) -> int:
        raise TypeError("a TwinMasks' next states come from its TokenFSM (`_twin_next`)")

    def _sorted_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        raise TypeError("a TwinMasks' transitions come from its TokenFSM (`_all_pairs`)")

    @property
    def can_continue(self) -> bool:
        return self._twin.can_continue

    @property
    def nbytes(self) -> int:
        ids, nxt = self._pairs                    # (the bitmask and ids are the twin's)
        return ids.nbytes + nxt.nbytes + _TWIN_BYTES


class KeyTwinMasks(StateMasks):
    """The `StateMasks` of a state inside an `any_order` object's key whose mask is another's
    but for the tokens holding a quote (see `constrained.key_twins`).

    `bitmask` is its own (the other's, with its own walk of the quote tokens); `ids`
    and `next` are those quote tokens'. A token's next state is walked from the
    state itself (`TokenFSM._key_twin_next`); every allowed token's at once
    (`TokenFSM.transitions`) comes from computing the state's masks in full.
    """

    __slots__ = ("state", "source", "_full")

    def __init__(self, ids: np.ndarray, next: np.ndarray, bitmask: np.ndarray, state: int, source: int) -> None:
        super().__init__(ids, next, None, False, bitmask, sorted=False)
        self.state = state
        self.source = source                      # the state whose mask it shares
        self._full: tuple[np.ndarray, np.ndarray] | None = None   # `TokenFSM._all_pairs`, once asked

    @property
    def can_continue(self) -> bool:
        return bool(self.bitmask.any())
