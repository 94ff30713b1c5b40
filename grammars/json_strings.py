"""JSON string bodies: every encoding of a code point set, literals, complements.

A JSON string can spell one character in several ways: raw UTF-8 (except
`"`, `\\` and control characters, which must be escaped), a short escape
(`\\" \\\\ \\/ \\b \\f \\n \\r \\t`), `\\uXXXX` with hex digits of either case,
or a surrogate pair `\\uD83D\\uDE00` for characters beyond the BMP.
`json_char(ranges)` accepts all of them, so constraints written over decoded
strings (`pattern`, lengths) hold for any serializer's output. Fixed strings
(property names, `enum` and `const` strings: `key_literal`) are spelled as
encoders write them, printable ASCII raw: every spelling of each character
took about eight NFA states per character instead of one.

Lone surrogate escapes (`\\uD800` without its pair) are rejected: they are
not Unicode scalar values. Nodes here describe the string *body* (between
the quotes); `quoted()` adds the quotes.

Example:
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.ast import Grammar
    >>> dfa = LazyDFA(Grammar({"start": quoted(string_literal("é"))}))
    >>> [dfa.matches(s) for s in (b'"\\xc3\\xa9"', b'"\\\\u00e9"', b'"\\\\u00E9"', b'"e"')]
    [True, True, True, False]
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable

from grammars.ast import (
    EMPTY, MAX_CODEPOINT, NOTHING, Alt, ByteSet, Node, Seq, alt, byteset, literal, repeat, seq, star,
)
from grammars.json_numbers import fixed_range
from grammars.fragments import compact, share, trie_complement, word_trie
from grammars.native import checkpoint
from grammars.utf8 import codepoints

__all__ = [
    "json_char", "ANY_CHAR", "ALL_CODEPOINTS", "string_literal", "key_literal", "string_not_in", "quoted",
    "any_string_body", "normalize_ranges", "SHORT_ESCAPES",
]

Ranges = tuple[tuple[int, int], ...]

ALL_CODEPOINTS: Ranges = ((0, MAX_CODEPOINT),)
SHORT_ESCAPES = {0x22: b'"', 0x5C: b"\\", 0x2F: b"/", 0x08: b"b", 0x0C: b"f", 0x0A: b"n", 0x0D: b"r", 0x09: b"t"}
_SURR_LO, _SURR_HI = 0xD800, 0xDFFF
QUOTE = literal(b'"')


def normalize_ranges(ranges: Iterable[tuple[int, int]]) -> Ranges:
    """Sorted, merged, surrogate-free code point ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        for a, b in ((lo, min(hi, _SURR_LO - 1)), (max(lo, _SURR_HI + 1), hi)):
            if a > b:
                continue
            if out and a <= out[-1][1] + 1:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
    return tuple(out)


def _clip(ranges: Ranges, lo: int, hi: int) -> Ranges:
    return tuple((max(a, lo), min(b, hi)) for a, b in ranges if max(a, lo) <= min(b, hi))


def _minus(ranges: Ranges, points: Iterable[int]) -> Ranges:
    out = list(ranges)
    for p in points:
        out = [piece for a, b in out for piece in ((a, min(b, p - 1)), (max(a, p + 1), b)) if piece[0] <= piece[1]]
    return tuple(out)


def _hex_digit(lo: int, hi: int) -> Node:
    """Hex digits with values lo..hi, either letter case."""
    values = range(lo, hi + 1)
    out = [0x30 + v for v in values if v < 10]
    out += [0x57 + v for v in values if v >= 10] + [0x37 + v for v in values if v >= 10]
    return byteset(out)


def _hex4(lo: int, hi: int) -> Node:
    digits = lambda v: [(v >> s) & 0xF for s in (12, 8, 4, 0)]  # noqa: E731
    return fixed_range(digits(lo), digits(hi), 16, _hex_digit)


_U = literal(b"\\u")


def _surrogate_pairs(lo: int, hi: int) -> Node:
    """`\\uHHHH\\uLLLL` spellings of the astral code points lo..hi."""
    a, b = lo - 0x10000, hi - 0x10000
    ha, la, hb, lb = a >> 10, a & 0x3FF, b >> 10, b & 0x3FF

    def pair(h0: int, h1: int, l0: int, l1: int) -> Node:
        return seq(_U, _hex4(0xD800 + h0, 0xD800 + h1), _U, _hex4(0xDC00 + l0, 0xDC00 + l1))

    if ha == hb:
        return pair(ha, ha, la, lb)
    parts = []
    if la:
        parts.append(pair(ha, ha, la, 0x3FF))
        ha += 1
    tail = None
    if lb != 0x3FF:
        tail = pair(hb, hb, 0, lb)
        hb -= 1
    if ha <= hb:
        parts.append(pair(ha, hb, 0, 0x3FF))
    if tail is not None:
        parts.append(tail)
    return alt(*parts)


@lru_cache(maxsize=8192)
def _json_char(ranges: Ranges) -> Node:
    raw = _minus(_clip(ranges, 0x20, MAX_CODEPOINT), (0x22, 0x5C))
    letters = [SHORT_ESCAPES[cp] for cp in sorted(SHORT_ESCAPES) if any(a <= cp <= b for a, b in ranges)]
    parts = [codepoints(raw)] if raw else []
    if letters:
        parts.append(seq(literal(b"\\"), byteset(b"".join(letters))))
    bmp = _clip(ranges, 0, 0xFFFF)
    if bmp:
        parts.append(seq(_U, alt(*(_hex4(a, b) for a, b in bmp))))
    parts += [_surrogate_pairs(a, b) for a, b in _clip(ranges, 0x10000, MAX_CODEPOINT)]
    # cached, so the same object in every schema: its NFA fragment is built once per process
    return share(alt(*parts))


def json_char(ranges: Iterable[tuple[int, int]]) -> Node:
    """One character of a JSON string body with code point in `ranges`, in
    every spelling JSON allows (raw UTF-8 where legal, short escape, `\\uXXXX`
    in any letter case, surrogate pair). This is the `encode` hook handed to
    `regex_node`.

    Example:
        >>> from grammars.dfa import LazyDFA
        >>> from grammars.ast import Grammar
        >>> dfa = LazyDFA(Grammar({"start": json_char([(0x0A, 0x0A)])}))
        >>> [dfa.matches(s) for s in (b"\\\\n", b"\\\\u000A", b"\\n")]
        [True, True, False]
    """
    if type(ranges) is tuple and len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        cp = ranges[0][0]                  # one code point (names, literals): the common call
        node = _ONE_CHAR.get(cp)
        if node is None:
            if len(_ONE_CHAR) >= 1 << 16:
                _ONE_CHAR.clear()
            norm = normalize_ranges(ranges)
            node = _ONE_CHAR[cp] = _json_char(norm) if norm else NOTHING
        return node
    norm = normalize_ranges(ranges)
    return _json_char(norm) if norm else NOTHING


_ONE_CHAR: dict[int, Node] = {}


# In most grammars, built from their minimal DFAs: ANY_CHAR is 22 states, not 47.
ANY_CHAR: Node = compact(json_char(ALL_CODEPOINTS))
NON_ASCII_CHAR: Node = compact(json_char(((0x80, MAX_CODEPOINT),)))
_ANY_REST: Node = compact(star(ANY_CHAR))
# raw bytes of printable ASCII that need no escape; and "a character that is not printable
# ASCII, or is an escaped quote or backslash, then any rest" (`string_not_in`)
_RAW_PRINTABLE = sum(1 << b for b in range(0x20, 0x7F) if b not in (0x22, 0x5C))
_RAW_PRINTABLE_CHARS = frozenset(chr(b) for b in range(0x20, 0x7F) if b not in (0x22, 0x5C))
# (the leading character is shared on its own: `_raw_not_in` puts this in an
# alternation whose branches the NFA splits into their items, see `fragments`)
_LEAVE_CHAR: Node = compact(alt(
    json_char(((0, 0x1F), (0x7F, MAX_CODEPOINT))),
    seq(literal(b"\\"), byteset(b'"\\'))))
_LEAVE_UNPRINTABLE: Node = share(seq(_LEAVE_CHAR, _ANY_REST))


def any_string_body(min_length: int = 0, max_length: int | None = None) -> Node:
    """String bodies of min_length..max_length code points."""
    if max_length is not None and min_length > max_length:
        return NOTHING
    return repeat(ANY_CHAR, min_length, max_length)


def quoted(body: Node) -> Node:
    return seq(QUOTE, body, QUOTE)


def string_literal(text: str) -> Node:
    """Every JSON spelling of the body of the string `text`."""
    return seq(*(json_char(((ord(c), ord(c)),)) for c in text))


def key_literal(name: str) -> Node:
    """The body of the object key (or enum/const string) `name` as JSON encoders write it: printable
    ASCII raw (`"` and `\\` as `\\"` and `\\\\`), other characters in every
    spelling. A `\\u0061` for `a` is refused, as in `string_not_in`; a key is
    then one NFA state per character instead of eight (every `\\u00XX` case).

    Example:
        >>> from grammars.dfa import LazyDFA
        >>> from grammars.ast import Grammar
        >>> dfa = LazyDFA(Grammar({"start": key_literal("a\u00e9")}))
        >>> [dfa.matches(s) for s in ("a\u00e9".encode(), b"a\\u00e9", b"\\u0061\\u00e9")]
        [True, True, False]
    """
    if _RAW_PRINTABLE_CHARS.issuperset(name):      # most names: one byte node per character, as they are
        return literal(name.encode())
    return seq(*(_RAW_KEY_CHAR[c] if c in _RAW_KEY_CHAR else json_char(((ord(c), ord(c)),)) for c in name))


_RAW_KEY_CHAR = {chr(b): literal(bytes([b])) for b in range(0x20, 0x7F) if b not in (0x22, 0x5C)}
_RAW_KEY_CHAR.update({'"': literal(b'\\"'), "\\": literal(b"\\\\")})


def string_not_in(words: Iterable[str], tries: dict | None = None) -> Node:
    """Bodies of all strings except `words` (complement of a finite set, via a trie).

    `tries`: the grammar's ``info["tries"]``, where the trie is noted for the NFA
    to build the complement from it directly (see `fragments.trie_complement`).

    While a string still spells the start of one of `words`, its printable
    ASCII characters are written raw (`"` and `\\` as `\\"` and `\\\\`): an
    escape such as `\\u0061` there is refused, not checked against the words.
    JSON encoders never write those escapes, and the trie then needs a few NFA
    states per node instead of ~35 (every `\\u00XX` spelling of every child).
    Words with other characters keep the exact construction (every spelling).

    Example:
        >>> from grammars.dfa import LazyDFA
        >>> from grammars.ast import Grammar
        >>> dfa = LazyDFA(Grammar({"start": string_not_in(["a", "ab"])}))
        >>> [dfa.matches(s) for s in (b"", b"a", b"ab", b"abc", b"b", b"\\u0061", b"a\\u00e9", b"\\u00e9")]
        [True, False, False, True, True, False, True, True]
    """
    words = tuple(words)
    trie = word_trie(words)
    # A string outside the set either ends inside the trie at a non-word node,
    # or leaves the trie at some node by a character no child has and then
    # continues freely (one shared any*): one walk of the trie says both.
    if _RAW_PRINTABLE_CHARS.issuperset("".join(words)):
        node = _raw_not_in(trie)
        if tries is not None:
            trie_complement(tries, node, trie, _RAW_PRINTABLE, _ANY_REST, _LEAVE_CHAR, words)
        return node
    return _not_in(trie, _ANY_REST)


def _raw_not_in(trie: dict) -> Node:
    """`_not_in` for words of raw printable ASCII (see `string_not_in`).

    Nodes are made directly, not through `seq`/`alt`: no branch here is a
    `Seq` to flatten, a bare byte set to merge or a duplicate, and this is the
    largest part of compiling objects that allow additional properties. Most
    trie nodes have one child: their "any other byte, then the rest" branch is
    one shared node per child byte.
    """
    parts: list[Node] = [] if trie.get(None) else [EMPTY]
    if len(trie) - (None in trie) == 1:        # most trie nodes: one child
        # (a loop, not `next(<generator>)`: compiled, closing the unfinished generator raised
        # GeneratorExit in it, with a traceback, at every trie node)
        for cp in trie:
            if cp is not None:
                break
        parts.append(Seq((_BYTE_NODES[cp], _raw_not_in(trie[cp]))))
        parts.append(_OTHERS_REST[cp])
    elif len(trie) == 1:                       # a leaf: the end of a word
        parts.append(_ALL_REST)
    else:
        children = sorted(k for k in trie if k is not None)
        for cp in children:
            parts.append(Seq((_BYTE_NODES[cp], _raw_not_in(trie[cp]))))
        others = _RAW_PRINTABLE & ~sum(1 << cp for cp in children)
        if others:
            parts.append(Seq((ByteSet(others), _ANY_REST)))
    parts.append(_LEAVE_UNPRINTABLE)
    return Alt(tuple(parts))


_BYTE_NODES = [literal(bytes((b,))) for b in range(256)]
_ALL_REST = Seq((ByteSet(_RAW_PRINTABLE), _ANY_REST))
# a trie node whose one child is byte b is left by any other raw printable byte, then anything
_OTHERS_REST = {b: Seq((ByteSet(_RAW_PRINTABLE & ~(1 << b)), _ANY_REST)) for b in range(0x20, 0x7F)
                if _RAW_PRINTABLE >> b & 1}


def _not_in(trie: dict, rest: Node) -> Node:
    """End here (unless a word does), or take a child's character, or leave by another one, then `rest`."""
    children = sorted(cp for cp, _ in _children(trie))
    parts = [] if trie.get(None) else [EMPTY]
    if children and children[-1] < 0x80:
        # "any other character" is the one shared non-ASCII node (a subroutine of the NFA)
        # plus a small ASCII class; each in its own sequence, since `alt` would flatten
        # them into a new large class per trie node
        parts += [seq(NON_ASCII_CHAR, rest), seq(json_char(_minus(((0, 0x7F),), children)), rest)]
    else:
        others = _minus(ALL_CODEPOINTS, children)
        parts += [seq(json_char(others), rest)] if others else []
    parts += [seq(json_char(((cp, cp),)), _not_in(sub, rest)) for cp, sub in sorted(_children(trie))]
    return alt(*parts)


def _children(trie: dict) -> list[tuple[int, dict]]:
    return [(k, v) for k, v in trie.items() if k is not None]


def ascii_char(ranges: Iterable[tuple[int, int]]) -> Node:
    """Raw (unescaped) printable ASCII only: used for `format` grammars, whose
    characters never need escaping, so that format automata stay small."""
    out = [b for lo, hi in ranges for b in range(max(lo, 0x20), min(hi, 0x7E) + 1) if b not in (0x22, 0x5C)]
    return byteset(out) if out else NOTHING

