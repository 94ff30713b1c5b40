"""Masks shared between DFA states that differ only in counts far from their bounds.

A bounded repetition (`maxLength: 5000`, `{0,1000}`, `maxItems`) is a counter
loop whose count lives on the DFA configuration's stack (see
`constrained.dfa_kernels`), so each count is a DFA state of its own. Each such
state used to get its own first mask, a walk of the vocabulary trie that also
expanded the DFA rows along every token, and its next states came from its own
rows, about 9 new DFA states a byte. A long `maxLength` string took 0.33 ms and
48 DFA states a token (Llama-3), and a ~26 KB mask memoized per token: the
default budget of 100,000 states ran out after about 9,400 characters.

Within one token a loop's count goes up by at most the token's length in
bytes (a counter loop's item is never empty: `grammars.fragments` makes it
non-empty), and the loop reads its count only through ``count >= lo`` and
``count < hi`` (an unbounded one, whose count stops at `lo`, only through the
first: ``minLength: 5000`` alone has one threshold). So two states whose
configurations are equal except for counts with no threshold (`lo`, `hi`)
between one below them and `L + 1` above them, the same number of thresholds
below each, and above `L` (`L`: the vocabulary's longest token, in bytes),
behave alike for one token: for
``minLength: 5000, maxLength: 100000``, the counts from 130 to 4,870 are one
class, and from 5,002 to 99,870 another.

- they allow the same tokens: `CounterTwins.key` names that class of states,
  and `TokenFSM` computes the mask of the first state of a class and shares it
  (`TwinMasks`) with the others;
- a token leads them to states that are equal but for the same counts:
  `CounterTwins.shift` finds what a state's counts add to its twin's, and the
  state after a token is the twin's, walked once and memoized, with those
  counts moved (`CounterTwins.moved`), interned as it is, without computing a
  row. A frame the token entered afresh has a count of at most `L`, the moved
  ones more than `L`, so they are told apart.

So a long string makes one DFA state a token, and masks one vocabulary walk
per class. Near a bound the count is kept exact and everything is computed
as before; where a shift cannot be found (counts of one loop that moved
unevenly), the token's bytes are walked from the state itself.

A `Counted` string (a pattern with length bounds past their product) counts its
characters the same way, but through gates with a window of counts per target
state (``lo <= count <= hi``) and an exit (``count >= lo``): every window's ends
are thresholds of its own, like a loop's bounds (`CounterTwins._counted`).

`TokenFSM` builds a `CounterTwins` only once its DFA has 2,048 states and a
loop or a `Counted` string has counted past a token's length (the DFA kernels
keep the largest count they made): most schemas' counts stay small (a
number's digits, short strings), and their masks pay nothing for this.

An `AnyOrder`'s frame (the set of members taken, `any_order=True`) is told
from a count by the construct it belongs to, and kept as it is. Its bits look
like a large count on the stack, so they do not count toward building twins:
they were built, and built again at each lazy rule, for schemas with no long
count at all (Github_hard---o40454: 113 ms masks).

`CounterTwins.min_bytes` bounds a state's completions from below (counts left
to their exit bounds), so that the budget planner (`constrained.budget`) does
not search for a completion a token's search or its whole budget cannot reach.

Each frame is attributed to its construct by where the configuration is: the
innermost construct holding its NFA state (or a call's return state, for the
frames below a call), then, frame by frame, the construct around that one.
A lazy rule spliced in (SPLICE: no frame) belongs to the construct around its
call. Only the native DFA's (`JitDFA`) configurations are read.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

import numpy as np

from grammars.nfa import CHECK, CLEAR, COUNT, ENTER, EXIT, FREE, GATE, HEAD, INC, LEAVE, PICK, REG, SPLICE, TICK

__all__ = ["CounterTwins", "FAR"]

# a far count in a `key`: FAR + the number of its construct's thresholds below it (a counter
# frame holds -2 - count, a call frame its return state, an NFA state: both far under FAR)
FAR = 1 << 40
# call edges of rule calls, lazy rules spliced in, counter loops, `Counted` strings and `AnyOrder`s
_KNOWN = (REG, FREE, SPLICE, ENTER, HEAD, INC, GATE, TICK, EXIT, PICK, CHECK, LEAVE, COUNT, CLEAR)
_SET_OPS = (PICK, CHECK, COUNT, CLEAR)         # an `AnyOrder`'s tests and updates of its frame


class _Lists:
    """An `NFAArrays`' columns as Python lists (indexing a list is 5-10x cheaper than a numpy scalar)."""

    _COLS = ("eps_ptr", "eps_dst", "edge_ptr", "edge_dst", "call_ptr", "call_op", "call_dst", "call_to", "call_lo",
             "call_hi")

    def __init__(self, a: Any) -> None:
        for name in self._COLS:
            setattr(self, name, np.asarray(getattr(a, name)).tolist())


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
        # frames this class cannot attribute (an edge it does not know), or nothing to share
        self.usable = bool(len(ops)) and bool(np.isin(ops, _KNOWN).all())
        # per construct: counts where a test it makes flips (None: an `AnyOrder`, whose frame is a set)
        self.thresholds: list[list[int] | None] = []
        self.ok: list[bool] = []                        # per construct: its frames can be shared
        self.exit_lo: list[int] = []                    # per construct: the least count it lets out at (sets: 0)
        self.inner: dict[int, int] = {}                 # NFA state -> innermost construct holding it
        self.parent: list[int] = []                     # per construct: the innermost one around it (-1: none)
        if not self.usable:
            return
        call_src = np.repeat(np.arange(len(a.call_ptr) - 1), np.diff(np.asarray(a.call_ptr)))
        cols: _Lists | None = None                          # the walks below take a Python step per state
        # the constructs, their thresholds first: where no count can be far (most schemas'
        # bounds are within two tokens' length), nothing more is made
        found = []                                          # (kind, entry, thresholds, anchor)
        for j in np.flatnonzero(ops == HEAD).tolist():     # counter loops: the item, from the head
            lo, hi = int(a.call_lo[j]), int(a.call_hi[j])   # HEAD: once more if count < hi, out if >= lo
            found.append(("loop", int(a.call_to[j]), [lo, hi] if hi >= 0 else [lo], int(call_src[j]), lo))
        for j in np.flatnonzero(ops == ENTER).tolist():    # `Counted` strings and `AnyOrder`s: from the state entered
            first = int(a.call_to[j])
            if HEAD in ops[int(a.call_ptr[first]):int(a.call_ptr[first + 1])]:
                continue                                    # a counter loop's head (above)
            if a.eps_ptr[first + 1] > a.eps_ptr[first]:     # an `AnyOrder`'s entry (a `Counted`'s has bytes only)
                found.append(("set", first, None, int(call_src[j]), 0))
            else:
                cols = cols or _Lists(a)
                counted = self._counted(cols, first)
                found.append(("counted", first, counted, int(call_src[j]), counted[3]))
        if not any(t is not None and self._has_far(t if kind == "loop" else t[2])
                   for kind, _, t, _, _ in found if kind != "set"):
            self.usable = False
            return
        bodies = []
        cols = cols or _Lists(a)
        for kind, entry, t, anchor, _ in found:
            if kind == "loop":
                body, ok = self._body(cols, entry, anchor, -1)
                bodies.append((body, ok, t, anchor))     # (unbounded: its count stops at lo, its one threshold)
            elif kind == "set":
                # its states x, hub, after, t are made in a row (`FragmentBuilder._build_any_order`):
                # its own LEAVE edges go to x + 3, a nested one's elsewhere
                body, ok = self._body(cols, entry, -1, entry + 3)
                bodies.append((body, ok, None, anchor))
            else:
                body, ok, flips, _ = t
                bodies.append((body, ok, flips, anchor))
        for body, ok, flips, _anchor in bodies:
            self.thresholds.append(None if flips is None else sorted(set(flips)))
            self.ok.append(ok)
        self.exit_lo = [f[4] for f in found]
        # innermost: the smallest body holding a state (bodies nest or are disjoint)
        for size, c in sorted(((len(b[0]), c) for c, b in enumerate(bodies)), reverse=True):
            for q in bodies[c][0]:
                self.inner[q] = c
        # the construct around one: the innermost holding the state it is entered from
        parent = [self.inner.get(anchor, -1) for *_, anchor in bodies]
        self.parent = [-1 if p == c else p for c, p in enumerate(parent)]

    def _has_far(self, thresholds: list[int]) -> bool:
        """Whether some counts are far (`_far`) from all of `thresholds`."""
        pts = sorted({self.longest, *(t for t in thresholds if t > self.longest)})
        return any(b - a >= self.longest + 4 for a, b in zip(pts, pts[1:]))   # (above the last: not reached)

    @staticmethod
    def _counted(a: _Lists, first: int) -> tuple[set[int], bool, list[int], int]:
        """The NFA states of a `Counted` string entered at `first` (its automaton's states and
        gates), whether only its own edges are met, and the counts where a test of its gates
        (``lo <= count <= hi``), ticks (``lo <= count + 1 <= hi``) or exits (``count >= lo``) flips, and
        the least count an exit lets out at."""
        edge_ptr, edge_dst = a.edge_ptr, a.edge_dst
        call_ptr, call_op, call_to, call_lo, call_hi = a.call_ptr, a.call_op, a.call_to, a.call_lo, a.call_hi
        seen = {first}
        todo = [first]
        ok = True
        flips: list[int] = []
        exits: list[int] = []
        while todo:
            s = todo.pop()
            nxt = edge_dst[edge_ptr[s]:edge_ptr[s + 1]]
            if a.eps_ptr[s + 1] > a.eps_ptr[s]:
                ok = False
            for j in range(call_ptr[s], call_ptr[s + 1]):
                op = call_op[j]
                if op in (GATE, TICK, EXIT):
                    lo, hi = call_lo[j], call_hi[j]
                    flips += [lo - 1, lo] if op == TICK else [lo]
                    if op == EXIT:
                        exits.append(lo)
                    if op != EXIT:
                        if hi >= 0:
                            flips += [hi, hi + 1]
                        nxt.append(call_to[j])
                else:
                    ok = False
            for t in nxt:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return seen, ok, flips, min(exits, default=0)

    @staticmethod
    def _body(a: _Lists, start: int, head: int, leave_to: int) -> tuple[set[int], bool]:
        """The NFA states of a construct from `start`, over calls and through the constructs
        nested in it: a counter loop's item, up to the INC back to its `head`; an `AnyOrder`'s
        members and tests, up to its LEAVE edges to `leave_to`. And whether only the kinds of
        edges `key` knows are met (and, for an `AnyOrder`, its own LEAVE)."""
        eps_ptr, eps_dst, edge_ptr, edge_dst = a.eps_ptr, a.eps_dst, a.edge_ptr, a.edge_dst
        call_ptr, call_op, call_dst, call_to = a.call_ptr, a.call_op, a.call_dst, a.call_to
        seen = {start}
        todo = [start]
        ok = True
        left = leave_to < 0
        while todo:
            s = todo.pop()
            nxt = eps_dst[eps_ptr[s]:eps_ptr[s + 1]] + edge_dst[edge_ptr[s]:edge_ptr[s + 1]]
            for j in range(call_ptr[s], call_ptr[s + 1]):
                op = call_op[j]
                if op in (REG, FREE, ENTER):
                    nxt.append(call_dst[j])                 # a call's return, a nested construct's entry
                elif op == HEAD:
                    nxt += [call_to[j], call_dst[j]]
                elif op == INC:
                    if call_dst[j] != head:
                        nxt.append(call_dst[j])
                elif op == SPLICE:
                    nxt.append(call_to[j])                  # a lazy rule's body, in place (no frame)
                elif op == LEAVE and call_to[j] == leave_to:
                    left = True                             # its own way out
                elif op in (GATE, TICK, EXIT, LEAVE) or op in _SET_OPS:
                    nxt.append(call_to[j])                  # inside a nested `Counted` or `AnyOrder`
                else:
                    ok = False
            for t in nxt:
                if t == head:
                    ok = False                              # only its own INC goes back there
                elif t not in seen:
                    seen.add(t)
                    todo.append(t)
        return seen, ok and left

    def _parts(self, state: int) -> tuple[bool, list[tuple[int, list[tuple[int, int, int]]]]] | None:
        """(accepting, configurations): each an NFA state and its frames from the top, as (frame,
        call edge kind, loop: -1 for a call); None if a counter frame cannot be attributed."""
        d = self.dfa
        n = d._n
        ret, up, depth = d._stk_ret, d._stk_parent, d._stk_depth
        cfgs = d._cfg_data[d._cfg_ptr[state]:d._cfg_ptr[state + 1]].tolist()
        accepting = bool(cfgs) and cfgs[0] < 0
        parts = []
        for c in cfgs[accepting:]:
            k, p = divmod(c, n)
            pos, last = p, -1
            frames = []
            while k > 0:
                r = int(ret[k])
                below = int(up[k])
                if r >= 0:                                   # a call: its return state is where we are below it
                    pos, last = r, -1
                    frames.append((r, REG if depth[k] > depth[below] else FREE, -1))
                else:
                    loop = self.inner.get(pos, -1) if last < 0 else self.parent[last]
                    if loop < 0 or not self.ok[loop]:
                        return None
                    frames.append((r, ENTER, loop))
                    last = loop
                k = below
            parts.append((p, frames))
        return accepting, parts

    def _far(self, construct: int, count: int) -> int:
        """The region of `count` (how many of its construct's thresholds lie below it) if it is far
        from all of them, else -1. Far: no threshold between one below it and a token's length
        (in bytes) and one above it, so that every test the construct makes on it comes out the
        same for the next token; and above a token's length, so that a token later it is told
        from a frame of the construct entered within the token (`moved`)."""
        t = self.thresholds[construct]
        if t is None or count <= self.longest + 1:
            return -1                                       # (an `AnyOrder`'s set is kept as it is)
        i = bisect_left(t, count - 1)
        if i < len(t) and t[i] <= count + self.longest + 1:
            return -1
        return i

    def key(self, state: int) -> tuple | None:
        """The class of DFA `state` (None: it holds no count far from its bounds, or
        a frame this class cannot attribute): its configurations, each as (NFA state,
        frames from the top), with the far counts replaced by `FAR`."""
        if not self.usable:
            return None
        got = self._parts(state)
        if got is None:
            return None
        accepting, parts = got
        far = False
        out = []
        for p, frames in parts:
            masked = []
            for r, _op, loop in frames:
                region = self._far(loop, -2 - r) if loop >= 0 else -1
                if region >= 0:
                    masked.append(FAR + region)
                    far = True
                else:
                    masked.append(r)
            out.append((p, tuple(masked)))
        if not far:
            return None
        out.sort()
        return (accepting, tuple(out))

    def min_bytes(self, state: int) -> int:
        """A lower bound on the bytes of every completion from DFA `state` (0: none known).

        A configuration accepts only once every frame is popped, and a counter loop or a
        `Counted` string pops its frame at a count of at least its exit bound (`exit_lo`),
        each count a byte at least further (an item is never empty, a tick is a character).
        So a configuration needs the largest of those differences, the state the least
        over its configurations: under ``minLength: 5000`` a count of 300 needs 4,700
        bytes, which the budget planner's searches need not look for within a token."""
        if not self.usable:
            return 0
        got = self._parts(state)
        if got is None or got[0]:
            return 0
        best = -1
        for _p, frames in got[1]:
            need = 0
            for r, _op, loop in frames:
                if loop >= 0:
                    need = max(need, self.exit_lo[loop] - (-2 - r))
            if best < 0 or need < best:
                best = need
        return max(best, 0)

    def shift(self, source: int, state: int) -> dict[int, int] | None:
        """Per loop, what `state`'s counts add to those of `source`, its twin (same `key`), when
        moving every count of those loops by it makes `source` into `state`; else None.

        Every frame of a loop moved must be far in `source` (so that, a token later, its
        frames past the token's length are the moved ones, see `moved`)."""
        a, b = self._parts(state), self._parts(source)
        if a is None or b is None:
            return None
        counts: dict[int, list[int]] = {}
        near: set[int] = set()
        for _p, frames in b[1]:
            for r, _op, loop in frames:
                if loop >= 0:
                    if self._far(loop, -2 - r) >= 0:
                        counts.setdefault(loop, []).append(-2 - r)
                    else:
                        near.add(loop)
        if near & counts.keys():
            return None
        mine: dict[int, int] = {}
        for _p, frames in a[1]:
            for r, _op, loop in frames:
                if loop in counts:
                    mine[loop] = min(mine.get(loop, -2 - r), -2 - r)
        if mine.keys() != counts.keys():
            return None
        delta = {loop: mine[loop] - min(c) for loop, c in counts.items()}
        if self._move(b, delta) != self._move(a, {}):
            return None
        return delta

    def _move(self, got: tuple, delta: dict[int, int]) -> tuple:
        """`_parts` with the counts of `delta`'s loops moved (those past a token's length), comparable."""
        accepting, parts = got
        longest = self.longest
        out = []
        for p, frames in parts:
            moved = []
            for r, op, loop in frames:
                if loop in delta and -2 - r > longest:
                    r -= delta[loop]
                moved.append((r, op))
            out.append((p, tuple(moved)))
        out.sort()
        return accepting, tuple(out)

    def moved(self, state: int, delta: dict[int, int]) -> int | None:
        """The DFA state of `state` with its counts moved by `delta` (see `shift`), interned
        without a closure; None if a frame of `state` cannot be attributed."""
        got = self._parts(state)
        if got is None:
            return None
        accepting, parts = self._move(got, delta)
        return self.dfa.intern_frames(accepting, [(p, list(reversed(frames))) for p, frames in parts])
