"""Sets of Unicode code points as sorted, disjoint `(lo, hi)` range lists.

Used by the regex compiler for classes, `\\d \\w \\s` in the Python and
ECMA-262 flavours, `.`, Unicode general categories (`\\p{Lu}`) and Python's
case-insensitive matching. The Unicode tables are computed on first use
(tens of milliseconds) and cached, so importing this module is free.

Example:
    >>> union([(0x61, 0x7A)], [(0x41, 0x5A), (0x5B, 0x5B)])
    [(65, 91), (97, 122)]
    >>> complement([(0, 0x60), (0x7B, 0x10FFFF)])
    [(97, 122)]
"""

from __future__ import annotations

import bisect
import re
from functools import lru_cache

__all__ = [
    "Ranges", "MAX_CP", "ALL", "normalize", "union", "complement", "intersect", "contains",
    "python_category", "ecma_category", "dot", "ignorecase", "general_category",
]

Ranges = list  # list[tuple[int, int]], sorted and disjoint
MAX_CP = 0x10FFFF
ALL: list[tuple[int, int]] = [(0, MAX_CP)]

_ASCII_CATEGORIES = {
    "digit": [(0x30, 0x39)],
    "word": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "space": [(0x09, 0x0D), (0x20, 0x20)],
}
# ECMA-262 WhiteSpace + LineTerminator, the meaning of `\s` in JSON Schema patterns.
_ECMA_SPACE = [
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
]


def normalize(ranges) -> list[tuple[int, int]]:
    """Sort and merge overlapping or adjacent ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def union(*sets) -> list[tuple[int, int]]:
    return normalize([r for s in sets for r in s])


def complement(ranges) -> list[tuple[int, int]]:
    """All code points 0..U+10FFFF not in `ranges` (which must be normalized)."""
    out = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return out


def intersect(a, b) -> list[tuple[int, int]]:
    return complement(union(complement(a), complement(b)))


def contains(ranges, cp: int) -> bool:
    """Whether `cp` is in the normalized `ranges` (binary search)."""
    i = bisect.bisect_right(ranges, (cp, MAX_CP + 1)) - 1
    return i >= 0 and ranges[i][0] <= cp <= ranges[i][1]


def dot(dialect: str, dotall: bool) -> list[tuple[int, int]]:
    """What `.` matches: Python excludes `\\n`, ECMA all line terminators."""
    if dotall:
        return list(ALL)
    if dialect == "ecma":
        return complement([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)])
    return complement([(0x0A, 0x0A)])


def ecma_category(name: str) -> list[tuple[int, int]]:
    """`\\d`, `\\w` (ASCII) and `\\s` (Unicode whitespace) in ECMA-262."""
    return list(_ECMA_SPACE) if name == "space" else list(_ASCII_CATEGORIES[name])


def python_category(name: str, ascii_only: bool) -> list[tuple[int, int]]:
    """`\\d`, `\\w`, `\\s` of Python's `re` for str patterns."""
    if ascii_only:
        return list(_ASCII_CATEGORIES[name])
    return list(_unicode_category(name))


@lru_cache(maxsize=None)
def _all_chars() -> str:
    import numpy as np

    return np.arange(MAX_CP + 1, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")


@lru_cache(maxsize=None)
def _unicode_category(name: str) -> tuple[tuple[int, int], ...]:
    # Let Python's own engine say which characters `\d` etc. match: exact by
    # construction, and one regex scan of all code points is ~20 ms.
    pattern = {"digit": r"\d+", "word": r"\w+", "space": r"\s+"}[name]
    return tuple((m.start(), m.end() - 1) for m in re.finditer(pattern, _all_chars()))


# ---------------------------------------------------------------------------
# Case-insensitive matching, as Python's `re` does it for str patterns.


@lru_cache(maxsize=None)
def _fold_tables(ascii_only: bool) -> tuple[list[int], dict[int, int], dict[int, tuple[int, ...]], list[int]]:
    """(sorted code points whose lowercase differs, their lowercase,
    extra equivalences, sorted cased code points) for Python's matcher."""
    if ascii_only:
        upper = list(range(0x41, 0x5B))
        return upper, {c: c + 32 for c in upper}, {}, upper + [c + 32 for c in upper]
    import _sre
    from re._casefix import _EXTRA_CASES  # type: ignore[import-not-found]

    lower, n = _sre.unicode_tolower, MAX_CP + 1
    changed = [c for c, lo in zip(range(n), map(lower, range(n))) if c != lo]
    cased = [c for c, yes in zip(range(n), map(_sre.unicode_iscased, range(n))) if yes]
    return changed, {c: lower(c) for c in changed}, dict(_EXTRA_CASES), cased


def ignorecase(ranges, categories=(), *, ascii_only: bool = False) -> list[tuple[int, int]]:
    """What a class matches under Python's IGNORECASE.

    `ranges` are the class's literal characters and ranges, `categories` the
    code points of its `\\d \\w \\s`-style items. Like `re` (3.7+): if no
    literal is cased the class is used as is; otherwise `ch` matches when
    lower(ch) is in lower(ranges) + extra equivalences (`re._casefix`, e.g.
    s/ſ, k/K-sign) + categories. Lowercasing is the simple case mapping of
    `_sre.unicode_tolower`; with `re.ASCII` only ASCII letters fold.

    Example:
        >>> ignorecase([(0x6B, 0x6B)])  # k, K and KELVIN SIGN
        [(75, 75), (107, 107), (8490, 8490)]
    """
    ranges = normalize(ranges)
    changed, lower, fixes, cased = _fold_tables(ascii_only)
    if not _points_in(cased, ranges):
        return union(ranges, categories)
    moved = _points_in(changed, ranges)
    images = union(_minus_points(ranges, moved), [(lower[c], lower[c]) for c in moved])
    extra = [(k, k) for c in fixes if contains(images, c) for k in fixes[c]]
    wanted = union(images, extra, categories)
    # {ch : lower(ch) in wanted}
    keep = _minus_points(wanted, _points_in(changed, wanted))
    return union(keep, [(c, c) for c in changed if contains(wanted, lower[c])])


def _points_in(points: list[int], ranges) -> list[int]:
    out: list[int] = []
    for lo, hi in ranges:
        out.extend(points[bisect.bisect_left(points, lo): bisect.bisect_right(points, hi)])
    return out


def _minus_points(ranges, points: list[int]) -> list[tuple[int, int]]:
    return intersect(ranges, complement(normalize((p, p) for p in points)))


# ---------------------------------------------------------------------------
# Unicode general categories (for ECMA `\p{...}`)

_LONG_NAMES = {
    "Letter": "L", "Cased_Letter": "LC", "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll",
    "Titlecase_Letter": "Lt", "Modifier_Letter": "Lm", "Other_Letter": "Lo", "Mark": "M",
    "Combining_Mark": "M", "Nonspacing_Mark": "Mn", "Spacing_Mark": "Mc", "Enclosing_Mark": "Me",
    "Number": "N", "Decimal_Number": "Nd", "digit": "Nd", "Letter_Number": "Nl", "Other_Number": "No",
    "Punctuation": "P", "punct": "P", "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd",
    "Open_Punctuation": "Ps", "Close_Punctuation": "Pe", "Initial_Punctuation": "Pi",
    "Final_Punctuation": "Pf", "Other_Punctuation": "Po", "Symbol": "S", "Math_Symbol": "Sm",
    "Currency_Symbol": "Sc", "Modifier_Symbol": "Sk", "Other_Symbol": "So", "Separator": "Z",
    "Space_Separator": "Zs", "Line_Separator": "Zl", "Paragraph_Separator": "Zp", "Other": "C",
    "Control": "Cc", "cntrl": "Cc", "Format": "Cf", "Surrogate": "Cs", "Private_Use": "Co",
    "Unassigned": "Cn",
}


def general_category(name: str) -> list[tuple[int, int]] | None:
    """Code points of a Unicode general category (`L`, `Lu`, `Letter`, ...).

    Also accepts `Any`, `ASCII` and `General_Category=X` / `gc=X`. Returns
    None for names it does not know (scripts, binary properties).

    Example:
        >>> general_category("Nd")[:2]
        [(48, 57), (1632, 1641)]
    """
    if "=" in name:
        key, _, name = name.partition("=")
        if key not in ("General_Category", "gc"):
            return None
    if name == "Any":
        return list(ALL)
    if name == "ASCII":
        return [(0, 0x7F)]
    short = _LONG_NAMES.get(name, name)
    table = _category_table()
    if short == "LC":
        return union(table.get("Lu", []), table.get("Ll", []), table.get("Lt", []))
    if len(short) == 1:
        parts = [r for k, v in table.items() if k[0] == short for r in v]
        return normalize(parts) if parts else None
    return list(table[short]) if short in table else None


@lru_cache(maxsize=None)
def _category_table() -> dict[str, list[tuple[int, int]]]:
    import unicodedata

    table: dict[str, list[tuple[int, int]]] = {}
    prev, start = None, 0
    for cp, cat in enumerate(map(unicodedata.category, _all_chars())):
        if cat != prev:
            if prev is not None:
                table.setdefault(prev, []).append((start, cp - 1))
            prev, start = cat, cp
    table.setdefault(prev, []).append((start, MAX_CP))
    return table
