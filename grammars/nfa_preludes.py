"""Preludes: a rule common to many grammars (JSON's any value), built once per process.

An NFA whose grammar names such a rule in ``info["prelude"]`` starts from a
copy of its states and tables (`Prelude`) instead of building it again, or,
lazy, appends them when the DFA first calls the rule. `Preludes` is the
NFA's part that does this (`grammars.nfa.NFA` mixes it in, as it does
`grammars.lazy.LazyRules`).

Example:
    >>> from grammars.json_schema import json_schema_grammar
    >>> from grammars.nfa import NFA
    >>> g = json_schema_grammar({"type": "object"})
    >>> NFA(g).rule_names[1], NFA(g, lazy=True)._lazy_prelude is not None
    ('any_json_value', True)
    >>> _PRELUDES[id(g.rules["any_json_value"])].count > 0
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grammars.ast import Grammar, Node

__all__ = ["Prelude", "Preludes"]


@dataclass(eq=False)
class Prelude:
    """A rule common to many grammars (JSON's any value), built once per process
    with its subroutines, as the first states of an NFA: rule 1 and its
    subroutines 2, 3, ... (rule 0, the start rule, comes after it). An NFA
    whose grammar names it in ``info["prelude"]`` starts from copies of these
    columns and tables instead of building the rule again: list copies, not a
    Python step per edge (about 190 of the 260 us an open object's NFA took).
    A lazy NFA (the compiled DFA's) does not even copy it at compile: rule 1 is
    a lazy rule whose body is these columns, renumbered and appended when the
    DFA first reaches a call to it (`Preludes._defer_prelude`): an open
    object's extra member, whose value may be any JSON value, is the usual
    caller, and the first mask (before `{`) never is. That took the median dev schema's compile
    plus first mask from 1.44-1.64 to 1.24-1.46 ms in a server-like loop.

    `cols` is empty when the rule calls a rule other than itself, which a
    prelude cannot hold (those rules' numbers differ between grammars).
    """

    node: Node                       # kept alive: preludes are found by id(node)
    names: list[str]                 # rule names, index 0 a placeholder for the start rule
    count: int = 0
    cols: tuple[list[int], ...] = ()
    mask_id: dict[int, int] = field(default_factory=dict)
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    subs: dict[int, int] = field(default_factory=dict)
    frags: dict[int, tuple[int, ...]] = field(default_factory=dict)
    dead: bool = False
    tables: tuple[np.ndarray, ...] = ()   # `cols` as `NFA._columns` gives them, converted once
    frag_nodes: list[Node] = field(default_factory=list)

    @classmethod
    def make(cls, name: str, node: Node) -> Prelude:
        """Build rule `name` (`node`) alone, as the first rule after the start rule."""
        from grammars.nfa import NFA, gc_paused     # (the NFA's module imports this one)

        b = NFA.__new__(NFA)
        with gc_paused():
            b._setup(["", name], {})
            try:
                b.rule_start[1] = start = b._new()
                b.rule_end[1] = b._build(node, start)
                b._build_pending()
            except KeyError:                 # it calls another rule
                return cls(node, [])
        if 0 in b._call_rule:
            return cls(node, [])
        return cls(node, b.rule_names, b._count, tuple(list(c) for c in b._builder_columns()), dict(b._mask_id),
                   b.rule_start, b.rule_end, dict(b._subs), dict(b._frags), b._dead, b._columns(), b._frag_nodes)


_PRELUDES: dict[int, Prelude] = {}


class Preludes:
    """The NFA's preludes: found or made (`_prelude`), copied in (`_resume`) or deferred
    (`_defer_prelude`) and appended when a lazy NFA's DFA first calls them (`_append_prelude`)."""

    def _prelude(self, grammar: Grammar) -> Prelude | None:
        """The prelude of the rule named by ``grammar.info["prelude"]``, made on first use (None: none)."""
        name = grammar.info.get("prelude")
        if (name is None or name == grammar.start or not self.preludes or not self.replay or not self.subroutines
                or not self.minimal_dfas):
            return None
        node = grammar.rules[name]
        p = _PRELUDES.get(id(node))
        if p is None or p.node is not node:
            if len(_PRELUDES) >= 64:
                _PRELUDES.clear()
            p = _PRELUDES[id(node)] = Prelude.make(name, node)
        return p if p.cols else None

    def _resume(self, p: Prelude) -> None:
        """Start from prelude `p`: its states, edges and tables, as if just built here."""
        self._count = p.count
        for col, values in zip(self._builder_columns(), p.cols):
            col.extend(values)
        self._mask_id.update(p.mask_id)
        self._frags.update(p.frags)
        self._frag_nodes.extend(p.frag_nodes)
        self._subs.update(p.subs)
        self._dead = p.dead
        self._head_tables = p.tables
        k = len(p.names)
        self.rule_start[1:k] = p.starts[1:]
        self.rule_end[1:k] = p.ends[1:]

    def _defer_prelude(self, p: Prelude) -> None:
        """Make prelude `p`'s rule (1) a lazy rule: its states are appended by `_append_prelude`
        when the DFA first reaches a call to it. An open object's extra members call it, and
        most documents never have one: copied in at compile, its ~300 states were a third of
        the median schema's NFA build and made the DFA's per-NFA-state arrays that much larger."""
        self._lazy[1] = p.node
        self._lazy_prelude = p
        # its masks first, with the ids they have in it: the byte classes are split by them from
        # the start (no reclassifying of the DFA's rows when it is built) and its mask column is
        # appended as it is
        self._mask_id.update(p.mask_id)           # (none registered before it: the same ids)

    def _append_prelude(self) -> tuple[int, int]:
        """The deferred prelude's states and edges, appended (renumbered past what is built)
        with its subroutines as new rules; returns rule 1's (start, end)."""
        p = self._lazy_prelude
        self._lazy_prelude = None
        d = self._count
        self._count += p.count
        first = len(self.rule_start)
        rules = [-1, 1, *range(first, first + len(p.names) - 2)]     # the prelude's rule numbers -> ours
        for r in range(2, len(p.names)):
            self.rule_names.append(f"sub:{rules[r]}")
            self.rule_start.append(p.starts[r] + d)
            self.rule_end.append(p.ends[r] + d)
        eps_src, eps_dst, byte_src, byte_mask, byte_dst, call_src, call_rule, call_dst, call_op, call_to, \
            call_lo, call_hi = p.cols
        self._eps_src.extend([a + d for a in eps_src])
        self._eps_dst.extend([b + d for b in eps_dst])
        self._byte_src.extend([a + d for a in byte_src])
        self._byte_dst.extend([b + d for b in byte_dst])
        self._byte_mask.extend(byte_mask)           # (its masks have their ids: `_defer_prelude`)
        self._call_src.extend([a + d for a in call_src])
        self._call_rule.extend([rules[r] if r >= 0 else r for r in call_rule])
        self._call_dst.extend([b + d for b in call_dst])
        self._call_op.extend(call_op)
        self._call_to.extend([t + d if t >= 0 else t for t in call_to])
        self._call_lo.extend(call_lo)
        self._call_hi.extend(call_hi)
        self._dead = self._dead or p.dead
        return p.starts[1] + d, p.ends[1] + d
