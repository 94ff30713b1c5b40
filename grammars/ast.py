"""The byte-level grammar language every constraint compiles into.

A constraint (regex, JSON schema) becomes a `Grammar`: named rules whose
bodies are trees of six node kinds over *bytes*:

- `ByteSet`: one byte out of a set (a 256-bit mask);
- `Seq`: concatenation;  `Alt`: alternation;
- `Repeat`: `item{min,max}` (`max=None` is unbounded);
- `Ref`: a call to another rule, which is how recursion is expressed;
- `AnyOrder`: a JSON object's members in any order, each at most once (the
  set of members taken is a frame on the DFA's stack, see `grammars.fragments`);
- `Counted`: an automaton's strings whose characters are counted between two
  bounds (the count is such a frame, see `grammars.json_counted`).

Nodes are immutable and hashable. Build them with the smart constructors
(`seq`, `alt`, `repeat`, `literal`, ...; `grammars.utf8.codepoints` for
characters), which simplify as they go: `seq(x, NOTHING)` is `NOTHING`, `alt(x, NOTHING)` is `x`, and single-byte
alternatives merge into one `ByteSet`.

Example:
    >>> digit = byte_range(ord("0"), ord("9"))
    >>> number = seq(optional(literal(b"-")), plus(digit))
    >>> Grammar({"start": number}).start_node is number
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Union

from grammars.errors import StateBudgetError
from grammars.native import checkpoint

try:
    import cython
except ImportError:  # the source runs as plain Python, without Cython: its decorators do nothing
    class cython:  # noqa: N801 - stands in for the module
        compiled = False

        @staticmethod
        def cclass(cls: type) -> type:
            return cls

        no_gc = cclass

        @staticmethod
        def freelist(n: int) -> Callable[[type], type]:
            return lambda cls: cls

        @staticmethod
        def cast(kind: type, value: object) -> object:
            return value

__all__ = [
    "ByteSet", "Seq", "Alt", "Repeat", "Ref", "AnyOrder", "Counted", "Node", "Grammar", "ANY_ORDER_MEMBERS", "COUNT_SHIFT", "COUNT_CAP",
    "EMPTY", "NOTHING", "ANY_BYTE",
    "byteset", "byte_range", "literal", "seq", "alt", "repeat", "optional", "star", "plus",
    "MAX_CODEPOINT", "surely_nullable", "non_empty",
]

MAX_CODEPOINT = 0x10FFFF


# Nodes are immutable: nothing assigns a field after construction but the hash
# cache, and the sharing of equal parts below (which changes no node's value). When this module is compiled (`grammars.native`), the `cython`
# decorators and `ast.pxd` make the five node classes C extension types: fields
# in C struct slots, instances from a free list, and not tracked by the cyclic
# GC (a node only refers to nodes made before it, so nodes form no cycles). The
# syntax a lazy NFA keeps for its unbuilt subschemas then costs collections
# nothing but its tuples, which the first collection untracks: the tracked
# objects a median dev schema's compile leaves went from 293 to 54, the largest
# mask of `bench masks` (a full collection in its worker) from 40-60 to 24-33 ms,
# and the median grammar from 215 to 195 us. As source, they are classes with slots.
# Compiled, `Seq` and `Alt` also untrack their item tuples when made (they hold nodes
# only), instead of leaving that to the next collection: a compile's kept syntax was
# ~1,000 young tuples at each gen-0 collection, nine tenths of what it walked.
#
# Nodes are shared DAGs that get hashed and compared a lot (dedup in `alt`,
# memo tables keyed by node): each caches its hash when first asked (not at
# construction: `seq` and `literal` make many nodes that are flattened into
# others and never hashed; median dev compile -6%), and equality rejects on
# differing lengths, then on differing hashes, before comparing children (the
# length first: `key == NOTHING` on a fresh trie complement hashed all of it,
# a tenth of the median schema's grammar).
#
# Equal nodes share their parts: when two distinct nodes compare equal, the
# second takes the first's children (its `items` tuple, its `item`), so that
# comparing the two again is a pass of identity checks. Equality walks the
# nodes as trees, and a DAG built twice (a schema's parts copied into its own
# `patternProperties` and `if` branches) reaches the same pair of equal,
# distinct subnodes again and again: without the sharing, one dict lookup in
# the NFA builder compared such a pair's subtrees for minutes.


@cython.no_gc
@cython.freelist(512)
@cython.cclass
class ByteSet:
    """One byte whose value is in `mask` (bit b set means byte b is allowed)."""

    __slots__ = ("mask",)

    def __init__(self, mask: int) -> None:
        self.mask = mask

    def __contains__(self, byte: int) -> bool:
        return bool(self.mask >> byte & 1)

    def __eq__(self, other: object) -> bool:
        return type(other) is ByteSet and self.mask == other.mask

    def __hash__(self) -> int:
        return hash(self.mask)

    def __repr__(self) -> str:
        return f"ByteSet(mask={self.mask:#x})"

    def __reduce__(self) -> tuple:
        return ByteSet, (self.mask,)

    def bytes(self) -> list[int]:
        return [b for b in range(256) if self.mask >> b & 1]


@cython.no_gc
@cython.freelist(512)
@cython.cclass
class Seq:
    """Concatenation of `items`."""

    __slots__ = ("items", "_hash")

    def __init__(self, items: tuple["Node", ...]) -> None:
        self.items = items
        if cython.compiled:
            PyObject_GC_UnTrack(items)  # noqa: F821 - declared in ast.pxd (C API)
        self._hash = 0                    # computed when first asked

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not Seq or len(self.items) != len(other.items) or hash(self) != hash(other):
            return False
        if self.items != other.items:
            return False
        cython.cast(Seq, other).items = self.items    # see "Equal nodes share their parts" above
        return True

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = hash(("seq", self.items)) or 1
            self._hash = h
        return h

    def __repr__(self) -> str:
        return f"Seq(items={self.items!r})"

    def __reduce__(self) -> tuple:
        return Seq, (self.items,)  # the cached hash is per process (string hashes are salted)


@cython.no_gc
@cython.freelist(512)
@cython.cclass
class Alt:
    """Alternation of `items`."""

    __slots__ = ("items", "_hash")

    def __init__(self, items: tuple["Node", ...]) -> None:
        self.items = items
        if cython.compiled:
            PyObject_GC_UnTrack(items)  # noqa: F821 - declared in ast.pxd (C API)
        self._hash = 0

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not Alt or len(self.items) != len(other.items) or hash(self) != hash(other):
            return False
        if self.items != other.items:
            return False
        cython.cast(Alt, other).items = self.items    # see "Equal nodes share their parts" above
        return True

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = hash(("alt", self.items)) or 1
            self._hash = h
        return h

    def __repr__(self) -> str:
        return f"Alt(items={self.items!r})"

    def __reduce__(self) -> tuple:
        return Alt, (self.items,)


@cython.no_gc
@cython.freelist(256)
@cython.cclass
class Repeat:
    """`item` repeated `min` to `max` times (`max` None: unbounded)."""

    __slots__ = ("item", "min", "max", "_hash")

    def __init__(self, item: "Node", min: int, max: int | None) -> None:   # noqa: A002 - the field names
        self.item = item
        self.min = min
        self.max = max
        self._hash = 0

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if (type(other) is not Repeat or hash(self) != hash(other) or self.min != other.min
                or self.max != other.max or self.item != other.item):
            return False
        cython.cast(Repeat, other).item = self.item      # see "Equal nodes share their parts" above
        return True

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = hash(("repeat", self.item, self.min, self.max)) or 1
            self._hash = h
        return h

    def __repr__(self) -> str:
        return f"Repeat(item={self.item!r}, min={self.min!r}, max={self.max!r})"

    def __reduce__(self) -> tuple:
        return Repeat, (self.item, self.min, self.max)


@cython.no_gc
@cython.freelist(64)
@cython.cclass
class Ref:
    """A call to the rule `name` of the enclosing `Grammar`."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return type(other) is Ref and self.name == other.name

    def __hash__(self) -> int:
        return hash(("ref", self.name))

    def __repr__(self) -> str:
        return f"Ref(name={self.name!r})"

    def __reduce__(self) -> tuple:
        return Ref, (self.name,)


# An `AnyOrder` frame is an int64 bit set: members take bits 0.., and a count of the members
# counted (`AnyOrder.lo`/`hi`) saturates in the 7 bits from COUNT_SHIFT (the frame stays < 2^62).
ANY_ORDER_MEMBERS = 62
COUNT_SHIFT = 55
COUNT_CAP = 127


@cython.no_gc
@cython.freelist(16)
@cython.cclass
class AnyOrder:
    """`items` in any order, each at most once, separated by `sep`; `extra` (any number of times)
    among them. Member i is bit i of the set of those taken, a frame on the DFA's stack.

    - `bans[i]`: the bits that must be clear to take member i (its own, and the members it
      conflicts with: a dependency forbidding one of them);
    - `required`: the bits that must all be set at the end;
    - `needs`: pairs (i, mask): at the end, if bit i is set, every bit of `mask` is;
    - `lo`, `hi`: how many members *not* in `required`, extras included, there may be (`hi` -1:
      no bound); counted only when `lo` > 0 or `hi` >= 0, in the bits from `COUNT_SHIFT`, so
      then at most `COUNT_SHIFT` members.

    Example:
        >>> from grammars.dfa import LazyDFA
        >>> body = AnyOrder((literal(b"a"), literal(b"b")), (1, 2), 3, (), NOTHING, literal(b","))
        >>> dfa = LazyDFA(Grammar({"start": body}))
        >>> [dfa.matches(t) for t in (b"a,b", b"b,a", b"a", b"a,a")]
        [True, True, False, False]
    """

    __slots__ = ("items", "bans", "required", "needs", "extra", "sep", "lo", "hi", "_hash")

    def __init__(self, items: tuple["Node", ...], bans: tuple[int, ...], required: int,
                 needs: tuple[tuple[int, int], ...], extra: "Node", sep: "Node", lo: int = 0, hi: int = -1) -> None:
        self.items = items
        self.bans = bans
        self.required = required
        self.needs = needs
        self.extra = extra
        self.sep = sep
        self.lo = lo
        self.hi = hi
        self._hash = 0

    @property
    def counted(self) -> bool:
        """Whether the frame counts the members outside `required` (see `lo`, `hi`)."""
        return self.lo > 0 or self.hi >= 0

    def _key(self) -> tuple:
        return (self.items, self.bans, self.required, self.needs, self.extra, self.sep, self.lo, self.hi)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not AnyOrder or hash(self) != hash(other) or self._key() != other._key():
            return False
        same = cython.cast(AnyOrder, other)               # see "Equal nodes share their parts" above
        same.items, same.extra, same.sep = self.items, self.extra, self.sep
        return True

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = hash(("any_order", *self._key())) or 1
            self._hash = h
        return h

    def __repr__(self) -> str:
        return (f"AnyOrder(items={self.items!r}, bans={self.bans!r}, required={self.required!r}, "
                f"needs={self.needs!r}, extra={self.extra!r}, sep={self.sep!r}, lo={self.lo!r}, hi={self.hi!r})")

    def __reduce__(self) -> tuple:
        return AnyOrder, self._key()


class Counted:
    """The strings of a byte automaton (a JSON string body) with `min_length`..`max_length`
    characters, the count a frame on the DFA's stack. Made by `grammars.json_counted.counted`,
    which says what the fields are and why every count it lets through can still finish.

    - `states[i]`: state i's edges, (target, byte mask, characters the byte starts: 0 or 1);
      state 0 is the start;
    - `live[i]`: (lo, hi), the counts with which state i can still end within the bounds (an
      edge into i is taken only if its new count is among them);
    - `accepting`: the states where the string may end (with a count >= `min_length`).

    A plain class, not a compiled one: a schema holds a few, and nothing walks their insides but
    `grammars.fragments`.
    """

    __slots__ = ("states", "live", "accepting", "min_length", "max_length", "_hash")

    def __init__(self, states: tuple, live: tuple, accepting: frozenset, min_length: int, max_length: int) -> None:
        self.states = states
        self.live = live
        self.accepting = accepting
        self.min_length = min_length
        self.max_length = max_length
        self._hash = 0

    def _key(self) -> tuple:
        return (self.states, self.live, self.accepting, self.min_length, self.max_length)

    def __eq__(self, other: object) -> bool:
        return self is other or (type(other) is Counted and hash(self) == hash(other)
                                 and self._key() == other._key())

    def __hash__(self) -> int:
        h = self._hash
        if not h:
            h = hash(("counted", *self._key())) or 1
            self._hash = h
        return h

    def __repr__(self) -> str:
        return f"Counted(<{len(self.states)} states>, min_length={self.min_length}, max_length={self.max_length})"

    def __reduce__(self) -> tuple:
        return Counted, self._key()


Node = Union[ByteSet, Seq, Alt, Repeat, Ref, AnyOrder, Counted]

EMPTY: Node = Seq(())       # matches only the empty string
NOTHING: Node = Alt(())     # matches nothing at all
ANY_BYTE: Node = ByteSet((1 << 256) - 1)
_SINGLE_BYTES = [ByteSet(1 << b) for b in range(256)]  # shared by `literal`


@dataclass(frozen=True)
class Grammar:
    """Named rules; `start` names the rule a match must derive.

    Rules may call each other (and themselves) through `Ref`; the automaton
    bounds the call depth, which is how recursive schemas are unrolled.
    """

    rules: Mapping[str, Node]
    start: str = "start"
    # Free-form facts the compiler wants to pass on (e.g. whitespace policy).
    info: Mapping[str, object] = field(default_factory=dict)
    # Check that every `Ref` names a rule (a walk of every body): compilers that only
    # make refs to rules they define skip it, it is a sizable part of a small compile.
    check_refs: bool = field(default=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.start not in self.rules:
            raise ValueError(f"start rule {self.start!r} is not defined")
        if not self.check_refs:
            return
        for name, body in self.rules.items():
            for ref in _refs(body):
                if ref not in self.rules:
                    raise ValueError(f"rule {name!r} calls undefined rule {ref!r}")

    @property
    def start_node(self) -> Node:
        return self.rules[self.start]


def _refs(node: Node) -> Iterable[str]:
    # Bodies are DAGs whose trees can be much larger (shared suffixes): expand
    # each sequence/alternation once.
    stack = [node]
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        kind = type(n)
        if kind is Ref:
            yield n.name
        elif kind is Seq or kind is Alt:
            if id(n) not in seen:
                seen.add(id(n))
                stack.extend(n.items)
        elif kind is Repeat:
            stack.append(n.item)
        elif kind is AnyOrder:
            stack.extend((*n.items, n.extra, n.sep))


# ---------------------------------------------------------------------------
# Smart constructors


def byteset(values: Iterable[int]) -> ByteSet:
    """`ByteSet` of the given byte values."""
    mask = 0
    for v in values:
        mask |= 1 << v
    return ByteSet(mask)


def byte_range(lo: int, hi: int) -> ByteSet:
    """`ByteSet` of lo..hi inclusive: byte_range(0x30, 0x39) is `[0-9]`."""
    if not 0 <= lo <= hi <= 255:
        raise ValueError(f"bad byte range {lo}..{hi}")
    return ByteSet(((1 << (hi - lo + 1)) - 1) << lo)


def literal(data: bytes) -> Node:
    """The exact byte string `data`."""
    if len(data) == 1:
        return _SINGLE_BYTES[data[0]]
    return Seq(tuple([_SINGLE_BYTES[b] for b in data])) if data else EMPTY


def seq(*items: Node) -> Node:
    """Concatenation, flattened; any `NOTHING` makes the whole `NOTHING`."""
    out: list[Node] = []
    for item in items:
        kind = type(item)
        if kind is Seq:
            out.extend(item.items)
        elif kind is Alt and not item.items:  # NOTHING
            return NOTHING
        else:
            out.append(item)
    return out[0] if len(out) == 1 else Seq(tuple(out))


def alt(*items: Node) -> Node:
    """Alternation, flattened and deduplicated; single bytes merge into one set."""
    mask = 0
    others: list[Node] = []
    seen: set[Node] = set()
    stack = list(reversed(items))
    while stack:
        item = stack.pop()
        if isinstance(item, Alt):
            stack.extend(reversed(item.items))
        elif isinstance(item, ByteSet):
            mask |= item.mask
        elif item not in seen:                 # hashes `item` (a whole enum's worth, the first time)
            checkpoint()                       # compiled: let other threads in (see `grammars.native`)
            seen.add(item)
            others.append(item)
    out = ([ByteSet(mask)] if mask else []) + others
    return out[0] if len(out) == 1 else Alt(tuple(out))


# Counter bounds are 64-bit in the DFA's configurations (see `grammars.nfa`): a larger
# upper bound counts as none, a larger lower bound is refused here, where the syntax
# is made, so that a part of a constraint built only when first reached never fails.
COUNT_MAX = 1 << 62


def repeat(item: Node, lo: int, hi: int | None) -> Node:
    """`item{lo,hi}`; `hi=None` means unbounded.

    Raises:
        StateBudgetError: `lo` is past `COUNT_MAX`.
    """
    if lo < 0 or (hi is not None and hi < lo):
        raise ValueError(f"bad repetition bounds {{{lo},{hi}}}")
    if lo > COUNT_MAX:
        raise StateBudgetError(COUNT_MAX, "a counted repeat's minimum", unit="repetitions", option=None)
    if hi == 0 or item == EMPTY:
        return EMPTY
    if item == NOTHING:
        return EMPTY if lo == 0 else NOTHING
    if lo == hi == 1:
        return item
    return Repeat(item, lo, hi)


def optional(item: Node) -> Node:
    return repeat(item, 0, 1)


def star(item: Node) -> Node:
    return repeat(item, 0, None)


def plus(item: Node) -> Node:
    return repeat(item, 1, None)


# ---------------------------------------------------------------------------
# The empty string


def surely_nullable(node: Node, memo: dict[int, bool] | None = None) -> bool:
    """Whether `node` matches the empty string without calling a rule.

    A `Ref` counts as not nullable, so False means "not nullable, or only
    through a rule call"; `memo` (by node id) keeps shared DAGs linear.
    """
    kind = type(node)
    if kind is ByteSet or kind is Ref:
        return False
    if kind is Repeat and node.min == 0:
        return True
    if kind is AnyOrder:
        return node.required == 0 and node.lo == 0
    if kind is Counted:
        return node.min_length == 0 and 0 in node.accepting
    if memo is None:
        memo = {}
    got = memo.get(id(node))
    if got is None:
        if kind is Seq:
            got = all(surely_nullable(x, memo) for x in node.items)
        elif kind is Alt:
            got = any(surely_nullable(x, memo) for x in node.items)
        else:
            got = surely_nullable(node.item, memo)
        memo[id(node)] = got
    return got


def non_empty(node: Node, memo: dict[int, bool] | None = None) -> Node:
    """A node matching every non-empty string of `node`, and only strings of `node`.

    It matches the empty string only when `node` does through a rule call
    (`surely_nullable` is False for it). `item{m,n}` with a nullable item is
    `non_empty(item){0,n}`: the form whose every round consumes a byte.

    Example:
        >>> non_empty(seq(optional(literal(b"a")), optional(literal(b"b")))) == alt(
        ...     seq(literal(b"a"), optional(literal(b"b"))), literal(b"b"))
        True
    """
    if memo is None:
        memo = {}
    if not surely_nullable(node, memo):
        return node
    kind = type(node)
    if kind is Seq:  # every item is nullable: the first non-empty one, then the rest
        items = node.items
        return alt(*(seq(non_empty(x, memo), *items[i + 1:]) for i, x in enumerate(items)))
    if kind is Alt:
        return alt(*(non_empty(x, memo) for x in node.items))
    if kind is AnyOrder:  # no member required: at least one counted
        if node.hi == 0 or (not node.items and node.extra == NOTHING):
            return NOTHING
        return AnyOrder(node.items, node.bans, node.required, node.needs, node.extra, node.sep, 1, node.hi)
    if kind is Counted:  # at least one character
        from grammars.json_counted import at_least_one
        return at_least_one(node)
    return repeat(non_empty(node.item, memo), 1, node.max)
