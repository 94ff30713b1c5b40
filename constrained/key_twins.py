"""Masks shared between the key states of an `any_order` object that differ only in the members taken.

With ``any_order=True`` an object's members are an `AnyOrder` (`grammars.fragments`):
its frame on the DFA's stack is the set of members taken, and after each comma
the DFA is in a new state for every set. When the object also allows other
keys, every key it starts reads almost any string, so the first mask of each
key walked some 14,000 tokens (Llama-3) through ~150 new DFA states: ~0.6-2.7 ms
per member, for a mask that is the same from one member to the next.

Inside a key, the frame is not read: it is tested again only after the key's
closing quote (PICK, then the value, then CLEAR or the end's CHECKs). And when
the additional keys are "any name but the declared ones", the raw key trie
complement (`FragmentBuilder._open_keys`), they read every prefix of every
member's key too. So from a state inside a key, a token without a `"` byte is
allowed exactly when the additional key's configurations read it, and those do
depend neither on the set taken nor on anything else on the stack (a key's
states make no call). `KeyTwins.key` names that class: the construct and the
additional key's NFA states, when every configuration of the state is inside
one of the construct's keys (the additional one or a member's: the states the
builder made for it, checked to be closed, see `_closed`).
The same key then shares its masks in every object of that construct: under
other sets taken, at other items of an array, in other outer objects. `TokenFSM`
computes the first state's mask of each class and gives each later state that
mask for the tokens without a quote, and its own walk of the tokens with one
(`VocabIndex.quote_tokens`, ~1,300 of Llama-3's); a token's next state is
walked from the state itself (`TokenFSM._key_twin_next`).

Where a key's NFA states cannot be told apart this way (an edge other than a
byte or an epsilon one inside it: a call, a counter), nothing is shared.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["KeyTwins"]

_QUOTE_MASK = 1 << 0x22


class KeyTwins:
    """The key regions of a `JitDFA`'s NFA (its `key_entries`), to name a DFA state's class (`key`).

    Args:
        dfa: a `constrained.dfa_jit.JitDFA`.
        previous: the `KeyTwins` of the same DFA before a lazy rule grew its NFA: the regions
            found then are kept (a built state's edges never change), only new ones are read.
    """

    def __init__(self, dfa: Any, previous: "KeyTwins | None" = None) -> None:
        nfa = dfa.nfa
        self.dfa = dfa
        self.num_states = nfa.num_states
        entries = list(getattr(nfa, "key_entries", ()))
        # per NFA state: 2 * construct for an additional key's, 2 * construct + 1 for a member's, -1: neither
        region = np.full(nfa.num_states, -1, dtype=np.int64)
        done = 0
        if previous is not None:
            done = previous.entries
            region[: len(previous.region)] = previous.region
        if done < len(entries):
            ranges = []                             # (first, end, region value) of the new entries' keys
            for c in range(done, len(entries)):
                extra, members = entries[c]
                ranges.append((*extra, 2 * c))
                ranges += [(*m, 2 * c + 1) for m in members if m is not None]
            ok = _closed(nfa.arrays, nfa.num_states, ranges)
            for (first, end, value), good in zip(ranges, ok):
                if good:
                    region[first:end] = value
            for c in range(done, len(entries)):     # an object whose additional key is not closed: none
                first, end = entries[c][0]
                if region[first] != 2 * c:
                    region[region >> 1 == c] = -1
        self.entries = len(entries)
        self.region = region
        self.usable = bool(entries) and bool((region >= 0).any())

    def key(self, state: int) -> tuple | None:
        """The class of DFA `state` (None: it is not inside one construct's keys): (construct, the
        additional key's NFA states). The stacks are left out: within a token without a quote
        no frame is read, nor pushed or popped (a key's states make no call), so the object's
        set taken, and whatever lies below it (an array's count, an outer object's set, a
        call's return), changes nothing."""
        d = self.dfa
        cfgs = d._cfg_data[d._cfg_ptr[state]:d._cfg_ptr[state + 1]]
        if not len(cfgs) or cfgs[0] < 0:          # (an accepting state's list starts with a negative)
            return None
        p = cfgs % d._n
        if int(p.max()) >= len(self.region):
            return None
        r = self.region[p]
        c = int(r[0]) >> 1
        if c < 0 or ((r >> 1) != c).any():
            return None
        extra = (r & 1) == 0
        if not extra.any():
            return None
        return c, p[extra].tobytes()


def _closed(a: Any, n: int, ranges: list[tuple[int, int, int]]) -> list[bool]:
    """Per range of NFA states (``first`` .. ``end`` - 1, a key's as built), whether it is closed:
    no call edge, and every epsilon edge and every byte edge but a lone quote's stays in it.
    Then a text without a quote never leaves it, and no frame is read on the way."""
    owner = np.full(n + 1, -1, dtype=np.int64)     # per state, the range holding it (the last: -1)
    for i, (first, end, _) in enumerate(ranges):
        if not 0 <= first < end <= n:
            return [False] * len(ranges)
        owner[first:end] = i
    quote = np.array([m == _QUOTE_MASK for m in a.masks], dtype=bool)
    bad = [owner[:n][np.diff(a.call_ptr[: n + 1]) > 0]]
    for ptr, dst, keep in ((a.eps_ptr, a.eps_dst, None), (a.edge_ptr, a.edge_dst, ~quote[a.edge_mask])):
        src = np.repeat(owner[:n], np.diff(ptr[: n + 1]))
        leaves = src != owner[dst]
        bad.append(src[leaves if keep is None else leaves & keep])
    bad_ranges = set(np.concatenate(bad).tolist())
    return [i not in bad_ranges for i in range(len(ranges))]
