"""Anchors whose position is not known, made exact: `^` and `$` inside repeats and alternatives.

`grammars.regex` converts `^`, `$`, `\\A` and `\\Z` where it knows whether the
position is the input's start/end (then nothing, or nothing matches); where it
does not, as in `(\\w+($|/))+` or `(^|,)x`, it leaves a mark: one byte, `END`
or `START`, that no UTF-8 text holds. `resolve_marks` then rewrites the node
into the texts it matches with every mark read as "the input ends (starts)
here", exactly and without adding states.

Example:
    >>> from grammars.ast import ByteSet, Grammar, alt, literal, seq, star
    >>> from grammars.dfa import LazyDFA
    >>> segment = seq(star(literal(b"a")), alt(ByteSet(END), literal(b"/")))   # a*($|/)
    >>> dfa = LazyDFA(Grammar({"start": resolve_marks(star(segment), ValueError)}))
    >>> [dfa.matches(t) for t in (b"a/a", b"a/", b"", b"a/$a")]
    [True, True, True, False]
"""

from __future__ import annotations

from typing import Callable

from grammars.ast import EMPTY, NOTHING, Alt, ByteSet, Node, Repeat, Seq, alt, repeat, seq
from grammars.native import checkpoint

__all__ = ["END", "START", "resolve_marks"]

# An anchor whose position is not known becomes one of these bytes (0xFF, 0xFE: no UTF-8
# text holds them) while converting.
END, START = 1 << 255, 1 << 254


def resolve_marks(node: Node, unsupported: Callable[[], Exception]) -> Node:
    """`node` with its anchors left as marks (`END`, `START` bytes) made exact: the texts
    it matches with every `END` read as "the input ends here" and every `START` as "the
    input starts here".

    Read as bytes, the marks make `node` a language over texts and marks. A text w
    matches the pattern when some start marks, w, then some end marks (none or more
    of each) are in it: an end anchor only holds where nothing follows, so every end
    mark a match reads comes after all of w's characters, and every start mark
    before them (the empty text, both start and end, takes marks in any order).
    Per node, `_marked` gives (E, T, D) for one kind of mark: E its texts read
    without a mark, T the texts read with at least one (all of them at that
    side), D whether it matches marks alone (the empty text included). E | T
    of the whole resolves that kind; end marks first, then start marks (read as
    characters until then). So `(\\w+($|/))+` matches "a/b/" (E) and "a/b" (T),
    not "a/$b", and `(^|/)x` matches "x" and "a/x". No state is added: E and T are
    built from the pattern's own nodes.
    """
    # (the empty text is both the start and the end: any order of marks reads it)
    empty = _only(node, END | START, {})
    for mark, at_end in ((END, True), (START, False)):
        e_node, t_node, _ = _marked(node, mark, at_end, {}, {}, {}, unsupported)
        node = alt(e_node, t_node)
    return alt(node, EMPTY) if empty else node


def _only(node: Node, bits: int, memo: dict[int, bool]) -> bool:
    """Whether `node` matches a string of the bytes in `bits` alone (the empty one included):
    with no bits, whether it matches the empty text; with both marks', marks alone."""
    got = memo.get(id(node))
    if got is None:
        kind = type(node)
        if kind is ByteSet:
            got = bool(node.mask & bits)
        elif kind is Seq:
            got = all(_only(x, bits, memo) for x in node.items)
        elif kind is Alt:
            got = any(_only(x, bits, memo) for x in node.items)
        elif kind is Repeat:
            got = node.min == 0 or _only(node.item, bits, memo)
        else:
            raise TypeError(f"not a regex node: {node!r}")
        memo[id(node)] = got
    return got


def _has_mark(node: Node, mark: int, memo: dict[int, bool]) -> bool:
    got = memo.get(id(node))
    if got is None:
        kind = type(node)
        if kind is ByteSet:
            got = bool(node.mask & mark)
        elif kind is Seq or kind is Alt:
            got = any(_has_mark(x, mark, memo) for x in node.items)
        elif kind is Repeat:
            got = _has_mark(node.item, mark, memo)
        else:
            got = False
        memo[id(node)] = got
    return got


def _marked(node: Node, mark: int, at_end: bool, memo: dict, marks: dict, nullable: dict,
            unsupported: Callable[[], Exception]) -> tuple[Node, Node, bool]:
    """(E, T, D) of `node` for `mark` (see `resolve_marks`)."""
    checkpoint()                         # compiled: let other threads in (see `grammars.native`)
    if not _has_mark(node, mark, marks):
        return node, NOTHING, _only(node, 0, nullable)
    got = memo.get(id(node))
    if got is not None:
        return got
    kind = type(node)
    if kind is ByteSet:
        chars = node.mask & ~mark
        got = (ByteSet(chars) if chars else NOTHING), EMPTY, True
    elif kind is Alt:
        parts = [_marked(x, mark, at_end, memo, marks, nullable, unsupported) for x in node.items]
        got = alt(*(p[0] for p in parts)), alt(*(p[1] for p in parts)), any(p[2] for p in parts)
    elif kind is Seq:
        # end marks: they start in item i (T), after items read without one (E), and every
        # later item reads marks alone (D); start marks the other way round
        e_node, t_node, d = EMPTY, NOTHING, True
        for x in (node.items if at_end else reversed(node.items)):
            ex, tx, dx = _marked(x, mark, at_end, memo, marks, nullable, unsupported)
            near = seq(e_node, tx) if at_end else seq(tx, e_node)
            t_node = alt(near, t_node if dx else NOTHING)
            e_node = seq(e_node, ex) if at_end else seq(ex, e_node)
            d = d and dx
        got = e_node, t_node, d
    elif kind is Repeat:
        ex, tx, dx = _marked(node.item, mark, at_end, memo, marks, nullable, unsupported)
        lo, hi = node.min, node.max
        # the marks are in round i; the rounds on the far side of it read marks alone, so
        # there may be some only if the item can (dx)
        rest = repeat(ex, 0 if dx else max(lo, 1) - 1, None if hi is None else hi - 1)
        got = repeat(ex, lo, hi), (seq(rest, tx) if at_end else seq(tx, rest)), lo == 0 or dx
    else:
        raise unsupported()
    memo[id(node)] = got
    return got
