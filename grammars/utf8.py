"""Unicode code point sets as UTF-8 byte automata (`grammars.ast` nodes).

`codepoints` is one UTF-8 encoded character out of a set of code point
ranges, as an alternation of byte-range sequences (`utf8_sequences`, the
classic split of RE2 and Rust's `utf8-ranges`); surrogates are never
produced, as they are not valid UTF-8.

Example:
    >>> from grammars.ast import Grammar
    >>> from grammars.dfa import LazyDFA
    >>> dfa = LazyDFA(Grammar({"start": codepoints([(0xE9, 0xE9), (0x20AC, 0x20AC)])}))
    >>> [dfa.matches(c.encode()) for c in ("\u00e9", "\u20ac", "e")]
    [True, True, False]
"""

from __future__ import annotations

from typing import Iterable

from grammars.ast import MAX_CODEPOINT, Node, alt, byte_range, seq

__all__ = ["codepoints", "utf8_sequences"]

_SURROGATES = (0xD800, 0xDFFF)



def codepoints(ranges: Iterable[tuple[int, int]]) -> Node:
    """One UTF-8 encoded character whose code point lies in one of `ranges`.

    Surrogates (U+D800..U+DFFF) are never produced: they are not valid UTF-8.

    Example:
        >>> codepoints([(0x41, 0x42)]) == byte_range(0x41, 0x42)
        True
    """
    branches = [
        seq(*(byte_range(a, b) for a, b in s))
        for lo, hi in _normalize(ranges)
        for s in utf8_sequences(lo, hi)
    ]
    return alt(*branches)


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Split code points lo..hi into UTF-8 byte-range sequences.

    Each result is a list of (min_byte, max_byte) per position; the union of
    the sequences' byte strings is exactly the UTF-8 encodings of lo..hi
    (surrogates excluded). This is the classic algorithm of RE2 / Rust's
    `utf8-ranges`.

    Example:
        >>> utf8_sequences(0x00, 0xFF)
        [[(0, 127)], [(194, 195), (128, 191)]]
    """
    out: list[list[tuple[int, int]]] = []
    for a, b in _exclude_surrogates(lo, hi):
        # Split by encoded length first: 1, 2, 3 and 4 bytes.
        for x, y in ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xFFFF), (0x10000, MAX_CODEPOINT)):
            s, e = max(a, x), min(b, y)
            if s <= e:
                _split_same_length(s, e, out)
    return out


def _split_same_length(lo: int, hi: int, out: list[list[tuple[int, int]]]) -> None:
    n = len(chr(lo).encode("utf-8", "surrogatepass"))
    if n > 1:
        for i in range(1, n):
            m = (1 << (6 * i)) - 1
            if lo & ~m != hi & ~m:
                # lo and hi differ above the last i continuation bytes: cut the
                # range so that those trailing bytes span their full 0x80..0xBF.
                if lo & m:
                    _split_same_length(lo, lo | m, out)
                    _split_same_length((lo | m) + 1, hi, out)
                    return
                if hi & m != m:
                    _split_same_length(lo, (hi & ~m) - 1, out)
                    _split_same_length(hi & ~m, hi, out)
                    return
    a = chr(lo).encode("utf-8", "surrogatepass")
    b = chr(hi).encode("utf-8", "surrogatepass")
    out.append(list(zip(a, b)))


def _exclude_surrogates(lo: int, hi: int) -> list[tuple[int, int]]:
    s0, s1 = _SURROGATES
    parts = []
    if lo < s0:
        parts.append((lo, min(hi, s0 - 1)))
    if hi > s1:
        parts.append((max(lo, s1 + 1), hi))
    return [(a, b) for a, b in parts if a <= b]


def _normalize(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sort and merge overlapping or adjacent ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if not 0 <= lo <= hi <= MAX_CODEPOINT:
            raise ValueError(f"bad code point range {lo:#x}..{hi:#x}")
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out
