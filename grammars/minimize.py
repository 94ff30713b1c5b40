"""Minimal DFAs of small grammar nodes, as NFA fragment templates (see `fragments.compact`).

A node's language is determinized with `LazyDFA`, minimized by Moore's
partition refinement (the DFAs are small: at most a few hundred states, over
the NFA's byte classes), and written back as a template in the form
`fragments._template` records: one state per block, byte edges grouped by
target block, an epsilon edge from each accepting block to a fresh exit.

Example:
    >>> from grammars.ast import byte_range, literal, seq, alt, repeat
    >>> d = byte_range(48, 57)
    >>> tri = alt(*(seq(repeat(d, i, i), literal(b"."), repeat(d, 1, 4 - i)) for i in range(1, 4)))
    >>> minimal_template(tri, 100)[0]       # 10 DFA states (the first is the entry) and an exit; the tree of states is 23
    10
"""

from __future__ import annotations

from grammars.ast import Grammar, Node
from grammars.dfa import LazyDFA
from grammars.errors import StateBudgetError

__all__ = ["minimal_template", "MINIMIZING", "NO_CALLS"]

MINIMIZING: set[int] = set()    # ids of nodes whose DFA is being built: built the generic way meanwhile
NO_CALLS: list = []             # the calls of a minimal DFA's template (none): marks a template as one


def minimal_template(node: Node, max_states: int) -> tuple | None:
    """The template (as `fragments._template` makes) of `node`'s minimal DFA; None past
    `max_states` DFA states, or when it is no smaller than the node's own NFA."""
    MINIMIZING.add(id(node))
    try:
        dfa = LazyDFA(Grammar({"start": node}), max_states=max_states)
        dfa.explore()
    except StateBudgetError:
        return None
    finally:
        MINIMIZING.discard(id(node))
    n, generic = dfa.num_states, dfa.nfa.num_states
    rows = [dfa.row(q) for q in range(n)]
    # Moore refinement: split blocks by (block, block of each class's target) until stable
    block = [int(dfa.is_accepting(q)) for q in range(n)]
    count = len(set(block))
    while True:
        ids: dict[tuple, int] = {}
        new = [ids.setdefault((block[q], *(block[t] if t >= 0 else -1 for t in rows[q])), len(ids)) for q in range(n)]
        block = new
        if len(ids) == count:
            break
        count = len(ids)
    if count + 1 >= generic:
        return None                           # no smaller than the tree of states
    class_mask = [0] * dfa.num_classes
    for b, c in enumerate(dfa.byte_class.tolist()):
        class_mask[c] |= 1 << b
    start = block[dfa.initial]
    entered = any(block[t] == start for row in rows for t in row if t >= 0)
    # states: one per block, in order; the entry is block `start` itself (as -1, no state of its
    # own), or a copy of it if edges enter it. (A state numbered for it anyway would reach no
    # exit: `NFA._compute_need`'s shortcut, which says every state does, would be wrong there.)
    number = {b: k for k, b in enumerate(b for b in range(count) if entered or b != start)}

    def state(i: int) -> int:
        return -1 if i == start and not entered else number[i]

    exit_ = len(number)
    eps_src, byte_src, byte_dst, masks, idx = [], [], [], [], []
    mask_ids: dict[int, int] = {}
    sources = [(i, next(q for q in range(n) if block[q] == i)) for i in range(count)]
    if entered:
        sources.append((-1, dfa.initial))
    for i, q in sources:
        src = i if i < 0 else state(i)
        if dfa.is_accepting(q):
            eps_src.append(src)
        out: dict[int, int] = {}
        for c, t in enumerate(rows[q]):
            if t >= 0:
                out[block[t]] = out.get(block[t], 0) | class_mask[c]
        for target, mask in out.items():
            byte_src.append(src)
            byte_dst.append(state(target))
            idx.append(mask_ids.setdefault(mask, len(mask_ids)))
    masks = list(mask_ids)
    return (exit_ + 1, exit_, eps_src, [exit_] * len(eps_src), byte_src, byte_dst, masks, idx, dfa.is_empty, NO_CALLS)
