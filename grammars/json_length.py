"""Intersect a JSON-string-body node with a code point length range, exactly.

`pattern` and `format` become byte-level nodes over *encoded* characters, so
"at most 8 characters" cannot be counted in bytes: `\\u00e9` is six bytes and
one character. We recover character boundaries with a tiny counting
automaton over the JSON string body (phases: between characters, inside a
UTF-8 sequence, inside an escape, inside a surrogate pair) and abstract
interpretation: a sub-node is a *unit* when every string it derives takes
the counter from "between characters" back to it after exactly one code
point. The node tree is then rebuilt per length ("profile": count -> node),
which is the product of the regular expression with a counter, done on the
expression so the result is again a plain `Node`.

The product can be large (a regular expression for "a search pattern within
at most n characters" needs O(n^2) pieces); `restrict_length` raises
`UnsupportedSchemaError` when the expanded size exceeds the budget rather
than ever dropping one of the two constraints.

Example:
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.ast import Grammar, star
    >>> from grammars.json_strings import ANY_CHAR, json_char
    >>> body = seq(star(ANY_CHAR), json_char([(0x41, 0x41)]), star(ANY_CHAR))  # contains "A"
    >>> dfa = LazyDFA(Grammar({"start": restrict_length(body, 2, 3)}))
    >>> [dfa.matches(s) for s in (b"A", b"xA", b"\\\\u0041yz", b"xAyz")]
    [False, True, True, False]
"""

from __future__ import annotations

from grammars.ast import EMPTY, NOTHING, Alt, AnyOrder, ByteSet, Node, Repeat, Seq, repeat, seq, star
from grammars.errors import UnsupportedSchemaError
from grammars.json_values import union

__all__ = ["restrict_length", "expanded_size", "DEFAULT_SIZE_BUDGET", "EXPANSION_BUDGET", "PHASE_STEPS", "BETWEEN"]

DEFAULT_SIZE_BUDGET = 400_000
# The size up to which `json_schema` expands a pattern per length (`restrict_length`'s budget there).
# Past it, a product of automata (`json_string_sets`) or the pattern's automaton with a count
# (`json_counted`) spells the same strings in fewer states, and the expansion that fails costs
# little: at the full budget it took 130 ms on maskbench's Handwritten---allany13 and 20 ms of
# Github_hard---o82773's 25; the largest one kept on that corpus is 7,320.
EXPANSION_BUDGET = 20_000

# Counter phases over a JSON string body.
(B, C1, C2, C3, ESC, U0, U1N, U1D, U2N, U3N, U2H, U3H, P0, P1, L0, L1, L2, L3) = range(18)
_HEX = set(b"0123456789abcdefABCDEF")


def _step(phase: int, byte: int) -> tuple[int, int] | None:
    """(next phase, characters completed) or None if the byte is illegal here."""
    if phase == B:
        if byte == 0x5C:
            return ESC, 0
        if 0x20 <= byte < 0x80 and byte != 0x22:
            return B, 1
        if 0xC2 <= byte <= 0xDF:
            return C1, 1
        if 0xE0 <= byte <= 0xEF:
            return C2, 1
        if 0xF0 <= byte <= 0xF4:
            return C3, 1
        return None
    if phase in (C1, C2, C3):
        return ((B, 0) if phase == C1 else (phase - 1, 0)) if 0x80 <= byte <= 0xBF else None
    if phase == ESC:
        if byte in b'"\\/bfnrt':
            return B, 1
        return (U0, 0) if byte == ord("u") else None
    if byte not in _HEX and phase not in (P0, P1):
        return None
    if phase == U0:
        return (U1D, 0) if byte in b"dD" else (U1N, 0)
    if phase == U1D:
        if byte in b"01234567":
            return U2N, 0
        return (U2H, 0) if byte in b"89abAB" else None
    simple = {U1N: (U2N, 0), U2N: (U3N, 0), U3N: (B, 1), U2H: (U3H, 0), U3H: (P0, 0),
              L2: (L3, 0), L3: (B, 1)}
    if phase in simple:
        return simple[phase]
    if phase == P0:
        return (P1, 0) if byte == 0x5C else None
    if phase == P1:
        return (L0, 0) if byte == ord("u") else None
    if phase == L0:
        return (L1, 0) if byte in b"dD" else None
    if phase == L1:
        return (L2, 0) if byte in b"cdefCDEF" else None
    return None


_STEP = [[_step(p, b) for b in range(256)] for p in range(18)]
# For `grammars.json_counted`, which follows the same phases over an automaton's edges.
PHASE_STEPS = _STEP
BETWEEN = B
_ID = frozenset((p, p, 0) for p in range(18))

Rel = frozenset  # of (phase_in, phase_out, count capped at 2)


def _compose(r1: Rel, r2: Rel) -> Rel:
    by_in: dict[int, list[tuple[int, int]]] = {}
    for a, b, n in r2:
        by_in.setdefault(a, []).append((b, n))
    return frozenset((a, c, min(2, n1 + n2)) for a, b, n1 in r1 for c, n2 in by_in.get(b, ()))


class _Analyzer:
    """Memoized phase relations of nodes (keyed by id: nodes are shared DAGs)."""

    def __init__(self) -> None:
        self.memo: dict[int, tuple[Node, Rel]] = {}
        self.mask_memo: dict[int, Rel] = {}

    def rel(self, node: Node) -> Rel:
        hit = self.memo.get(id(node))
        if hit is not None:
            return hit[1]
        out = self._rel(node)
        self.memo[id(node)] = (node, out)  # keep node alive so its id stays unique
        return out

    def _rel(self, node: Node) -> Rel:
        if isinstance(node, ByteSet):
            out = self.mask_memo.get(node.mask)
            if out is None:
                bs = node.bytes()
                out = frozenset((p, *_STEP[p][b]) for p in range(18) for b in bs if _STEP[p][b])
                self.mask_memo[node.mask] = out
            return out
        if isinstance(node, Seq):
            r = _ID
            for item in node.items:
                r = _compose(r, self.rel(item))
            return r
        if isinstance(node, Alt):
            return frozenset().union(*(self.rel(i) for i in node.items))
        if isinstance(node, Repeat):
            item = self.rel(node.item)
            r = _ID
            for _ in range(node.min):
                nxt = _compose(r, item)
                if nxt == r:
                    break
                r = nxt
            step = _ID | item
            for _ in range(node.max - node.min if node.max is not None else 1 << 30):
                nxt = _compose(r, step)
                if nxt == r:
                    break
                r = nxt
            return r
        raise UnsupportedSchemaError("pattern", "$", f"cannot count characters through {type(node).__name__}")

    def from_between(self, node: Node) -> set[tuple[int, int]]:
        return {(b, n) for a, b, n in self.rel(node) if a == B}

    def is_unit(self, node: Node) -> bool:
        return self.from_between(node) == {(B, 1)}

    def is_closed(self, node: Node) -> bool:
        return all(b == B for b, _ in self.from_between(node))


Profile = dict[int, Node]


class _Product:
    def __init__(self, cap: int, path: str, budget: int) -> None:
        self.cap = cap
        self.path = path
        self.budget = budget
        self.an = _Analyzer()
        self.sizes: dict[int, int] = {}

    def _check(self, p: Profile) -> Profile:
        """Stop as soon as a partial product outgrows the budget (before building more)."""
        size = sum(expanded_size(v, self.sizes) for v in p.values())
        if size > self.budget:
            raise self.fail(f"the exact product exceeds the size budget of {self.budget}")
        return p

    def fail(self, why: str) -> UnsupportedSchemaError:
        return UnsupportedSchemaError("pattern", self.path, f"cannot intersect with minLength/maxLength: {why}")

    def profile(self, node: Node) -> Profile:
        """count (saturated at cap) -> sub-node of `node` with that many characters."""
        an = self.an
        if not an.is_closed(node):
            raise self.fail("a character is split across sub-expressions")
        counts = {n for _, n in an.from_between(node)}
        if counts == {1}:
            return {min(1, self.cap): node}
        if counts == {0}:
            return {0: node} if node != NOTHING else {}
        if isinstance(node, Seq):
            return self._seq(self._groups(node.items))
        if isinstance(node, Alt):
            parts: dict[int, list[Node]] = {}
            for item in node.items:
                for k, v in self.profile(item).items():
                    parts.setdefault(k, []).append(v)
            return self._check({k: union(*v) for k, v in parts.items()})
        if isinstance(node, Repeat):
            return self._repeat(node)
        raise self.fail(f"unexpected node {type(node).__name__}")

    def _groups(self, items: tuple[Node, ...]) -> list[Node]:
        """Split a sequence into minimal runs that start and end between characters."""
        groups, run = [], []
        for item in items:
            run.append(item)
            if self.an.is_closed(seq(*run)):
                groups.append(seq(*run))
                run = []
        if run:
            raise self.fail("a sequence ends inside a character")
        if len(groups) == 1 and isinstance(groups[0], Seq):
            raise self.fail("an indivisible multi-character run")
        return groups

    def _shift(self, p: Profile, q: Profile) -> Profile:
        parts: dict[int, list[Node]] = {}
        for a, x in p.items():
            for b, y in q.items():
                parts.setdefault(min(a + b, self.cap), []).append(seq(x, y))
        return self._check({k: union(*v) for k, v in parts.items()})

    def _seq(self, groups: list[Node]) -> Profile:
        p: Profile = {0: EMPTY}
        for g in groups:
            p = self._shift(p, self.profile(g))
        return p

    def _repeat(self, node: Repeat) -> Profile:
        q = self.profile(node.item)
        lo = 0 if 0 in q else node.min
        q = {k: v for k, v in q.items() if k > 0}
        if not q:
            return {0: EMPTY}
        cap = self.cap
        if list(q) == [1] and cap > 0:  # one character per repetition: bounds shift directly
            x = q[1]
            out = {k: repeat(x, k, k) for k in range(lo, min(node.max if node.max is not None else cap, cap - 1) + 1)}
            if node.max is None or node.max >= cap:
                out[cap] = repeat(x, max(lo, cap), node.max)
            return out
        item = union(*q.values())
        hi = node.max
        out = {}
        cur: Profile = {0: EMPTY}
        reps = 0
        # Every repetition adds >= 1 character, so after `cap` of them all counts saturate.
        while True:
            if reps >= lo:
                for k, v in cur.items():
                    out[k] = union(out.get(k, NOTHING), v)
            if (hi is not None and reps >= hi) or (hi is None and reps >= max(lo, cap)):
                break
            cur = self._shift(cur, q)
            reps += 1
        if hi is None and cap in out:
            out[cap] = seq(out[cap], star(item))
        return out


def expanded_size(node: Node, memo: dict[int, int] | None = None) -> int:
    """Number of leaves after expanding counted repeats (~ Thompson NFA states)."""
    memo = {} if memo is None else memo
    hit = memo.get(id(node))
    if hit is not None:
        return hit
    if isinstance(node, ByteSet):
        size = 1
    elif isinstance(node, (Seq, Alt)):
        size = sum(expanded_size(i, memo) for i in node.items)
    elif isinstance(node, Repeat):
        size = expanded_size(node.item, memo) * max(node.max if node.max is not None else node.min + 1, 1)
    elif isinstance(node, AnyOrder):
        size = sum(expanded_size(i, memo) + 2 for i in node.items) + expanded_size(node.extra, memo) + \
            expanded_size(node.sep, memo) + len(node.needs) + 6
    else:
        size = 1
    memo[id(node)] = size
    return size


def restrict_length(body: Node, min_length: int, max_length: int | None, *, path: str = "$",
                    budget: int = DEFAULT_SIZE_BUDGET) -> Node:
    """Strings of `body` with min_length..max_length code points (see module doc)."""
    if min_length == 0 and max_length is None:
        return body
    cap = max_length + 1 if max_length is not None else min_length
    prod = _Product(cap, path, budget)
    direct = _one_counted_run(prod, body, min_length, max_length)
    if direct is None:
        direct = _per_branch(prod, body, min_length, max_length)
    if direct is not None:
        return direct
    prof = prod.profile(body)
    keep = [k for k in prof if k >= min_length and (max_length is None or k <= max_length)]
    if len(keep) == len(prof):
        return body  # the length bounds are implied by the body itself
    out = union(*(prof[k] for k in sorted(keep)))
    if expanded_size(out) > budget:
        raise prod.fail(f"the exact product exceeds the size budget of {budget}")
    return out


def _one_counted_run(prod: _Product, body: Node, lo: int, hi: int | None) -> Node | None:
    """`body` with its length bounds moved onto its one repeat of single characters, when it is
    such a repeat between fixed-length pieces (`^[a-z]+$`, `^id-\\d+$`, a class of several spellings
    being one character): no per-length branches,
    so the counter loop of the result stays lazy. None when `body` has another shape."""
    items = body.items if isinstance(body, Seq) else (body,)
    an, fixed, run = prod.an, 0, None
    for i, item in enumerate(items):
        if not an.is_closed(item):
            return None
        counts = {n for _, n in an.from_between(item)}
        if isinstance(item, Repeat) and run is None and an.is_unit(item.item):
            run = i
        elif len(counts) == 1 and isinstance(item, (ByteSet, Seq, Alt)) and _fixed_count(an, item) is not None:
            fixed += _fixed_count(an, item)
        else:
            return None
    if run is None:
        return None
    r = items[run]
    new_lo = max(r.min, lo - fixed)
    new_hi = r.max if hi is None else (hi - fixed if r.max is None else min(r.max, hi - fixed))
    if new_hi is not None and new_hi < new_lo:
        return NOTHING
    return seq(*items[:run], repeat(r.item, new_lo, new_hi), *items[run + 1:])


def _per_branch(prod: _Product, body: Node, lo: int, hi: int | None) -> Node | None:
    """`_one_counted_run` of each branch of an alternation (`^([a-z][a-z-]*)?$`, `^(a|b[a-z]*c)$`),
    fixed-length branches kept or dropped by their length: a length bound distributes over a
    union, and no branch is expanded per length. None when a branch has another shape."""
    if isinstance(body, Alt):
        branches = body.items
    elif isinstance(body, Repeat) and body.min == 0 and body.max == 1:
        branches = (EMPTY, body.item)
    else:
        return None
    an, out = prod.an, []
    for branch in branches:
        if not an.is_closed(branch):
            return None
        direct = _one_counted_run(prod, branch, lo, hi)
        if direct is None:
            n = _fixed_count(an, branch) if isinstance(branch, (ByteSet, Seq, Alt)) else None
            if n is None:
                return None
            direct = branch if lo <= n and (hi is None or n <= hi) else NOTHING
        if direct != NOTHING:
            out.append(direct)
    return union(*out) if out else NOTHING


def _fixed_count(an: _Analyzer, item: Node) -> int | None:
    """The number of characters of a sequence of single characters (None if not one)."""
    parts = item.items if isinstance(item, Seq) else (item,)
    n = 0
    for part in parts:
        if an.is_unit(part):
            n += 1
        elif not (isinstance(part, ByteSet) or an.is_closed(part)) or an.from_between(part) != {(B, 0)}:
            return None
    return n
