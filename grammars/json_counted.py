"""A string automaton with length bounds, the characters counted as the DFA reads them.

`pattern` (or `format`, or `not` of either) together with `minLength`/`maxLength` is
the product of two languages. `json_length.restrict_length` moves the bounds into
the syntax tree where the pattern's shape allows it, and `json_string_sets` builds
the product of the two automata otherwise. Neither works for a hostname
(``^[a-z0-9-]+(\\.[a-z0-9-]+)*$``) with ``maxLength: 253``, an e-mail address with
254, or words (``^\\S+( \\S+)*$``) with 1,000: the pattern's automaton has tens of
states and the product one per (state, count), over the 2,000 that
`json_string_sets.MAX_STATES` allows. Such schemas were refused.

`counted` keeps the pattern's automaton as it is and the count beside it, as a
frame on the DFA configuration's stack (the `Counted` node, built by
`grammars.fragments` with GATE, TICK and EXIT edges): O(states) NFA states,
and the (state, count) pairs are made only when generation reaches them, as
for a counter loop (`grammars.nfa`). This is the symbolic-derivative idea
(a derivative of ``r & .{0,n}`` is ``r' & .{0,n-1}``) in this engine's
terms: the counted length is one more kind of frame.

Every DFA state must stay live, so the count is checked on the way, not only
at the end. Per state, the completions' lengths (characters still to read
before the string may end) form a set R; with `c` characters read, the state
can still finish iff ``min_length <= c + r <= max_length`` for some r in R.
R is computed by layers (the states with a completion of exactly k
characters, from those of k - 1), which become periodic after a while, so the
work is not proportional to `max_length`. The counts that can finish form an
interval (`Counted.live`) when no gap in R is wider than the bounds' window;
then a gate on each edge lets the configuration on only with a count in its
target's interval. Otherwise (a rare shape: "an even number of characters"
with a narrow window) the schema is refused as before.

The pattern's automaton itself stays within `json_string_sets.MAX_STATES`. Inside
a counted string, each mask reaches a DFA state per (pattern state, count) that
some token's prefix leads to; with the 3,210 states of ``^(?:\\S+\\s+){0,29}\\S+$``
(maskbench's Github_hard---o21074 and o21076, ``maxLength: 300``) walking their
1.3 KB test documents made 100,000-140,000 DFA states and masks of up to 50 ms,
so such patterns are refused, as before, rather than failing mid-generation.

Characters are recognised by the phases of `json_length` (between
characters, inside a UTF-8 sequence, inside an escape): a byte that starts a
character counts it. A state reached both between characters and inside one
is refused.

Example:
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.ast import Grammar
    >>> edges = [{1: 0x3FF << 48}, {1: 0x3FF << 48}]             # one digit or more
    >>> dfa = LazyDFA(Grammar({"start": counted(edges, {1}, 2, 3, path="$")}))
    >>> [dfa.matches(s) for s in (b"1", b"12", b"123", b"1234")]
    [False, True, True, False]
"""

from __future__ import annotations

from grammars.ast import NOTHING, Counted, Node
from grammars.errors import UnsupportedSchemaError
from grammars.json_length import BETWEEN, PHASE_STEPS
from grammars.json_string_sets import MAX_STATES, difference, string_automaton
from grammars.json_strings import any_string_body
from grammars.native import checkpoint

__all__ = ["bounded_strings", "counted", "at_least_one", "MAX_LAYERS"]

# Layers of completion lengths computed before a schema is refused (they turn periodic well before
# this for any pattern seen in the corpus: within the pattern automaton's number of states).
MAX_LAYERS = 20_000


def _phase_classes() -> list[int]:
    """Phases that count alike merged (two hex digits before the end of ``\\u0041`` and of the low
    half of a surrogate pair): a DFA state of a pattern may stand for both. Partition refinement."""
    cls = [0] * len(PHASE_STEPS)
    while True:
        sig = [tuple(None if st is None else (cls[st[0]], st[1]) for st in steps) for steps in PHASE_STEPS]
        ids: dict[tuple, int] = {}
        new = [ids.setdefault((cls[p], sig[p]), len(ids)) for p in range(len(PHASE_STEPS))]
        if len(ids) == len(set(cls)):
            return new
        cls = new


def _phase_groups(cls: list[int]) -> list[list[tuple[int, tuple[int, int]]]]:
    """Per phase class, (byte mask, (next phase class, characters started)) for each outcome of a byte."""
    out: list[list[tuple[int, tuple[int, int]]]] = [[] for _ in range(max(cls) + 1)]
    for p, steps in enumerate(PHASE_STEPS):
        if out[cls[p]]:
            continue
        groups: dict[tuple[int, int], int] = {}
        for b, step in enumerate(steps):
            if step is not None:
                key = (cls[step[0]], step[1])
                groups[key] = groups.get(key, 0) | 1 << b
        out[cls[p]] = [(m, step) for step, m in groups.items()]
    return out


_CLASS = _phase_classes()
_GROUPS = _phase_groups(_CLASS)
_BETWEEN = _CLASS[BETWEEN]


def bounded_strings(required: list[Node], excluded: list[Node], min_length: int, max_length: int | None, *,
                    path: str, keyword: str, tries: dict | None = None) -> Node:
    """Strings of every `required` body and of no `excluded` one, with `min_length`..`max_length`
    characters: the product of their automata with the length's (`json_string_sets.difference`)
    where it stays small, else the product without the length, `counted`.

    Raises:
        UnsupportedSchemaError: neither can be built (the message is the product's).
    """
    auto = None
    if max_length is not None:
        auto = string_automaton(required[0], excluded, required=required[1:], path=path, keyword=keyword)
        if auto is None:
            return NOTHING
        if len(auto[0]) * (max_length + 1) > MAX_STATES:      # the product with the length would pass it
            return counted(*auto, min_length, max_length, path=path, keyword=keyword)
    try:
        return difference(any_string_body(min_length, max_length), excluded, required=required, path=path,
                          tries=tries, keyword=keyword)
    except UnsupportedSchemaError as e:
        if auto is None:
            raise
        try:
            return counted(*auto, min_length, max_length, path=path, keyword=keyword)
        except UnsupportedSchemaError:
            raise e from None


def counted(edges: list[dict[int, int]], accepting: set[int], min_length: int, max_length: int, *,
            path: str, keyword: str = "maxLength") -> Node:
    """The strings of a JSON-string-body automaton with `min_length`..`max_length` characters.

    Args:
        edges: per state, target -> byte mask; state 0 is the start, and every state reaches
            an accepting one (`json_string_sets.string_automaton` gives such automata).
        accepting: the states where a string may end.
        min_length, max_length: the bounds, in code points.
        path, keyword: where the bounds are, for the error.

    Returns:
        A `Counted` node, or NOTHING when no string has such a length.

    Raises:
        UnsupportedSchemaError: the counts that can finish are not an interval somewhere, or
            the automaton splits characters in a way the phases cannot follow.
    """
    weighted = _weights(edges, accepting, path, keyword)
    return _make(weighted, frozenset(accepting), min_length, max_length, path, keyword)


def at_least_one(node: Counted) -> Node:
    """`node` without its empty string (`ast.non_empty`)."""
    return _make([list(out) for out in node.states], node.accepting, max(1, node.min_length), node.max_length,
                 "$", "minLength")


def _refuse(keyword: str, path: str, why: str) -> UnsupportedSchemaError:
    return UnsupportedSchemaError(keyword, path, f"cannot count the pattern's characters: {why}")


def _weights(edges: list[dict[int, int]], accepting: set[int], path: str,
             keyword: str) -> list[list[tuple[int, int, int]]]:
    """Per state, (target, mask, characters the byte starts) from the phases of each state."""
    n = len(edges)
    phase = [-1] * n
    phase[0] = _BETWEEN
    out: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    order = [0]
    for i in order:
        p = phase[i]
        groups = _GROUPS[p]
        for j, mask in edges[i].items():
            step = None
            rest = mask
            for gmask, outcome in groups:
                if mask & gmask:
                    if step is not None and outcome != step:
                        raise _refuse(keyword, path, "one edge's bytes start different characters")
                    step = outcome
                    rest &= ~gmask
            if rest or step is None:
                raise _refuse(keyword, path, "a byte no JSON string has there")
            q, w = step
            if phase[j] < 0:
                phase[j] = q
                order.append(j)
            elif phase[j] != q:
                raise _refuse(keyword, path, "a state both between and inside characters")
            out[i].append((j, mask, w))
    if any(phase[i] != _BETWEEN for i in accepting if phase[i] >= 0):
        raise _refuse(keyword, path, "a string ending inside a character")
    return out


def _make(weighted: list[list[tuple[int, int, int]]], accepting: frozenset, m: int, hi: int, path: str,
          keyword: str) -> Node:
    """The `Counted` node of a weighted automaton (see the module doc), pruned to what can finish."""
    n = len(weighted)
    stats = _completions(weighted, accepting, hi, path, keyword)
    window = hi - m + 1
    live: list[tuple[int, int] | None] = [None] * n
    for i, st in enumerate(stats):
        if st is None:
            continue
        first, last, gap = st
        lo_i, hi_i = max(0, m - last), hi - first
        if lo_i > hi_i:
            continue
        if gap > window:
            raise _refuse(keyword, path, "the lengths that can still finish have gaps wider than the bounds allow")
        live[i] = (lo_i, hi_i)
    if window <= 0 or live[0] is None or live[0][0] > 0:
        return NOTHING
    # the edges a live count can take, from the start; states renumbered in the order met
    number = {0: 0}
    order = [0]
    states: list[tuple[tuple[int, int, int], ...]] = []
    for i in order:
        lo_i, hi_i = live[i]
        kept = []
        for j, mask, w in weighted[i]:
            target = live[j]
            if target is None or max(lo_i, target[0] - w) > min(hi_i, target[1] - w):
                continue
            k = number.get(j)
            if k is None:
                k = number[j] = len(order)
                order.append(j)
            kept.append((k, mask, w))
        states.append(tuple(kept))
    return Counted(tuple(states), tuple(live[i] for i in order), frozenset(number[i] for i in order if i in accepting),
                   m, hi)


def _completions(weighted: list[list[tuple[int, int, int]]], accepting: frozenset, hi: int, path: str,
                 keyword: str) -> list[tuple[int, int, int] | None]:
    """Per state, (least, greatest, widest gap) of its completion lengths up to `hi`, or None.

    Layer k is the set of states (bits of an int) with a completion of exactly k characters:
    those that reach layer k - 1 by one counted edge, and by uncounted edges before and after
    it. The layers are a function of the one before, so once one repeats, they cycle.
    """
    n = len(weighted)
    back0: list[list[int]] = [[] for _ in range(n)]
    back1 = [0] * n
    for i, out in enumerate(weighted):
        for j, _, w in out:
            if w:
                back1[j] |= 1 << i
            else:
                back0[j].append(i)

    def close(x: int) -> int:
        todo = _bits(x)
        while todo:
            for i in back0[todo.pop()]:
                if not x >> i & 1:
                    x |= 1 << i
                    todo.append(i)
        return x

    layers = [close(sum(1 << i for i in accepting))]
    seen = {layers[0]: 0}
    cycle_at = -1
    while len(layers) <= hi:
        checkpoint()
        x = 0
        for j in _bits(layers[-1]):
            x |= back1[j]
        x = close(x)
        if x in seen:
            cycle_at = seen[x]
            break
        if len(layers) >= MAX_LAYERS:
            raise _refuse(keyword, path, f"its lengths do not settle within {MAX_LAYERS} characters")
        seen[x] = len(layers)
        layers.append(x)
    k = len(layers)
    period = k - cycle_at
    stats: list[tuple[int, int, int] | None] = []
    for i in range(n):
        pos = [x for x in range(k) if layers[x] >> i & 1]
        if cycle_at >= 0 and k <= hi:
            # positions k + t for t <= hi - k, where t % period is an offset at which state i is in the cycle
            offsets = [o for o in range(period) if layers[cycle_at + o] >> i & 1]
            if offsets:
                span = hi - k
                tail = [k + o for o in offsets if o <= span]
                if tail:
                    last = max(k + o + (span - o) // period * period for o in offsets if o <= span)
                    gaps = [b - a for a, b in zip(pos, pos[1:])] + [tail[0] - pos[-1]] if pos else []
                    gaps += [b - a for a, b in zip(offsets, offsets[1:])] + [offsets[0] + period - offsets[-1]]
                    stats.append((pos[0] if pos else tail[0], last, max(gaps) if gaps else 0))
                    continue
        if not pos:
            stats.append(None)
            continue
        stats.append((pos[0], pos[-1], max((b - a for a, b in zip(pos, pos[1:])), default=0)))
    return stats


def _bits(x: int) -> list[int]:
    out = []
    while x:
        low = x & -x
        out.append(low.bit_length() - 1)
        x ^= low
    return out
