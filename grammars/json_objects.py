"""Objects of a JSON schema as grammar nodes (arrays: `grammars.json_arrays`).

Objects are laid out in the order of `properties` (then names that are only
`required`), optional ones skippable, additional members after the declared
ones: users order fields on purpose ("reasoning" before "answer"), so that
is the default. A small dynamic program over (member index, members so far)
places the commas and enforces `minProperties`/`maxProperties` exactly.

With `any_order=True` every member order is accepted, exactly: the body is
one `AnyOrder` node (`grammars.json_any_order`), or, past its limits, the
declared order.

Additional keys never repeat a declared name (the parsed object would keep
the last duplicate, whose value was never checked against its schema).

"The first present member is i, then the rest" repeats the rest of the
object per i (n^2/2 items for n optional properties), but the rests are
suffixes built from shared items and the NFA builds common suffixes of
alternatives once, so the automaton is linear in n.

Example:
    >>> from grammars.json_schema import json_schema_grammar
    >>> from grammars.dfa import LazyDFA
    >>> g = json_schema_grammar({"properties": {"a": {"type": "integer"}}, "required": ["a"]}, strict=True)
    >>> dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    >>> dfa.matches(b'{"a": 1}'), dfa.matches(b'{"a": 1, "b": 2}')
    (True, False)
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from grammars.ast import EMPTY, NOTHING, Node, alt, optional, seq
from grammars.errors import UnsupportedSchemaError
from grammars.json_any_order import any_order_body
from grammars.json_checks import dependent_names
from grammars.json_string_sets import difference
from grammars.json_strings import any_string_body, key_literal, quoted, string_literal, string_not_in
from grammars.json_length import expanded_size
from grammars.json_merge import consts_as_enums
from grammars.json_patterns import pattern_body, pattern_matches, pattern_universal
from grammars.json_values import counted, union, unit

if TYPE_CHECKING:
    from grammars.json_schema import Compiler

__all__ = ["object_node", "dependencies", "dependency_names", "MemberRules", "DEPENDENCY_LIMIT", "PATTERN_GROUPS_LIMIT"]

_DEPENDENCY_KEYS = frozenset(("dependentRequired", "dependentSchemas", "dependencies"))
# Properties that `dependentRequired` / `dependentSchemas` / `dependencies` may mention in one object:
# the layout tracks which of them are present.
DEPENDENCY_LIMIT = 12
# Patterns with different schemas in one object's patternProperties: a key's names are split
# into 2^n - 1 groups by the patterns it matches.
PATTERN_GROUPS_LIMIT = 4


def object_node(c: "Compiler", s: dict, path: str, base: str) -> Node:
    props: dict = s.get("properties", {})
    required: list = list(s.get("required", []))
    extra = s.get("additionalProperties", False if c.strict else True)
    patterns: dict = dict(s.get("patternProperties", {}))
    if extra is True:          # a pattern allowing every value then changes nothing: the names it
        patterns = {p: v for p, v in patterns.items() if v is not True and v != {}}   # misses allow any
    names_schema = s.get("propertyNames", True)
    if c.draft == 4 and names_schema is not True:      # a draft-4 document: only later drafts read it
        names_schema = consts_as_enums(names_schema)
    names = list(props) + [r for r in required if r not in props]
    requires, forbids = dependencies(s, path) if _DEPENDENCY_KEYS & s.keys() else ({}, {})
    for name in dependency_names(requires, forbids) if requires or forbids else ():
        if name not in names:            # a name a dependency mentions: a member of its own, so that
            names.append(name)           # additional keys never take it (their value: additionalProperties)
    members: list[tuple[Node, bool]] = []
    index_of: dict[str, int] = {}
    for name in names:
        req = name in required
        sub = _declared_schema(c, name, props, patterns, extra, path)
        if names_schema is not True and not c.accepts(names_schema, name, f"{path}.propertyNames", base):
            if req:
                return NOTHING
            continue
        value = c.node(sub, f"{path}.properties.{name}", base)
        if value == NOTHING:
            if req:
                return NOTHING
            continue
        index_of[name] = len(members)
        members.append((seq(quoted(key_literal(name)), c.ws.colon, unit(value)), req))
    declared = set(names)
    extra_member = _extra_member(c, declared, patterns, extra, names_schema, path, base)
    lo, hi = s.get("minProperties", 0), s.get("maxProperties")
    rules = MemberRules.of(requires, forbids, index_of) if requires or forbids else None
    if c.any_order and (len(members) > 1 or (members and extra_member is not None)):
        body = any_order_body(c, members, extra_member, lo, hi, rules, path)
        if body is not None:
            return c.ws.obj(body)
    if rules is not None and len(rules.relevant) > DEPENDENCY_LIMIT:
        key = next(k for k in ("dependentRequired", "dependentSchemas", "dependencies") if s.get(k))
        raise UnsupportedSchemaError(key, path, f"dependencies among {len(rules.relevant)} properties (at most "
                                                f"{DEPENDENCY_LIMIT}: the object's layout grows like 2^n in them)")
    layout = _Layout(c, members, extra_member, lo, hi, rules)
    body = layout.ruled() if rules else layout.ordered()
    # the uncounted layout is linear in the NFA (shared suffixes) though its tree is quadratic
    size = expanded_size(body) if layout.counted else 0
    if size > c.budget:
        raise UnsupportedSchemaError("properties", path, f"the exact object layout needs {size} NFA states "
                                     f"(budget {c.budget}); minProperties/maxProperties over many optional "
                                     "properties grow combinatorially")
    return c.ws.obj(body)


def dependency_names(requires: dict[str, list[str]], forbids: dict[str, list[str]]) -> list[str]:
    """The names `dependencies` mentions, in the order an object's layout places those not declared."""
    return [*requires, *forbids, *(n for ns in (*requires.values(), *forbids.values()) for n in ns)]


def dependencies(s: dict, path: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """`dependentRequired`, `dependentSchemas` and draft-7 `dependencies` as (name -> names it requires,
    name -> names it forbids); `grammars.json_checks` has refused every other form."""
    requires: dict[str, list[str]] = {}
    forbids: dict[str, list[str]] = {}
    for key in ("dependentRequired", "dependentSchemas", "dependencies"):
        deps = s.get(key)
        if deps is not None and not isinstance(deps, dict):
            raise UnsupportedSchemaError(key, path, "not an object of dependencies")
        for name, v in (deps or {}).items():
            got = dependent_names(key, v)
            if got is None:
                raise UnsupportedSchemaError(key, path, f"the dependency of {name!r} is not of a form enforced "
                                                        "exactly (names required or forbidden)")
            if got[0]:
                requires.setdefault(name, []).extend(got[0])
            if got[1]:
                forbids.setdefault(name, []).extend(got[1])
    return requires, forbids


class MemberRules:
    """Dependencies between an object's members, by member index: taking member i needs every
    member of `needs[i]` (-1: one that can never be there) and none of `bans[i]`."""

    def __init__(self, needs: dict[int, frozenset[int]], bans: dict[int, frozenset[int]]) -> None:
        self.needs, self.bans = needs, bans
        self.relevant = frozenset(needs) | frozenset(bans) | {j for js in (*needs.values(), *bans.values())
                                                              for j in js}

    @classmethod
    def of(cls, requires: dict[str, list[str]], forbids: dict[str, list[str]],
           index_of: dict[str, int]) -> "MemberRules | None":
        needs = {index_of[a]: frozenset(index_of.get(b, -1) for b in bs if b != a)
                 for a, bs in requires.items() if a in index_of}
        bans = {index_of[a]: frozenset(index_of[x] for x in xs if x in index_of)
                for a, xs in forbids.items() if a in index_of}
        needs = {i: js for i, js in needs.items() if js}
        bans = {i: js for i, js in bans.items() if js}
        return cls(needs, bans) if needs or bans else None

    def may_take(self, i: int, taken: frozenset[int]) -> bool:
        """Member i can join `taken`: nothing taken bans it, it bans nothing taken."""
        return -1 not in self.needs.get(i, ()) and i not in self.bans.get(i, ()) and not (
            self.bans.get(i, frozenset()) & taken) and not any(i in self.bans.get(t, ()) for t in taken)

    def done(self, taken: frozenset[int]) -> bool:
        """Every member taken has the members it needs."""
        return all(self.needs.get(t, frozenset()) <= taken for t in taken)

    def owed(self, i: int, taken: frozenset[int]) -> bool:
        """Member i must be taken: a member taken before it needs it."""
        return any(i in self.needs.get(t, ()) for t in taken)


def _declared_schema(c: "Compiler", name: str, props: dict, patterns: dict, extra: Any, path: str) -> Any:
    """A declared name's schema, merged with every patternProperties schema it matches."""
    matching = [sub for p, sub in patterns.items() if pattern_matches(c, p, name, f"{path}.patternProperties")]
    sub = props[name] if name in props else (matching.pop(0) if matching else extra)
    for other in matching:
        sub = c.merger.merge(sub, other, f"{path}.properties.{name}")
    return sub


def _extra_member(c: "Compiler", declared: set, patterns: dict, extra: Any, names_schema: Any,
                  path: str, base: str) -> Node | None:
    """key:value of one additional member, or None when none is allowed."""
    if patterns:
        return _pattern_member(c, declared, patterns, extra, names_schema, path, base)
    if extra is False:
        return None
    value = c.node(extra, f"{path}.additionalProperties", base)
    if value == NOTHING:
        return None
    if names_schema is True:
        body = string_not_in(declared, c.tries)
        key = NOTHING if body == NOTHING else quoted(body)
    else:
        key = _names_key(c, declared, names_schema, path, base)
    return None if key == NOTHING else seq(key, c.ws.colon, value)


def _names_key(c: "Compiler", declared: set, names: Any, path: str, base: str) -> Node:
    """The keys (quoted, in every spelling) of additional members: the strings valid under
    `propertyNames` that are no declared name (``"pattern": "^[a-z]+$"`` beside a declared
    ``"id"``: every such name but ``"id"``, which its own member spells)."""
    where = f"{path}.propertyNames"
    clash = [n for n in declared if c.accepts(names, n, where, base)]
    if not clash:
        return c.string_node(names, where, base)
    flat = c.merger.flatten(names, where)
    if isinstance(flat, dict) and "enum" in flat:
        allowed = [v for v in flat["enum"] if isinstance(v, str) and v not in declared
                   and c.accepts(names, v, where, base)]
        return quoted(alt(*(key_literal(v) for v in allowed)))
    # the names it admits but the declared names (each in every spelling), by a product of automata
    return difference(c.string_node(names, where, base), [quoted(string_literal(n)) for n in sorted(clash)],
                      path=where, keyword="propertyNames", tries=c.tries)


def _pattern_member(c: "Compiler", declared: set, patterns: dict, extra: Any, names_schema: Any,
                    path: str, base: str) -> Node | None:
    """key:value of one member that no declared name spells.

    A key's value must satisfy the schema of every pattern it matches, and
    additionalProperties when it matches none. The simple cases keep plain
    nodes: when a pattern matches every name (`.*`, `^[a-z]*` under search
    semantics, proven on the automata: `json_patterns.pattern_universal`) and all
    patterns share one schema, a member is any other name with that schema;
    with additionalProperties false, one schema and no declared name matching
    a pattern, the names are the patterns'. Otherwise the names of each group
    (the patterns matched, or none) are computed exactly as strings of some
    bodies and not of others (`json_string_sets.difference`, which also leaves
    out every spelling of the declared names), each group with its schemas
    merged: at most `PATTERN_GROUPS_LIMIT` patterns of different schemas.
    """
    where = f"{path}.patternProperties"
    if names_schema is not True:
        raise UnsupportedSchemaError("propertyNames", path, "together with patternProperties")
    every = {p for p in patterns if pattern_universal(c, p, where)}      # patterns matching every name
    universal = bool(every)
    schemas = list(patterns.values())
    same = len({json.dumps(v, sort_keys=True, default=str) for v in schemas}) == 1
    if universal and same:
        value = c.node(schemas[0], where, base)
        return None if value == NOTHING else seq(quoted(string_not_in(declared, c.tries)), c.ws.colon, value)
    clash = any(pattern_matches(c, p, name, where) for name in declared for p in patterns)
    if same and (extra is False or universal) and not clash:
        value = c.node(schemas[0], where, base)
        if value == NOTHING:
            return None
        return seq(quoted(alt(*(pattern_body(c, p, where) for p in patterns))), c.ws.colon, value)
    bodies = {p: pattern_body(c, p, where) for p in patterns}
    names = [string_literal(n) for n in sorted(declared)]       # every spelling of each
    # (bodies a key matches, bodies it does not, the schemas its value must satisfy, their path)
    groups: list[tuple[list[Node], list[Node], list[Any], str]] = []
    if same:
        groups.append(([alt(*bodies.values())], [], schemas[:1], where))
    else:
        if len(patterns) > PATTERN_GROUPS_LIMIT:
            raise UnsupportedSchemaError("patternProperties", path, f"more than {PATTERN_GROUPS_LIMIT} patterns "
                                         "with different schemas (each set of patterns a key may match is a "
                                         "group of its own)")
        items = list(patterns.items())
        for chosen in range(1, 1 << len(items)):
            inside = [i for i in range(len(items)) if chosen >> i & 1]
            if any(not chosen >> i & 1 for i, (p, _) in enumerate(items) if p in every):
                continue                   # every name matches those: none is outside them
            matched = [bodies[items[i][0]] for i in inside if items[i][0] not in every]
            groups.append((matched or [any_string_body(0, None)],
                           [bodies[p] for i, (p, _) in enumerate(items) if not chosen >> i & 1],
                           [items[i][1] for i in inside], where))
    if extra is not False and not universal:
        groups.append(([any_string_body(0, None)], list(bodies.values()), [extra], f"{path}.additionalProperties"))
    parts = []
    for required, others, subs, at in groups:
        key = difference(required[0], others + names, required=required[1:], path=path,
                         keyword="patternProperties", tries=c.tries)
        if key == NOTHING:                 # e.g. two patterns no key matches both of
            continue
        schema = subs[0]
        for other in subs[1:]:
            schema = c.merger.merge(schema, other, at)
        if len(subs) == 1:
            value = c.node(schema, at, base)
        else:
            # A merged value is compiled inline, a recursive `$ref` in it too. Reached again
            # inside itself, it would unroll without end (and each level makes a group per set of
            # patterns: before this check, a schema whose `if`, `then` and `else` patterns `$ref`
            # it back ran for minutes)
            merged = (json.dumps(subs, sort_keys=True, default=repr), base)   # by content: merges make new dicts
            if merged in c.merged_patterns:
                raise UnsupportedSchemaError("patternProperties", at, "a name matching several of its patterns "
                                             "has a value whose schemas lead back here (a recursive `$ref`): "
                                             "merging them unrolls without end")
            c.merged_patterns.add(merged)
            try:
                value = c.node(schema, at, base)
            finally:
                c.merged_patterns.discard(merged)
        if value != NOTHING:
            parts.append(seq(quoted(key), c.ws.colon, value))
    return alt(*parts) if parts else None


class _Layout:
    """Comma placement and member counting for one object body."""

    def __init__(self, c: "Compiler", members: list[tuple[Node, bool]], extra: Node | None,
                 lo: int, hi: int | None, rules: MemberRules | None = None) -> None:
        self.ws = c.ws
        self.members, self.extra, self.lo, self.hi, self.rules = members, extra, lo, hi, rules
        # Counts saturate at cap; count > 0 doubles as "a comma is needed".
        self.cap = max(1, hi + 1 if hi is not None else lo)
        self.counted = not (self.cap == 1 and hi is None)
        self.memo: dict[Any, Node] = {}

    def _extras(self, count: int) -> Node:
        hi = None if self.hi is None else self.hi - count
        if self.extra is None or hi == 0:
            return EMPTY if count >= self.lo and (hi is None or hi >= 0) else NOTHING
        if hi is not None and hi < 0:
            return NOTHING
        lo = max(0, self.lo - count)
        if count == 0:
            return self.ws.listing(self.extra, lo, hi)
        return counted(seq(self.ws.sep, self.extra), lo, hi)

    def _take(self, i: int, count: int, rest: Node) -> Node:
        if self.hi is not None and count + 1 > self.hi:
            return NOTHING
        return seq(self.ws.sep if count else EMPTY, self.members[i][0], rest)

    def ordered(self) -> Node:
        n = len(self.members)
        if not self.counted:
            return self._ordered_uncounted()
        # Build right to left: tails[c] is the rest of the body after members[:i] with c present.
        tails = {c: self._extras(c) for c in range(self.cap + 1)}
        for i in range(n - 1, -1, -1):
            member, required = self.members[i]
            new = {}
            for c in range(self.cap + 1):
                if c == self.cap and self.hi is None:  # saturated: taking or not leads to the same tail
                    step = seq(self.ws.sep, member)
                    new[c] = seq(step if required else optional(step), tails[c])
                    continue
                take = self._take(i, c, tails[min(c + 1, self.cap)])
                new[c] = take if required else union(take, tails[c])
            tails = new
        return tails[0]

    def _steps(self) -> list[Node]:
        """`, member` per member, optional unless required: one object each, so
        that the rests of the body below share their items (see `nfa`)."""
        out = []
        for member, required in self.members:
            step = seq(self.ws.sep, member)
            out.append(step if required else optional(step))
        return out

    def _ordered_uncounted(self) -> Node:
        """No member counting beyond "is there one yet" (for the commas).

        The body is "first present member i, the rest of the declared members,
        then the additional ones" (or only additional ones when nothing is
        required). As a tree each first member i has its own copy of the rest
        (n^2/2 items), but the rests are suffixes made of the same step
        objects, and the NFA builds the common suffixes of alternatives once:
        the automaton stays linear in the number of members.
        """
        n = len(self.members)
        first_required = n
        for i, (_, req) in enumerate(self.members):    # (not `next(<generator>)`: see json_strings._raw_not_in)
            if req:
                first_required = i
                break
        steps = self._steps()
        firsts = [seq(self.members[i][0], *steps[i + 1:]) for i in range(min(first_required + 1, n))]
        nonempty = seq(union(*firsts), self._extras(1))
        return union(nonempty, self._extras(0)) if first_required == n else nonempty

    def ruled(self) -> Node:
        """`ordered` with dependencies between members (`MemberRules`): the state adds, of the members
        taken, those a dependency mentions (2^k states for k of them; schemas have one or two)."""
        rules, n = self.rules, len(self.members)

        def tail(i: int, count: int, taken: frozenset) -> Node:
            key = (i, count, taken)
            if key not in self.memo:
                if i == n:
                    out = self._extras(count) if rules.done(taken) else NOTHING
                else:
                    _, required = self.members[i]
                    must = required or rules.owed(i, taken)
                    mark = taken | {i} if i in rules.relevant else taken
                    take = (self._take(i, count, tail(i + 1, min(count + 1, self.cap), mark))
                            if rules.may_take(i, taken) else NOTHING)
                    out = take if must else union(take, tail(i + 1, count, taken))
                self.memo[key] = out
            return self.memo[key]

        return tail(0, 0, frozenset())
