"""First characters of a parsed regex: what its items can start with, and what may follow them.

`grammars.regex` needs them where a construct's language depends on what comes
next: a possessive quantifier or an atomic group matches the same language as
its greedy form only when no character that could continue its body may follow
it, and Python's `$` also matches before a final newline, so it is the end of
the input only where no newline can come next. The items are those of
Python's parser (`re._parser`); the code points of a character set item come
from the converter's `charset` (which applies the flags and the dialect).

What may follow a point of the pattern (a *follow*) is described lazily, as
the pattern is converted: None (the input ends there), `ANYTHING` (an
unanchored search's suffix), ``("or", f, g)`` (either f or g), or
``(data, start, flags, parent)`` (the items ``data[start:]`` read under
`flags`, then `parent`).

Example:
    >>> from re import _parser
    >>> literal = lambda op, av, flags: [(av, av)]
    >>> first(literal, _parser.parse("a*b").data, 0, 0)
    ([(97, 98)], False)
    >>> first_of_follow(literal, (_parser.parse("x?").data, 0, 0, None))
    ([(120, 120)], True)
"""

from __future__ import annotations

import re
from typing import Any, Callable

from grammars import charsets as cs

try:  # Python >= 3.11
    import re._constants as _c
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _c  # type: ignore[no-redef]

__all__ = ["ANYTHING", "ATOMIC", "POSSESSIVE", "combine_flags", "first", "first_of_follow"]

# The code points one LITERAL / NOT_LITERAL / ANY / IN item matches: (op, av, flags) -> ranges.
Charset = Callable[[Any, Any, int], list[tuple[int, int]]]

ANYTHING = ("anything",)  # follow set of an unanchored search suffix
POSSESSIVE = getattr(_c, "POSSESSIVE_REPEAT", None)   # (Python >= 3.11)
ATOMIC = getattr(_c, "ATOMIC_GROUP", None)
_TYPE_FLAGS = int(re.ASCII | re.UNICODE | re.LOCALE)


def combine_flags(flags: int, add: int, remove: int) -> int:
    """The flags inside a group ``(?add-remove:...)`` (a type flag it adds replaces the one in force)."""
    add, remove = int(add), int(remove)
    if add & _TYPE_FLAGS:
        flags &= ~_TYPE_FLAGS
    return (flags | add) & ~remove


def first(charset: Charset, data, start: int, flags: int) -> tuple[list[tuple[int, int]], bool]:
    """(first characters, nullable) of the items `data[start:]`."""
    out: list[tuple[int, int]] = []
    for op, av in data[start:]:
        chars, nullable = _first_item(charset, op, av, flags)
        out = cs.union(out, chars)
        if not nullable:
            return out, False
    return out, True


def _first_item(charset: Charset, op, av, flags: int):
    if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
        return charset(op, av, flags), False
    if op is _c.SUBPATTERN:
        return first(charset, av[3].data, 0, combine_flags(flags, av[1], av[2]))
    if op is _c.BRANCH:
        parts = [first(charset, b.data, 0, flags) for b in av[1]]
        return cs.union(*(p[0] for p in parts)), any(p[1] for p in parts)
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) or op is POSSESSIVE:
        chars, nullable = first(charset, av[2].data, 0, flags)
        return chars, nullable or av[0] == 0
    if op is ATOMIC:
        return first(charset, av.data, 0, flags)
    return [], True  # anchors (others raise when converted)


def first_of_follow(charset: Charset, follow) -> tuple[list[tuple[int, int]], bool]:
    """(characters that may come next, whether the input may end)."""
    if follow is None:
        return [], True
    if follow is ANYTHING:
        return list(cs.ALL), True
    if follow[0] == "or":
        a, b = first_of_follow(charset, follow[1]), first_of_follow(charset, follow[2])
        return cs.union(a[0], b[0]), a[1] or b[1]
    data, start, flags, parent = follow
    chars, nullable = first(charset, data, start, flags)
    if not nullable:
        return chars, False
    more, can_end = first_of_follow(charset, parent)
    return cs.union(chars, more), can_end
