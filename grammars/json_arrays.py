"""Arrays of a JSON schema as grammar nodes: `prefixItems`, `items`, `minItems`/`maxItems`, `contains`.

Without `contains` an array body is a small program over the item position:
the `prefixItems` one by one, then `items` as a counted repeat, commas
between them, `minItems`/`maxItems` on the positions and the repeat.

`contains: C` with `minContains` lo (default 1) and `maxContains` hi
(default none) counts items. Each position's schema P (a prefix item's, or
`items`) splits into X = P and C (the item counts), Y (it does not) and S
(an item once the count is settled), and the body is a walk over
(position i, count j):

- with hi: Y = P and not C (`json_negation.negation(C)`, merged with P by
  `json_merge.Merger`), disjoint from X, and j is the exact count, 0..hi,
  settled at hi (S = Y). A C whose negation has no form compiled exactly (a
  bound, a pattern) is refused, naming `contains` and the array's path;
- without hi: j counts up to lo and is settled there (S = P). Y is P and not
  C where that negation exists, else P itself: an array with lo items valid
  under C is one in which lo items can be *chosen* to count, and X is part
  of P, so `contains` of any schema that compiles is exact without a
  negation. The negation is still used where it exists and positions are
  explicit (below): each item then has one reading, so the DFA keeps one
  configuration per array instead of one per choice (`maxItems: 250`,
  `contains: {"const": 1}`, a walk of 55 items: 2.1 ms against 8.4 ms).

Positions are explicit only where the two counts meet: the prefix items,
and the positions before `maxItems` (or before `minItems`, without
`maxItems`). Past them, or once j is settled, the rest is a counted repeat,
which the NFA builds as a counter loop whatever its bounds: `(, S){m,n}`
once settled, else `(, Y)* (, X (, Y)*){lo-j,hi-j}`. So `contains`
without `maxItems`/`minItems` costs a few nodes whatever lo and hi are
(`{"minContains": 10**6}` too). With them, the (position, count) states
are a product (no smaller automaton has the language), and share their
rests (a DAG: an equal rest is one node). The NFA builds a rest shared by
two states once, then once more as a subroutine, with the states its first
build made: a run of counts, so the layout costs about states x (counts
per position) x `NFA_PER_STATE` NFA states, refused past the compiler's
size budget (400k: `maxItems` 100 with `maxContains` 10 is about 70k).

Why not N* (M N*){lo,hi} throughout, as a negation always allows: most
`contains` have no `maxContains`, and their C often has no negation
(`{"type": "number", "minimum": 100}`); choosing lo items needs none.

Example:
    >>> from grammars.json_schema import json_schema_grammar
    >>> from grammars.dfa import LazyDFA
    >>> g = json_schema_grammar({"type": "array", "contains": {"const": 1}, "maxContains": 2})
    >>> dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    >>> [dfa.matches(t) for t in (b'[0,1]', b'[1,0,1]', b'[0]', b'[1,1,1]')]
    [True, True, False, False]
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from grammars.ast import EMPTY, NOTHING, Node, repeat, seq, star
from grammars.errors import SchemaNote, UnsupportedSchemaError
from grammars.json_disjoint import type_set
from grammars.json_doubles import int_bounds
from grammars.json_merge import ANNOTATIONS, normalize
from grammars.json_negation import negation
from grammars.json_number_keywords import schema_interval
from grammars.json_values import counted, json_key, json_type, union, unit, value_node

if TYPE_CHECKING:
    from grammars.json_schema import Compiler

__all__ = ["array_node", "NFA_PER_STATE", "UNIQUE_VALUES"]

# Distinct item values an array with `uniqueItems` may have (its layout has a state per set of them).
UNIQUE_VALUES = 10

# NFA states per explicit (position, count) state of an array's layout, about (measured: 5 to 7); the
# layout is refused past the compiler's size budget (`json_length.DEFAULT_SIZE_BUDGET`).
NFA_PER_STATE = 8


def array_node(c: "Compiler", s: dict, path: str, base: str) -> Node:
    """`prefixItems` / `items` / `minItems` / `maxItems` / `contains` (draft-07 forms normalized before)."""
    if s.get("uniqueItems") is True and (s.get("maxItems") is None or s["maxItems"] >= 2):
        try:
            return c.ws.arr(_distinct(c, s, path, base))
        except UnsupportedSchemaError as e:
            if not c.approximate or e.keyword != "uniqueItems":
                raise
            c.notes.append(SchemaNote("uniqueItems", path, "approximated"))   # duplicates allowed
    counts = _contains_counts(s)
    if counts is not None:
        return c.ws.arr(_Counting(c, s, path, base, *counts).body())
    prefix = s.get("prefixItems", [])
    items = s.get("items", True)
    lo, hi = s.get("minItems", 0), s.get("maxItems")
    elems = [c.node(p, f"{path}.prefixItems[{i}]", base) for i, p in enumerate(prefix)]
    rest = unit(c.node(items, f"{path}.items", base)) if items is not False else NOTHING
    ws, k = c.ws, len(prefix)

    # built from the end: the items after the k prefix items, then each prefix item, which
    # may stop there while fewer than minItems are not reached (a loop, not a recursive closure:
    # that was a reference cycle, the whole compile's state kept until the GC's next pass)
    r_lo, r_hi = max(0, lo - k), None if hi is None else hi - k
    if r_hi is not None and r_hi < 0:
        node = NOTHING
    elif rest == NOTHING or r_hi == 0:
        node = EMPTY if r_lo == 0 else NOTHING
    else:
        node = ws.listing(rest, r_lo, r_hi) if k == 0 else counted(seq(ws.sep, rest), r_lo, r_hi)
    for i in range(k - 1, -1, -1):
        stop = EMPTY if i >= lo else NOTHING
        take = seq(ws.sep if i else EMPTY, elems[i], node) if hi is None or i < hi else NOTHING
        node = union(stop, take)
    return ws.arr(node)


def _distinct(c: "Compiler", s: dict, path: str, base: str) -> Node:
    """The body of an array with `uniqueItems` whose items are a few values (an enum or const,
    booleans and null, integers in a small range): per set of the values used so far, any
    unused one next, or the end. The set is the state, so the layout has 2^k rests for k
    values; past `UNIQUE_VALUES` values, or for items of another kind (whose uniqueness no
    finite automaton can check), it is refused."""
    if s.get("prefixItems") or "contains" in s:
        raise UnsupportedSchemaError("uniqueItems", path, "together with prefixItems or contains")
    items = s.get("items", True)
    values = _finite_values(c, items, f"{path}.items", base)
    if values is None:
        raise UnsupportedSchemaError("uniqueItems", path, "the items are not a few values (enum, const, booleans, "
                                     "null, integers in a small range): the uniqueness of other values is not regular")
    if len(values) > UNIQUE_VALUES:
        raise UnsupportedSchemaError("uniqueItems", path, f"{len(values)} distinct item values (at most "
                                     f"{UNIQUE_VALUES}: the layout has a state per set of values used)")
    nodes = [unit(value_node(v, c.ws, f"{path}.items", c.numbers)) for v in values]
    lo, hi = s.get("minItems", 0), s.get("maxItems")
    ws = c.ws
    memo: dict[int, Node] = {}

    def rest(used: int) -> Node:            # the body after the values in the bit set `used`
        hit = memo.get(used)
        if hit is None:
            count = bin(used).count("1")
            parts = [EMPTY] if count >= lo else []
            if hi is None or count < hi:
                parts += [seq(ws.sep if count else EMPTY, node, rest(used | 1 << i))
                          for i, node in enumerate(nodes) if not used >> i & 1]
            hit = memo[used] = union(*parts) if parts else NOTHING
        return hit

    return rest(0)


def _finite_values(c: "Compiler", items: Any, path: str, base: str) -> list | None:
    """The distinct values (JSON equality) valid under `items` when they are few and known:
    an enum or const, booleans and null, integers within `UNIQUE_VALUES` of each other."""
    flat = c.flatten(items, path, base)
    if flat is False:
        return []
    if not isinstance(flat, dict):
        return None
    flat = normalize(flat, c.draft)
    if "enum" in flat:
        candidates = list(flat["enum"])
    else:
        types = type_set(flat)
        if types <= {"boolean", "null"}:
            candidates = [v for v in (False, True, None) if json_type(v) in types]
        elif types == {"integer"} or types == {"integer", "number"} and flat.get("type") == "integer":
            lo, hi = int_bounds(schema_interval(c, flat))
            if lo is None or hi is None or hi - lo >= UNIQUE_VALUES:
                return None
            candidates = list(range(lo, hi + 1))
        else:
            return None
    out, seen = [], set()
    for v in candidates:
        key = json_key(v)
        if key not in seen and c.accepts(items, v, path, base):
            seen.add(key)
            out.append(v)
    return out


def _contains_counts(s: dict) -> tuple[Any, int, int | None] | None:
    """(C, lo, hi) of `contains`; None when it constrains nothing (absent, or `minContains: 0`
    without `maxContains`)."""
    if "contains" not in s:
        return None
    lo, hi = s.get("minContains", 1), s.get("maxContains")
    return None if lo == 0 and hi is None else (s["contains"], lo, hi)


def _negation(c: "Compiler", schema: Any, path: str, base: str, why: list[str] | None = None) -> Any:
    """`json_negation.negation` of `schema`, its `$ref`s and `allOf`s merged in (`Compiler.resolving`); None if none
    (and the reason in `why`)."""
    return negation(schema, c.resolving(path, base), why, path, c.draft)


class _Counting:
    """The body of an array with a `contains` count (see the module docstring).

    Per position, (X, Y, S): the values that count, those that do not, and those taken once the
    count is settled (Y under hi; every value of the position without hi)."""

    def __init__(self, c: "Compiler", s: dict, path: str, base: str, schema: Any, lo: int, hi: int | None) -> None:
        self.c, self.ws, self.path, self.base = c, c.ws, path, base
        self.lo, self.hi = lo, hi
        self.a, self.b = s.get("minItems", 0), s.get("maxItems")
        prefix, items = s.get("prefixItems", []), s.get("items", True)
        self.k = len(prefix)
        self.end = self.b if self.b is not None else max(self.k, self.a, 1)   # the first position not explicit
        self.impossible = (hi is not None and hi < lo) or (self.b is not None and (self.a > self.b or lo > self.b))
        if self.impossible:
            return
        # The negation makes the split disjoint: needed under hi, and worth it wherever positions are
        # explicit (each item then has one reading: the DFA keeps one configuration, not one per choice).
        why: list[str] = []
        neg = _negation(c, schema, f"{path}.contains", base, why) if hi is not None or self.end > 1 else None
        if hi is not None and neg is None:
            self._no_negation(schema, why[0] if why else "")
        self.exact = self.hi is not None
        self.cap = self.hi if self.exact else lo                  # counts run 0..cap (without hi: capped at lo)
        self.split = [self._split(p, schema, neg, f"{path}.prefixItems[{i}]") for i, p in enumerate(prefix)]
        self.rest = self._split(items, schema, neg, f"{path}.items")
        self.others = star(seq(self.ws.sep, self.rest[1]))     # (one node: the rests share it)

    def _no_negation(self, schema: Any, why: str) -> None:
        """Refuse `maxContains` (or, approximating, drop it) for want of the items not valid under `contains`."""
        text = (f"maxContains {self.hi} needs the items not valid under `contains` ({schema!r}), which has no "
                f"negation made of forms compiled exactly: {why}")
        if not self.c.approximate:
            raise UnsupportedSchemaError("contains", self.path, text)
        self.c.notes.append(SchemaNote("maxContains", self.path, "approximated", text))
        self.hi = None

    # -- the parts -------------------------------------------------------------

    def _split(self, item: Any, schema: Any, neg: Any, where: str) -> tuple[Node, Node, Node]:
        """(X, Y, S) of a position whose schema is `item` (see the class docstring)."""
        if item is False:
            return NOTHING, NOTHING, NOTHING
        plain = item is True or (isinstance(item, dict) and all(k in ANNOTATIONS for k in item))
        label = f"{self.path}.contains" if plain else where
        x = unit(self.c.node(self._both(item, schema, where), label, self.base))
        y = None
        if neg is not None:
            try:
                y = unit(self.c.node(self._both(item, neg, where), label, self.base))
            except UnsupportedSchemaError as e:
                if self.exact:
                    raise UnsupportedSchemaError("contains", self.path, f"maxContains {self.hi} needs the items at "
                                                 f"{where} not valid under `contains`, which do not compile exactly "
                                                 f"({e})") from None
        if self.exact:
            return x, y, y
        whole = unit(self.c.node(item, where, self.base))
        return x, (whole if y is None else y), whole      # without a negation, an item counts or not, freely

    def _both(self, item: Any, other: Any, where: str) -> Any:
        """The schema of values valid under `item` and `other` (`json_merge.Merger`)."""
        if item is True or other is False:
            return other
        if other is True or item is False:
            return item
        self.c.merger.base = self.base
        try:
            return self.c.merger.merge(item, other, where)
        except UnsupportedSchemaError as e:
            raise UnsupportedSchemaError("contains", self.path, f"the items at {where} and `contains` do not "
                                         f"merge exactly ({e})") from None

    # -- the walk ----------------------------------------------------------------

    def body(self) -> Node:
        if self.impossible:
            return NOTHING
        end, budget = self.end, self.c.budget // NFA_PER_STATE
        if _states(end, self.cap) > budget:
            raise self._too_large(_states(end, self.cap), budget)
        # States with one rest share one node: an equal copy would cost the NFA's alternations
        # deep equality tests (the nodes form a DAG), and the NFA another build.
        memo: dict[tuple, Node] = {}

        def node(i: int, j: int, make: Any) -> Node:
            key = self._key(i, j)
            if key not in memo:
                memo[key] = make()
            return memo[key]

        nxt = {j: node(end, j, lambda: self._last(j)) for j in range(min(end, self.cap) + 1)}
        for i in range(end - 1, -1, -1):
            nxt = {j: node(i, j, lambda: self._rest(i, j) or self._step(i, j, nxt))
                   for j in range(min(i, self.cap) + 1)}
        # The NFA builds a state shared by two others once, then its copy as a subroutine, with the
        # states its first build made: a run of counts, at most as many as one position has.
        width = max(Counter(i for i, _, _ in memo).values())
        if len(memo) * width > budget:
            raise self._too_large(len(memo) * width, budget)
        return nxt[0]

    def _key(self, i: int, j: int) -> tuple:
        """What the rest from position i with count j depends on: i, the counts still needed, and the
        room left under hi (none when fewer positions than that are left)."""
        room = None if not self.exact else self.hi - j
        if room is not None and self.b is not None and room >= self.b - i:
            room = None
        return i, max(self.lo - j, 0), room

    def _too_large(self, size: int, budget: int) -> UnsupportedSchemaError:
        bound = f"at most {self.b} items" if self.b is not None else f"at least {max(self.a, self.k)} items"
        counts = f"at least {self.lo}" if self.hi is None else f"{self.lo} to {self.hi}"
        return UnsupportedSchemaError(
            "contains", self.path, f"counting {counts} items valid under `contains` among {bound} takes {size} "
            f"layout states (at most {budget}, for the size budget of {self.c.budget} NFA states): the two counts "
            "make a product")

    def _last(self, j: int) -> Node:
        """The rest after the explicit positions: the end (after `maxItems` items), or counted repeats."""
        if self.b is not None:
            return EMPTY if j >= self.lo else NOTHING
        return self._rest(self.end, j)

    def _rest(self, i: int, j: int) -> Node | None:
        """The rest from position i with count j as counted repeats, where one count is settled; None
        where positions are still explicit (prefix items, the first item, which has no comma)."""
        if i < max(self.k, 1):
            return None
        x, y, settled = self.rest
        if j == self.cap:                            # the count is settled: the items left, counted
            return counted(seq(self.ws.sep, settled), max(self.a - i, 0), None if self.b is None else self.b - i)
        if self.b is None and i >= self.a:           # the number of items is free: items that count among others
            room = None if self.hi is None else self.hi - j
            return seq(self.others, repeat(seq(self.ws.sep, x, self.others), max(self.lo - j, 0), room))
        return None

    def _step(self, i: int, j: int, nxt: dict[int, Node]) -> Node:
        """Position i with count j: stop here, or an item that counts, or one that does not."""
        x, y, settled = self.split[i] if i < self.k else self.rest
        sep = self.ws.sep if i else EMPTY
        stop = EMPTY if i >= self.a and j >= self.lo else NOTHING
        if j == self.cap:
            return union(stop, seq(sep, settled, nxt[j]))
        return union(stop, seq(sep, y, nxt[j]), seq(sep, x, nxt[j + 1]))     # (y first: see the NFA note)


def _states(end: int, cap: int) -> int:
    """Explicit states: positions 0..end-1, counts 0..min(i, cap) at position i."""
    full = min(end, cap + 1)                        # positions whose counts are not yet capped
    return full * (full + 1) // 2 + (end - full) * (cap + 1)
