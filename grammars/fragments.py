"""Building NFA fragments: Thompson construction over `grammars.ast` nodes, without unrolling.

`FragmentBuilder` holds the construction methods of `grammars.nfa.NFA`
(which says what the NFA is); this module says how its pieces are made:

- counted repeats past `UNROLL_LIMIT` become counter loops (ENTER, HEAD and
  INC call edges; the count is a frame on the DFA configuration's stack); a
  nullable item loops as `non_empty(item)`, so no round is empty;
- an `AnyOrder` (object members in any order) pushes a bit-set frame, the
  members taken, tested and updated by PICK, CHECK, COUNT, CLEAR and LEAVE
  edges: O(members) states, where listing the orders would take n!;
- a node built again is copied from the edges recorded for its first build,
  or, from `SUBROUTINE_MIN` states on, called as a subroutine (FREE call)
  whose body is made after the grammar's rules;
- `share`d nodes common to many grammars (whitespace, string characters,
  numbers, the any-value rule) are built once per process and replayed from a
  template (rule calls in it kept by name); from `SUBROUTINE_MIN` states they
  are subroutines from their first use, the template recorded off to the side
  so that an NFA's shape never depends on what the process built before;
- `compact` nodes (small languages that a tree of states spells with many:
  "at most 17 digits, a point somewhere among them" is a triangle of
  copies) are built from their minimal DFA, one state per DFA state,
  determinized once per process;
- alternatives share common suffixes and left-factor leading byte sets;
- a `trie_complement` (JSON keys other than the declared names) is built
  straight from its trie, one state per trie node, not from its alternations.

Example:
    >>> from grammars.ast import Grammar, byte_range, repeat
    >>> from grammars.nfa import NFA
    >>> NFA(Grammar({"start": repeat(byte_range(48, 57), 0, 10**6)})).num_states
    5
"""

from __future__ import annotations

from typing import Iterable

from grammars.ast import (COUNT_MAX, NOTHING, Alt, AnyOrder, ByteSet, Counted, Node, Ref, Repeat, Seq, non_empty, repeat,
                          surely_nullable)
from grammars.errors import StateBudgetError
from grammars.native import checkpoint

try:
    import cython
except ImportError:  # the source runs as plain Python, without Cython: the decorator does nothing
    class cython:  # noqa: N801 - stands in for the module
        @staticmethod
        def cclass(cls: type) -> type:
            return cls

__all__ = ["FragmentBuilder", "share", "compact", "trie_complement", "automaton", "REG", "FREE", "ENTER", "HEAD", "INC", "SPLICE",
           "PICK", "CHECK", "LEAVE", "COUNT", "CLEAR", "GATE", "TICK", "EXIT", "UNROLL_LIMIT", "SUBROUTINE_MIN"]

# Kinds of call edge (`NFAArrays.call_op`). REG: a rule call (`Ref`), one level of
# nesting depth; FREE: a subroutine call, no depth; ENTER: push a counter frame
# holding 0, go to the loop head; HEAD: count < hi: enter the item, count >= lo:
# pop the frame and go to the loop exit (`call_dst`); INC: count + 1, back to the head.
# SPLICE: a lazy rule's only call once its body is built (`NFA.build_lazy`): an epsilon
# move to the body's start, no frame; the body's end goes on to the call's exit.
# An `AnyOrder` (object members in any order) is entered by ENTER too, its frame a bit set
# `bits` (stored as -2 - bits, like a count), and then, each going to `to` only if:
# PICK: bits & hi == 0 (hi: member lo's bans, its own bit included); the frame becomes
# bits | 1 << lo. CHECK: lo >= 0 and bit lo is clear, or bits & hi == hi (lo -1: always the
# mask test). COUNT: the count c (bits >> COUNT_SHIFT) is below hi (-1: no bound); c becomes
# min(c + 1, lo). LEAVE: c >= lo; pops the frame. CLEAR: bits & hi == 0 and, unless lo is -1,
# c < lo (some member can still be taken: the comma before it is allowed).
# A `Counted` automaton (a string's characters counted, `grammars.json_counted`) is entered by
# ENTER too, its frame the count c, and then, each going to `to` only if:
# GATE: lo <= c <= hi. TICK: lo <= c + 1 <= hi; the frame becomes c + 1. EXIT: c >= lo; pops the frame.
REG, FREE, ENTER, HEAD, INC, SPLICE, PICK, CHECK, LEAVE, COUNT, CLEAR, GATE, TICK, EXIT = range(14)
# A repeat is copied when its bound is at most this (a byte class: 8); else a counter loop.
UNROLL_LIMIT = 4
_BYTE_UNROLL_LIMIT = 8
# A node built again whose fragment has at least this many states becomes a subroutine.
# (16 before: on maskbench-dev, 6 makes JSON whitespace gaps and small values calls,
# median NFA build -19%, p99 -38%, and masks no slower: 17.8 vs 19.0 us mean.)
SUBROUTINE_MIN = 6
# A lazy NFA defers no subschema that a text of at most this many bytes leads to from its
# rule's start (an object's `{`, an array's `[{`): the first mask reads tokens such as `{"` and
# `[{"` from there, which would build it at once, and each deferred body built costs a pass over
# the whole NFA's arrays (`LazyRules.build_lazy`). On maskbench-dev (495 schemas, compile and
# first mask, warm, in process), 3 made the median schema 4% faster in declared order and 7%
# with `any_order` than 0, and 2 to 16 were within 1.5% of each other; in `python -m bench
# masks` (cold workers, beside llguidance) declared order was unchanged within the noise.
OPENING = 3


def _items(node: Node) -> tuple[Node, ...]:
    """A node as a sequence of items (an `Alt` branch flattened, unless it is `compact`)."""
    return node.items if type(node) is Seq and id(node) not in _COMPACT else (node,)


# Process-wide NFA fragments of nodes that many grammars contain (JSON
# whitespace, string characters, numbers): id(node) -> node, kept alive so
# that the id stays valid, and id(node) -> template (see `_template`).
_SHARED: dict[int, Node] = {}
_TEMPLATES: dict[int, tuple] = {}
_COMPACT: set[int] = set()

# A `compact` node whose minimal DFA has more states than this is built the generic way.
_COMPACT_MAX_STATES = 512


def share(node: Node) -> Node:
    """Mark `node` (which must stay immutable, as all nodes are) as common to
    many grammars: its NFA fragment is then built once per process and copied
    into later NFAs. Returns `node`.

    Example:
        >>> from grammars.ast import Grammar, byte_range, star
        >>> from grammars.nfa import NFA
        >>> gap = share(star(byte_range(32, 32)))
        >>> NFA(Grammar({"start": gap})).num_states == NFA(Grammar({"start": gap})).num_states
        True
    """
    if type(node) in (Seq, Alt, Repeat) and id(node) not in _SHARED:
        if len(_SHARED) >= 4096:  # a bound for callers sharing per-request nodes
            _SHARED.clear()
            _TEMPLATES.clear()
            _COMPACT.clear()
        _SHARED[id(node)] = node
    return node


def compact(node: Node) -> Node:
    """Mark `node` (no rule calls) to be built from its minimal DFA: one NFA state
    per DFA state (`grammars.minimize`), where a tree of Thompson states repeats
    itself, as digit budgets shared across a point do (`[1-9]\\d{0,15}\\.\\d+`
    with at most 17 digits: 123 states, 49 as a DFA). The DFA is built once per
    process, on first use, and kept only if smaller and within
    `_COMPACT_MAX_STATES`. Like `share`, it returns `node`.

    Example:
        >>> from grammars.ast import Grammar, byte_range, literal, seq, alt, repeat
        >>> from grammars.nfa import NFA
        >>> d = byte_range(48, 57)
        >>> def tri():  # i digits, a point, 1 to 8-i digits
        ...     return alt(*(seq(repeat(d, i, i), literal(b"."), repeat(d, 1, 8 - i)) for i in range(1, 8)))
        >>> NFA(Grammar({"start": tri()})).num_states, NFA(Grammar({"start": compact(tri())})).num_states
        (77, 25)
    """
    share(node)
    if id(node) in _SHARED:
        _COMPACT.add(id(node))
    return node


def _is_quote(node: Node) -> bool:
    """Whether `node` reads a lone `"`."""
    return type(node) is ByteSet and node.mask == 1 << 0x22


def word_trie(words: Iterable[str]) -> dict:
    """The trie of `words`: nested dicts keyed by character code, `None: True` where a word ends."""
    trie: dict = {}
    for w in words:
        checkpoint()                             # compiled: let other threads in (see `grammars.native`)
        node = trie
        for ch in w:
            node = node.setdefault(ord(ch), {})
        node[None] = True
    return trie


def trie_complement(tries: dict, node: Node, trie: dict, printable: int, rest: Node, leave: Node,
                    words: tuple[str, ...]) -> Node:
    """Note in `tries` (a grammar's ``info["tries"]``) that `node` is the
    complement of `words`, whose trie is `trie` (`word_trie`): from each trie node a text may end there (unless a word
    does), take a child's byte, or leave by a byte of `printable` that no child
    has, or by a text of `leave`, and go on with `rest`.
    Returns `node`, which must spell exactly that: without the note (another
    grammar, a copy of the node) it is built the generic way, same language.

    The NFA then builds it directly: one state per trie node with its byte
    edges, and one shared copy of `rest` and `leave` for the whole trie,
    instead of an alternation per trie node (about six states and a
    subroutine call each). The note lives as long as its grammar, not the process;
    an NFA that keeps it for a lazy body keeps `words` only (`NFA._forget_built`).
    """
    tries[id(node)] = (node, trie, printable, rest, leave, words)
    return node


def automaton(tries: dict, node: Node, edges: list[dict[int, int]], accepting: set[int]) -> Node:
    """Note in `tries` (a grammar's ``info["tries"]``, beside `trie_complement`'s notes) that `node`, an
    `Alt`, spells the automaton of `edges` (per state, target state -> byte mask; the start is state 0,
    every state reaches an accepting one) and `accepting`. The NFA then builds one state per
    automaton state, where the generic build of a node written from an automaton (by state
    elimination, its states' nodes shared) can copy a subroutine's body into each later one.
    Returns `node`, which must spell exactly that language."""
    tries[id(node)] = (node, edges, accepting)
    return node


def _template(nfa: "NFA", s: int, c0: int, e0: int, b0: int, k0: int, t: int) -> tuple:
    """A just-built fragment (entry `s`, states from `c0`, edges from e0/b0,
    exit `t`) with states renumbered from 0 and the entry as -1."""
    def rel(x: int) -> int:
        return -1 if x == s else x - c0

    inv = {v: k for k, v in nfa._mask_id.items()}
    masks: list[int] = []
    local: dict[int, int] = {}
    idx = []
    for i in nfa._byte_mask[b0:]:
        j = local.get(i)
        if j is None:
            j = local[i] = len(masks)
            masks.append(inv[i])
        idx.append(j)
    # rule calls by name (rule numbers differ between grammars), counter edges as they are
    calls = [(rel(a), op, b - c0, to - c0 if to >= 0 else -1, lo, hi, nfa.rule_names[r] if r >= 0 else None)
             for a, op, b, to, lo, hi, r in zip(nfa._call_src[k0:], nfa._call_op[k0:], nfa._call_dst[k0:],
                                                nfa._call_to[k0:], nfa._call_lo[k0:], nfa._call_hi[k0:],
                                                nfa._call_rule[k0:])]
    return (nfa._count - c0, rel(t), [rel(a) for a in nfa._eps_src[e0:]], [b - c0 for b in nfa._eps_dst[e0:]],
            [rel(a) for a in nfa._byte_src[b0:]], [b - c0 for b in nfa._byte_dst[b0:]], masks, idx, nfa._dead, calls)


@cython.cclass
class FragmentBuilder:
    """The construction methods of `NFA` (its columns, counters and tables are set up by `NFA._init`).

    Compiled, it is a C extension type whose columns and tables are C slots (`fragments.pxd`).
    """


    def _new(self) -> int:
        self._count += 1
        return self._count - 1

    def _eps(self, a: int, b: int) -> None:
        self._eps_src.append(a)
        self._eps_dst.append(b)

    def _build(self, node: Node, s: int) -> int:
        """Add `node` starting at state `s`; return its exit state.

        Fragments never add edges *into* `s`, so alternatives may share it.
        """
        kind = type(node)
        if kind is ByteSet:
            return self._byte(s, node.mask)
        if kind is Ref:
            t = self._new()
            self._call(s, REG, t, rule=self.rule_index[node.name])
            return t
        label = self._labels.get(id(node))
        if label is not None:
            if self._lazy is None:
                c0 = self._count
                t = self._build_node(node, s)
                self.origins.append((c0, self._count, label[1]))
                return t
            path = label[1]
            if (s not in self._entries and s not in self._opened and path != self._home and path != self._owner
                    and not self._no_subs):
                t = self._lazy_call(node, s)
                if t >= 0:
                    return t
            c0, owner = self._count, self._owner
            self._built_labels.append(id(node))
            self._owner = path                       # its parts labeled alike are its own: not deferred
            try:
                t = self._build_node(node, s)
            finally:
                self._owner = owner
            self.origins.append((c0, self._count, path))
            return t
        return self._build_node(node, s)

    def _build_node(self, node: Node, s: int) -> int:
        checkpoint()                                 # compiled: let other threads in (see `grammars.native`)
        kind = type(node)
        frag = self._frags.get(id(node)) if self.replay else None
        if frag is not None:
            if frag[5] - frag[1] < SUBROUTINE_MIN or not self.subroutines or self._no_subs:
                return self._copy(frag, s)
            return self._subroutine(node, frag, s)
        mark = (s, self._count, len(self._eps_src), len(self._byte_src), len(self._call_src))
        if self.replay and id(node) in _SHARED:
            if self.subroutines and not self._no_subs:
                tpl = _TEMPLATES.get(id(node)) or self._record_template(node)
                if tpl is not None and tpl[0] >= SUBROUTINE_MIN:
                    return self._subroutine(node, None, s)   # a large shared node: one body, from its first use
            t = self._build_shared(node, s)
        elif kind is Seq:
            t = self._build_seq(node.items, 0, len(node.items), s)
        elif kind is Alt:
            trie = self._tries.get(id(node))
            if trie is not None:
                self._built_tries.append(id(node))
                t = (self._build_automaton(s, *trie[1:]) if len(trie) == 3
                     else self._build_trie_complement(s, trie[1] if trie[1] is not None else word_trie(trie[5]),
                                                      *trie[2:5]))
            else:
                if not node.items:
                    self._dead = True  # NOTHING: its entry cannot reach its exit
                t = self._new()
                self._build_alt([_items(x) for x in node.items], s, t)
        elif kind is Repeat:
            t = self._build_repeat(node, s)
        elif kind is AnyOrder:
            t = self._build_any_order(node, s)
        elif kind is Counted:
            t = self._build_counted(node, s)
        else:
            raise TypeError(f"not a grammar node: {node!r}")
        # keyed by identity (the node kept alive beside it): hashing every new node by its
        # structure was a seventh of building an NFA, for little sharing
        self._frags[id(node)] = (*mark, self._count, t, len(self._eps_src), len(self._byte_src), len(self._call_src))
        self._frag_nodes.append(node)
        return t

    def _record_template(self, node: Node) -> tuple | None:
        """Record the template of a `share`d node met for the first time in this process, leaving
        nothing of that build in this NFA, so that its shape never depends on what was built before."""
        marks = self._marks()
        self._build_shared(node, self._new())
        self._rollback(marks)
        return _TEMPLATES.get(id(node))

    def _marks(self) -> tuple:
        """Where building stands (see `_rollback`)."""
        return (self._count, len(self._eps_src), len(self._byte_src), len(self._call_src), len(self._mask_id),
                len(self._frags), len(self.origins), self._dead, len(self.rule_start), len(self._subs),
                len(self._lazy_rule_of), len(self._pending))

    def _rollback(self, marks: tuple) -> None:
        """Forget what was built since `_marks()` returned `marks`."""
        count, e, b, k, m, f, o, self._dead, r, subs, lazy, pending = marks
        self._count = count
        for col, n in ((self._eps_src, e), (self._eps_dst, e), (self._byte_src, b), (self._byte_dst, b),
                       (self._byte_mask, b), (self._call_src, k), (self._call_rule, k), (self._call_dst, k),
                       (self._call_op, k), (self._call_to, k), (self._call_lo, k), (self._call_hi, k),
                       (self.origins, o), (self.rule_start, r), (self.rule_end, r), (self.rule_names, r)):
            del col[n:]
        for table, n in ((self._mask_id, m), (self._frags, f), (self._subs, subs), (self._lazy_rule_of, lazy)):
            for key in list(table)[n:]:
                del table[key]
        for rule in [x for x in self._lazy or () if x >= r]:
            del self._lazy[rule]
        self._entries = {x for x in self._entries if x < count}
        self._opened = {x: n for x, n in self._opened.items() if x < count}
        if self.key_entries and self.key_entries[-1][0][0] >= count:
            self.key_entries = [e for e in self.key_entries if e[0][0] < count]
        del self._pending[pending:]             # (a template is recorded while others wait)

    def _call(self, s: int, op: int, dst: int, *, rule: int = -1, to: int = -1, lo: int = 0, hi: int = -1) -> None:
        """A call edge from `s` (see `REG` ... `INC`)."""
        self._call_src.append(s)
        self._call_rule.append(rule)
        self._call_dst.append(dst)
        self._call_op.append(op)
        self._call_to.append(to)
        self._call_lo.append(lo)
        self._call_hi.append(hi)

    def _subroutine(self, node: Node, frag: tuple[int, ...] | None, s: int) -> int:
        """A FREE call from `s` to the subroutine of `node`.

        Its body, a copy of the recorded fragment (`frag`; None: of the `share`d
        node's template), is made after the grammar's rules (`_pending`): made
        now, it would lie inside the fragment being built, whose later copies
        would carry a dead copy of it.
        """
        rule = self._subs.get(id(node))
        if rule is None:
            rule = self._subs[id(node)] = len(self.rule_start)   # by identity, as `_frags`
            self._frag_nodes.append(node)
            self.rule_names.append(f"sub:{rule}")
            self.rule_start.append(-1)
            self.rule_end.append(-1)
            self._pending.append((rule, frag, node))
        t = self._new()
        self._call(s, FREE, t, rule=rule)
        return t

    def _build_shared(self, node: Node, s: int) -> int:
        """Build a `share`d node from its process-wide template (recorded on its
        first build in any NFA), on fresh states from entry `s`."""
        tpl = _TEMPLATES.get(id(node))
        if tpl is not None and not all(name is None or name in self.rule_index for *_, name in tpl[9]):
            tpl = None                        # it calls a rule this grammar lacks: build it here, unrecorded
            record = False
        else:
            record = True
        if id(node) in _COMPACT:
            from grammars.minimize import MINIMIZING, NO_CALLS, minimal_template   # it builds a LazyDFA

            minimal = tpl is not None and tpl[9] is NO_CALLS
            if not self.minimal_dfas or id(node) in MINIMIZING:
                if minimal:
                    tpl, record = None, False     # the generic way, for this NFA only
            elif not minimal:
                tpl = minimal_template(node, _COMPACT_MAX_STATES)
                if tpl is None:
                    _COMPACT.discard(id(node))    # no smaller: built (and recorded) the generic way
                else:
                    _TEMPLATES[id(node)] = tpl
        if tpl is None:
            was_dead, self._dead = self._dead, False
            c0, e0, b0, k0 = self._count, len(self._eps_src), len(self._byte_src), len(self._call_src)
            self._no_subs += 1                # nested nodes are copied: a template calls no subroutine
            try:
                kind = type(node)
                if kind is Seq:
                    t = self._build_seq(node.items, 0, len(node.items), s)
                elif kind is Alt:
                    t = self._new()
                    self._build_alt([_items(x) for x in node.items], s, t)
                else:
                    t = self._build_repeat(node, s)
            finally:
                self._no_subs -= 1
            if record and FREE not in self._call_op[k0:]:
                _TEMPLATES[id(node)] = _template(self, s, c0, e0, b0, k0, t)
            self._dead = was_dead or self._dead
            return t
        size, exit_, eps_src, eps_dst, byte_src, byte_dst, masks, mask_idx, dead, calls = tpl
        d = self._count
        self._count += size
        self._dead = self._dead or dead
        self._eps_src.extend([s if a < 0 else a + d for a in eps_src])
        self._eps_dst.extend([b + d for b in eps_dst])
        self._byte_src.extend([s if a < 0 else a + d for a in byte_src])
        self._byte_dst.extend([b + d for b in byte_dst])
        ids = [self._mask_index(m) for m in masks]
        self._byte_mask.extend([ids[i] for i in mask_idx])
        for a, op, b, to, lo, hi, name in calls:
            self._call(s if a < 0 else a + d, op, b + d, rule=-1 if name is None else self.rule_index[name],
                       to=to + d if to >= 0 else -1, lo=lo, hi=hi)
        return s if exit_ < 0 else exit_ + d

    def _copy(self, frag: tuple[int, ...], s: int) -> int:
        """Replay a recorded fragment from entry `s`, on fresh states.

        The fragment's states are the contiguous range [c0, c1) and its edges
        the slices [e0, e1) of the columns; only its entry lies outside the
        range, and no edge enters it.
        """
        entry, c0, e0, b0, k0, c1, exit_, e1, b1, k1 = frag
        stub = self._stub
        if stub is not None and c0 < stub:        # built before a lazy body's columns were thawed: the
            eps, byte, call = self._head_tables   # lists hold stand-ins there (`LazyRules._thaw_columns`)
            eps_src, eps_dst = eps[:, e0:e1].tolist()
            byte_src, byte_dst, byte_mask = byte[:, b0:b1].tolist()
            calls = call[:, k0:k1].tolist() if k1 > k0 else None
        else:
            eps_src, eps_dst = self._eps_src[e0:e1], self._eps_dst[e0:e1]
            byte_src, byte_dst, byte_mask = self._byte_src[b0:b1], self._byte_dst[b0:b1], self._byte_mask[b0:b1]
            calls = None
            if k1 > k0:
                calls = (self._call_src[k0:k1], self._call_rule[k0:k1], self._call_dst[k0:k1], self._call_op[k0:k1],
                         self._call_to[k0:k1], self._call_lo[k0:k1], self._call_hi[k0:k1])
        d = self._count - c0
        self._count += c1 - c0
        self._eps_src.extend([s if a == entry else a + d for a in eps_src])
        self._eps_dst.extend([b + d for b in eps_dst])
        self._byte_src.extend([s if a == entry else a + d for a in byte_src])
        self._byte_mask.extend(byte_mask)
        self._byte_dst.extend([b + d for b in byte_dst])
        if calls is not None:
            src, rule, dst, op, to, lo, hi = calls
            self._call_src.extend([s if a == entry else a + d for a in src])
            self._call_rule.extend(rule)
            self._call_dst.extend([b + d for b in dst])
            self._call_op.extend(op)
            self._call_to.extend([b + d if b >= 0 else b for b in to])
            self._call_lo.extend(lo)
            self._call_hi.extend(hi)
        return s if exit_ == entry else exit_ + d

    def _build_alt(self, branches: list[tuple[Node, ...]], s: int, t: int) -> None:
        """Alternatives from `s` to `t`, sharing common suffixes and prefixes.

        Branches that end in the same items share one copy of them (built
        once, entered by epsilon from each branch); what remains of the
        branches is left-factored on leading byte sets by `_build_prefixes`.
        Iterative, so long shared suffixes cost no recursion depth.
        """
        leaves: list[tuple[tuple[Node, ...], int, int]] = []  # (items, stop, target)
        todo = [([(items, len(items)) for items in branches], t)]
        while todo:
            checkpoint()
            group, target = todo.pop()
            if len(group) == 1:
                leaves.append((group[0][0], group[0][1], target))
                continue
            by_last: dict[Node, list[tuple[tuple[Node, ...], int]]] = {}
            for items, stop in group:
                if stop == 0:
                    leaves.append((items, 0, target))
                else:
                    by_last.setdefault(items[stop - 1], []).append((items, stop - 1))
            for last, tails in by_last.items():
                if len(tails) == 1:
                    items, stop = tails[0]
                    leaves.append((items, stop + 1, target))
                    continue
                # several branches end in `last`: build it once, from a fresh entry h
                h = self._new()
                self._eps(self._build(last, h), target)
                todo.append((tails, h))
        self._build_prefixes(leaves, s)

    def _build_prefixes(self, leaves: list[tuple[tuple[Node, ...], int, int]], s: int) -> None:
        """Branch prefixes items[:stop] from `s` to their targets, left-factored.

        Prefixes that start with the same `ByteSet` share one edge (a trie);
        UTF-8 classes such as `\\w` have hundreds of branches with few distinct
        lead bytes, and this keeps the NFA and every DFA closure small.
        """
        todo = [([(items, 0, stop, target) for items, stop, target in leaves], s)]
        while todo:
            checkpoint()
            group, s = todo.pop()
            near = self._near(s)
            heads: dict[int, list[tuple[tuple[Node, ...], int, int, int]]] = {}
            for items, at, stop, target in group:
                if at < stop and type(items[at]) is ByteSet:
                    heads.setdefault(items[at].mask, []).append((items, at + 1, stop, target))
                else:
                    self._eps(self._build_seq(items, at, stop, s), target)
            for mask, tails in heads.items():
                u = self._byte(s, mask)
                if near >= 0:
                    self._note_near(u, near + 1)
                if len(tails) == 1:
                    items, at, stop, target = tails[0]
                    self._eps(self._build_seq(items, at, stop, u), target)
                else:
                    todo.append((tails, u))

    def _build_trie_complement(self, s: int, trie: dict, printable: int, rest: Node, leave: Node) -> int:
        """A `trie_complement` from `s`: one state per trie node (the root is `s`)."""
        t = self._new()
        r = self._new()                              # the trie was left: the rest (one copy for
        self._eps(self._build(rest, r), t)           # every way out, so that they share DFA states)
        out = self._new()                            # any trie node may leave by `leave`
        self._eps(self._build(leave, out), r)
        # the edges appended inline (this is most of an open object's NFA): per trie
        # node, "not a word: end here", its children's bytes, "leave by another
        # printable byte", "leave by `leave`"
        eps_src, eps_dst = self._eps_src, self._eps_dst
        byte_src, byte_mask, byte_dst = self._byte_src, self._byte_mask, self._byte_dst
        mask_id = self._mask_id
        todo = [(trie, s)]
        while todo:
            checkpoint()
            node, q = todo.pop()
            if not node.get(None):
                eps_src.append(q)                    # not a word: the text may end here
                eps_dst.append(t)
            taken = 0
            for b in sorted(k for k in node if k is not None) if len(node) - (None in node) > 1 else [k for k in node if k is not None]:
                bit = 1 << b
                taken |= bit
                mid = mask_id.get(bit)
                if mid is None:
                    mid = mask_id[bit] = len(mask_id)
                u = self._count
                self._count = u + 1
                byte_src.append(q)
                byte_mask.append(mid)
                byte_dst.append(u)
                todo.append((node[b], u))
            others = printable & ~taken
            if others:
                byte_src.append(q)
                byte_mask.append(self._mask_index(others))
                byte_dst.append(r)
            eps_src.append(q)
            eps_dst.append(out)
        return t

    def _build_automaton(self, s: int, edges: list[dict[int, int]], accepting: set[int]) -> int:
        """A `automaton` note's states from `s`: one NFA state per automaton state, its byte edges as
        they are (the start is a fresh state: `s` takes no edges in, and the automaton may loop to it)."""
        first = self._count
        self._count = first + len(edges)
        t = self._new()
        self._eps(s, first)
        byte_src, byte_mask, byte_dst = self._byte_src, self._byte_mask, self._byte_dst
        for i, out in enumerate(edges):
            checkpoint()
            for j, mask in out.items():
                byte_src.append(first + i)
                byte_mask.append(self._mask_index(mask))
                byte_dst.append(first + j)
            if i in accepting:
                self._eps(first + i, t)
        return t

    def _mask_index(self, mask: int) -> int:
        """The id of byte mask `mask` in this NFA (ids in order of first use)."""
        mid = self._mask_id.get(mask)
        if mid is None:
            mid = self._mask_id[mask] = len(self._mask_id)
        return mid

    def _byte(self, s: int, mask: int) -> int:
        """A byte edge from `s` to a fresh state; return that state."""
        mid = self._mask_id.get(mask)
        if mid is None:                              # `_mask_index`, inline: the most frequent call
            mid = self._mask_id[mask] = len(self._mask_id)
        t = self._count
        self._count = t + 1
        self._byte_src.append(s)
        self._byte_mask.append(mid)
        self._byte_dst.append(t)
        return t

    def _build_seq(self, items: tuple[Node, ...], at: int, stop: int, s: int) -> int:
        checkpoint()
        near = self._near(s)                     # bytes read since the rule's start, up to OPENING
        for i in range(at, stop):
            item = items[i]
            # byte sets inline: most items of literals and UTF-8 sequences are bytes
            if type(item) is ByteSet:
                s = self._byte(s, item.mask)
                if near >= 0:
                    near = self._note_near(s, near + 1)
            else:
                t = self._build(item, s)
                if near >= 0:
                    near = self._note_near(t, near) if surely_nullable(item, self._null_memo) else -1
                s = t
        return s

    def _near(self, s: int) -> int:
        """How many bytes a text reads from its rule's start to `s`: 0 for an entry, up to
        `OPENING` for a state in `_opened`; -1 for any other state (none noted)."""
        return 0 if s in self._entries else self._opened.get(s, -1)

    def _note_near(self, t: int, n: int) -> int:
        """Note that a text of `n` bytes leads to `t` from its rule's start (see `_near`); returns `n`,
        or -1 past `OPENING` (not noted)."""
        if n == 0:
            self._entries.add(t)                 # still no byte read since the rule's start
        elif n <= OPENING:
            self._opened[t] = n
        else:
            return -1
        return n

    def _build_repeat(self, node: Repeat, s: int) -> int:
        bound = node.max if node.max is not None else node.min
        if type(node.item) is ByteSet and node.max is not None and bound <= _BYTE_UNROLL_LIMIT:
            return self._byte_repeat(node.item.mask, node.min, node.max, s)
        if bound > UNROLL_LIMIT and not (type(node.item) is ByteSet and node.max is None and node.min <= _BYTE_UNROLL_LIMIT):
            if surely_nullable(node.item):
                # item{m,n} = non_empty(item){0,n}: a counter bumped on empty rounds would
                # make closures list every count (and, nested, every combination of counts)
                return self._build(repeat(non_empty(node.item), 0, node.max), s)
            return self._counter_loop(node, s)
        for _ in range(node.min):
            s = self._build(node.item, s)
        if node.max is None:
            # Loop through a fresh head so no back edge ever enters `s`.
            head = self._new()
            near = self._near(s)
            if near >= 0:
                self._note_near(head, near)
            self._eps(s, head)
            self._eps(self._build(node.item, head), head)
            t = self._new()
            self._eps(head, t)
            return t
        t = self._new()
        for _ in range(node.max - node.min):
            self._eps(s, t)
            s = self._build(node.item, s)
        self._eps(s, t)
        return t

    def _counter_loop(self, node: Repeat, s: int) -> int:
        """`item{lo,hi}` as a counter loop: s -ENTER-> head -HEAD-> item ... -INC-> head; head -HEAD-> exit.

        Four states and three edges whatever the bounds; the counter lives on
        the DFA configuration's stack (see the module docstring).
        """
        if node.min > COUNT_MAX:
            raise StateBudgetError(COUNT_MAX, "a counted repeat's minimum", unit="repetitions", option=None)
        # a bound past the counters' 64 bits admits every text that could ever be written
        hi = -1 if node.max is None or node.max > COUNT_MAX else node.max
        head, body, t = self._new(), self._new(), self._new()
        self._call(s, ENTER, head, to=head)
        self._call(head, HEAD, t, to=body, lo=node.min, hi=hi)
        self._call(self._build(node.item, body), INC, head, to=head, lo=node.min, hi=hi)
        return t

    def _build_any_order(self, node: AnyOrder, s: int) -> int:
        """An `AnyOrder` from `s`: O(members) states and edges, the set taken a frame.

            s -ENTER-> x -> hub -PICK i-> (COUNT ->) member i -> after -CLEAR i-> more -> sep -> hub
                          hub -> (COUNT ->) extra -> after
                       x, after -> CHECK required -> CHECK needs... -LEAVE-> t

        The frame is pushed and popped here, around every member: a member's value (a
        subroutine, a lazy rule, a counter loop) is balanced and never sees it. The CLEAR
        edges let the comma through only where some member can still be taken, so that
        no DFA state is a dead end (the compiler makes every member that PICK lets through
        completable: `grammars.json_any_order`).

        When the additional members' keys are any name but the declared ones (`_open_keys`),
        each key is built first (`_key`, the additional one inline) and the states it spans
        are noted in `key_entries`, for `constrained.key_twins` to share their masks.
        """
        x, hub, after, t = self._new(), self._new(), self._new(), self._new()
        self._call(s, ENTER, x, to=x)
        self._eps(x, hub)
        counted = node.lo > 0 or node.hi >= 0
        cap = node.hi if node.hi >= 0 else node.lo
        keyed = node.extra != NOTHING and self._open_keys(node.extra)
        regions = []
        for i, item in enumerate(node.items):
            p = self._new()
            self._call(hub, PICK, p, to=p, lo=i, hi=node.bans[i])
            if counted and not node.required >> i & 1:
                p = self._count_step(p, cap, node.hi)
            end = self._key(item, p, regions) if keyed else None
            self._eps(self._build(item, p) if end is None else end, after)
        if node.extra != NOTHING:
            p = self._new()                     # (a fresh entry: the hub is entered again after a comma)
            self._eps(hub, p)
            if counted:
                p = self._count_step(p, cap, node.hi)
            end = self._key(node.extra, p, regions, True) if keyed else None   # (its key inline: no call in it)
            if end is not None:
                self.key_entries.append((regions.pop(), tuple(regions)))
            self._eps(self._build(node.extra, p) if end is None else end, after)
        more = self._new()
        if node.extra != NOTHING and not counted:
            self._eps(after, more)
        else:
            for i, ban in enumerate(node.bans):
                limit = node.hi if counted and not node.required >> i & 1 else -1
                self._call(after, CLEAR, more, to=more, lo=limit, hi=ban)
            if node.extra != NOTHING:
                self._call(after, CLEAR, more, to=more, lo=node.hi, hi=0)
        self._eps(self._build(node.sep, more), hub)
        done = self._new()
        self._eps(x, done)
        self._eps(after, done)
        if node.required:
            done = self._guard(done, CHECK, -1, node.required)
        for i, mask in node.needs:
            done = self._guard(done, CHECK, i, mask)
        self._call(done, LEAVE, t, to=t, lo=node.lo if counted else 0)
        return t

    def _key(self, item: Node, p: int, regions: list, inline: bool = False) -> int | None:
        """Build `item` (a member, ``"name": value``) from `p`, its key first, and note in `regions`
        the states its key spans, from the one after the opening quote to the one before the
        closing quote's: ``(first, end)``. Returns its exit; None, with nothing built and the
        region None, when the key is not found (not a `Seq` opening with a quote).
        `inline`: the key's parts are built in place, never as a subroutine call."""
        items = item.items if type(item) is Seq else ()
        close = next((j for j in range(1, len(items)) if _is_quote(items[j])), 0) if items and _is_quote(items[0]) else 0
        if not close:
            regions.append(None)
            return None
        first = self._count
        self._no_subs += inline
        try:
            p = self._build_seq(items, 0, close + 1, p)
        finally:
            self._no_subs -= inline
        regions.append((first, self._count - 1))         # (the closing quote's state is the last made)
        return self._build_seq(items, close + 1, len(items), p)

    def _open_keys(self, extra: Node) -> bool:
        """Whether `extra` (an `AnyOrder`'s additional member) is ``"<any name but the declared
        ones>": value``, the names a raw key trie complement (`trie_complement`): its keys then
        read every prefix of every member's key (a member's name is raw printable ASCII too,
        `grammars.json_strings.key_literal`), which `constrained.key_twins` relies on."""
        if type(extra) is not Seq or len(extra.items) < 3:
            return False
        items = extra.items
        note = self._tries.get(id(items[1]))
        return _is_quote(items[0]) and _is_quote(items[2]) and note is not None and len(note) == 6

    def _build_counted(self, node: Counted, s: int) -> int:
        """A `Counted` from `s`: O(its states) NFA states and edges, the count a frame.

            s -ENTER-> state 0;  state i -byte-> gate (j, w) -GATE or TICK-> state j;  accepting i -EXIT-> t

        One NFA state per automaton state, and one per (target, characters started) of its
        edges: the byte is read first, and the gate after it lets the configuration on only
        with a count the target can still finish with (`Counted.live`), so that every DFA
        state is live. TICK counts the character a byte starts.
        """
        first = self._count
        n = len(node.states)
        self._count = first + n
        t = self._new()
        self._call(s, ENTER, first, to=first)
        gates: dict[tuple[int, int], int] = {}
        byte_src, byte_mask, byte_dst = self._byte_src, self._byte_mask, self._byte_dst
        for i, out in enumerate(node.states):
            checkpoint()
            for j, mask, w in out:
                g = gates.get((j, w))
                if g is None:
                    g = gates[(j, w)] = self._new()
                byte_src.append(first + i)
                byte_mask.append(self._mask_index(mask))
                byte_dst.append(g)
            if i in node.accepting:
                self._call(first + i, EXIT, t, to=t, lo=node.min_length)
        for (j, w), g in gates.items():
            lo, hi = node.live[j]
            self._call(g, TICK if w else GATE, first + j, to=first + j, lo=lo, hi=hi)
        return t

    def _guard(self, s: int, op: int, lo: int, hi: int) -> int:
        """A frame test or update (`PICK` ... `COUNT`) from `s` to a fresh state; returns it."""
        t = self._new()
        self._call(s, op, t, to=t, lo=lo, hi=hi)
        return t

    def _count_step(self, s: int, cap: int, hi: int) -> int:
        return self._guard(s, COUNT, cap, hi)

    def _byte_repeat(self, mask: int, lo: int, hi: int, s: int) -> int:
        """`[mask]{lo,hi}` in bulk: the same edges, in the same column order, as
        the generic loop of `_build_repeat` (whitespace gaps are `[ \\t]{0,32}`)."""
        mid = self._mask_index(mask)
        c = self._count
        # lo mandatory bytes: s -> c -> c+1 ... -> c+lo-1
        if lo:
            self._byte_src.append(s)
            self._byte_src.extend(range(c, c + lo - 1))
            s = c + lo - 1
        # then hi-lo optional ones, each skippable to t: s -> t+1 -> ... -> t+k
        t = c + lo
        k = hi - lo
        if k:
            self._byte_src.append(s)
            self._byte_src.extend(range(t + 1, t + k))
        self._byte_dst.extend(range(c, c + lo))
        self._byte_dst.extend(range(t + 1, t + k + 1))
        self._byte_mask.extend([mid] * (lo + k))
        self._eps_src.append(s)
        self._eps_src.extend(range(t + 1, t + k + 1))
        self._eps_dst.extend([t] * (k + 1))
        self._count = t + k + 1
        return t
