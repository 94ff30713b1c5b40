"""An NFA's edges as arrays: grouped per source state (CSR), as the DFA kernels read them.

`grammars.nfa.NFA` builds its edges as Python lists and packs them into an
`NFAArrays`; `per_state` splits a packed column back into one tuple per state.

Example:
    >>> import numpy as np
    >>> per_state(np.array([0, 2, 2, 3]), ["a", "b", "c"])
    [('a', 'b'), (), ('c',)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NFAArrays", "per_state"]


@dataclass(frozen=True, eq=False)
class NFAArrays:
    """An NFA's edges grouped per source state (CSR, in insertion order).

    Attributes:
        eps_ptr, eps_dst: epsilon edges of state s are eps_dst[eps_ptr[s]:eps_ptr[s + 1]].
        edge_ptr, edge_dst, edge_mask: byte edges; `edge_mask` indexes `masks`.
        masks: the distinct byte masks, in order of first use: a lazy body's new masks
            come after the others, whose ids stay.
        call_ptr, call_rule, call_dst: call edges (rule index or -1, return or exit state).
        call_op, call_to, call_lo, call_hi: per call edge its kind (`REG` ... `CLEAR`),
            the state it goes to (a rule's start, a loop head or body), and a
            counter loop's bounds (hi -1: unbounded) or an `AnyOrder` edge's
            operands (see `grammars.fragments`).
    """

    eps_ptr: np.ndarray
    eps_dst: np.ndarray
    edge_ptr: np.ndarray
    edge_dst: np.ndarray
    edge_mask: np.ndarray
    masks: tuple[int, ...]
    call_ptr: np.ndarray
    call_rule: np.ndarray
    call_dst: np.ndarray
    call_op: np.ndarray
    call_to: np.ndarray
    call_lo: np.ndarray
    call_hi: np.ndarray


def per_state(ptr: np.ndarray, items: list) -> list[tuple]:
    """Split `items` into one tuple per state (the shared empty tuple where none)."""
    bounds = ptr.tolist()
    return [tuple(items[lo:hi]) if hi > lo else () for lo, hi in zip(bounds, bounds[1:])]
