"""Lazy rules: the NFA's subschemas built when the DFA first reaches them.

`LazyRules` holds the methods of `grammars.nfa.NFA` made with ``lazy=True``
(the module docstring there says what they do for compile): the choice of
what to defer while building (`_lazy_call`), building a deferred body when
the DFA asks (`build_lazy`), splicing it in where it has one call site, and
letting go of what only the parts built so far needed.

Example:
    >>> from grammars.ast import Grammar, alt, literal, seq
    >>> from grammars.nfa import NFA
    >>> late = alt(literal(b"y" * 200), literal(b"z"))
    >>> g = Grammar({"start": seq(literal(b"head"), late)}, info={"labels": {id(late): (late, "$.late")}})
    >>> nfa = NFA(g, lazy=True)
    >>> nfa.unbuilt
    1
    >>> nfa.build_lazy(next(iter(nfa._lazy)))
    >>> nfa.unbuilt
    0
"""

from __future__ import annotations

import numpy as np

from grammars.ast import Alt, AnyOrder, ByteSet, Counted, Node, Ref, Repeat, Seq
from grammars.fragments import _SHARED, FREE, SPLICE

__all__ = ["LazyRules", "LAZY_MIN", "LAZY_MIN_IN_BODY"]

# The builder's edge columns, in the order of `NFA._columns`' tables (epsilon, byte, call edges;
# `nfa._GROUPS` cuts them there).
_COLUMNS = ("_eps_src", "_eps_dst", "_byte_src", "_byte_dst", "_byte_mask", "_call_src", "_call_rule",
            "_call_dst", "_call_op", "_call_to", "_call_lo", "_call_hi")

# A labeled node (a subschema) of at least this many syntax nodes is built
# lazily in an NFA made with ``lazy=True``: a FREE call to a rule whose body is
# made when the DFA first reaches it (`NFA.build_lazy`). Each build also redoes the
# whole NFA's arrays (`need`, CSR): on JsonSchemaStore---rustfmt (7,900 NFA states) a
# member's body of 20-60 states took 0.4-1.5 ms to build in a mask. A threshold of
# 128 made maskbench-dev's masks 4-7% faster but its time to first mask in
# `python -m bench masks` (each engine in its own worker, caches cold) 4-5% slower,
# per schema, against llguidance (1.00-1.03x instead of 0.96x, two runs each): kept at 24.
LAZY_MIN = 24
# Inside a lazy body being built, only a subschema this large is deferred again: a body is
# built whole unless that would make one mask slow (a Kubernetes definition's body took
# 39 ms to build in one mask), as each build also redoes the NFA's arrays.
# An object's body with `any_order` (an `AnyOrder`) is deferred from this size too: from
# `LAZY_MIN`, time to first mask was 6-9% lower per schema than never deferring one, but masks
# 2-4% slower (`python -m bench masks --corpus ../shared/corpus/maskbench-dev --engines ours
# llguidance --any-order`, two runs each); from this size, the largest compiles gain most of
# it (TTFM p90 2.2-2.35 ms against 2.7-2.9 never deferring) for 1-2% of masks.
LAZY_MIN_IN_BODY = 256


class LazyRules:
    """The lazy-rule methods of `grammars.nfa.NFA` (its tables are set up by `NFA._setup`)."""

    def _lazy_call(self, node: Node, s: int) -> int:
        """A FREE call from `s` to the lazy rule of labeled `node`; -1 where `node` is built now.

        Not deferred (see `_build`): a node that starts where no byte has been
        read since its rule's start (`_entries`: a rule's own node, a root
        schema after optional whitespace, the branches of a root `anyOf`),
        which the DFA's first state would build at once, or where at most
        `OPENING` bytes have (`_opened`: an object's body after its `{`), which the
        first mask's tokens (`{"`, `[{"`) would build at once; and the parts of the
        subschema being built (labeled with its path: a flattened sequence's
        items) or of the rule's own (``info["homes"]``). Otherwise only a node of
        `LAZY_MIN` syntax nodes or more (`LAZY_MIN_IN_BODY` inside a lazy body, and for
        an `AnyOrder`)
        that surely reaches its end without a
        rule call is deferred: its rule's `need` is 0, which the
        NFA's `need` assumes before the body exists, so that nothing computed
        from it changes when the body is made.
        """
        rule = self._lazy_rule_of.get(id(node))     # (entries go when built: their nodes may go too)
        if rule is None:
            min_size = LAZY_MIN_IN_BODY if self._in_body or type(node) is AnyOrder else LAZY_MIN
            if (id(node) in _SHARED or id(node) in self._frags or not _at_least(node, min_size)
                    or not _ends_free(node, self._free_memo)):
                return -1                           # (a shared node or one built before is replayed: cheap)
            rule = self._lazy_rule_of[id(node)] = len(self.rule_start)
            self.rule_names.append(f"lazy:{rule}")
            self.rule_start.append(-1)
            self.rule_end.append(-1)
            self._lazy[rule] = node
        t = self._new()
        self._call(s, FREE, t, rule=rule)
        return t

    @property
    def unbuilt(self) -> int:
        """How many lazy rules have no body yet (0 for an NFA made with ``lazy=False``)."""
        return len(self._lazy) if self._lazy else 0

    def build_lazy(self, rule: int) -> None:
        """Make the body of lazy rule `rule`, then `need` and the arrays again.

        The body's states and edges are appended: everything built before keeps
        its number and its `need`, so that a DFA over this NFA keeps its states
        and only extends its per-NFA-state arrays. New masks renumber the mask
        ids of `arrays` (ascending masks) and may split the DFA's byte classes
        (`JitDFA._build_rule`). If building fails (a budget, a recursion
        limit), the NFA is left as it was.
        """
        from grammars.nfa import gc_paused     # (the NFA's module imports this one)

        node = self._lazy.pop(rule)
        self._thaw_columns()
        marks = self._marks()
        with gc_paused():
            try:
                prelude = self._lazy_prelude if rule == 1 else None
                if prelude is not None:             # the any-value rule: its states, appended
                    start, end = self._append_prelude()
                else:
                    start = self._new()
                    self._entries.add(start)
                    label = self._labels.get(id(node))
                    self._home = label[1] if label is not None else None
                    self._in_body = True
                    end = self._build(node, start)
                    self._build_pending()
                    self._in_body = False
            except BaseException:
                self._in_body = False
                self._rollback(marks)
                self._lazy[rule] = node
                if prelude is not None:
                    self._lazy_prelude = prelude
                raise
            self.rule_start[rule], self.rule_end[rule] = start, end
            if prelude is None:                     # (the prelude calls itself: never one call site)
                self._splice(rule, start, end)
            # placeholders of bodies built and not spliced are orphans, reaching no rule's end:
            # `need` counts them 0 or INF depending on whether it takes its shortcut (no rule calls)
            orphans = list(self._placeholder.values())
            before = np.asarray(self.need, dtype=np.int64).copy()
            before[orphans] = -1
            self._finish(self.max_depth)
            after = np.asarray(self.need[:len(before)], dtype=np.int64).copy()
            after[orphans] = -1
            if not np.array_equal(after, before):
                raise RuntimeError(f"lazy rule {rule} changed the need of states built before it")

    def _freeze_columns(self) -> None:
        """Drop the edge columns until the next lazy build (`_thaw_columns`): the tables
        `_columns` just made hold the same edges. As lists, a cached FSM's edges were a
        reference each for every GC collection to walk."""
        for name in _COLUMNS:
            setattr(self, name, None)
        self._stub = None

    def _thaw_columns(self) -> None:
        """Edge columns to build on: lists as long as the tables, whose entries so far are
        stand-ins (-1), since building appends and only reads what it appended.

        The two reads of older edges (`_copy` of a fragment built before, `_splice` of an
        earlier call) take them from the tables, where `_stub` (the state count when the
        columns were thawed) says they lie. Making real lists of the tables (`tolist`) for
        every body cost more than building most bodies: 185 of 920 ms over the dev corpus's
        1,978 builds, and 74 ms more to free them.
        """
        if self._eps_src is not None:
            return
        eps, byte, call = self._head_tables
        for name, row in zip(_COLUMNS, (*eps, *byte, *call)):
            setattr(self, name, [-1] * row.shape[0])
        self._stub = self._count

    def _forget_built(self) -> None:
        """Drop the labels of the subschemas built so far (the root's labels held its whole
        syntax tree) and the key tries of the objects built (a body holding one of those
        too builds its key complement the long way, same language). Kept for the lazy
        bodies: their nodes (`_lazy`), labels and key tries, and the subroutines
        built before with their fragments (without them, the bodies of one dev schema took
        40 ms to build instead of 14); the other fragments go with their nodes, which a
        server's cached FSMs would otherwise keep for every full GC collection to walk (the
        benchmark's worker paused up to 60 ms in a mask). Memos by node id go: a dropped
        node's id may be a new one's."""
        waiting = {id(node) for node in self._lazy.values()}       # built elsewhere too, maybe
        for key in self._built_labels:
            if key not in waiting:
                self._labels.pop(key, None)
        self._built_labels = []
        for key in self._built_tries:               # (a body holding one of them builds it the long way)
            if key not in waiting:
                self._tries.pop(key, None)
        self._built_tries = []
        # A key trie kept for a body is nested dicts, a few hundred objects for every GC
        # collection to walk while the FSM is cached: its words stand in, the trie made again
        # if the body is built.
        tries = self._tries
        for key, note in tries.items():
            if len(note) == 6 and note[1] is not None:
                tries[key] = (note[0], None, *note[2:])
        subs = self._subs
        kept = {id(node): node for node in self._frag_nodes if id(node) in subs}
        self._frags = {key: frag for key, frag in self._frags.items() if key in kept}
        self._frag_nodes = list(kept.values())
        self._free_memo, self._null_memo = {}, {}
        self._lazy_rule_of = {id(node): rule for rule, node in self._lazy.items()}

    def _splice(self, rule: int, start: int, end: int) -> None:
        """Make the only call of just-built lazy `rule` a SPLICE: configurations inside the body
        then carry no frame for it (a frame per body cost its masks a quarter more). The
        call edge is changed in place (its index, which closures memoize, stays), the body's
        end gets an epsilon edge to the call's exit, and the rule is left to its placeholder.
        A fragment recorded around the call would copy it as a second call of one body: those
        are forgotten, to be built again."""
        heads = self._head_tables                  # the columns converted so far (`_columns`)
        n_head = heads[2].shape[1] if heads else 0
        sites = np.flatnonzero(heads[2][1] == rule).tolist() if n_head else []
        sites += [k for k, r in enumerate(self._call_rule[n_head:], n_head) if r == rule]
        if len(sites) != 1:
            return
        k = sites[0]
        self._call_op[k], self._call_rule[k], self._call_to[k] = SPLICE, -1, start
        if k < n_head:                             # the tables hold it (the lists, stand-ins: `_thaw_columns`)
            calls = heads[2].copy()                # (never a prelude's own table: this call is not the prelude's)
            calls[1, k], calls[3, k], calls[4, k] = -1, SPLICE, start
            self._head_tables = (heads[0], heads[1], calls)
            exit_ = int(calls[2, k])
        else:
            exit_ = self._call_dst[k]
        self._eps(end, exit_)
        self.rule_start[rule] = self.rule_end[rule] = self._placeholder[rule]
        for key, frag in list(self._frags.items()):
            if frag[4] <= k < frag[9]:
                del self._frags[key]


def _at_least(node: Node, limit: int) -> bool:
    """Whether the tree of `node` has at least `limit` nodes (nodes used twice counted twice; a
    `share`d node, replayed from its template, counts one; stops at `limit`)."""
    stack, count = [node], 0
    while stack:
        x = stack.pop()
        count += 1
        if count >= limit:
            return True
        kind = type(x)
        if x is not node and id(x) in _SHARED:
            continue
        if kind is Seq or kind is Alt:
            stack.extend(x.items)
        elif kind is Repeat:
            stack.append(x.item)
        elif kind is AnyOrder:
            stack.extend((*x.items, x.extra, x.sep))
    return False



def _ends_free(node: Node, memo: dict[int, bool]) -> bool:
    """Whether some text takes `node` from its entry to its exit without a rule call
    (memoized by id; an `Alt` stops at its first such branch)."""
    kind = type(node)
    if kind is ByteSet:
        return node.mask != 0
    if kind is Ref:
        return False
    if (kind is Repeat and node.min == 0) or kind is AnyOrder or kind is Counted:
        return True              # (an `AnyOrder`'s or `Counted`'s frame edges are epsilon moves to `need`)
    key = id(node)
    got = memo.get(key)
    if got is None:
        if kind is Seq:
            got = True
            for x in node.items:
                if not _ends_free(x, memo):
                    got = False
                    break
        elif kind is Alt:
            got = False
            for x in node.items:
                if _ends_free(x, memo):
                    got = True
                    break
        else:
            got = _ends_free(node.item, memo)
        memo[key] = got
    return got
