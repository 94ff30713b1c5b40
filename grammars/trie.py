"""Alternations of many literal branches as tries (shared prefixes).

A list of 10k words joined by `|` would otherwise become a 10k-way
alternation; factoring common leading items keeps the IR, the NFA and the
DFA closures small. Plain word lists also skip the regex parser, which
dominates their cost.

Example:
    >>> from grammars.ast import alt, byteset, literal, seq
    >>> words = [literal(b"ab"), literal(b"ac"), literal(b"ad"), literal(b"b")]
    >>> trie_alt(words) == alt(literal(b"b"), seq(literal(b"a"), byteset(b"bcd")))
    True
    >>> word_list("cat|car|dog", lambda r: literal(bytes([r[0][0]])), False) is not None
    True
"""

from __future__ import annotations

from typing import Callable

from grammars import charsets as cs
from grammars.ast import EMPTY, NOTHING, Alt, ByteSet, Node, Seq, alt, seq, star

__all__ = ["trie_alt", "word_list", "is_word_list"]


_META = frozenset("\\.^$*+?{}[]()#")


def is_word_list(pattern: str) -> bool:
    """A plain `word|word|...` pattern (no metacharacter but `|`): both
    dialects read it literally, so skip the parser (it dominates the cost)."""
    return len(pattern) > 64 and _META.isdisjoint(pattern)


def word_list(pattern: str, encode: Callable[[list[tuple[int, int]]], Node], search: bool) -> Node:
    memo: dict[str, Node] = {}

    def char(ch: str) -> Node:
        node = memo.get(ch)
        if node is None:
            node = memo[ch] = encode([(ord(ch), ord(ch))])
        return node

    words = [_concat(list(map(char, w))) for w in set(pattern.split("|"))]
    node = trie_alt(words)
    if search:
        anything = star(encode(list(cs.ALL)))
        node = seq(anything, node, anything)
    return node


def trie_alt(branches: list[Node]) -> Node:
    """Alternation with common leading items factored out (a trie), so a
    list of 10k words becomes a small-fan-out automaton."""
    if len(branches) < 4:
        return alt(*branches)
    try:
        return _factor([(b.items if isinstance(b, Seq) else (b,), 0) for b in branches])
    except RecursionError:  # thousands of nested prefixes (a|aa|aaa|...): stay flat
        return alt(*branches)


def _factor(branches: list[tuple[tuple[Node, ...], int]]) -> Node:
    groups: dict[Node, list[tuple[tuple[Node, ...], int]]] = {}
    done = False
    for items, at in branches:
        if at == len(items):
            done = True
        else:
            groups.setdefault(items[at], []).append((items, at + 1))
    # Heads are distinct, so build the Alt directly (alt() would hash every
    # subtree again at each trie level to deduplicate).
    parts: list[Node] = [EMPTY] if done else []
    mask = 0
    for head, tails in groups.items():
        if len(tails) == 1:
            items, at = tails[0]
            part = _concat([head, *items[at:]])
        else:
            part = _concat([head, _factor(tails)])
        if isinstance(part, ByteSet):
            mask |= part.mask
        else:
            parts.append(part)
    if mask:
        parts.insert(0, ByteSet(mask))
    return parts[0] if len(parts) == 1 else Alt(tuple(parts))


def _concat(items: list[Node]) -> Node:
    """`seq(*items)` without its per-item equality tests (hot for word lists)."""
    out: list[Node] = []
    for item in items:
        if type(item) is Seq:
            out.extend(item.items)
        elif type(item) is Alt and not item.items:
            return NOTHING
        else:
            out.append(item)
    return out[0] if len(out) == 1 else Seq(tuple(out))


