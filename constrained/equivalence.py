"""Whether two DFA states accept the same language: a bounded product walk.

Slices (`constrained.slice_view`) and the tests ask it of states that a token
reaches by different paths. A `JitDFA` answers with its compiled walk
(`JitDFA.equivalent`), any other DFA with `equivalent_py`; both give up,
answering False, past `_MAX_EQUIV_PAIRS` pairs of states.

Example:
    >>> from grammars.ast import Grammar, literal, alt
    >>> from grammars.dfa import LazyDFA
    >>> dfa = LazyDFA(Grammar({"start": alt(literal(b"ab"), literal(b"cb"))}))
    >>> a, c = dfa.next_state(dfa.initial, ord("a")), dfa.next_state(dfa.initial, ord("c"))
    >>> equivalent(dfa, a, c), equivalent(dfa, dfa.initial, a)
    (True, False)
"""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["equivalent", "equivalent_py"]

# State pairs explored when proving two DFA states equivalent.
_MAX_EQUIV_PAIRS = 256


def equivalent(dfa, a: int, b: int) -> bool:
    """True when DFA states `a` and `b` accept the same language (bounded search; False if unsure)."""
    native = getattr(dfa, "equivalent", None)      # a JitDFA's compiled product walk, same answers
    if native is not None:
        return native(a, b, _MAX_EQUIV_PAIRS)
    return equivalent_py(dfa, a, b)


def equivalent_py(dfa, a: int, b: int) -> bool:
    """`equivalent` as a product walk in Python, over any DFA with `transitions`."""
    seen = {(a, b)}
    todo = deque([(a, b)])
    # breadth first, and a byte that one state rejects and the other reads fails at once:
    # states that differ usually differ within a byte or two, and a depth-first search
    # could first expand hundreds of counter states (~8 ms)
    while todo:
        x, y = todo.popleft()
        if x == y:
            continue
        if x < 0 or y < 0 or bool(dfa.is_accepting(x)) != bool(dfa.is_accepting(y)):
            return False
        rx, ry = dfa.transitions(x), dfa.transitions(y)
        differ = rx != ry
        if not differ.any():
            continue
        if (rx[differ] < 0).any() or (ry[differ] < 0).any():
            return False
        keys = np.unique((rx[differ].astype(np.int64) << 32) | (ry[differ].astype(np.int64) & 0xFFFFFFFF))
        for key in keys.tolist():
            pair = (key >> 32, (key & 0xFFFFFFFF) - ((key & 0x80000000) << 1))
            if pair not in seen:
                if len(seen) >= _MAX_EQUIV_PAIRS:
                    return False
                seen.add(pair)
                todo.append(pair)
    return True
