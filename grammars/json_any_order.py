"""Objects whose members come in any order (`any_order=True`): one `AnyOrder` node per body.

Every member order is accepted, exactly, in O(n) states: the body is one
`AnyOrder` node, whose NFA (`grammars.fragments`) pushes a frame holding the
*set* of members taken (an int64 bit set, like a counter loop's count) and
tests it with call edges: PICK takes member i if none of its bans is taken
(its own bit: no key twice), CHECK tests `required` and each dependency at
the end, COUNT counts the optional members for
`minProperties`/`maxProperties` (in the frame's bits 55..61), CLEAR lets a
comma through only when some member can still come, LEAVE pops. The DFA
builds the sets that generation reaches, lazily; listing the orders instead
grows like n! (the layout this replaced stopped at 6 properties). Each
member's ban mask is computed here so that every set the DFA can reach
still completes (`need` ignores the frame): member j is banned after i when
what i and j need, transitively, clashes with a dependency's forbidden
names. Limits: 62 properties per object (55 with counts, of at most 127
optional members), and no counts together with dependencies (a count of
what the needs add is not a bit test): past them the object is laid out in
declared order (`grammars.json_objects`), with a note in the compile report
(a "declared order" `SchemaNote`, warned), rather than refusing a schema
that compiles without the option (10 of the 599 dev schemas have an object
of 63 to 131 members).

Example:
    >>> from grammars.json_schema import json_schema_grammar
    >>> from grammars.dfa import LazyDFA
    >>> schema = {"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a", "b"]}
    >>> g = json_schema_grammar(schema, strict=True, any_order=True)
    >>> dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    >>> dfa.matches(b'{"b": "x", "a": 1}'), dfa.matches(b'{"a": 1, "a": 1}')
    (True, False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grammars.ast import ANY_ORDER_MEMBERS, COUNT_CAP, COUNT_SHIFT, NOTHING, AnyOrder, Node
from grammars.errors import SchemaNote

if TYPE_CHECKING:
    from grammars.json_objects import MemberRules
    from grammars.json_schema import Compiler

__all__ = ["any_order_body", "ANY_ORDER_MEMBERS"]


def any_order_body(c: "Compiler", members: list[tuple[Node, bool]], extra: Node | None, lo: int, hi: int | None,
                   rules: MemberRules | None, path: str) -> Node | None:
    """The members in any order: an `AnyOrder` node (see the module docstring), or NOTHING; None
    (with a note in the compile report) past the frame's limits: declared order then.

    Member i is bit i of the set taken. Only members that some valid object can hold are
    kept, and each one's ban mask holds every member whose presence, with what the two
    need (transitively) and what is required, breaks a dependency: so every set the DFA
    reaches can still be completed, as `need` (which ignores the set) assumes.
    """
    n = len(members)
    closures = _closures(n, rules)
    required = _bits(i for i, (_, req) in enumerate(members) if req)
    req_set = frozenset(j for i in _members(required) for j in closures[i])   # required, and what they need
    if -1 in req_set or not _consistent(req_set, rules):
        return NOTHING
    keep = [i for i in range(n) if -1 not in closures[i] and _consistent(closures[i] | req_set, rules)]
    counted_lo, counted_hi = _counts(lo, hi, len(req_set), sum(i not in req_set for i in keep), extra is not None)
    if counted_lo < 0:
        return NOTHING
    counted = counted_lo > 0 or counted_hi >= 0
    limit = COUNT_SHIFT if counted else ANY_ORDER_MEMBERS
    why = None
    if len(keep) > limit:
        why = (f"any_order=True takes at most {limit} properties per object"
               f"{' with minProperties/maxProperties' if counted else ''} (the set taken is a 64-bit frame), "
               f"got {len(keep)}")
    elif counted and rules is not None:
        why = "any_order=True does not count members together with dependencies"
    elif max(counted_lo, counted_hi) > COUNT_CAP:
        why = f"any_order=True counts at most {COUNT_CAP} optional members, got {max(counted_lo, counted_hi)}"
    if why is not None:
        c.notes.append(SchemaNote("properties", path, "declared order", why))
        return None
    bit = {i: k for k, i in enumerate(keep)}            # member index -> its bit
    bans, needs = [], []
    for i in keep:
        clash = [j for j in keep if j == i or (rules is not None and not _consistent(closures[i] | closures[j], rules))]
        bans.append(_bits(bit[j] for j in clash))
        if rules is not None and rules.needs.get(i) and i not in req_set:
            needs.append((bit[i], _bits(bit[j] for j in rules.needs[i])))
    return AnyOrder(tuple(members[i][0] for i in keep), tuple(bans),
                    _bits(bit[i] for i in req_set), tuple(needs), NOTHING if extra is None else extra, c.ws.sep,
                    counted_lo, counted_hi)


def _closures(n: int, rules: MemberRules | None) -> list[frozenset[int]]:
    """Per member, itself and every member it needs, transitively (-1: one never there)."""
    out = []
    for i in range(n):
        seen, todo = {i}, [i]
        while todo:
            j = todo.pop()
            for k in (rules.needs.get(j, ()) if rules is not None and j >= 0 else ()):
                if k not in seen:
                    seen.add(k)
                    todo.append(k)
        out.append(frozenset(seen))
    return out


def _consistent(taken: frozenset[int], rules: MemberRules | None) -> bool:
    """No member of `taken` forbids one of `taken` (itself included)."""
    return rules is None or not any(rules.bans.get(i, frozenset()) & taken for i in taken)


def _counts(lo: int, hi: int | None, n_required: int, n_optional: int, extra: bool) -> tuple[int, int]:
    """minProperties/maxProperties as bounds on the members outside the required ones: (lo, hi),
    hi -1 for none, lo -1 when no object fits; a bound that nothing can break is dropped."""
    lo = max(0, lo - n_required)
    if hi is not None:
        hi -= n_required
        if hi < lo:
            return -1, -1
        if not extra and hi >= n_optional:
            hi = None
    if not extra and lo > n_optional:
        return -1, -1
    return lo, -1 if hi is None else hi


def _bits(indices: Any) -> int:
    out = 0
    for i in indices:
        out |= 1 << i
    return out


def _members(mask: int) -> list[int]:
    return [i for i in range(mask.bit_length()) if mask >> i & 1]
