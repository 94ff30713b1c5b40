"""Masks shared between DFA states that differ only in counts far from their bounds.

A bounded repetition (`maxLength: 5000`, `{0,1000}`, `maxItems`) is a counter
loop whose count lives on the DFA configuration's stack (see
`constrained.dfa_kernels`), so each count is a DFA state of its own, and each
such state used to get its own first mask: a walk of the vocabulary trie that
also expanded the DFA rows along every token (48 new DFA states and 0.33 ms per
token of a long `maxLength` string, with a ~26 KB mask memoized per token).

Within one token a loop's count goes up by at most the token's length in
bytes (a counter loop's item is never empty: `grammars.fragments` makes it
non-empty), and the loop reads its count only through ``count >= lo`` and
``count < hi``. So two states whose configurations are equal except for
counts ``c`` with ``lo <= c`` and ``c + L < hi`` (`L`: the vocabulary's longest
token, in bytes) allow the same tokens: `CounterTwins.key` names that class of
states, and `TokenFSM` computes the mask of the first state of a class and
shares it (`TwinMasks`) with the others, which walk only the sampled token's
bytes from their own, exact, state. Near a bound the count is kept, and the
mask is computed as before.

Only the native DFA's (`JitDFA`) configurations are read, and only grammars whose
frames are rule calls and counter loops: an `AnyOrder`'s set of members taken or
a `Counted` string's count are frames too, which `key` could not tell from a
loop's, so an NFA with any of them gets no twins (`key` returns None).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grammars.nfa import ENTER, FREE, HEAD, INC, REG

__all__ = ["CounterTwins", "FAR"]

FAR = -1          # a count far from both bounds, in a `key` (a counter frame holds -2 - count)


class CounterTwins:
    """The counter loops of a `JitDFA`'s NFA, to name a DFA state's class (`key`).

    Args:
        dfa: a `constrained.dfa_jit.JitDFA`.
        longest: the vocabulary's longest token, in bytes.

    Built for the NFA as it is; `TokenFSM` builds it again when a lazy rule
    has added states since (`num_states`).
    """

    def __init__(self, dfa: Any, longest: int) -> None:
        nfa = dfa.nfa
        a = nfa.arrays
        self.num_states = nfa.num_states
        self.dfa = dfa
        self.longest = longest
        ops = np.asarray(a.call_op)
        # frames this class cannot attribute (AnyOrder, Counted), or nothing to share
        self.usable = bool(len(ops)) and bool(np.isin(ops, (REG, FREE, ENTER, HEAD, INC)).all())
        self.bounds: list[tuple[int, int]] = []        # per loop: (lo, hi)
        self.ok: list[bool] = []                        # per loop: its frames can be shared
        self.inner: dict[int, int] = {}                 # NFA state -> innermost loop whose item holds it
        self.parent: list[int] = []                     # per loop: the innermost loop around it (-1: none)
        if not self.usable:
            return
        heads = np.flatnonzero(ops == HEAD)
        wide = [j for j in heads.tolist() if a.call_hi[j] >= 0 and a.call_lo[j] + longest + 1 < a.call_hi[j]]
        if not wide:
            self.usable = False
            return
        src = np.searchsorted(np.asarray(a.call_ptr), heads, side="right") - 1
        bodies = []
        for j, head in zip(heads.tolist(), src.tolist()):
            body, ok = self._body(a, int(head), int(a.call_to[j]))
            self.bounds.append((int(a.call_lo[j]), int(a.call_hi[j])))
            self.ok.append(ok and a.call_hi[j] >= 0)
            bodies.append((len(body), len(bodies), int(head), body))
        # innermost: the smallest item holding a state (items nest or are disjoint)
        for size, loop, _head, body in sorted(bodies, reverse=True):
            for s in body:
                self.inner[s] = loop
        self.parent = [-1] * len(bodies)
        for size, loop, head, body in bodies:
            outer = self.inner.get(head, -1)
            self.parent[loop] = outer if outer != loop else -1

    @staticmethod
    def _body(a: Any, head: int, start: int) -> tuple[set[int], bool]:
        """The NFA states of a loop's item, from its first state to the INC back to `head`
        (through nested loops, over calls); and whether only rule calls and loops are met."""
        eps_ptr, eps_dst, edge_ptr, edge_dst = a.eps_ptr, a.eps_dst, a.edge_ptr, a.edge_dst
        call_ptr, call_op, call_dst, call_to = a.call_ptr, a.call_op, a.call_dst, a.call_to
        seen = {start}
        todo = [start]
        ok = True
        while todo:
            s = todo.pop()
            nxt = eps_dst[eps_ptr[s]:eps_ptr[s + 1]].tolist() + edge_dst[edge_ptr[s]:edge_ptr[s + 1]].tolist()
            for j in range(int(call_ptr[s]), int(call_ptr[s + 1])):
                op = int(call_op[j])
                if op in (REG, FREE, ENTER):
                    nxt.append(int(call_dst[j]))            # a call's return, a nested loop's head
                elif op == HEAD:
                    nxt += [int(call_to[j]), int(call_dst[j])]
                elif op == INC:
                    if int(call_dst[j]) != head:
                        nxt.append(int(call_dst[j]))
                else:
                    ok = False
            for t in nxt:
                if t == head:
                    ok = False                              # only its own INC goes back there
                elif t not in seen:
                    seen.add(t)
                    todo.append(t)
        return seen, ok

    def key(self, state: int) -> tuple | None:
        """The class of DFA `state` (None: it holds no count far from its bounds, or
        a frame this class cannot attribute): its configurations, each as (NFA state,
        frames from the top), with the far counts replaced by `FAR`."""
        if not self.usable:
            return None
        d = self.dfa
        n = d._n
        ret, up = d._stk_ret, d._stk_parent
        cfgs = d._cfg_data[d._cfg_ptr[state]:d._cfg_ptr[state + 1]].tolist()
        parts = []
        far = False
        longest = self.longest
        for c in cfgs:
            if c < 0:
                parts.append((-1, ()))                       # accepting
                continue
            k, p = divmod(c, n)
            pos, last = p, -1
            frames = []
            while k > 0:
                r = int(ret[k])
                if r >= 0:                                   # a call: its return state is where we are below it
                    pos, last = r, -1
                    frames.append(r)
                else:
                    loop = self.inner.get(pos, -1) if last < 0 else self.parent[last]
                    if loop < 0 or not self.ok[loop]:
                        return None
                    lo, hi = self.bounds[loop]
                    count = -2 - r
                    if lo <= count and count + longest < hi:
                        frames.append(FAR)
                        far = True
                    else:
                        frames.append(r)
                    last = loop
                k = int(up[k])
            parts.append((p, tuple(frames)))
        if not far:
            return None
        parts.sort()
        return tuple(parts)
