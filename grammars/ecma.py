"""ECMA-262 regex syntax -> Python `re` syntax, and locating constructs.

JSON Schema `pattern`s are ECMA-262 regexes. Python's parser reads most of
them unchanged; `translate` rewrites the few escapes and forms that differ
(`\\cX`, `\\u{...}`, surrogate pairs, `\\p{..}`, `(?<name>`, `\\k<name>`,
`[^]`, `[]`, identity escapes such as `\\a` = "a", a bare `[` inside a class)
token by token, keeping a map from each output character back to its
position in the original pattern for error messages. The semantic
differences (`\\d`, `\\w`, `\\s`, `.`, `$`) are handled by the converter.

`locate` finds where a construct (backreference, lookahead, anchor, ...)
occurs in a Python-syntax pattern, for `UnsupportedRegexError` positions.
`leading_lookarounds` splits the lookaheads off the start of a pattern, and
`both_patterns` writes two patterns' conjunction as one of them (both for
the schema compiler, which takes leading lookaheads exactly).

Example:
    >>> translate(r"(?<y>\\d{4})-\\cJ")[0]
    '(?P<y>\\\\d{4})-\\\\x0a'
"""

from __future__ import annotations

from grammars import charsets as cs
from grammars.errors import RegexSyntaxError, UnsupportedRegexError

__all__ = ["translate", "locate", "leading_lookarounds", "both_patterns"]

_HEX = set("0123456789abcdefABCDEF")
_KEEP_ESCAPES = set("dDwWsSbBtnvfr123456789") | {"\\"}
_ASCII_LETTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def translate(pattern: str) -> tuple[str, list[int]]:
    """Rewrite an ECMA-262 pattern in Python syntax.

    Returns the new pattern and, for each of its characters (plus one past
    the end), the index in `pattern` it came from.

    Example:
        >>> translate("[^]a")
        ('[\\\\s\\\\S]a', [0, 0, 0, 0, 0, 0, 3, 4])
    """
    out: list[str] = []
    origin: list[int] = []
    i, n, in_class, class_start = 0, len(pattern), False, -1

    def emit(text: str, pos: int) -> None:
        out.append(text)
        origin.extend([pos] * len(text))

    while i < n:
        ch = pattern[i]
        if ch == "\\":
            text, i2 = _escape(pattern, i, in_class)
            emit(text, i)
            i = i2
        elif in_class:
            if ch == "]" and i != class_start:
                in_class = False
                emit("]", i)
            elif ch == "[" or (ch in "&|-~" and pattern[i + 1: i + 2] == ch):
                emit("\\" + ch, i)  # literal in ECMA; Python warns or may treat as set ops
            else:
                emit(ch, i)
            i += 1
        elif ch == "[":
            if pattern.startswith("[^]", i):
                emit(r"[\s\S]", i)
                i += 3
            elif pattern.startswith("[]", i):
                emit(r"[^\s\S]", i)
                i += 2
            else:
                neg = pattern.startswith("[^", i)
                emit("[^" if neg else "[", i)
                i += 2 if neg else 1
                in_class, class_start = True, -1
        elif pattern.startswith("(?<", i) and pattern[i + 3: i + 4] not in ("=", "!"):
            emit("(?P<", i)
            i += 3
        else:
            emit(ch, i)
            i += 1
    origin.append(n)
    return "".join(out), origin


def _escape(p: str, i: int, in_class: bool) -> tuple[str, int]:
    """Translate the escape starting at p[i] == '\\'; return (text, next index)."""
    c = p[i + 1: i + 2]
    if not c:
        return "\\", i + 1  # trailing backslash: let Python's parser report it
    if c == "c" and p[i + 2: i + 3] in _ASCII_LETTERS and p[i + 2: i + 3]:
        return f"\\x{ord(p[i + 2]) % 32:02x}", i + 3
    if c == "u":
        return _unicode_escape(p, i)
    if c == "x":
        if len(p) >= i + 4 and set(p[i + 2: i + 4]) <= _HEX:
            return p[i: i + 4], i + 4
        return "x", i + 2
    if c in "pP" and p[i + 2: i + 3] == "{":
        return _property(p, i, in_class)
    if c == "k" and p[i + 2: i + 3] == "<" and ">" in p[i + 3:]:
        j = p.index(">", i + 3)
        return f"(?P={p[i + 3: j]})", j + 1
    if c == "0" and not p[i + 2: i + 3].isdigit():
        return "\\x00", i + 2
    if c in _KEEP_ESCAPES:
        return "\\" + c, i + 2
    if c in _ASCII_LETTERS or c in "89":
        return c, i + 2  # identity escape (Annex B): `\a` is "a"
    return "\\" + c, i + 2


def _unicode_escape(p: str, i: int) -> tuple[str, int]:
    if p[i + 2: i + 3] == "{" and "}" in p[i + 3:]:
        j = p.index("}", i + 3)
        digits = p[i + 3: j]
        if digits and set(digits) <= _HEX and int(digits, 16) <= cs.MAX_CP:
            return f"\\U{int(digits, 16):08x}", j + 1
    digits = p[i + 2: i + 6]
    if len(digits) < 4 or not set(digits) <= _HEX:
        return "u", i + 2
    value = int(digits, 16)
    low = p[i + 8: i + 12] if p.startswith("\\u", i + 6) else ""
    if 0xD800 <= value <= 0xDBFF and len(low) == 4 and set(low) <= _HEX and 0xDC00 <= int(low, 16) <= 0xDFFF:
        value = 0x10000 + ((value - 0xD800) << 10) + (int(low, 16) - 0xDC00)
        return f"\\U{value:08x}", i + 12
    return f"\\U{value:08x}", i + 6


def _property(p: str, i: int, in_class: bool) -> tuple[str, int]:
    j = p.find("}", i + 3)
    if j < 0:
        raise RegexSyntaxError(p, "unterminated \\p{...}", i)
    name = p[i + 3: j]
    ranges = cs.general_category(name)
    if ranges is None:
        raise UnsupportedRegexError(p, f"Unicode property \\{p[i + 1]}{{{name}}}", i)
    negated = p[i + 1] == "P"
    if in_class and negated:
        ranges, negated = cs.complement(ranges), False
    body = "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)
    if in_class:
        return body, j + 1
    if not ranges:
        return ("[\\s\\S]" if negated else "[^\\s\\S]"), j + 1
    return ("[^" if negated else "[") + body + "]", j + 1


# ---------------------------------------------------------------------------


def _tokens(source: str):
    """Yield (position, token, inside a class) for a Python-syntax pattern."""
    i, n, in_class, first = 0, len(source), False, -1
    while i < n:
        ch = source[i]
        if ch == "\\":
            yield i, source[i: i + 2], in_class
            i += 2
            continue
        if in_class:
            if ch == "]" and i != first:
                in_class = False
        elif ch == "[":
            in_class = True
            first = i + 2 if source.startswith("[^", i) else i + 1
        yield i, ch, in_class and ch != "["
        i += 1


def _is_kind(source: str, pos: int, tok: str, prev: str, kind: str) -> bool:
    ahead = source[pos: pos + 4]
    if kind == "backreference":
        return (len(tok) == 2 and tok[1] in "123456789") or ahead.startswith("(?P=")
    if kind == "lookahead":
        return ahead[:3] in ("(?=", "(?!")
    if kind == "lookbehind":
        return ahead in ("(?<=", "(?<!")
    if kind == "conditional group":
        return ahead[:3] == "(?("
    if kind == "atomic group":
        return ahead[:3] == "(?>"
    if kind == "word boundary":
        return tok in ("\\b", "\\B")
    if kind == "anchor":
        return tok in ("^", "$", "\\A", "\\Z")
    if kind == "possessive quantifier":
        return tok == "+" and prev in ("*", "+", "?", "}")
    return False


def locate(source: str, kind: str, nth: int = 0) -> int | None:
    """Position of the `nth` occurrence (0-based; clamped to the last one) of
    a construct `kind` in the Python-syntax pattern `source`.

    Example:
        >>> locate(r"(a)[\\1]\\1", "backreference")
        7
    """
    found = []
    prev = ""
    for pos, tok, in_class in _tokens(source):
        if not in_class and _is_kind(source, pos, tok, prev, kind):
            found.append(pos)
        prev = tok if not in_class else ""
    if not found:
        return None
    return found[min(nth, len(found) - 1)]


def leading_lookarounds(pattern: str) -> tuple[list[tuple[bool, str]], str] | None:
    """`^(?=X)(?!Y)...Z` as ([(True, X), (False, Y), ...], Z), when the pattern starts with
    lookaheads and has no alternation outside groups; else None."""
    if not pattern.startswith(("^(?=", "^(?!")) or group_end(pattern, -1) is not None:
        return None
    looks, i = [], 1
    while pattern.startswith(("(?=", "(?!"), i):
        end = group_end(pattern, i)
        if end is None:
            return None
        looks.append((pattern[i + 2] == "=", pattern[i + 3:end]))
        i = end + 1
    return looks, pattern[i:]


def group_end(pattern: str, start: int) -> int | None:
    """The index of the `)` closing the group opened at `start`, skipping escapes and classes;
    with `start` -1, the index of a `|` outside every group (None: there is none)."""
    depth = 0 if start >= 0 else 1
    k = max(start, 0)
    in_class = False
    while k < len(pattern):
        ch = pattern[k]
        if ch == "\\":
            k += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0 and start >= 0:
                return k
        elif ch == "|" and depth == 1 and start < 0:
            return k
        k += 1
    return None


def both_patterns(x: str, y: str) -> str | None:
    """One pattern that a string matches iff it matches `x` and `y` (search semantics): leading
    lookaheads, one per pattern, each from the start (the compiler takes them exactly:
    `json_patterns.pattern_body`); None when a `^` is not at a pattern's start."""
    px, py = _pattern_parts(x), _pattern_parts(y)
    if px is None or py is None:
        return None
    return "^" + "".join(f"(?={p})" for p in px + py)


def _pattern_parts(x: str) -> list[str] | None:
    """Lookahead bodies, each matched from the start of a string, whose conjunction is `x`'s match."""
    split = leading_lookarounds(x)
    if split is not None and not split[1] and all(positive for positive, _ in split[0]):
        return [body for _, body in split[0]]              # already `both_patterns`' form
    if "^" in x[1:]:
        return None                                        # (an anchor inside: not after any prefix)
    if x.startswith("^") and group_end(x, -1) is None:
        return [f"(?:{x[1:]})"]
    return None if x.startswith("^") else [f"[\\s\\S]*?(?:{x})"]
