"""A schema's numeric keywords (`minimum` ... `exclusiveMaximum`, `multipleOf`) as integer and number nodes.

Bounds are compared as the compiler's `numbers` policy reads schema numbers
(`c.value`: the double a bound parses to, or its exact decimal); values a
`not` excludes split the range into open pieces. `multipleOf` is exact for
integer divisors and, with ``numbers="exact"``, for `10^-k`; a float divisor
under ``numbers="double"`` is checked as validators check it (`x / divisor`
in floating point), by listing the multiples of a bounded range.

Example:
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.json_schema import json_schema_grammar
    >>> g = json_schema_grammar({"type": "integer", "minimum": 1, "multipleOf": 2, "not": {"const": 4}})
    >>> dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    >>> [dfa.matches(s) for s in (b"2", b"4", b"6", b"0", b"3")]
    [True, False, True, False, False]
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from grammars.ast import Node, alt, literal, optional, plus, seq
from grammars.errors import UnsupportedSchemaError
from grammars.json_doubles import (
    ANY_DOUBLE, checked_multiples, divides_exactly, double_interval, double_value, int_bounds, safe_integers,
    integers_passing,
)
from grammars.json_numbers import (
    ANY_NUMBER, Interval, integer_multiples, literal_set, number_interval, number_value,
)
from grammars.json_values import to_decimal, union

if TYPE_CHECKING:
    from grammars.json_schema import Compiler

__all__ = ["schema_interval", "integer_node", "number_node", "as_decimal"]

_NUMBER_ENUM_LIMIT = 1024


def schema_interval(c: "Compiler", s: dict) -> Interval:
    """The numbers `s`'s bounds admit (`minimum` ... `exclusiveMaximum`, as `c.value` reads them)."""
    iv = Interval(None, None)
    for key, strict, upper in (("minimum", False, False), ("exclusiveMinimum", True, False),
                               ("maximum", False, True), ("exclusiveMaximum", True, True)):
        if key not in s:
            continue
        x = c.value(s[key])
        if upper and (iv.hi is None or x < iv.hi or (x == iv.hi and strict)):
            iv.hi, iv.hi_strict = x, strict
        if not upper and (iv.lo is None or x > iv.lo or (x == iv.lo and strict)):
            iv.lo, iv.lo_strict = x, strict
    return iv


def integer_node(c: "Compiler", s: dict, excluded: list, path: str) -> Node:
    """The integers valid under the numeric keywords of `s`, minus the `excluded` values."""
    iv = schema_interval(c, s)
    lo, hi = int_bounds(iv)
    k = 1
    ranges = [(lo, hi, 1)]                                  # (from, to, divisor of the integers kept)
    if "multipleOf" in s:
        k = Fraction(as_decimal(s["multipleOf"])).numerator  # n*p/q is an integer multiple iff p | n
        ranges = [(lo, hi, k)]
        if c.numbers == "double" and isinstance(s["multipleOf"], float):   # checked as n / divisor
            if not divides_exactly(s["multipleOf"]):
                return _listed_multiples(c, s, iv, excluded, path, integers=True)
            # multiples where a double holds the integer and the quotient is exact; past that, every
            # integer passes the float check (found refused by `bench.mutations`, seed 61)
            first, passing = integers_passing(s["multipleOf"], lo, hi)
            a, b = safe_integers(lo, hi)
            ranges = [(max(a, 1 - first), min(b, first - 1), k)] + [(a, b, 1) for a, b in passing]
    parts = []
    points = sorted(int(c.value(v)) for v in excluded)
    for lo, hi, step in ranges:
        for a, b in _split_ints(lo, hi, points):
            part = integer_multiples(a, b, step)
            if part is None:
                raise UnsupportedSchemaError("multipleOf", path, f"multiples of {step} in [{a}, {b}] are not a "
                                             "small automaton (needs a bounded range or a divisor of a power of 10)")
            parts.append(part)
    return alt(*parts)


def number_node(c: "Compiler", s: dict, excluded: list, path: str) -> Node:
    """The numbers valid under the numeric keywords of `s`, minus the `excluded` values."""
    iv = schema_interval(c, s)
    points = sorted({c.value(v) for v in excluded})
    double = c.numbers == "double"
    if "multipleOf" not in s:
        if iv.lo is None and iv.hi is None and not points:
            return ANY_DOUBLE if double else ANY_NUMBER
        return alt(*((double_interval if double else number_interval)(p) for p in _split_interval(iv, points)))
    m = Fraction(as_decimal(s["multipleOf"]))
    if double and m.denominator == 1:     # integer spellings only: json.loads reads `n.0` as a float
        return integer_node(c, s, excluded, path)
    if double:
        return _listed_multiples(c, s, iv, excluded, path, integers=False)
    if m.denominator == 1:  # integer-valued numbers, written with an optional zero fraction
        ints = integer_node(c, {**s, "multipleOf": int(m)}, excluded, path)
        return seq(ints, optional(seq(literal(b"."), plus(literal(b"0")))))
    digits = _power_of_ten(m)
    if digits is not None:
        return alt(*(number_interval(p, limit=digits, scientific=False) for p in _split_interval(iv, points)))
    if iv.lo is not None and iv.hi is not None:
        first, last = math.ceil(Fraction(iv.lo) / m), math.floor(Fraction(iv.hi) / m)
        if last - first < _NUMBER_ENUM_LIMIT:
            values = [Decimal(n * m.numerator) / Decimal(m.denominator) for n in range(first, last + 1)]
            return alt(*(number_value(v) for v in values if iv.contains(v) and v not in points))
    raise UnsupportedSchemaError("multipleOf", path, f"multipleOf {s['multipleOf']!r} on unbounded numbers "
                                 "(only 10^-k, integers, or bounded ranges are exact)")


def _listed_multiples(c: "Compiler", s: dict, iv: Interval, excluded: list, path: str, integers: bool) -> Node:
    """Multiples of a float divisor that pass jsonschema's check (`x / divisor` an integer), listed."""
    points = sorted({c.value(v) for v in excluded})
    xs = checked_multiples(iv, s["multipleOf"], points, _NUMBER_ENUM_LIMIT)
    if xs is None:
        raise UnsupportedSchemaError(
            "multipleOf", path, f"multipleOf {s['multipleOf']!r} with numbers='double' (the default): validators "
            f"check x / {s['multipleOf']!r} in floating point (2.01 / 0.01 = 200.99999999999997 fails), and "
            f"which multiples pass is not a regular language; give minimum and maximum (at most "
            f"{_NUMBER_ENUM_LIMIT} multiples) or pass numbers='exact' for decimal semantics")
    if integers:
        return literal_set(str(int(x)).encode() for x in xs if x.is_integer())
    return union(*(double_value(Decimal(x)) for x in xs))




def as_decimal(v: Any) -> Decimal:
    """A schema number as a `Decimal` (exactly: `0.1` is 0.1, not the double nearest it)."""
    return v if isinstance(v, Decimal) else to_decimal(v)


def _power_of_ten(m: Fraction) -> int | None:
    """k when m == 10**-k."""
    if m.numerator != 1:
        return None
    k, d = 0, m.denominator
    while d % 10 == 0:
        d //= 10
        k += 1
    return k if d == 1 else None


def _split_interval(iv: Interval, points: list[Decimal]) -> list[Interval]:
    """iv minus the points, as open-ended pieces."""
    pieces, cur = [], Interval(iv.lo, iv.hi, lo_strict=iv.lo_strict, hi_strict=iv.hi_strict)
    for p in points:
        if not cur.contains(p):
            continue
        pieces.append(Interval(cur.lo, p, lo_strict=cur.lo_strict, hi_strict=True))
        cur = Interval(p, cur.hi, lo_strict=True, hi_strict=cur.hi_strict)
    return [p for p in pieces + [cur] if not p.is_empty()]


def _split_ints(lo: int | None, hi: int | None, points: list[int]) -> list[tuple[int | None, int | None]]:
    out, cur = [], lo
    for p in points:
        if (cur is None or p >= cur) and (hi is None or p <= hi):
            if cur is None or p - 1 >= cur:
                out.append((cur, p - 1))
            cur = p + 1
    if cur is None or hi is None or cur <= hi:
        out.append((cur, hi))
    return out

