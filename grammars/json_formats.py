"""String `format`s as exact byte automata over raw ASCII characters.

Each format is the RFC grammar written out with nodes (no regex engine), so
calendar rules are exact: month lengths and leap years for `date`, octets
0..255 for `ipv4`, the nine `::` shapes of RFC 4291 for `ipv6`.

Format strings are accepted in their plain spelling only: `"2024-01-31"`, not
`"\\u0032024-01-31"`. Every format here is ASCII, and no JSON serializer
escapes these characters, so this never rejects a real serializer's output.

| format    | grammar                                                              |
|-----------|----------------------------------------------------------------------|
| date      | RFC 3339 full-date, years 0001-9999, real month lengths, leap years  |
| time      | RFC 3339 full-time: `HH:MM:SS(.d+)?(Z|±HH:MM)`, seconds 00-59, `z`   |
| date-time | date `T`/`t` time                                                     |
| duration  | RFC 3339 appendix A (`P1Y2M`, `PT5M`, `P3W`, ...)                    |
| email     | dot-atom local part `@` labels of 1-63 chars (RFC 5321 subset: no    |
|           | quoted local parts or address literals; total length not limited)    |
| hostname  | RFC 1123 labels of 1-63 chars, <= 253 chars in all, as a union of    |
|           | shapes (<= 3 labels of <= 63, <= 8 of <= 30, ..., <= 127 of 1 char)   |
| ipv4      | dotted quad, octets 0-255 without leading zeros                      |
| ipv6      | RFC 4291 text forms incl. `::` and embedded IPv4, no zone id         |
| uri       | RFC 3986 `URI` (scheme, authority, path, query, fragment)            |
| uuid      | RFC 4122 8-4-4-4-12 hex, either case                                 |

Example:
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.ast import Grammar
    >>> dfa = LazyDFA(Grammar({"start": format_node("date")}))
    >>> [dfa.matches(s) for s in (b"2024-02-29", b"2023-02-29", b"2023-04-31")]
    [True, False, False]
"""

from __future__ import annotations

from typing import Callable

from grammars.ast import EMPTY, Node, alt, byteset, literal, optional, plus, repeat, seq, star
from grammars.json_numbers import int_range

__all__ = ["FORMATS", "DRAFT_FORMATS", "format_node"]


def _c(chars: str) -> Node:
    return byteset(chars.encode())


def _lit(text: str) -> Node:
    return literal(text.encode())


_DIGITS = "0123456789"
_ALPHA = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
D = _c(_DIGITS)
HEX = _c(_DIGITS + "abcdefABCDEF")


def _two(lo: int, hi: int) -> Node:
    """Two-digit zero-padded numbers lo..hi."""
    return alt(*(_lit(f"{v:02d}") for v in range(lo, hi + 1)))


def _date() -> Node:
    year = alt(seq(_lit("000"), _c("123456789")), seq(_lit("00"), _c("123456789"), D),
               seq(_lit("0"), _c("123456789"), D, D), seq(_c("123456789"), D, D, D))
    leap = alt(seq(D, D, alt(seq(_c("0"), _c("48")), seq(_c("2468"), _c("048")), seq(_c("13579"), _c("26")))),
               seq(alt(seq(_c("0"), _c("48")), seq(_c("2468"), _c("048")), seq(_c("13579"), _c("26"))), _lit("00")))
    long_months = alt(*(_lit(m) for m in ("01", "03", "05", "07", "08", "10", "12")))
    short_months = alt(*(_lit(m) for m in ("04", "06", "09", "11")))
    return alt(
        seq(year, _lit("-"), long_months, _lit("-"), _two(1, 31)),
        seq(year, _lit("-"), short_months, _lit("-"), _two(1, 30)),
        seq(year, _lit("-02-"), _two(1, 28)),
        seq(leap, _lit("-02-29")),
    )


def _time() -> Node:
    hh, mm = _two(0, 23), seq(_c("012345"), D)
    offset = alt(_c("Zz"), seq(_c("+-"), hh, _lit(":"), mm))
    return seq(hh, _lit(":"), mm, _lit(":"), mm, optional(seq(_lit("."), plus(D))), offset)


def _duration() -> Node:
    n = plus(D)
    second = seq(n, _lit("S"))
    minute = seq(n, _lit("M"), optional(second))
    hour = seq(n, _lit("H"), optional(minute))
    time = seq(_lit("T"), alt(hour, minute, second))
    day = seq(n, _lit("D"))
    month = seq(n, _lit("M"), optional(day))
    year = seq(n, _lit("Y"), optional(month))
    week = seq(n, _lit("W"))
    return seq(_lit("P"), alt(seq(alt(day, month, year), optional(time)), time, week))


_LD = _ALPHA + _DIGITS


def _label(max_len: int) -> Node:
    if max_len == 1:
        return _c(_LD)
    return seq(_c(_LD), optional(seq(repeat(_c(_LD + "-"), 0, max_len - 2), _c(_LD))))


def _hostname() -> Node:
    """Names of at most 253 characters, as a union of shapes: up to L labels of
    at most m characters each with L*m + L-1 <= 253 (3 x 63, 8 x 30, ..., 127 x 1)."""
    dot = _lit(".")
    shapes, fewest = [], 1
    for most in (3, 8, 16, 32, 64, 127):
        width = min(63, (254 - most) // most)
        shapes.append(seq(_label(width), repeat(seq(dot, _label(width)), fewest - 1, most - 1)))
        fewest = most + 1
    return alt(*shapes)


def _email() -> Node:
    atext = _c(_ALPHA + _DIGITS + "!#$%&'*+-/=?^_`{|}~")
    local = seq(plus(atext), star(seq(_lit("."), plus(atext))))
    # RFC 5321's overall length limits are not counted here (jsonschema checks only "@").
    domain = seq(_label(63), star(seq(_lit("."), _label(63))))
    return seq(local, _lit("@"), domain)


def _ipv4() -> Node:
    octet = int_range(0, 255)
    return seq(octet, *(seq(_lit("."), octet) for _ in range(3)))


def _ipv6() -> Node:
    h16 = repeat(HEX, 1, 4)
    col = _lit(":")
    h16c = seq(h16, col)
    ls32 = alt(seq(h16, col, h16), _ipv4())
    dc = _lit("::")

    def before(k: int) -> Node:  # [ *k( h16 ":" ) h16 ]
        return optional(seq(repeat(h16c, 0, k), h16))

    return alt(
        seq(repeat(h16c, 6, 6), ls32),
        seq(dc, repeat(h16c, 5, 5), ls32),
        seq(optional(h16), dc, repeat(h16c, 4, 4), ls32),
        seq(before(1), dc, repeat(h16c, 3, 3), ls32),
        seq(before(2), dc, repeat(h16c, 2, 2), ls32),
        seq(before(3), dc, h16c, ls32),
        seq(before(4), dc, ls32),
        seq(before(5), dc, h16),
        seq(before(6), dc),
    )


def _uri() -> Node:
    unreserved = _ALPHA + _DIGITS + "-._~"
    sub_delims = "!$&'()*+,;="
    pct = seq(_lit("%"), HEX, HEX)
    pchar = alt(_c(unreserved + sub_delims + ":@"), pct)
    segment, segment_nz = star(pchar), plus(pchar)
    scheme = seq(_c(_ALPHA), star(_c(_ALPHA + _DIGITS + "+-.")))
    userinfo = star(alt(_c(unreserved + sub_delims + ":"), pct))
    ipvfuture = seq(_c("vV"), plus(HEX), _lit("."), plus(_c(unreserved + sub_delims + ":")))
    host = alt(seq(_lit("["), alt(_ipv6(), ipvfuture), _lit("]")), _ipv4(),
               star(alt(_c(unreserved + sub_delims), pct)))
    authority = seq(optional(seq(userinfo, _lit("@"))), host, optional(seq(_lit(":"), star(D))))
    abempty = star(seq(_lit("/"), segment))
    hier = alt(
        seq(_lit("//"), authority, abempty),
        seq(_lit("/"), optional(seq(segment_nz, abempty))),
        seq(segment_nz, abempty),
        EMPTY,
    )
    tail = star(alt(pchar, _c("/?")))
    return seq(scheme, _lit(":"), hier, optional(seq(_lit("?"), tail)), optional(seq(_lit("#"), tail)))


def _uuid() -> Node:
    return seq(repeat(HEX, 8, 8), *(seq(_lit("-"), repeat(HEX, 4, 4)) for _ in range(3)),
               _lit("-"), repeat(HEX, 12, 12))


FORMATS: dict[str, Callable[[], Node]] = {
    "date": _date,
    "time": _time,
    "date-time": lambda: seq(_date(), _c("Tt"), _time()),
    "duration": _duration,
    "email": _email,
    "hostname": _hostname,
    "ipv4": _ipv4,
    "ipv6": _ipv6,
    "uri": _uri,
    "uuid": _uuid,
}

_CACHE: dict[str, Node] = {}

# The formats above that each draft defines (`json_refs.draft_of`: 4, 6, 7, 2020 for 2019-09 and
# 2020-12): an older draft's validators ignore the others. The compiler checks every known
# format in a value all the same (stricter than such a draft: what passes is valid), but inside a
# negation (`not`, a `oneOf` branch's, an `if`'s) it ignores those, where checking would let more pass.
DRAFT_FORMATS: dict[int, frozenset[str]] = {
    4: frozenset({"date-time", "email", "hostname", "ipv4", "ipv6", "uri"}),
    6: frozenset({"date-time", "email", "hostname", "ipv4", "ipv6", "uri"}),
    7: frozenset({"date-time", "email", "hostname", "ipv4", "ipv6", "uri", "date", "time"}),
}


def format_node(name: str) -> Node | None:
    """String body node of a known format, or None for an unknown one."""
    if name not in FORMATS:
        return None
    if name not in _CACHE:
        _CACHE[name] = FORMATS[name]()
    return _CACHE[name]
