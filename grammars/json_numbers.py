"""Digit automata for JSON numbers: exact ranges, decimal bounds, multiples.

Everything here builds byte-level `Node`s that accept *exactly* the number
spellings whose value lies in a set. Values are compared as exact decimals
(`decimal.Decimal`), never as floats.

Number syntax accepted:

- unconstrained `number`: the full JSON grammar
  `-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?`;
- a number with bounds (or a `const`/`enum`/`not` over numbers): plain
  decimals `-?(0|[1-9][0-9]*)(\\.[0-9]+)?` plus *normalized* scientific
  notation `-?[1-9](\\.[0-9]+)?[eE][+-]?[0-9]+` (what Python's `repr` and
  JavaScript print). Unnormalized forms such as `10e5` or `0.5e1` are
  rejected: with an unbounded exponent their value comparison is not a
  regular language;
- `integer`: `-?(0|[1-9][0-9]*)` without `-0` (`1.0` is rejected although the
  spec calls it an integer).

Example:
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.ast import Grammar
    >>> from decimal import Decimal
    >>> g = Grammar({"start": int_range(-17, 12345)})
    >>> [LazyDFA(g).matches(s) for s in (b"-17", b"-18", b"12345", b"012")]
    [True, False, True, False]
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from typing import Callable, Iterable

from grammars.ast import (
    EMPTY, NOTHING, Node, alt, byte_range, byteset, literal, optional, plus, repeat, seq, star,
)
from grammars.fragments import share

__all__ = [
    "Interval", "int_range", "digits_with_zeros", "decimal_interval", "number_interval",
    "ANY_NUMBER", "ANY_INTEGER", "literal_set", "number_value", "integer_multiples",
]

DIGIT = byte_range(0x30, 0x39)
NONZERO = byte_range(0x31, 0x39)
ZERO = literal(b"0")
MINUS = literal(b"-")
EXP = byteset(b"eE")
_SIGN = byteset(b"+-")

ANY_INTEGER: Node = seq(optional(MINUS), alt(ZERO, seq(NONZERO, star(DIGIT))))
_INT_PART = alt(ZERO, seq(NONZERO, star(DIGIT)))
ANY_NUMBER: Node = seq(
    optional(MINUS), _INT_PART,
    optional(seq(literal(b"."), plus(DIGIT))),
    optional(seq(EXP, optional(_SIGN), plus(DIGIT))),
)
for _part in (*ANY_INTEGER.items, *ANY_NUMBER.items):  # NFA fragments built once per process
    share(_part)


def _dec_digit(lo: int, hi: int) -> Node:
    return byte_range(0x30 + lo, 0x30 + hi)


# ---------------------------------------------------------------------------
# Fixed-width digit ranges (shared with hex escapes in json_strings)


def fixed_range(lo: list[int], hi: list[int], base: int, digit: Callable[[int, int], Node]) -> Node:
    """Digit strings of len(lo) digits whose value is in [lo, hi] (lo <= hi).

    Example:
        >>> fixed_range([1, 5], [2, 3], 10, _dec_digit) == alt(
        ...     seq(_dec_digit(1, 1), _dec_digit(5, 9)), seq(_dec_digit(2, 2), _dec_digit(0, 3)))
        True
    """
    if not lo:
        return EMPTY
    n = len(lo) - 1
    if lo[0] == hi[0]:
        return seq(digit(lo[0], lo[0]), fixed_range(lo[1:], hi[1:], base, digit))
    parts: list[Node] = []
    first, last = lo[0], hi[0]
    # The first digit of lo, when lo's tail is not all zeros, needs its own branch.
    if any(lo[1:]):
        parts.append(seq(digit(first, first), fixed_range(lo[1:], [base - 1] * n, base, digit)))
        first += 1
    tail_hi: Node | None = None
    if any(d != base - 1 for d in hi[1:]):
        tail_hi = seq(digit(last, last), fixed_range([0] * n, hi[1:], base, digit))
        last -= 1
    if first <= last:
        parts.append(seq(digit(first, last), repeat(digit(0, base - 1), n, n)))
    if tail_hi is not None:
        parts.append(tail_hi)
    return alt(*parts)


def _nonneg_int_range(lo: int, hi: int | None) -> Node:
    """Canonical decimal spellings (no leading zeros) of lo..hi, hi=None: no limit."""
    if hi is not None and hi < lo:
        return NOTHING
    parts: list[Node] = []
    width = len(str(lo))
    top = len(str(hi)) if hi is not None else width
    for w in range(width, top + 1):
        a = max(lo, 10 ** (w - 1) if w > 1 else 0)
        b = 10 ** w - 1 if hi is None else min(hi, 10 ** w - 1)
        if a <= b:
            parts.append(fixed_range([int(c) for c in str(a)], [int(c) for c in str(b)], 10, _dec_digit))
    if hi is None:
        parts.append(seq(NONZERO, repeat(DIGIT, width, None)))
    return alt(*parts)


@lru_cache(maxsize=1024)
def int_range(lo: int | None, hi: int | None) -> Node:
    """Canonical JSON integers in [lo, hi] (None: unbounded). `-0` is excluded.

    Memoized (a tree of O(digits) nodes): syntax trees are immutable, and real schemas
    repeat their integer ranges (870 of maskbench-dev's 1,026 integer subschemas are
    unbounded, and ``minimum: 0`` makes most of the rest), so each range's tree is built
    once per process and the same object serves every schema, as `ANY_NUMBER` does.
    (`integer_multiples` with other divisors is not: an enumerated range can be large.)

    Example:
        >>> int_range(0, 9) == DIGIT
        True
    """
    if lo is not None and hi is not None and lo > hi:
        return NOTHING
    parts = []
    if lo is None or lo < 0:
        mag_lo = 1 if hi is None or hi >= 0 else -hi
        parts.append(seq(MINUS, _nonneg_int_range(mag_lo, None if lo is None else -lo)))
    if hi is None or hi >= 0:
        parts.append(_nonneg_int_range(max(lo or 0, 0), hi))
    return alt(*parts)


def digits_with_zeros(lo: int | None, hi: int | None) -> Node:
    """Signed digit strings with optional leading zeros and `+` (exponents)."""
    parts = []
    if hi is None or hi >= 0:
        parts.append(seq(optional(literal(b"+")), star(ZERO), _nonneg_int_range(max(lo or 0, 0), hi)))
    if lo is None or lo <= 0:
        mag_lo = 0 if hi is None or hi >= 0 else -hi
        parts.append(seq(MINUS, star(ZERO), _nonneg_int_range(mag_lo, None if lo is None else -lo)))
    return alt(*parts)


# ---------------------------------------------------------------------------
# Decimal intervals


class Interval:
    """A set of reals {x : lo <(=) x <(=) hi}; None bounds are infinite.

    Example:
        >>> Interval(Decimal(0), None, lo_strict=True).contains(Decimal("0"))
        False
    """

    __slots__ = ("lo", "hi", "lo_strict", "hi_strict")

    def __init__(self, lo: Decimal | None, hi: Decimal | None, *, lo_strict: bool = False,
                 hi_strict: bool = False) -> None:
        self.lo, self.hi = lo, hi
        self.lo_strict, self.hi_strict = lo_strict, hi_strict

    def contains(self, x: Decimal) -> bool:
        if self.lo is not None and (x < self.lo or (self.lo_strict and x == self.lo)):
            return False
        return not (self.hi is not None and (x > self.hi or (self.hi_strict and x == self.hi)))

    def is_empty(self) -> bool:
        if self.lo is None or self.hi is None:
            return False
        return self.lo > self.hi or (self.lo == self.hi and (self.lo_strict or self.hi_strict))

    def negated(self) -> "Interval":
        return Interval(None if self.hi is None else -self.hi, None if self.lo is None else -self.lo,
                        lo_strict=self.hi_strict, hi_strict=self.lo_strict)

    def __eq__(self, other: object) -> bool:
        return type(other) is Interval and (self.lo, self.hi, self.lo_strict, self.hi_strict) == (
            other.lo, other.hi, other.lo_strict, other.hi_strict)

    def __hash__(self) -> int:
        return hash((self.lo, self.hi, self.lo_strict, self.hi_strict))

    def __repr__(self) -> str:
        return (f"Interval({'(' if self.lo_strict else '['}{self.lo}, {self.hi}"
                f"{')' if self.hi_strict else ']'})")


def _split(x: Decimal) -> tuple[int, str]:
    """Integer part and fraction digits (no trailing zeros) of x >= 0."""
    sign, digits, exp = x.normalize().as_tuple()
    text = "".join(map(str, digits))
    if exp >= 0:
        return int(text + "0" * exp), ""
    int_digits = text[:exp] if len(text) > -exp else ""
    frac = text[exp:].rjust(-exp, "0").rstrip("0")
    return int(int_digits or "0"), frac


def _any_frac(limit: int | None, capped: bool = False) -> Node:
    """Digit strings (possibly empty); past `limit` digits only zeros (`capped`: nothing)."""
    if limit is None:
        return star(DIGIT)
    return repeat(DIGIT, 0, limit) if capped else seq(repeat(DIGIT, 0, limit), star(ZERO))


def _zeros(top: bool, limit: int | None, capped: bool) -> Node:
    """A run of zeros (at least one if `top`), at most `limit` of them when `capped`."""
    if capped:
        return repeat(ZERO, 1 if top else 0, limit) if top <= (limit or 0) else NOTHING
    return plus(ZERO) if top else star(ZERO)


def _frac(lo: str | None, ls: bool, hi: str | None, hs: bool, limit: int | None, top: bool,
          capped: bool = False) -> Node:
    """Fraction digit strings f with lo <(=) 0.f <(=) hi, digit by digit.

    `lo`/`hi` are the remaining bound digits ("" means the bound is zero
    from here on, None means that side is already decided). `top` forbids the
    empty string (a fraction after '.' needs a digit). Past `limit` digits
    only zeros may follow, or, when `capped`, nothing.
    """
    if lo == "" and not ls:
        lo = None
    if hi == "" and hs:
        return NOTHING
    if capped and limit == 0:
        return EMPTY if lo is None and not top else NOTHING
    if lo is None and hi is None:
        if not top:
            return _any_frac(limit, capped)
        rest = None if limit is None else max(limit - 1, 0)
        return seq(DIGIT if limit != 0 else ZERO, _any_frac(rest, capped))
    if lo == "" and hi is None:  # strictly above zero: some nonzero digit (within limit)
        return _positive_frac(limit, capped)
    if hi == "":  # the rest must be zeros, and lo (if any) needs something > 0
        return NOTHING if lo is not None else _zeros(top, limit, capped)
    if limit == 0:  # only zeros may follow: the remaining value is 0
        ok = lo is None
        return _zeros(top, limit, capped) if ok else NOTHING
    nxt = None if limit is None else limit - 1
    parts: list[Node] = [] if top or lo is not None else [EMPTY]
    a = int(lo[0]) if lo else 0
    b = int(hi[0]) if hi else 9
    for d in sorted({a, b}):
        sub_lo = lo[1:] if lo is not None and d == a else (None if lo is None or d > a else lo)
        sub_hi = hi[1:] if hi is not None and d == b else (None if hi is None or d < b else hi)
        parts.append(seq(_dec_digit(d, d), _frac(sub_lo, ls, sub_hi, hs, nxt, False, capped)))
    if a + 1 <= b - 1:
        parts.append(seq(_dec_digit(a + 1, b - 1), _any_frac(nxt, capped)))
    return alt(*parts)


def _positive_frac(limit: int | None, capped: bool = False) -> Node:
    if limit is None:
        return seq(star(ZERO), NONZERO, star(DIGIT))
    return alt(*(seq(repeat(ZERO, i, i), NONZERO, _any_frac(limit - i - 1, capped)) for i in range(limit)))


def _frac_part(lo: str | None, ls: bool, hi: str | None, hs: bool, limit: int | None,
               capped: bool = False, required: bool = False) -> Node:
    """'.digits' whose value (0 when absent) is within the bounds; optional unless `required`."""
    zero_ok = (lo is None or (lo == "" and not ls)) and not (hi == "" and hs) and not required
    dotted = seq(literal(b"."), _frac(lo, ls, hi, hs, limit, True, capped))
    return alt(EMPTY, dotted) if zero_ok else dotted


def decimal_interval(iv: Interval, limit: int | None = None, *, capped: bool = False,
                     fraction: bool = False) -> Node:
    """Plain decimals `(0|[1-9]\\d*)(\\.\\d+)?` with value in iv (iv.lo >= 0).

    `limit`: fraction digits beyond this position must be zero (multipleOf
    10^-limit), or, when `capped`, absent. `fraction`: the '.digits' part is
    required (floats, as `json.loads` reads them).
    """
    if iv.is_empty():
        return NOTHING
    lo = iv.lo if iv.lo is not None and iv.lo > 0 else Decimal(0)
    ls = iv.lo_strict if iv.lo is not None and iv.lo >= 0 else False
    ai, af = _split(lo)
    opts = (limit, capped, fraction)
    if iv.hi is None:
        return alt(
            seq(literal(str(ai).encode()), _frac_part(af, ls, None, False, *opts)),
            seq(_nonneg_int_range(ai + 1, None), _frac_part(None, False, None, False, *opts)),
        )
    bi, bf = _split(iv.hi)
    hs = iv.hi_strict
    if ai == bi:
        return seq(literal(str(ai).encode()), _frac_part(af, ls, bf, hs, *opts))
    return alt(
        seq(literal(str(ai).encode()), _frac_part(af, ls, None, False, *opts)),
        seq(_nonneg_int_range(ai + 1, bi - 1), _frac_part(None, False, None, False, *opts)),
        seq(literal(str(bi).encode()), _frac_part(None, False, bf, hs, *opts)),
    )


def _scientific_positive(iv: Interval) -> Node:
    """Normalized `[1-9](\\.\\d+)?[eE][+-]?\\d+` spellings of positive values in iv."""
    lo = iv.lo if iv.lo is not None and iv.lo > 0 else None
    e_lo = lo.adjusted() if lo is not None else None
    e_hi = iv.hi.adjusted() if iv.hi is not None else None
    if iv.hi is not None and iv.hi <= 0:
        return NOTHING
    parts = []
    for e in sorted({x for x in (e_lo, e_hi) if x is not None}):
        scaled = Interval(
            None if iv.lo is None else iv.lo.scaleb(-e), None if iv.hi is None else iv.hi.scaleb(-e),
            lo_strict=iv.lo_strict, hi_strict=iv.hi_strict)
        mant = _mantissa(scaled)
        if mant != NOTHING:
            parts.append(seq(mant, EXP, digits_with_zeros(e, e)))
    full_lo = None if e_lo is None else e_lo + 1
    full_hi = None if e_hi is None else e_hi - 1
    if full_lo is None or full_hi is None or full_lo <= full_hi:
        parts.append(seq(_mantissa(Interval(Decimal(1), Decimal(10), hi_strict=True)), EXP,
                         digits_with_zeros(full_lo, full_hi)))
    return alt(*parts)


def _mantissa(iv: Interval) -> Node:
    """Plain decimals in iv ∩ [1, 10): one nonzero integer digit."""
    lo, ls = (Decimal(1), False) if iv.lo is None or iv.lo < 1 else (iv.lo, iv.lo_strict)
    hi, hs = (Decimal(10), True) if iv.hi is None or iv.hi >= 10 else (iv.hi, iv.hi_strict)
    return decimal_interval(Interval(lo, hi, lo_strict=ls, hi_strict=hs))


def number_interval(iv: Interval, *, limit: int | None = None, scientific: bool = True) -> Node:
    """JSON numbers (plain + normalized scientific) whose value is in iv.

    Example:
        >>> from grammars.dfa import LazyDFA
        >>> from grammars.ast import Grammar
        >>> dfa = LazyDFA(Grammar({"start": number_interval(Interval(Decimal("0.5"), None))}))
        >>> [dfa.matches(s) for s in (b"0.5", b"0.49", b"5e-1", b"1e+16", b"-0.0")]
        [True, False, True, True, False]
    """
    if iv.is_empty():
        return NOTHING
    parts = []
    if iv.hi is None or iv.hi > 0 or (iv.hi == 0 and not iv.hi_strict):
        pos = Interval(iv.lo if iv.lo is not None and iv.lo >= 0 else Decimal(0), iv.hi,
                       lo_strict=iv.lo_strict if iv.lo is not None and iv.lo >= 0 else False,
                       hi_strict=iv.hi_strict)
        parts.append(decimal_interval(pos, limit))
        if scientific:
            parts.append(_scientific_positive(pos))
    if iv.lo is None or iv.lo < 0 or (iv.lo == 0 and not iv.lo_strict):
        neg = iv.negated()
        mag = Interval(neg.lo if neg.lo is not None and neg.lo >= 0 else Decimal(0), neg.hi,
                       lo_strict=neg.lo_strict if neg.lo is not None and neg.lo >= 0 else False,
                       hi_strict=neg.hi_strict)
        body = [decimal_interval(mag, limit)]
        if scientific:
            body.append(_scientific_positive(mag))
        parts.append(seq(MINUS, alt(*body)))
    return alt(*parts)


def number_value(x: Decimal) -> Node:
    """Every plain / normalized-scientific spelling of the value x (1 = 1.0 = 1e0)."""
    return number_interval(Interval(x, x))


# ---------------------------------------------------------------------------
# Finite sets and integer multiples


def literal_set(words: Iterable[bytes]) -> Node:
    """A trie-shaped node accepting exactly the given byte strings.

    Example:
        >>> literal_set([b"ab", b"ac"]) == seq(literal(b"a"), byteset(b"bc"))
        True
    """
    words = sorted(set(words))
    if not words:
        return NOTHING
    end = words[0] == b""
    groups: dict[int, list[bytes]] = {}
    for w in words[1 if end else 0:]:
        groups.setdefault(w[0], []).append(w[1:])
    # Group first bytes whose continuations are identical, so they merge into one ByteSet.
    by_tail: dict[tuple[bytes, ...], list[int]] = {}
    for b, rest in groups.items():
        by_tail.setdefault(tuple(rest), []).append(b)
    parts = [seq(byteset(bs), literal_set(tails)) for tails, bs in by_tail.items()]
    return alt(EMPTY, *parts) if end else alt(*parts)


ENUMERATION_LIMIT = 4096


def integer_multiples(lo: int | None, hi: int | None, k: int) -> Node | None:
    """Canonical integers in [lo, hi] divisible by k; None when not exact/cheap.

    Bounded ranges with few multiples are enumerated; otherwise k must divide a
    power of ten (2^a 5^b) so the last digits decide, and the range must be one
    side of zero.
    """
    if k == 1:
        return int_range(lo, hi)
    if lo is not None and hi is not None:
        first, last = -(-lo // k) * k, (hi // k) * k
        if first > last:
            return NOTHING
        if (last - first) // k < ENUMERATION_LIMIT:
            return literal_set(str(v).encode() for v in range(first, last + 1, k))
    t = _power_of_ten_for(k)
    if t is None or 10 ** t // k > ENUMERATION_LIMIT:
        return None
    parts = []
    if hi is None or hi >= 0:
        part = _suffix_multiples(max(lo or 0, 0), hi, k, t)
        if part is None:
            return None
        parts.append(part)
    if lo is None or lo < 0:
        mag_lo = 1 if hi is None or hi >= 0 else -hi
        part = _suffix_multiples(mag_lo, None if lo is None else -lo, k, t)
        if part is None:
            return None
        parts.append(seq(MINUS, part))
    return alt(*parts)


def _power_of_ten_for(k: int) -> int | None:
    t = 0
    while 10 ** t % k:
        t += 1
        if t > 12:
            return None
    return t


def _suffix_multiples(lo: int, hi: int | None, k: int, t: int) -> Node | None:
    """Nonneg multiples of k (k | 10^t) in [lo, hi]: small ones listed, large by suffix.

    A large lower bound (``{"exclusiveMinimum": 2.1e16, "multipleOf": 5}``) is not
    listed (its multiples below the next power of ten are ~10^16; counting them
    first, as this once did not, ran out of memory): a number is its leading
    part P and a t-digit tail that k divides, with P above lo's, or equal to it
    and the tail at least lo's.
    """
    if hi is not None:
        return None  # a finite range with many multiples: not expressible cheaply here
    width = max(t, len(str(lo))) + 1
    cut = 10 ** width
    first = -(-lo // k) * k
    tails = range(0, 10 ** t, k)
    if (cut - 1 - first) // k + 1 <= ENUMERATION_LIMIT:
        small = [str(v).encode() for v in range(first, cut, k)]
        # Numbers of more than `width` digits: any leading digits, then a good t-digit tail.
        big = seq(NONZERO, repeat(DIGIT, width - t, None), literal_set(str(v).rjust(t, "0").encode() for v in tails))
        return alt(literal_set(small), big)
    head, rest = divmod(lo, 10 ** t)
    above = seq(int_range(head + 1, None), literal_set(str(v).rjust(t, "0").encode() for v in tails))
    if not head:                  # lo < 10^t: its multiples below 10^t, written without leading zeros
        return alt(literal_set(str(v).encode() for v in range(first, 10 ** t, k)), above)
    return alt(seq(literal(str(head).encode()), literal_set(str(v).rjust(t, "0").encode() for v in tails if v >= rest)),
               above)
