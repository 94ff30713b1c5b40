"""Vocabulary slices: answer "inside a string" states without walking 100k tokens.

Most decoding steps of a JSON document are inside a string, where nearly the
whole vocabulary is allowed and the DFA simply loops on itself.  Walking the
full trie there touches every node.  Following llguidance, we precompute for a
few byte languages ("slices", e.g. JSON string characters) the set of tokens
made only of slice characters, plus a small trie of all the *other* tokens.

When a DFA state `q` maps every string of the slice language back to `q`
(checked on the product of `q` with the slice's tiny automaton), every slice
token is allowed and leads back to `q`: we copy its precomputed bitmask and
walk only the small complementary trie.

Example:
    >>> table = utf8_table(excluded=b'"\\\\' + bytes(range(0x20)))
    >>> int(table[0, ord("a")]), int(table[0, ord('"')]), int(table[0, 0xC3]), int(table[1, 0xA9])
    (0, -1, 1, 0)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from constrained.vocab_trie import VocabTrie

__all__ = ["Slice", "SLICE_LANGUAGES", "utf8_table", "build_slice", "loops_on", "equivalent", "pack_bits"]

# Slice automaton states: 0 is the start and the only accepting state.  The
# others count the UTF-8 continuation bytes still owed (with the classic
# narrower ranges after E0, ED, F0 and F4 that exclude overlong forms and surrogates).
_CONT1, _CONT2, _CONT3, _E0, _ED, _F0, _F4 = range(1, 8)

# Largest slices first: a state looping on a larger slice skips more tokens.
SLICE_LANGUAGES: dict[str, bytes] = {
    # regex `.`: any character but newline
    "line": b"\n",
    # JSON string contents: no quote, backslash or control character
    "json_string": b'"\\' + bytes(range(0x20)),
}

# Product states explored before giving up on a slice (UTF-8 needs ~8).
_MAX_PRODUCT_STATES = 64
# State pairs explored when proving two DFA states equivalent.
_MAX_EQUIV_PAIRS = 256


def utf8_table(excluded: bytes = b"") -> np.ndarray:
    """int16[8, 256] DFA accepting sequences of UTF-8 characters minus the `excluded` ASCII bytes."""
    t = np.full((8, 256), -1, dtype=np.int16)
    t[0, :0x80] = 0
    t[0, list(excluded)] = -1
    t[0, 0xC2:0xE0] = _CONT1
    t[0, 0xE0] = _E0
    t[0, 0xE1:0xF0] = _CONT2
    t[0, 0xED] = _ED
    t[0, 0xF0] = _F0
    t[0, 0xF1:0xF4] = _CONT3
    t[0, 0xF4] = _F4
    t[_CONT1, 0x80:0xC0] = 0
    t[_CONT2, 0x80:0xC0] = _CONT1
    t[_CONT3, 0x80:0xC0] = _CONT2
    t[_E0, 0xA0:0xC0] = _CONT1
    t[_ED, 0x80:0xA0] = _CONT1
    t[_F0, 0x90:0xC0] = _CONT2
    t[_F4, 0x80:0x90] = _CONT2
    return t


@dataclass(frozen=True, eq=False)
class Slice:
    """Tokens made only of the slice's characters, and a trie of the others.

    Attributes:
        name: key of `SLICE_LANGUAGES`.
        table: the slice automaton (see `utf8_table`).
        member: bool[vocab size], True for slice tokens.
        bitmask: packed int32 mask of the slice tokens.
        complement: trie of every other (non-special) token.
    """

    name: str
    table: np.ndarray
    member: np.ndarray
    bitmask: np.ndarray
    complement: VocabTrie

    @cached_property
    def moves(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per slice state: (bytes completing a character, bytes continuing one, their next state)."""
        out = []
        for row in self.table:
            done = np.flatnonzero(row == 0)
            inner = np.flatnonzero(row > 0)
            out.append((done, inner, row[inner].astype(np.int64)))
        return out

    @property
    def nbytes(self) -> int:
        return self.table.nbytes + self.member.nbytes + self.bitmask.nbytes + self.complement.nbytes


def build_slice(name: str, trie: VocabTrie, token_bytes: Sequence[bytes | None],
                usable: np.ndarray, n_words: int) -> Slice:
    """Split the `usable` tokens of `trie` into slice tokens and a complement trie."""
    table = utf8_table(SLICE_LANGUAGES[name])
    as_dfa = table.astype(np.int32)
    identity = np.arange(256, dtype=np.int32)
    ids, ends = trie.walk(0, identity, lambda: as_dfa, lambda s: None)
    member = np.zeros(len(token_bytes), dtype=bool)
    member[ids[ends == 0]] = True
    member &= usable
    rest = np.flatnonzero(usable & ~member)
    return Slice(name, table, member, pack_bits(member, n_words),
                 VocabTrie.build(token_bytes, rest.tolist()))


def pack_bits(flags: np.ndarray, n_words: int) -> np.ndarray:
    """bool[n] -> int32[n_words] with bit i of word i // 32 set when flags[i]."""
    padded = np.zeros(n_words * 32, dtype=bool)
    padded[: len(flags)] = flags
    return np.packbits(padded, bitorder="little").view("<i4").astype(np.int32, copy=False)


def loops_on(dfa, q: int, sl: Slice) -> bool:
    """True when every string of the slice language leads `dfa` from `q` back to `q`.

    Explores the product of `q` with the slice automaton: every byte the slice
    allows must keep the DFA alive, and completing a slice character must land
    on `q`, or on a state proven equivalent to `q` (a lazily determinized DFA
    is not minimal: `"a` and `"é` may reach different but equivalent states).
    """
    seen = {(q, 0)}
    twins: set[int] = {q}
    todo = [(q, 0)]
    while todo:
        s, a = todo.pop()
        row = dfa.transitions(s)                 # int32[256], memoized by the DFA
        done_bytes, inner_bytes, inner_next = sl.moves[a]
        ends = row[done_bytes]                   # DFA states after a complete character
        mids = row[inner_bytes]                  # ... and inside one
        if (len(ends) and ends.min() < 0) or (len(mids) and mids.min() < 0):
            return False
        if len(ends) and not (ends == q).all():
            for other in set(ends.tolist()) - twins:
                if not equivalent(dfa, q, other):
                    return False
                twins.add(other)
        if len(mids):
            for key in set((mids.astype(np.int64) * 8 + inner_next).tolist()):
                pair = (key >> 3, key & 7)
                if pair not in seen:
                    if len(seen) >= _MAX_PRODUCT_STATES:
                        return False
                    seen.add(pair)
                    todo.append(pair)
    return True


def equivalent(dfa, a: int, b: int) -> bool:
    """True when DFA states `a` and `b` accept the same language (bounded search; False if unsure)."""
    seen = {(a, b)}
    todo = [(a, b)]
    while todo:
        x, y = todo.pop()
        if x == y:
            continue
        if x < 0 or y < 0 or bool(dfa.is_accepting(x)) != bool(dfa.is_accepting(y)):
            return False
        rx, ry = dfa.transitions(x), dfa.transitions(y)
        for pair in set(zip(rx.tolist(), ry.tolist())):
            if pair[0] != pair[1] and pair not in seen:
                if len(seen) >= _MAX_EQUIV_PAIRS:
                    return False
                seen.add(pair)
                todo.append(pair)
    return True
