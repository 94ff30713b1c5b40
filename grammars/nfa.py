"""Thompson NFA over bytes, with rule calls, built from a `Grammar`.

Every rule of the grammar becomes a fragment `start -> ... -> end` of NFA
states. States carry three kinds of edges:

- byte edges `(mask, target)`: consume one byte whose bit is set in `mask`;
- epsilon edges: move without consuming;
- call edges `(rule, ret)`: run `rule` from its start; when it reaches its end,
  continue at `ret` (the lazy DFA keeps the return states on a stack); the
  same columns hold the frame edges of counter loops (ENTER, HEAD, INC) and
  of `AnyOrder` objects (ENTER, PICK, CHECK, COUNT, CLEAR, LEAVE).
  (A lazy rule's only call becomes a SPLICE once its body is built: an
  epsilon move into the body, whose end goes on to `ret`, no frame.)

Construction is linear in the size of the IR *without* expanding counted
repeats: it never unrolls a bound. `Repeat(x, m, n)` with small bounds is
copied (`x{0,1}`, `x{2}`, a byte class up to 64 times); past that it becomes
a *counter loop*: an ENTER edge pushes a counter frame holding 0 on the
configuration's stack, the loop HEAD either runs `x` again (count < n) or pops
the frame and leaves (count >= m), and an INC edge after `x` bumps the count.
So `x{0,1000000}` costs four states, and the counter values live in the lazy
DFA's configurations, created only when generation reaches them. An
`AnyOrder` (a JSON object's members in any order) is entered the same way,
its frame the set of members taken, tested and updated by PICK, CHECK,
COUNT, CLEAR and LEAVE edges (`grammars.fragments` says what each does): O(n)
states for n members, where listing the orders takes n!. A large
node used again (a `$ref`'d definition, a shared object layout) becomes a
subroutine: a FREE call, which returns like a `Ref` but costs no nesting
depth, instead of another copy; small ones are copied from the edges
recorded for their first build. Alternatives that end in the same items
share one copy of that suffix, so "the first present member is i, then the
optional rest" layouts of JSON objects stay linear instead of quadratic.

Subschemas are built when first reached. An NFA made with ``lazy=True``
(the compiled DFA's, `constrained.dfa_jit.JitDFA`) does not build a labeled
node (a subschema: a property's value, an array's items, a branch) of
`lazy.LAZY_MIN` syntax nodes or more that surely ends without a rule
call: it calls a rule whose body does not exist yet. When the DFA first
follows that call, `build_lazy` builds the body, appending states and edges,
and the DFA goes on with every state it had. So compile builds the first
level of a schema, and a walk builds the subschemas it enters, each whole
(deferring inside a body too cost more than it saved: a call frame per level
in every configuration there, and the arrays rebuilt per body). Such a rule's
`need` is 0 (it ends without a rule call), which is what the NFA assumes
before the body exists, so nothing computed before changes when it is built.
Nothing that a text of at most `fragments.OPENING` bytes reaches from a rule's
start is deferred (an object's body after its `{`: the first mask's tokens
would build it at once), and an object's body with `any_order` (an
`AnyOrder`) only from `lazy.LAZY_MIN_IN_BODY` syntax nodes (a body built in a
mask costs a pass over the whole NFA's arrays).
On maskbench-dev the median schema's NFA has 486 states at compile instead
of about 800, and its NFA build takes 275 us instead of 500.

Why counters rather than symbolic derivatives (llguidance's derivre): the
lazy subset construction over Thompson NFAs, its compiled kernels, the
vocabulary-trie walks and the slice machinery all work on configurations
`stack * N + state`; a counter is one more kind of stack frame, so every
one of them carries over unchanged, and the NFA stays O(size of the schema).

`need[s]` is the least call-nesting budget with which state `s` can still reach
the end of its own rule (`INF` if it never can). The DFA uses it to keep only
configurations that can finish, so every DFA state it builds is live.

Example:
    >>> from grammars.ast import Grammar, literal, star
    >>> nfa = NFA(Grammar({"start": star(literal(b"ab"))}))
    >>> nfa.need[nfa.rule_start[0]]
    0
"""

from __future__ import annotations

import gc
import struct
from functools import cached_property
from typing import Mapping

import numpy as np

from grammars.ast import Grammar, Node
from grammars.fragments import (  # noqa: F401 - re-exported: the call edge kinds and `share` are part of the NFA's API
    CHECK, CLEAR, COUNT, ENTER, EXIT, FREE, GATE, HEAD, INC, LEAVE, PICK, REG, SPLICE, SUBROUTINE_MIN, TICK, UNROLL_LIMIT,
    FragmentBuilder, share,
)
from grammars.lazy import _COLUMNS, LazyRules
from grammars.need import INF, compute_need
from grammars.nfa_arrays import NFAArrays, per_state
from grammars.nfa_preludes import Prelude, Preludes

__all__ = ["NFA", "INF", "gc_paused", "share", "REG", "FREE", "ENTER", "HEAD", "INC", "SPLICE", "PICK",
           "CHECK", "LEAVE", "COUNT", "CLEAR", "GATE", "TICK", "EXIT", "UNROLL_LIMIT", "SUBROUTINE_MIN"]


class gc_paused:  # noqa: N801 - used as a function: ``with gc_paused():``
    """Pause the cyclic GC: building 10^5 small lists/tuples otherwise triggers
    collections that rescan every live object (measured 2-3x slower). A class, not a
    `contextmanager` generator: entered two or three times per compile, that was a few
    microseconds each after an idle wait."""

    __slots__ = ("_was",)

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


# the columns of `NFA._columns` by table: epsilon, byte and call edges
_GROUPS = ((0, 2), (2, 5), (5, 12))


class NFA(LazyRules, Preludes, FragmentBuilder):
    """Byte-level NFA of a grammar; rule 0 is the start rule.

    Edges are kept as numpy CSR arrays (`arrays`); per-state adjacency as
    tuples (`eps`, `edges`, `calls`, the shared empty tuple for states without
    such edges) is built on first use, for the Python DFA.

    Example:
        >>> from grammars.ast import Grammar, literal
        >>> nfa = NFA(Grammar({"start": literal(b"hi")}))
        >>> [len(e) for e in nfa.edges]
        [1, 1, 0]
    """

    # Switches for differential tests: replay recorded fragments; skip the
    # finishability search when the structure guarantees its answer; call large
    # nodes built again as subroutines instead of copying them; build `compact`
    # nodes from their minimal DFA (templates of shared nodes recorded while it
    # was on keep theirs: switch it off with `fragments._TEMPLATES` emptied).
    replay = True
    fast_need = True
    subroutines = True
    minimal_dfas = True
    preludes = True
    # A compiled `compute_need` (same arguments and result), installed by `constrained.dfa_jit`
    # when numba is there; grammars itself stays free of numba.
    need_kernel = None
    # Compiled `_compute_need` and `_csr` straight from `_columns` (see `constrained.need_kernel`),
    # installed with `need_kernel`: (n, rule_start, rule_end, eps, byte, call, max_depth) -> need,
    # and (n, eps, byte, call, rule_start) -> the CSR columns of `NFAArrays`, masks aside.
    need_columns_kernel = None
    csr_kernel = None
    # Both in one call, with `is_end`: (n, rule_start, need_start, rule_end, eps, byte, call,
    # max_depth, fast) -> (need, is_end, the CSR columns); used when installed (with the others).
    finish_kernel = None

    def __init__(self, grammar: Grammar, *, max_depth: int = 64, lazy: bool = False) -> None:
        with gc_paused():
            self._init(grammar, max_depth, lazy)

    def _init(self, grammar: Grammar, max_depth: int, lazy: bool) -> None:
        prelude = self._prelude(grammar)
        names = [grammar.start] + [n for n in grammar.rules if n != grammar.start]
        # its rule is 1; eager, its subroutines keep their numbers 2, 3, ...; lazy, they are
        # numbered when it is built (see `_defer_prelude`)
        kept = (prelude.names[1:2] if lazy else prelude.names[1:]) if prelude is not None else []
        if prelude is not None:
            names = [grammar.start, *kept] + [n for n in names[1:] if n != prelude.names[1]]
        self._setup(names, grammar.info, lazy)
        if prelude is not None:
            if lazy:
                self._defer_prelude(prelude)
            else:
                self._resume(prelude)
        built = 1 + len(kept)
        for i, name in enumerate(names):
            if i == 0 or i >= built:
                self.rule_start[i] = start = self._new()
                self._entries.add(start)
                self._home = self._homes.get(name)
                self.rule_end[i] = self._build(grammar.rules[name], start)
        self._build_pending()
        self._finish(max_depth)

    def _setup(self, names: list[str], info: Mapping[str, object], lazy: bool = False) -> None:
        """Empty columns and tables for rules `names` (subroutines are added while building)."""
        self.rule_names: list[str] = names[:]   # subroutines get names "sub:<index>"
        self.rule_index: dict[str, int] = {n: i for i, n in enumerate(names)}
        # Edges are collected as flat int columns while building (no tuple per
        # edge), then grouped per state.
        self._count = 0
        self._eps_src: list[int] = []
        self._eps_dst: list[int] = []
        self._byte_src: list[int] = []
        self._byte_mask: list[int] = []  # mask ids, numbered in order of first use
        self._mask_id: dict[int, int] = {}
        self._byte_dst: list[int] = []
        self._call_src: list[int] = []
        self._call_rule: list[int] = []      # -1 for counter edges
        self._call_dst: list[int] = []
        self._call_op: list[int] = []
        self._call_to: list[int] = []        # counter edges: the state they go to (rule calls: -1)
        self._call_lo: list[int] = []
        self._call_hi: list[int] = []
        self._subs: dict[int, int] = {}      # id(node) -> its subroutine's rule index
        self._no_subs = 0                    # > 0 while recording a template (see `_build_shared`)
        self._pending: list[tuple[int, tuple[int, ...] | None, Node]] = []   # subroutine bodies to make
        self._labels: dict[int, tuple[Node, str]] = dict(info.get("labels") or {})
        self._tries: dict[int, tuple] = dict(info.get("tries") or {})   # see `fragments.trie_complement`
        # (first state, end state, label): the states each labeled node built (see `origin`)
        self.origins: list[tuple[int, int, str]] = []
        # per `AnyOrder` whose additional keys read every name (`FragmentBuilder._open_keys`): the
        # states its additional key spans and those of each member's key (None: not found), each
        # ``(first, end)``, see `constrained.key_twins`
        self.key_entries: list[tuple[tuple[int, int], tuple[tuple[int, int] | None, ...]]] = []
        # node -> (entry, first state, end state, exit, edge offsets) of its first build
        self._frags: dict[int, tuple[int, ...]] = {}
        self._frag_nodes: list[Node] = []    # the nodes of `_frags`, alive: their ids stay theirs
        self._dead = False  # built a NOTHING (some states may not reach their rule's end)
        self._head_tables: tuple[np.ndarray, ...] = ()   # the prelude's part of `_columns`, if any
        self._stub: int | None = None        # lazy: the state count when the columns were thawed (`_thaw_columns`)
        # grammar rules first; subroutines are appended while building them
        self.rule_start: list[int] = [-1] * len(names)
        self.rule_end: list[int] = [-1] * len(names)
        # lazy rules (see `build_lazy`): rule -> its node, while its body is not made (None: built eagerly)
        self._lazy: dict[int, Node] | None = {} if lazy else None
        self._lazy_rule_of: dict[int, int] = {}      # id(node) -> its lazy rule
        self._placeholder: dict[int, int] = {}       # lazy rule -> the end state standing in for its body
        # states no byte leads to from their rule's start (its own, or a lazy body's): nodes built
        # from them are not deferred (see `_lazy_call`)
        self._entries: set[int] = set()
        # states 1 to `OPENING` bytes lead to from an entry (an object's `{`, an array's `[{`) -> that
        # count: nodes built from them are not deferred either (see `_lazy_call`)
        self._opened: dict[int, int] = {}
        self._null_memo: dict[int, bool] = {}        # `surely_nullable`'s, for `_entries`
        self._homes: Mapping[str, str] = info.get("homes") or {}
        self._home: str | None = None                # the label of the rule's (or lazy body's) own subschema
        self._owner: str | None = None               # the label of the labeled node being built
        self._in_body = False                         # building a lazy body: its parts are built with it
        self._free_memo: dict[int, bool] = {}        # see `fragments._ends_free`
        self._built_labels: list[int] = []           # ids of the labeled nodes built (`_forget_built`)
        self._built_tries: list[int] = []            # ids of the key complements built
        self._lazy_prelude: Prelude | None = None   # the prelude whose rule (1) waits to be built, if any

    def _builder_columns(self) -> tuple[list[int], ...]:
        return (self._eps_src, self._eps_dst, self._byte_src, self._byte_mask, self._byte_dst, self._call_src,
                self._call_rule, self._call_dst, self._call_op, self._call_to, self._call_lo, self._call_hi)

    def _build_pending(self) -> None:
        for rule, frag, node in self._pending:      # subroutine bodies: copies, which make no new subroutines
            self.rule_start[rule] = start = self._new()
            self.rule_end[rule] = self._build_shared(node, start) if frag is None else self._copy(frag, start)
            if id(node) in self._labels:
                self.origins.append((start, self._count, self._labels[id(node)][1]))
        self._pending = []

    def _finish(self, max_depth: int) -> None:
        """`need` and the CSR arrays from the columns; drops what only building needed
        (kept while a lazy rule has no body yet).

        A lazy rule without its body ends at a placeholder: a state of its own,
        no edges, an end, so `need` counts the call as free (which `_lazy_call`
        made sure it is); its calls go nowhere (`call_to` -1) until `build_lazy`.
        """
        for rule in self._lazy or ():
            if rule not in self._placeholder:
                self._placeholder[rule] = self.rule_end[rule] = self._new()
        self.max_depth = max_depth
        cols = self._columns()
        if self.finish_kernel is not None:
            self._finish_native(max_depth, cols)
        else:
            self.is_end = np.zeros(self._count, dtype=np.bool_)     # numpy: the DFA kernels take it as is
            self.is_end[self.rule_end] = True
            self.need: list[int] | np.ndarray = self._compute_need(max_depth, cols)
            self.arrays = self._csr(cols)
        if self._lazy:
            self._head_tables = cols          # the next `_columns` converts only what is built after
            self._forget_built()
            self._freeze_columns()
            return
        del self._frags, self._frag_nodes, self._dead, self._mask_id, self._eps_src, self._eps_dst, self._byte_src, self._byte_mask, self._byte_dst
        del self._call_src, self._call_rule, self._call_dst, self._call_op, self._call_to, self._call_lo, self._call_hi
        del self._subs, self._pending, self._labels, self._tries, self._head_tables, self._stub
        del self._lazy_rule_of, self._free_memo, self._entries, self._opened, self._null_memo, self._built_labels
        del self._built_tries

    def _finish_native(self, max_depth: int, cols: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """`is_end`, `need` (`_compute_need`) and `arrays` (`_csr`) in one `finish_kernel` call."""
        starts = np.array(self.rule_start, dtype=np.int64)
        fast = self._need_is_trivial()
        need_start = starts if fast or not self._placeholder else np.array(self._need_starts(), dtype=np.int64)
        need, self.is_end, eps_ptr, eps_dst, edge_ptr, edge_dst, edge_mask, *calls = self.finish_kernel(
            self._count, starts, need_start, np.array(self.rule_end, dtype=np.int64), *cols, max_depth, fast)
        self.need = need
        self.arrays = NFAArrays(eps_ptr, eps_dst, edge_ptr, edge_dst, edge_mask, tuple(self._mask_id), *calls)

    def _need_is_trivial(self) -> bool:
        """Without rule calls and without dead parts (NOTHING, empty byte sets) every Thompson
        fragment state reaches its fragment's exit, hence its rule's end: need is 0 everywhere."""
        calls = self._head_tables[2] if self._head_tables else None     # (the lists may hold stand-ins for it)
        return (self.fast_need and REG not in self._call_op and not self._dead and 0 not in self._mask_id
                and (calls is None or not (calls[3] == REG).any()))

    def _need_starts(self) -> list[int]:
        """Rule starts for `need`: a lazy rule without its body starts at its placeholder."""
        if not self._placeholder:
            return self.rule_start
        return [self._placeholder[r] if x < 0 else x for r, x in enumerate(self.rule_start)]

    def _columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The edge columns in numpy: epsilon (src, dst), byte (src, dst, mask id)
        and call edges (src, rule, dst, op, to, lo, hi), as rows.

        All of them go through one `struct.pack` of one flat list (6 ns per Python
        int; `np.fromiter` took 15, `np.array` more, and a call per column adds
        up). A prelude's part was converted when it was made, so only what
        follows it is converted here (a third of an open object's edges)."""
        cols = [getattr(self, name) for name in _COLUMNS]
        heads = self._head_tables or (None, None, None)
        skip = [0 if h is None else h.shape[1] for h in heads]
        flat: list[int] = []
        for (a, b), k in zip(_GROUPS, skip):
            for col in cols[a:b]:
                flat += col[k:] if k else col
        # a writable buffer: numba would compile its kernels again for read-only arrays
        values = np.frombuffer(bytearray(struct.pack(f"{len(flat)}q", *flat)), np.int64)
        out = []
        at = 0
        for (a, b), k, head in zip(_GROUPS, skip, heads):
            n = len(cols[a]) - k
            table = values[at:at + (b - a) * n].reshape(b - a, n)
            at += (b - a) * n
            out.append(table if not k else head if not n else np.concatenate((head, table), axis=1))
        return out[0], out[1], out[2]

    def _csr(self, cols: tuple[np.ndarray, np.ndarray, np.ndarray]) -> "NFAArrays":
        """The edge columns (`_columns`) grouped per source state (order kept)."""
        n = self._count

        def group(table: np.ndarray) -> tuple[np.ndarray, ...]:
            ptr = np.zeros(n + 1, dtype=np.int64)
            if not table.shape[1]:  # e.g. no calls
                return (ptr, *table[1:])
            order = np.argsort(table[0], kind="stable")
            np.cumsum(np.bincount(table[0], minlength=n), out=ptr[1:])
            return (ptr, *table[1:, order])

        # (in order of first use, the ids the edges have: sorting them took three passes of
        # 256-bit ints, 15-30 us a compile; the byte classes rank them where they need to)
        masks = tuple(self._mask_id)
        if self.csr_kernel is not None:
            eps_ptr, eps_dst, edge_ptr, edge_dst, edge_mask, *calls = self.csr_kernel(
                n, *cols, np.array(self.rule_start, dtype=np.int64))
            return NFAArrays(eps_ptr, eps_dst, edge_ptr, edge_dst, edge_mask, masks, *calls)
        eps, byte, call = cols
        eps_ptr, eps_dst = group(eps)
        edge_ptr, edge_dst, edge_mask = group(byte)
        call_ptr, call_rule, call_dst, call_op, call_to, call_lo, call_hi = group(call)
        if len(call_rule):              # rule calls go to their rule's start
            starts = np.array(self.rule_start, dtype=np.int64)
            call_to = np.where(call_rule >= 0, starts[np.maximum(call_rule, 0)], call_to)
        return NFAArrays(eps_ptr, eps_dst, edge_ptr, edge_dst, edge_mask, masks, call_ptr, call_rule, call_dst,
                         call_op, call_to, call_lo, call_hi)

    # Per-state adjacency as tuples, for the Python DFA (built on first use).

    @cached_property
    def eps(self) -> list[tuple[int, ...]]:
        a = self.arrays
        return per_state(a.eps_ptr, a.eps_dst.tolist())

    @cached_property
    def edges(self) -> list[tuple[tuple[int, int], ...]]:
        a = self.arrays
        masks = a.masks
        return per_state(a.edge_ptr, [(masks[m], t) for m, t in zip(a.edge_mask.tolist(), a.edge_dst.tolist())])

    @cached_property
    def calls(self) -> list[tuple[tuple[int, int, int, int, int], ...]]:
        """Per state, its call edges as (op, to, dst, lo, hi) (see `REG` ... `INC`)."""
        a = self.arrays
        return per_state(a.call_ptr, list(zip(a.call_op.tolist(), a.call_to.tolist(), a.call_dst.tolist(),
                                               a.call_lo.tolist(), a.call_hi.tolist())))

    @property
    def num_states(self) -> int:
        return self._count

    def forward(self, s: int) -> int:
        """Follow pure epsilon hops (one eps edge, nothing else) from `s`.

        Return states are canonicalized this way so that calls whose
        continuations coincide (`x ("," x)*`) push the same stack entry, which
        keeps the DFA of recursive grammars from splitting equivalent states.
        """
        a = self.arrays
        eps_ptr, edge_ptr, call_ptr = a.eps_ptr, a.edge_ptr, a.call_ptr
        seen = {s}
        while (eps_ptr[s + 1] - eps_ptr[s] == 1 and edge_ptr[s + 1] == edge_ptr[s] and call_ptr[s + 1] == call_ptr[s]
               and not self.is_end[s] and int(a.eps_dst[eps_ptr[s]]) not in seen):
            s = int(a.eps_dst[eps_ptr[s]])
            seen.add(s)
        return s

    def origin(self, states: list[int]) -> str | None:
        """The label (JSON path, regex) of the innermost labeled node that built one of
        `states`, the deepest of them; None if none is labeled. For error messages only."""
        best: tuple[int, str] | None = None
        for s in states:
            inner = min(((b - a, lab) for a, b, lab in self.origins if a <= s < b), default=None)
            if inner is not None and (best is None or len(inner[1]) > len(best[1])):
                best = inner
        return None if best is None else best[1]

    def forward_many(self, states: np.ndarray) -> np.ndarray:
        """`forward` of each of `states` (int64), vectorized: chains of pure epsilon hops are
        followed a step at a time for all of them at once; the few still moving after 32
        steps (long chains, cycles) take the plain `forward`."""
        a = self.arrays
        hop = ((np.diff(a.eps_ptr) == 1) & (np.diff(a.edge_ptr) == 0) & (np.diff(a.call_ptr) == 0)
               & ~self.is_end)
        nxt = np.arange(self.num_states, dtype=np.int64)
        nxt[hop] = a.eps_dst[a.eps_ptr[:-1][hop]]
        cur = np.asarray(states, dtype=np.int64)
        for _ in range(32):
            moved = nxt[cur]
            if (moved == cur).all():
                return cur
            cur = moved
        out = np.asarray(states, dtype=np.int64).copy()
        done = nxt[cur] == cur
        out[done] = cur[done]
        out[~done] = [self.forward(int(t)) for t in out[~done]]
        return out

    def masks(self) -> set[int]:
        """All distinct byte masks on edges (they define the byte classes)."""
        return set(self.arrays.masks)

    # -- finishability ------------------------------------------------------

    def _compute_need(self, max_depth: int, cols: tuple[np.ndarray, np.ndarray, np.ndarray]) -> list[int]:
        """need[s]: least nesting budget with which s reaches its rule's end (see `grammars.need`).

        A counter loop's item is a pseudo-rule (from the loop's body to the
        state with its INC edge), and the loop head calls it like a subroutine,
        returning to the loop's exit: the exit needs at least one iteration
        when the lower bound is positive (the DFA checks the count itself);
        with a lower bound of 0 the head also reaches the exit directly. ENTER
        is an epsilon move; INC is not followed (the pseudo-rule ends there).
        An `AnyOrder`'s frame tests (PICK, CHECK, COUNT, LEAVE, CLEAR) are epsilon
        moves too: `need` ignores the set taken, and the compiler keeps every
        set reachable completable instead (see `grammars.json_any_order`).
        """
        n = self.num_states
        if self._need_is_trivial():
            return [0] * n
        rule_start = self._need_starts()
        if self.need_columns_kernel is not None:
            return self.need_columns_kernel(n, np.array(rule_start, dtype=np.int64),
                                            np.array(self.rule_end, dtype=np.int64), *cols, max_depth)
        eps, byte, call = cols
        c_src, c_rule, c_dst, c_op, c_to, c_lo, _ = call
        # a loop head calls its item (body .. the state with the INC edge back to the head)
        inc = c_op == INC
        inc_to, inc_src = c_to[inc], c_src[inc]
        head = np.flatnonzero(c_op == HEAD)
        order = np.argsort(inc_to, kind="stable")
        item_end = inc_src[order][np.searchsorted(inc_to[order], c_src[head])] if len(head) else head
        n_rules = len(self.rule_start)
        starts = np.concatenate((np.array(rule_start, dtype=np.int64), c_to[head]))
        ends = np.concatenate((np.array(self.rule_end, dtype=np.int64), item_end))
        rule = c_rule.copy()
        rule[head] = n_rules + np.arange(len(head))
        skip0 = head[c_lo[head] == 0]                  # lower bound 0: the head also reaches the exit
        # epsilon moves: to the loop head, a body, and an `AnyOrder`'s frame tests (PICK ...)
        moves = (c_op == ENTER) | (c_op == SPLICE) | (c_op >= PICK)
        enter = np.flatnonzero(moves)
        src = np.concatenate((eps[0], byte[0], c_src[skip0], c_src[enter]))
        dst = np.concatenate((eps[1], byte[1], c_dst[skip0], c_to[enter]))
        keep = (c_op != INC) & ~moves
        calls = (c_src[keep], rule[keep], c_dst[keep], (c_op[keep] != REG).astype(np.int64))
        if self.need_kernel is not None:
            return self.need_kernel(n, starts, ends, src, dst, *calls, max_depth=max_depth)
        return compute_need(n, starts.tolist(), ends.tolist(), src.tolist(), dst.tolist(),
                            *(c.tolist() for c in calls), max_depth=max_depth)
