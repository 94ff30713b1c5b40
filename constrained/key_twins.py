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
not depend on the set taken. `KeyTwins.key` names that class: the construct,
the stack below its frame and the additional key's NFA states, when every
configuration of the state is inside one of the construct's keys (the
additional one or a member's, see `_region`) above one stack. `TokenFSM`
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
            a = nfa.arrays
            lists = _Lists(a)
            for c in range(done, len(entries)):
                extra, members = entries[c]
                states = _region(lists, extra)
                if states is None:
                    continue
                region[states] = 2 * c
                for m in members:
                    states = _region(lists, m)
                    if states is not None:
                        region[states] = 2 * c + 1
        self.entries = len(entries)
        self.region = region
        self.usable = bool(entries) and bool((region >= 0).any())

    def key(self, state: int) -> tuple | None:
        """The class of DFA `state` (None: it is not inside one construct's keys): (construct,
        stack below its frame, the additional key's NFA states)."""
        d = self.dfa
        cfgs = d._cfg_data[d._cfg_ptr[state]:d._cfg_ptr[state + 1]]
        if not len(cfgs) or cfgs[0] < 0:          # (an accepting state's list starts with a negative)
            return None
        k, p = np.divmod(cfgs, d._n)
        if int(p.max()) >= len(self.region) or not (k > 0).all():
            return None
        r = self.region[p]
        c = int(r[0]) >> 1
        if c < 0 or ((r >> 1) != c).any():
            return None
        extra = (r & 1) == 0
        if not extra.any():
            return None
        below = d._stk_parent[k]
        if (below != below[0]).any() or (d._stk_ret[k] >= 0).any():   # (a call frame's is its return state)
            return None
        return c, int(below[0]), p[extra].tobytes()


class _Lists:
    """The NFA's columns a region's walk reads, as Python lists (indexing a list is 5-10x cheaper
    than a numpy scalar), and per mask id whether it is a lone quote."""

    def __init__(self, a: Any) -> None:
        self.eps_ptr, self.eps_dst = a.eps_ptr.tolist(), a.eps_dst.tolist()
        self.edge_ptr, self.edge_dst, self.edge_mask = a.edge_ptr.tolist(), a.edge_dst.tolist(), a.edge_mask.tolist()
        self.call_ptr = a.call_ptr.tolist()
        self.quote = [m == _QUOTE_MASK for m in a.masks]


def _region(a: _Lists, entry: int) -> list[int] | None:
    """The NFA states of the key entered at `entry` (its opening quote next), up to its closing
    quote: those reached from the state after the opening quote by epsilon edges and byte edges
    other than a lone quote. None when an edge of another kind (a call) is met, or the entry
    does not read a lone quote first: the frame could be read within the key, or the key's
    states are not known."""
    n = len(a.eps_ptr) - 1
    if not 0 <= entry < n:
        return None
    eps_ptr, eps_dst, edge_ptr, edge_dst, edge_mask, call_ptr, quote = (
        a.eps_ptr, a.eps_dst, a.edge_ptr, a.edge_dst, a.edge_mask, a.call_ptr, a.quote)
    seeds: list[int] = []
    seen, todo = {entry}, [entry]
    while todo:                                    # the entry's closure: the opening quote
        s = todo.pop()
        if call_ptr[s + 1] > call_ptr[s]:
            return None
        for j in range(edge_ptr[s], edge_ptr[s + 1]):
            if not quote[edge_mask[j]]:
                return None
            seeds.append(edge_dst[j])
        for t in eps_dst[eps_ptr[s]:eps_ptr[s + 1]]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    if not seeds:
        return None
    seen = set(seeds)
    todo = list(seeds)
    while todo:
        s = todo.pop()
        if call_ptr[s + 1] > call_ptr[s]:
            return None
        nxt = eps_dst[eps_ptr[s]:eps_ptr[s + 1]]
        for j in range(edge_ptr[s], edge_ptr[s + 1]):
            if not quote[edge_mask[j]]:
                nxt.append(edge_dst[j])
        for t in nxt:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return sorted(seen)
