"""Vocabulary slices: answer "inside a string" states without walking 100k tokens.

Most decoding steps of a JSON document are inside a string, where nearly the
whole vocabulary is allowed and the DFA simply loops on itself.  Walking the
trie there touches every node.  Following llguidance, a *slice* is a small
byte language (e.g. JSON string characters) with, precomputed once per
vocabulary:

- the tokens made only of slice characters (`member`, as a ready bitmask);
- the trie nodes where a prefix first *leaves* the slice language (`exits`).

When, from a DFA state `q`, every slice character leads to one state (up to
equivalence) and so on character after character (a loop, or a counter such
as `maxLength` that ends where every character is rejected; see
`slice_view`), then every slice token is allowed (up to the counter's
capacity) and its next state is known from its character count and how it
ends; every trie node above an exit is alive in a known state.  So a visit is
one bitmask copy plus a walk that starts at the exits, a few thousand nodes
instead of a few hundred thousand.

Three kinds of slices exist: UTF-8 ones built with the vocabulary (JSON string
content, regex `.`); the same minus a few more ASCII bytes, derived from them
the first time a state loops on such a set (a search pattern `[0-9]` inside a
string loops on every character but the digits); and ASCII byte-set ones
(`[a-z ]*`, digits) built the first time a state loops on that byte set.

Example:
    >>> table = utf8_table(excluded=b'"\\\\' + bytes(range(0x20)))
    >>> int(table[0, ord("a")]), int(table[0, ord('"')]), int(table[0, 0xC3]), int(table[1, 0xA9])
    (0, -1, 1, 0)
    >>> len(table)   # one state per UTF-8 branch and position
    19
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from constrained import fsm_jit
from constrained.vocab_trie import VocabTrie
from grammars.ast import MAX_CODEPOINT
from grammars.utf8 import utf8_sequences

__all__ = ["Slice", "UTF8_SLICES", "utf8_table", "byteset_table", "build_slice", "build_byteset_slice",
           "derive_utf8_slice", "follows_utf8", "pack_bits", "ids_bitmask"]

# name -> excluded ASCII bytes, in the order they are tried.
UTF8_SLICES: dict[str, bytes] = {
    # JSON string contents (no quote, backslash or control character): tried
    # first, as most states of JSON documents are inside strings
    "json_string": b'"\\' + bytes(range(0x20)),
    "line": b"\n",                                    # regex `.`: any character but newline
}

# Member bitmasks cached per slice (one per counter capacity / excluded first bytes).
_MAX_CACHED_MASKS = 256


def utf8_table(excluded: bytes = b"") -> np.ndarray:
    """int16[n, 256] DFA of sequences of UTF-8 characters minus the `excluded` ASCII bytes.

    State 0 is the start and "between characters".  The other states follow
    the canonical split of the non-ASCII code points into byte-range branches
    (`grammars.utf8.utf8_sequences`), one state per branch and position: the
    grammars build their UTF-8 automata from the same split, so a DFA state
    inside a character maps to exactly one slice state and no equivalence
    proofs are needed.
    """
    branches = utf8_sequences(0x80, MAX_CODEPOINT)
    t = np.full((1 + sum(len(br) - 1 for br in branches), 256), -1, dtype=np.int16)
    t[0, :0x80] = 0
    t[0, list(excluded)] = -1
    state = 0
    for br in branches:
        prev = 0
        for k, (lo, hi) in enumerate(br):
            nxt = 0 if k == len(br) - 1 else state + 1
            t[prev, lo:hi + 1] = nxt
            if nxt:
                state = prev = nxt
    return t


def byteset_table(mask: int) -> np.ndarray:
    """int16[1, 256] one-state DFA of strings over the bytes of `mask` (each byte is a character)."""
    t = np.full((1, 256), -1, dtype=np.int16)
    t[0, [b for b in range(256) if mask >> b & 1]] = 0
    return t


@dataclass(frozen=True, eq=False)
class Slice:
    """Slice tokens and exit nodes of one slice language over one vocabulary trie.

    A slice token may end inside a multi-byte character (byte-level BPE has
    thousands of such tokens); `end` records the slice automaton state it ends
    in, so that a state looping on the slice knows where each one leads.

    Attributes:
        name: e.g. "json_string", or "bytes:<hex mask>" for byte-set slices.
        table: the slice automaton, int16[n_states, 256] (-1: no move; 0 is
            the start and "between characters").
        end: int8[vocab size], slice state after the token; -1 if not a slice token.
        complete: int16[vocab size], complete characters in the token (read for
            slice tokens only: other entries are unspecified).
        started: int16[vocab size], characters the token starts (complete or
            not; slice tokens only).
        member: bool[vocab size], `end >= 0`.
        bitmask: packed int32 mask of the slice tokens.
        max_started: the largest `started` of a slice token.
        exits: trie nodes whose prefix leaves the slice language at their own
            byte; `exit_from` / `exit_level` are the slice state / complete
            characters just before that byte, `exit_first` the prefix's first byte.
        used_from: bool[levels, n_states, 256], slice moves tokens make at
            character level >= l (the last level repeats for deeper ones).
        base: for a slice derived from another by excluding more ASCII bytes
            (`derive_utf8_slice`), that slice: its moves, minus those bytes, are these.
    """

    name: str
    table: np.ndarray
    end: np.ndarray
    complete: np.ndarray
    started: np.ndarray
    member: np.ndarray
    bitmask: np.ndarray
    max_started: int
    exits: np.ndarray
    exit_from: np.ndarray
    exit_level: np.ndarray
    exit_first: np.ndarray
    used_from: np.ndarray
    _masks: dict = field(default_factory=dict, repr=False)
    _moves_at: dict = field(default_factory=dict, repr=False)
    _exit_cells: dict = field(default_factory=dict, repr=False)
    base: "Slice | None" = field(default=None, repr=False)

    @cached_property
    def moves(self) -> list[list[tuple[int, np.ndarray]]]:
        """Per slice state: (next slice state, bytes leading there) groups."""
        if self.base is not None:
            return self._minus_excluded(self.base.moves)
        return [[(int(b), np.flatnonzero(row == b)) for b in np.unique(row[row >= 0])]
                for row in self.table]

    def _minus_excluded(self, moves: list[list[tuple[int, np.ndarray]]]) -> list[list[tuple[int, np.ndarray]]]:
        """The base's `moves` (or `moves_at`) without the bytes this slice excludes from the
        start state (the tables differ only there), cheaper than recomputing them."""
        row = self.table[0]
        start = [(b, ids[row[ids] >= 0]) for b, ids in moves[0]]
        return [[(b, ids) for b, ids in start if len(ids)]] + moves[1:]

    @cached_property
    def first_ascii(self) -> np.ndarray:
        """Bytes that are one whole character from the start at level 0 (the first
        character's group that `slice_view` lets a state partly exclude)."""
        groups = [ids for b, ids in self.moves_at(0)[0] if b == 0]
        return groups[0] if groups else np.empty(0, np.int64)

    def moves_at(self, level: int) -> list[list[tuple[int, np.ndarray]]]:
        """`moves` restricted to the moves tokens make at character level >= `level` (cached)."""
        level = min(level, len(self.used_from) - 1)
        out = self._moves_at.get(level)
        if out is None:
            if self.base is not None:               # same `used_from` as the base
                out = self._moves_at[level] = self._minus_excluded(self.base.moves_at(level))
                return out
            used = self.used_from[level]
            out = [[(b, ids[used[a, ids]]) for b, ids in groups if used[a, ids].any()]
                   for a, groups in enumerate(self.moves)]
            self._moves_at[level] = out
        return out

    def flat_moves_at(self, level: int) -> np.ndarray:
        """`moves_at(level)` flattened for the compiled level check (`fsm_jit.flatten_moves`, cached)."""
        level = min(level, len(self.used_from) - 1)
        key = ("flat", level)
        out = self._moves_at.get(key)
        if out is None:
            out = self._moves_at[key] = fsm_jit.flatten_moves(self.moves_at(level))
        return out

    def first_bytes_at(self, level: int) -> np.ndarray:
        """The bytes a character can start with at character level >= `level` (cached)."""
        level = min(level, len(self.used_from) - 1)
        key = ("first", level)
        out = self._moves_at.get(key)
        if out is None:
            groups = self.moves_at(level)[0]
            out = np.concatenate([ids for _, ids in groups]) if groups else np.empty(0, np.int64)
            self._moves_at[key] = out
        return out

    def packed_levels(self, buckets: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        """`flat_moves_at` and `first_bytes_at` of each level bucket (those up to the last
        level), concatenated, with their offsets: the whole chain of a `slice_view` for the
        native DFA's kernel (`walk_kernels.view_native`, cached)."""
        key = ("packed", buckets)
        out = self._moves_at.get(key)
        if out is None:
            levels = [b for b in buckets if b <= len(self.used_from) - 1] or [0]
            moves = [self.flat_moves_at(b) for b in levels]
            first = [self.first_bytes_at(b).astype(np.int64) for b in levels]
            out = self._moves_at[key] = (
                np.concatenate(moves).astype(np.int32), np.cumsum([0] + [len(m) for m in moves]).astype(np.int64),
                np.concatenate(first), np.cumsum([0] + [len(f) for f in first]).astype(np.int64),
                np.array(levels, np.int64))
        return out

    def exit_cells(self, cycle: tuple[int, int] | None, n_rows: int, row_index) -> np.ndarray:
        """Flat index into a view's `rows` (`n_rows` x n_states) of each exit's state before its byte.

        It depends only on the view's shape (`cycle`, `n_rows`; `row_index` maps
        character counts to rows), so views of the same shape share it (cached).
        """
        key = (cycle, n_rows)
        out = self._exit_cells.get(key)
        if out is None:
            out = row_index(self.exit_level) * len(self.table) + self.exit_from
            if len(self._exit_cells) >= _MAX_CACHED_MASKS:
                self._exit_cells.pop(next(iter(self._exit_cells)))
            self._exit_cells[key] = out
        return out

    def member_bitmask(self, capacity: int, excluded: np.ndarray | None, first: np.ndarray) -> np.ndarray:
        """Packed mask of slice tokens starting <= `capacity` characters, minus those whose
        first byte is flagged in `excluded` (bool[256]); `first` is the vocabulary's first bytes."""
        capacity = min(capacity, self.max_started)
        key = (capacity, None if excluded is None else excluded.tobytes())
        mask = self._masks.get(key)
        if mask is None:
            if excluded is None and capacity == self.max_started:
                return self.bitmask
            flags = self.member & (self.started <= capacity)
            if excluded is not None:
                flags &= ~excluded[first]
            mask = pack_bits(flags, len(self.bitmask))
            if len(self._masks) >= _MAX_CACHED_MASKS:
                self._masks.pop(next(iter(self._masks)))
            self._masks[key] = mask
        return mask

    @property
    def nbytes(self) -> int:
        arrays = (self.table, self.end, self.complete, self.started, self.member, self.bitmask,
                  self.exits, self.exit_from, self.exit_level, self.exit_first, self.used_from)
        if self.base is not None:                   # arrays shared with the base are counted there
            shared = {id(a) for a in (self.base.complete, self.base.started, self.base.used_from)}
            arrays = tuple(a for a in arrays if id(a) not in shared)
        cached = list(self._masks.values()) + list(self._exit_cells.values())
        return sum(a.nbytes for a in arrays) + sum(m.nbytes for m in cached)


def build_slice(name: str, table: np.ndarray, trie: VocabTrie, usable: np.ndarray, n_words: int,
                states: tuple[np.ndarray, np.ndarray] | None = None) -> Slice:
    """Slice tokens (among `usable`) and exit nodes of the language of `table` over `trie`.

    `states` is `trie.node_states(table)` when the caller has it already.
    """
    inside, count = states if states is not None else trie.node_states(table.astype(np.int32))
    size = len(usable)
    end = np.full(size, -1, dtype=np.int8)
    complete = np.zeros(size, dtype=np.int16)
    end[trie.term_ids] = inside[trie.term_nodes]
    complete[trie.term_ids] = count[trie.term_nodes]
    end[~usable] = -1
    member = end >= 0
    started = complete + (end > 0)
    parent = trie.parents
    has_parent = parent >= 0
    before = np.where(has_parent, inside[np.maximum(parent, 0)], 0)
    exits = np.flatnonzero((inside < 0) & (before >= 0)).astype(np.int32)
    parent_count = np.where(has_parent, count[np.maximum(parent, 0)], 0)
    max_started = int(started[member].max()) if member.any() else 0
    return Slice(name, table, end, complete, started, member, pack_bits(member, n_words), max_started,
                 exits, before[exits].astype(np.int32), parent_count[exits].astype(np.int32),
                 trie.root_byte[exits], _moves_used(inside, before, parent_count, trie.byte, len(table)))


def build_byteset_slice(mask: int, trie: VocabTrie, usable: np.ndarray, n_words: int) -> Slice:
    """`build_slice(f"bytes:{mask:x}", byteset_table(mask), ...)`, for an ASCII byte set, in ~1/10 the time.

    Every byte is a character, so a prefix is inside the slice iff all its
    bytes are in `mask`, its character count is its length, and it leaves the
    slice at its first byte outside `mask`.
    """
    if mask >> 128:
        raise ValueError(f"byte-set slices are over ASCII bytes, got mask {mask:#x}")
    kernels = fsm_jit.load_kernels()
    if kernels is not None:
        member, complete, exits, used, max_started = _byteset_parts_jit(kernels.byteset, mask, trie, usable)
    else:
        member, complete, exits, used = _byteset_parts(mask, trie, usable)
        max_started = int(complete[member].max()) if member.any() else 0
    end = member.astype(np.int8) - 1                           # 0 (the one slice state) or -1
    used_from = np.logical_or.accumulate(used[::-1], axis=0)[::-1].copy()
    return Slice(f"bytes:{mask:x}", byteset_table(mask), end, complete, complete.copy(), member,
                 pack_bits(member, n_words), max_started, exits, np.zeros(len(exits), dtype=np.int32),
                 trie.depth[exits].astype(np.int32), trie.root_byte[exits], used_from)


def _byteset_parts(mask: int, trie: VocabTrie, usable: np.ndarray):
    """(member, complete, exits, used) of a byte-set slice, in numpy (see `build_byteset_slice`).

    A prefix's bytes are all in `mask` iff one test on the trie's precomputed
    `ascii_paths` says so.
    """
    lo, hi, wide = trie.ascii_paths
    out_lo, out_hi = np.uint64(~mask & (2**64 - 1)), np.uint64(~(mask >> 64) & (2**64 - 1))
    inside = ~wide & ((lo & out_lo) == 0) & ((hi & out_hi) == 0)
    depth = trie.depth
    parent = trie.parents
    size = len(usable)
    ids, tlo, thi, twide, tlen = trie.token_paths
    tok_inside = ~twide & ((tlo & out_lo) == 0) & ((thi & out_hi) == 0)
    member = np.zeros(size, dtype=bool)
    member[ids[tok_inside]] = True
    member &= usable
    complete = np.zeros(size, dtype=np.int16)
    complete[ids[tok_inside]] = tlen[tok_inside]
    complete[~member] = 0
    before_inside = np.ones(len(inside), dtype=bool)           # roots: "before" is the start state
    before_inside[trie.n_roots:] = inside[parent[trie.n_roots:]]
    exits = np.flatnonzero(~inside & before_inside).astype(np.int32)
    # moves tokens make at character level >= l: byte b at level l is used iff an
    # inside node at depth l spells b (cf. `_moves_used`)
    nodes = np.flatnonzero(inside)
    has_child = trie.child_hi[nodes] > trie.child_lo[nodes]
    levels = (int(depth[nodes[has_child]].max()) + 1 if has_child.any() else 0) + 2
    used = np.zeros((levels, 1, 256), dtype=bool)
    used[depth[nodes], 0, trie.byte[nodes]] = True
    return member, complete, exits, used


def _byteset_parts_jit(kernel, mask: int, trie: VocabTrie, usable: np.ndarray):
    """`_byteset_parts` by the compiled kernel, and the largest character count of a member."""
    in_mask = np.array([mask >> b & 1 for b in range(256)], dtype=np.bool_)
    size = len(usable)
    member = np.zeros(size, dtype=bool)
    complete = np.zeros(size, dtype=np.int16)
    exits = np.empty(trie.n_nodes, dtype=np.int32)
    used = np.zeros((len(trie.level_lo) + 2, 1, 256), dtype=bool)
    n_exits, levels, longest = kernel(in_mask, trie.n_roots, trie.byte, trie.child_lo, trie.child_hi,
                                      trie.term_lo, trie.term_hi, trie.term_ids, trie.depth, usable,
                                      member, complete, exits, used)
    return member, complete, exits[:n_exits].copy(), used[:levels], int(longest)


def derive_utf8_slice(base: Slice, states: tuple[np.ndarray, np.ndarray], excluded: bytes, trie: VocabTrie,
                      by_byte: tuple[np.ndarray, np.ndarray], n_words: int) -> Slice:
    """The UTF-8 slice minus the ASCII bytes `excluded` from a UTF-8 slice `base` that
    excludes a subset of them, in ~1/20 the time of `build_slice`.

    An ASCII byte is a whole character, so a prefix is inside the new slice iff
    it is inside `base` and holds none of the extra excluded bytes (one test on
    the trie's `ascii_paths`), in the same slice state with the same count.
    Base tokens holding such a byte drop out; base exits below one drop out;
    the new exits are the extra bytes read between characters by a prefix
    still inside.  `states` is the base's `trie.node_states`, `by_byte` is
    `nodes_by_byte(trie)`.  `used_from` is the base's: a superset of the moves
    the new slice's tokens make, so `slice_view` checks a few moves more than needed.
    """
    drop = np.zeros(256, dtype=bool)
    drop[list(excluded)] = True
    if drop[0x80:].any() or (base.table[0] < 0)[:0x80][~drop[:0x80]].any():
        raise ValueError(f"base slice {base.name!r} excludes bytes that {excluded!r} does not")
    extra = np.flatnonzero(drop & (base.table[0] >= 0)).tolist()
    table = base.table.copy()
    table[0, extra] = -1
    x_lo = np.uint64(sum(1 << b for b in extra if b < 64))
    x_hi = np.uint64(sum(1 << (b - 64) for b in extra if b >= 64))
    lo, hi, _ = trie.ascii_paths
    ids, tlo, thi, _, _ = trie.token_paths
    hit = (tlo & x_lo) != 0 if x_lo else np.zeros(len(ids), dtype=bool)
    if x_hi:
        hit |= (thi & x_hi) != 0
    dropped = ids[hit]
    dropped = dropped[base.member[dropped]]
    member, end = base.member.copy(), base.end.copy()
    member[dropped], end[dropped] = False, -1
    bitmask = base.bitmask & ~ids_bitmask(dropped, n_words)
    # character counts of the remaining members are the base's (shared: only members' are read)
    complete, started = base.complete, base.started
    max_started = base.max_started
    if len(dropped) and int(started[dropped].max()) == max_started:   # a longest token dropped out
        max_started = int(started[member].max()) if member.any() else 0

    def clean(nodes: np.ndarray) -> np.ndarray:        # prefix holds no extra byte (-1: the empty prefix)
        safe = np.maximum(nodes, 0)
        return (nodes < 0) | (((lo[safe] & x_lo) | (hi[safe] & x_hi)) == 0)

    inside, count = states
    parent = trie.parents
    keep = clean(parent[base.exits])
    order, bounds = by_byte
    cand = np.concatenate([order[bounds[b]:bounds[b + 1]] for b in extra]) if extra else base.exits[:0]
    par = parent[cand]
    safe = np.maximum(par, 0)
    # an extra byte read between characters (else the base already exits there)
    new = clean(par) & ((par < 0) | (inside[safe] >= 0)) & (inside[cand] >= 0)
    cand, safe, root = cand[new], safe[new], par[new] < 0
    exits = np.concatenate((base.exits[keep], cand.astype(np.int32)))
    exit_from = np.concatenate((base.exit_from[keep], np.where(root, 0, inside[safe]).astype(np.int32)))
    exit_level = np.concatenate((base.exit_level[keep], np.where(root, 0, count[safe]).astype(np.int32)))
    sort = np.argsort(exits, kind="stable")
    exits, exit_from, exit_level = exits[sort], exit_from[sort], exit_level[sort]
    mask = int.from_bytes(np.packbits(table[0, :0x80] >= 0, bitorder="little").tobytes(), "little")
    return Slice(f"utf8:{mask:x}", table, end, complete, started, member, bitmask, max_started,
                 exits, exit_from, exit_level, trie.root_byte[exits], base.used_from, base=base)


def nodes_by_byte(trie: VocabTrie) -> tuple[np.ndarray, np.ndarray]:
    """(trie nodes sorted by their own byte, int64[257] start of each byte's run) for `derive_utf8_slice`."""
    order = np.argsort(trie.byte, kind="stable").astype(np.int32)
    return order, np.searchsorted(trie.byte[order], np.arange(257))


def follows_utf8(dfa, q: int, target: int) -> bool:
    """A cheap sign that state `q` reads non-ASCII characters as `target` (checked for real by
    `slice_view`): every UTF-8 lead byte is live, and a 2-byte character such as "é" leads to `target`."""
    row = dfa.transitions(q)
    if (row[0xC2:0xF5] < 0).any():
        return False
    return bool((dfa.transitions(int(row[0xC3]))[0x80:0xC0] == target).all())


def _moves_used(inside, before, parent_count, byte, n_states: int) -> np.ndarray:
    """bool[levels, n_states, 256]: slice moves some token makes at character level >= each level.

    A DFA state need only follow the slice on the moves tokens make: deep
    inside a counted string, tokens are ASCII runs, so there is no need to
    check (and determinize) every 4-byte UTF-8 branch at level 60.
    """
    nodes = np.flatnonzero(inside >= 0)
    levels = int(parent_count.max()) + 2 if len(parent_count) else 2
    used = np.zeros((levels, n_states, 256), dtype=bool)
    used[parent_count[nodes], before[nodes], byte[nodes]] = True
    return np.logical_or.accumulate(used[::-1], axis=0)[::-1].copy()


def pack_bits(flags: np.ndarray, n_words: int) -> np.ndarray:
    """bool[n] -> int32[n_words] with bit i of word i // 32 set when flags[i]."""
    padded = np.zeros(n_words * 32, dtype=bool)
    padded[: len(flags)] = flags
    return np.packbits(padded, bitorder="little").view("<i4").astype(np.int32, copy=False)


def ids_bitmask(ids: np.ndarray, n_words: int, base: np.ndarray | None = None) -> np.ndarray:
    """Packed int32 mask of the distinct token `ids`, OR-ed into a copy of `base` when given.

    Example:
        >>> ids_bitmask(np.array([0, 33]), 2).tolist()
        [1, 2]
    """
    kernels = fsm_jit.load_kernels()
    out = np.zeros(n_words, dtype=np.uint32) if base is None else base.view(np.uint32).copy()
    if kernels is not None:
        kernels.set_bits(out, np.ascontiguousarray(ids))
        return out.view(np.int32)
    if len(ids) < n_words:
        # few ids: one bit each, summed per word (distinct bits, so the sum is the OR; exact in float64)
        bits = np.left_shift(np.int64(1), np.asarray(ids) & 31).astype(np.float64)
        out |= np.bincount(np.asarray(ids) >> 5, weights=bits, minlength=n_words).astype(np.uint32)
    else:
        flags = np.zeros(n_words * 32, dtype=bool)
        flags[ids] = True
        out |= np.packbits(flags, bitorder="little").view(np.uint32)
    return out.view(np.int32)
