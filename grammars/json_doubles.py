"""JSON numbers that stay valid after `json.loads`: the default `numbers="double"` policy.

`json.loads` (like JavaScript's `JSON.parse` and every validator that works
on doubles) reads a number written with a fraction or an exponent as an IEEE
double, and one written as a plain integer exactly (a Python `int`). Exact
decimal grammars (`grammars.json_numbers`, `numbers="exact"`) can therefore
emit text that parses to something else: `1.6e-55294741716849749` underflows
to 0.0 and fails `exclusiveMinimum: 0`, `1e999` overflows to inf, and
`0.10000000000000001` parses to the same double as `0.1`, so it fails
`exclusiveMinimum: 0.1`. Under this policy:

- **integers** (`-?(0|[1-9][0-9]*)`, no fraction, no exponent) are compared
  exactly with the bounds' values as Python holds them (an `int`, or the exact
  binary value of a `float` bound); any length is allowed, since `json.loads`
  reads them exactly (outside +-2^53 JavaScript rounds them: an
  interoperability note, not an error);
- **floats** have at most `SIG_DIGITS` (17) significant digits, enough for
  every double. Nonzero ones have a magnitude in [1e-323, 1e308), so none
  underflows to 0 or overflows to inf; past that only where the schema's
  bounds lie there, up to the least and greatest doubles 5e-324 and
  1.7976931348623157e308. (Those two edges, 17-digit comparisons, made the
  default number ~1,400 NFA states where whole decades take ~190: every
  grammar with an untyped value carries one.) Plain ones (`0.5`, `123.25`) stay
  below 1e16, or are zero (`0.0`, at most 17 zeros); scientific ones have a
  normalized mantissa (`[1-9](\\.\\d{1,16})?[eE][+-]?\\d+`, as `repr` and
  JavaScript write them; not `10e5` or `0.0e0`);
- **bounds** are decided on `float(text)`: a float passes a lower bound `b`
  when it is at least `repr(D)`, where `D` is the least double >= `b` (> `b`
  when exclusive), and likewise for upper bounds. Rounding is monotone, so
  every float that passes this passes jsonschema's check; the only texts
  left out are those of 16-17 digits that round to `D` from below its
  shortest spelling (for 15 digits or fewer the test is exact).

Example:
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.ast import Grammar
    >>> from grammars.json_numbers import Interval
    >>> dfa = LazyDFA(Grammar({"start": double_interval(Interval(Decimal(0), None, lo_strict=True))}))
    >>> [dfa.matches(s) for s in (b"1", b"0.5", b"1e-300", b"1e-400", b"0", b"1e309", b"0.1234567890123456789")]
    [True, True, True, False, False, False, False]
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

from grammars.ast import NOTHING, Node, alt, byteset, literal, optional, repeat, seq
from grammars.fragments import compact, share
from grammars.json_numbers import (
    ANY_INTEGER, DIGIT, EXP, MINUS, NONZERO, ZERO, Interval, decimal_interval, digits_with_zeros, int_range,
)

__all__ = [
    "SIG_DIGITS", "MIN_EXP", "MAX_EXP", "double_interval", "double_value", "float_interval", "ANY_DOUBLE", "exact_value",
    "divides_exactly", "safe_integers", "integers_passing", "checked_multiples", "int_bounds",
]

SIG_DIGITS = 17          # significant digits of a float: enough to spell every double
# The least and greatest positive doubles, as `repr` spells them: no nonzero float goes past them.
TINY, HUGE = Decimal("5e-324"), Decimal("1.7976931348623157e308")
# Nonzero floats keep within [LOW, HIGH) unless the schema's bounds lie beyond: whole
# decades, so the default number is small (TINY and HUGE as edges cost ~1,200 NFA states).
LOW, HIGH = Decimal("1e-323"), Decimal("1e308")
MIN_EXP, MAX_EXP = TINY.adjusted(), HUGE.adjusted()
_PLAIN_MAX_EXP = 15      # plain floats (with a fraction) stay below 1e16, as Python's repr writes them
_ZERO_FLOAT = seq(literal(b"0."), repeat(ZERO, 1, SIG_DIGITS))


def _double_at_least(b: Decimal, strict: bool) -> float:
    """The least double >= b (> b when `strict`); inf when there is none.

    Compared as `Decimal`s, which hold every double exactly and compare exactly
    (a `Fraction` is pure Python: this was most of a bounded number's compile).
    """
    d = float(b)                                 # correctly rounded; +-inf past the doubles
    while math.isfinite(d) and (Decimal(d) < b or (strict and Decimal(d) == b)):
        d = math.nextafter(d, math.inf)
    while True:
        p = math.nextafter(d, -math.inf)
        if math.isfinite(p) and (Decimal(p) > b or (not strict and Decimal(p) == b)):
            d = p
        else:
            return d


def _exact(x: int | Decimal) -> Decimal:
    return x if isinstance(x, Decimal) else Decimal(x)


def float_interval(iv: Interval) -> Interval | None:
    """Decimals whose double lies in `iv` (exact bounds), kept off the edge: [repr(lo), repr(hi)]; None if empty.

    Example:
        >>> float_interval(Interval(Decimal(0), None, lo_strict=True)).lo
        Decimal('5E-324')
    """
    lo = hi = None
    if iv.lo is not None:
        d = _double_at_least(_exact(iv.lo), iv.lo_strict)
        if d == math.inf:
            return None
        lo = Decimal(repr(d)) if d != -math.inf else None
    if iv.hi is not None:
        d = -_double_at_least(_exact(iv.hi).copy_negate(), iv.hi_strict)    # (`-x` would round)
        if d == -math.inf:
            return None
        hi = Decimal(repr(d)) if d != math.inf else None
    out = Interval(lo, hi)
    return None if out.is_empty() else out


# ---------------------------------------------------------------------------
# Plain floats, decade by decade: [10^k, 10^(k+1)) has k+1 integer digits (k >= 0)
# or -k-1 zeros after the point (k < 0), so its fraction may hold `_cap(k)` digits.


def _cap(k: int) -> int:
    return SIG_DIGITS - (k + 1) if k >= 0 else SIG_DIGITS - k - 1


def _digits_then_fraction(mandatory: int, optional_: int, budget: int) -> Node:
    """`mandatory` digits, up to `optional_` more, then '.' and 1+ digits: at most `budget` digits in all."""
    if mandatory:
        return seq(DIGIT, _digits_then_fraction(mandatory - 1, optional_, budget - 1))
    frac = seq(literal(b"."), repeat(DIGIT, 1, budget)) if budget >= 1 else NOTHING
    if optional_ and budget > 1:
        return alt(frac, seq(DIGIT, _digits_then_fraction(0, optional_ - 1, budget - 1)))
    return frac


@lru_cache(maxsize=512)
def _full_decades(a: int, b: int) -> Node:
    """Every plain float with at most 17 significant digits in [10^a, 10^(b+1)) (a <= b)."""
    parts = []
    if a < 0:     # 0.000ddd: -k-1 zeros after the point for decade k
        zeros = repeat(ZERO, -min(b, -1) - 1, -a - 1)
        parts.append(seq(literal(b"0."), zeros, NONZERO, repeat(DIGIT, 0, SIG_DIGITS - 1)))
    if b >= 0:
        lo = max(a, 0)
        parts.append(compact(seq(NONZERO, _digits_then_fraction(lo, b - lo, SIG_DIGITS - 1))))
    return share(alt(*parts))


def _floor(iv: Interval) -> tuple[Decimal, bool]:
    """The least nonzero magnitude of a float in iv (iv.lo >= 0 or None), and whether it is excluded:
    iv's bound, kept at LOW or above unless all of iv lies below LOW."""
    if iv.lo is not None and (iv.lo >= LOW or (iv.hi is not None and iv.hi < LOW and iv.lo >= TINY)):
        return iv.lo, iv.lo_strict
    return (TINY if iv.hi is not None and iv.hi < LOW else LOW), False


def _ceiling(iv: Interval) -> tuple[Decimal, bool]:
    """The greatest magnitude of a float in iv (iv.lo >= 0 or None), and whether it is excluded:
    iv's bound, kept below HIGH unless all of iv lies at HIGH or above."""
    if iv.hi is not None and (iv.hi < HIGH or (iv.lo is not None and iv.lo >= HIGH and iv.hi <= HUGE)):
        return iv.hi, iv.hi_strict
    return (HUGE, False) if iv.lo is not None and iv.lo >= HIGH else (HIGH, True)


def _plain_positive(iv: Interval) -> Node:
    """Plain floats (with a fraction) of value in iv, iv.lo >= 0, within {0} U [`_floor`, 1e16)."""
    parts = []
    if iv.contains(Decimal(0)):
        parts.append(_ZERO_FLOAT)
    top = Decimal(10) ** (_PLAIN_MAX_EXP + 1)
    lo, ls = _floor(iv)
    hi, hs = (top, True) if iv.hi is None or iv.hi >= top else (iv.hi, iv.hi_strict)
    if lo > hi or (lo == hi and (ls or hs)):
        return alt(*parts)
    k_lo, k_hi = lo.adjusted(), hi.adjusted()
    if hi == Decimal(10) ** k_hi and (hs or k_hi > _PLAIN_MAX_EXP):
        k_hi -= 1                   # [.., 10^k) strictly: decade k holds nothing
    first = k_lo if lo == Decimal(10) ** k_lo and not ls else k_lo + 1
    last = k_hi if hi >= Decimal(10) ** (k_hi + 1) else k_hi - 1
    for k in sorted({k_lo, k_hi}):
        if first <= k <= last:
            continue
        d_lo, d_hi = Decimal(10) ** k, Decimal(10) ** (k + 1)
        sub = Interval(max(lo, d_lo), min(hi, d_hi), lo_strict=ls if lo >= d_lo else False,
                       hi_strict=hs if hi < d_hi else True)
        parts.append(decimal_interval(sub, _cap(k), capped=True, fraction=True))
    if first <= last:
        parts.append(_full_decades(first, last))
    return alt(*parts)


# ---------------------------------------------------------------------------
# Scientific floats: a normalized mantissa in [1, 10), an exponent in [MIN_EXP, MAX_EXP]

_MANTISSA = share(seq(NONZERO, optional(seq(literal(b"."), repeat(DIGIT, 1, SIG_DIGITS - 1)))))


def _mantissa(iv: Interval) -> Node:
    """Mantissas `[1-9](\\.\\d{1,16})?` of value in iv ∩ [1, 10)."""
    lo, ls = (Decimal(1), False) if iv.lo is None or iv.lo < 1 else (iv.lo, iv.lo_strict)
    hi, hs = (Decimal(10), True) if iv.hi is None or iv.hi >= 10 else (iv.hi, iv.hi_strict)
    if lo == 1 and not ls and hi == 10:
        return _MANTISSA
    sub = Interval(lo, hi, lo_strict=ls, hi_strict=hs)
    ints = [str(v).encode() for v in range(1, 10) if sub.contains(Decimal(v))]
    return alt(byteset(b"".join(ints)) if ints else NOTHING, decimal_interval(sub, SIG_DIGITS - 1, capped=True,
                                                                           fraction=True))


@lru_cache(maxsize=1024)
def _exponents(lo: int, hi: int) -> Node:
    """Exponents lo..hi (`+`, leading zeros allowed), from their minimal DFA: 16 states for -323..307, not 36."""
    return compact(digits_with_zeros(lo, hi))


def _scientific_positive(iv: Interval) -> Node:
    """Scientific floats of value in iv, iv.lo >= 0, within [`_floor`, `_ceiling`]."""
    (lo, ls), (hi, hs) = _floor(iv), _ceiling(iv)
    iv = Interval(lo, hi, lo_strict=ls, hi_strict=hs)
    if iv.is_empty():
        return NOTHING
    e_lo, e_hi = lo.adjusted(), hi.adjusted()
    parts, full = [], [e_lo + 1, e_hi - 1]      # exponents with every mantissa
    for e in sorted({e_lo, e_hi}):
        mant = _mantissa(Interval(lo.scaleb(-e), hi.scaleb(-e), lo_strict=ls, hi_strict=hs))
        if mant is _MANTISSA:                   # a whole decade (a bound at a power of ten): join the range
            full = [min(full[0], e), max(full[1], e)]
        elif mant != NOTHING:
            parts.append(seq(mant, EXP, _exponents(e, e)))
    if full[0] <= full[1]:
        parts.append(seq(_MANTISSA, EXP, _exponents(*full)))
    return alt(*parts)


def _floats(iv: Interval) -> Node:
    """Float spellings (plain with a fraction, or scientific) of value in iv (decimal bounds)."""
    parts = []
    if iv.hi is None or iv.hi >= 0:
        pos = Interval(iv.lo if iv.lo is not None and iv.lo >= 0 else Decimal(0), iv.hi,
                       lo_strict=iv.lo_strict if iv.lo is not None and iv.lo >= 0 else False, hi_strict=iv.hi_strict)
        parts.append(alt(_plain_positive(pos), _scientific_positive(pos)))
    if iv.lo is None or iv.lo <= 0:
        neg = iv.negated()
        mag = Interval(neg.lo if neg.lo is not None and neg.lo >= 0 else Decimal(0), neg.hi,
                       lo_strict=neg.lo_strict if neg.lo is not None and neg.lo >= 0 else False,
                       hi_strict=neg.hi_strict)
        if parts and mag == pos:     # symmetric (unbounded): one copy, an optional sign
            return seq(optional(MINUS), parts[0])
        parts.append(seq(MINUS, alt(_plain_positive(mag), _scientific_positive(mag))))
    return alt(*parts)


def int_bounds(iv: Interval) -> tuple[int | None, int | None]:
    """The least and greatest integers in iv (None: unbounded); exact for any exponent."""
    lo = hi = None
    # (the exact ratio, not a `Fraction`: that is pure Python, a tenth of a small schema's compile)
    if iv.lo is not None:
        n, d = iv.lo.as_integer_ratio()          # d > 0
        lo = n // d + 1 if iv.lo_strict or d != 1 else n
    if iv.hi is not None:
        n, d = iv.hi.as_integer_ratio()
        hi = -(-n // d) - 1 if iv.hi_strict or d != 1 else n
    return lo, hi


def double_interval(iv: Interval) -> Node:
    """Integers exactly in iv, and floats whose double is in iv (iv: exact bound values).

    Example:
        >>> from grammars.dfa import LazyDFA
        >>> from grammars.ast import Grammar
        >>> dfa = LazyDFA(Grammar({"start": double_interval(Interval(None, Decimal(0.1), hi_strict=True))}))
        >>> [dfa.matches(s) for s in (b"0", b"0.09999999999999999", b"0.1", b"0.10000000000000001", b"-1e307")]
        [True, True, False, False, True]
    """
    if iv.is_empty():
        return NOTHING
    lo, hi = int_bounds(iv)
    ints = NOTHING if lo is not None and hi is not None and lo > hi else int_range(lo, hi)
    fl = float_interval(iv)
    return alt(ints, NOTHING if fl is None else _floats(fl))


def double_value(x: Decimal) -> Node:
    """Every spelling whose `json.loads` value equals x (an int, or a float's exact value)."""
    return double_interval(Interval(x, x))


ANY_DOUBLE: Node = share(alt(ANY_INTEGER, _floats(Interval(None, None))))


# ---------------------------------------------------------------------------
# What the compiler asks: schema values, divisors

_SAFE_INT = 2 ** 53 - 1     # integers a double holds exactly: float(n) == n below this


def exact_value(v: int | float | Decimal) -> Decimal:
    """The value `json.loads` gives a schema number, exactly: an int, or a float's binary value.

    Example:
        >>> exact_value(0.5), exact_value(3), str(exact_value(0.1))[:22]
        (Decimal('0.5'), Decimal('3'), '0.10000000000000000555')
    """
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{v!r} is not a JSON number")
    return v if isinstance(v, Decimal) else Decimal(v)


def divides_exactly(divisor: float) -> bool:
    """Whether `n / divisor` (float division, as jsonschema checks `multipleOf`) is an integer for every
    integer multiple n of the divisor's decimal value with |n| <= 2^53.

    n = k*p for the decimal p/q, so the true quotient is k*q*(1 - e) with e the
    divisor's relative representation error; it rounds to k*q when |e| <= 2^-54.

    Example:
        >>> divides_exactly(0.1), divides_exactly(0.7), divides_exactly(2.5)
        (True, False, True)
    """
    binary, written = Fraction(divisor), Fraction(Decimal(repr(divisor)))
    return abs(binary - written) * 2 ** 54 <= binary


def safe_integers(lo: int | None, hi: int | None) -> tuple[int, int]:
    """[lo, hi] within +-(2^53 - 1), where `float(n) == n`."""
    return max(lo if lo is not None else -_SAFE_INT, -_SAFE_INT), min(hi if hi is not None else _SAFE_INT, _SAFE_INT)


def integers_passing(divisor: float, lo: int | None, hi: int | None) -> tuple[int, list[tuple[int, int]]]:
    """Where every integer n passes jsonschema's float check of `multipleOf: divisor` (`float(n) /
    divisor` is integral): where that quotient is at least 2^52, every double is an integer. Returns
    the least such |n| and those ranges of [lo, hi], up to `divisor * 1e308`, where the quotient stays
    finite (past it the check overflows). Below, only multiples pass for sure (`divides_exactly`).

    Example:
        >>> first, ranges = integers_passing(0.25, 0, None)
        >>> first == 2 ** 50 + 1, ranges == [(2 ** 50 + 1, 25 * 10 ** 306)]
        (True, True)
        >>> integers_passing(0.5, -10, 10)[1]
        []
    """
    scale = Fraction(divisor)
    first = math.ceil(2 ** 52 * scale * (1 + Fraction(1, 2 ** 50)))     # (a margin for float(n)'s rounding)
    last = math.floor(scale * 10 ** 308)
    out = []
    for a, b in ((first, last), (-last, -first)):
        a, b = max(a, lo) if lo is not None else a, min(b, hi) if hi is not None else b
        if a <= b:
            out.append((a, b))
    return first, out


def checked_multiples(iv: Interval, divisor: float, points: list[Decimal], limit: int) -> list[float] | None:
    """The doubles in iv that pass jsonschema's float check (`x / divisor` is an integer), minus `points`;
    None when iv is unbounded or holds more than `limit` multiples of the divisor.

    Example:
        >>> checked_multiples(Interval(Decimal(2), Decimal("2.1")), 0.01, [], 100)[:4]
        [2.0, 2.02, 2.04, 2.06]
    """
    if iv.lo is None or iv.hi is None:
        return None
    step = Fraction(Decimal(repr(divisor)))
    first, last = math.ceil(Fraction(iv.lo) / step), math.floor(Fraction(iv.hi) / step)
    if last - first >= limit:
        return None
    gone = set(points)
    out: set[float] = set()
    for n in range(first, last + 1):
        # x / divisor rounds to an integer only within an ulp or two of n * divisor: try the doubles there
        x = float(n * step)
        near = [x]
        for direction in (math.inf, -math.inf):
            y = x
            for _ in range(3):
                y = math.nextafter(y, direction)
                near.append(y)
        for y in near:
            q = y / divisor
            if math.isfinite(q) and q == int(q) and iv.contains(Decimal(y)) and Decimal(y) not in gone:
                out.add(y)
    return sorted(out)
