"""JSON values as grammar nodes: whitespace policy, constants, any value.

Example:
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.ast import Grammar
    >>> ws = Whitespace(WhitespacePolicy())
    >>> dfa = LazyDFA(Grammar({"start": value_node({"a": [1, "x\u00e9"]}, ws)}))
    >>> [dfa.matches(s) for s in (b'{"a":[1,"x\\xc3\\xa9"]}', b'{"a": [1.0, "x\\\\u00e9"]}', b'{"a":[1]}')]
    [True, True, False]
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable

from grammars.ast import EMPTY, NOTHING, Alt, ByteSet, Node, Ref, Seq, alt, byteset, literal, optional, repeat, seq, star
from grammars.errors import InvalidSchemaError
from grammars.fragments import share
from grammars.json_doubles import ANY_DOUBLE, double_value, exact_value
from grammars.json_numbers import ANY_NUMBER, number_value
from grammars.json_strings import ANY_CHAR, key_literal, quoted

__all__ = [
    "WhitespacePolicy", "Whitespace", "value_node", "json_key", "json_equal", "json_type", "to_decimal",
    "any_value_rule", "ANY_RULE", "ANY_STRING", "PERMUTATION_LIMIT", "union", "counted", "unit",
]

ANY_RULE = "any_json_value"
ANY_STRING: Node = quoted(star(ANY_CHAR))
# Objects in `const`/`enum` match in any key order up to this many keys
# (n! orders); larger ones only in the order written in the schema.
PERMUTATION_LIMIT = 4


def counted(item: Node, lo: int, hi: int | None) -> Node:
    """`repeat` that is NOTHING for contradictory bounds (e.g. minItems > maxItems)."""
    return NOTHING if hi is not None and lo > hi else repeat(item, lo, hi)


def unit(value: Node) -> Node:
    """`value` as one item of the sequences it goes into (`seq` flattens a `Seq`).

    A value used in several places (each optional member is in "first member"
    and in "a later member"; array items in the first and the later places)
    is then one node, which the NFA builds once and calls as a subroutine
    from its other uses, rather than its items copied one by one.
    """
    return Alt((value,)) if type(value) is Seq else value


def union(*items: Node) -> Node:
    """`alt` for large sub-grammars: flattens and merges bytes like `alt`, but
    deduplicates by identity only (no equality checks between big subtrees)."""
    mask = 0
    out: list[Node] = []
    seen: set[int] = set()
    stack = list(reversed(items))
    while stack:
        item = stack.pop()
        if isinstance(item, Alt):
            stack.extend(reversed(item.items))
        elif isinstance(item, ByteSet):
            mask |= item.mask
        elif id(item) not in seen:
            seen.add(id(item))
            out.append(item)
    out = ([ByteSet(mask)] if mask else []) + out
    if not out:
        return NOTHING
    return out[0] if len(out) == 1 else Alt(tuple(out))


@dataclass(frozen=True)
class WhitespacePolicy:
    """How much whitespace may appear between JSON tokens (always bounded).

    A *gap* is either empty, 1..`max_spaces` spaces, or 1..`max_newlines`
    newlines each followed by up to `max_indent` indentation characters
    (`indent_chars`). Gaps go where pretty printers break lines: after `{`,
    `[` and `,`, before `}` and `]`. Before `,` and around `:` only
    0..`max_spaces` spaces are allowed (`"a" : 1` yes, a newline before a
    comma no). This accepts compact output, `json.dumps` defaults (`", "`,
    `": "`) and pretty printing (`indent=2`, `indent=4`, tabs) up to
    `max_indent` columns, but never unbounded whitespace.
    `around_document` allows one gap before and after the whole value.

    Example:
        >>> WhitespacePolicy(max_indent=8).max_newlines
        1
    """

    max_spaces: int = 1
    max_newlines: int = 1
    max_indent: int = 32
    indent_chars: str = " \t"
    around_document: bool = True

    def __post_init__(self) -> None:
        for name in ("max_spaces", "max_newlines", "max_indent"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"WhitespacePolicy.{name} must be a non-negative int, got {value!r}")
        if not set(self.indent_chars) <= {" ", "\t"}:
            raise ValueError(f"indent_chars may hold only spaces and tabs, got {self.indent_chars!r}")

    @classmethod
    def named(cls, name: "str | WhitespacePolicy") -> "WhitespacePolicy":
        if isinstance(name, WhitespacePolicy):
            return name
        # one object per name: each compile looks its policy up (`Whitespace.of`, the first
        # mask's gap starts), and the same object needs no field-by-field `__eq__`
        if name == "default":
            return _NAMED[0]
        if name == "compact":
            return _NAMED[1]
        raise ValueError(f"whitespace must be 'default', 'compact' or a WhitespacePolicy, got {name!r}")


class Whitespace:
    """The punctuation nodes of one policy: `gap`, `sep` (,), `colon` (:), ..."""

    def __init__(self, policy: WhitespacePolicy) -> None:
        self.policy = policy
        parts = [EMPTY]
        if policy.max_spaces:
            parts.append(repeat(literal(b" "), 1, policy.max_spaces))
        if policy.max_newlines:
            indent = repeat(byteset(policy.indent_chars.encode()), 0, policy.max_indent) if policy.indent_chars else EMPTY
            parts.append(repeat(seq(literal(b"\n"), indent), 1, policy.max_newlines))
        self.gap: Node = alt(*parts)
        g = self.gap
        spaces = repeat(literal(b" "), 0, policy.max_spaces)
        self.sep = seq(spaces, literal(b","), g)
        self.colon = seq(spaces, literal(b":"), spaces)
        self.open_obj, self.close_obj = seq(literal(b"{"), g), seq(g, literal(b"}"))
        self.open_arr, self.close_arr = seq(literal(b"["), g), seq(g, literal(b"]"))
        self.around = g if policy.around_document else EMPTY
        share(g)  # one NFA fragment per process (see `Whitespace.of`)
        share(spaces)

    @classmethod
    def of(cls, policy: WhitespacePolicy) -> "Whitespace":
        """The (shared, immutable) `Whitespace` of `policy`: building its nodes
        is a sizable part of compiling a small schema, and shared node objects
        compare by identity."""
        ws = _WHITESPACE.get(policy)
        if ws is None:
            if len(_WHITESPACE) >= 64:
                _WHITESPACE.clear()
            ws = _WHITESPACE[policy] = cls(policy)
        return ws

    def obj(self, body: Node) -> Node:
        return seq(self.open_obj, body, self.close_obj)

    def arr(self, body: Node) -> Node:
        return seq(self.open_arr, body, self.close_arr)

    def listing(self, item: Node, lo: int = 0, hi: int | None = None) -> Node:
        """lo..hi copies of `item` separated by commas."""
        if hi is not None and lo > hi:
            return NOTHING
        if hi == 0:
            return EMPTY
        first_hi = None if hi is None else hi - 1
        more = seq(item, repeat(seq(self.sep, item), max(lo - 1, 0), first_hi))
        return more if lo > 0 else optional(more)


_WHITESPACE: dict[WhitespacePolicy, Whitespace] = {}
_NAMED = (WhitespacePolicy(), WhitespacePolicy(0, 0, 0, "", False))     # "default", "compact"


# ---------------------------------------------------------------------------
# JSON value identity


def json_type(v: Any) -> str:
    """The JSON Schema type name of a Python JSON value ("integer" for 1 and 1.0)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise TypeError(f"not a JSON value: {v!r}")


def to_decimal(v: int | float) -> Decimal:
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{v!r} is not a JSON number")
    return Decimal(repr(v)) if isinstance(v, float) else Decimal(v)


def json_key(v: Any) -> Any:
    """Hashable key with JSON equality: 1 == 1.0, true != 1, key order ignored."""
    t = json_type(v)
    if t in ("integer", "number"):
        return ("num", to_decimal(v).normalize())
    if t == "array":
        return ("arr", tuple(json_key(x) for x in v))
    if t == "object":
        return ("obj", frozenset((k, json_key(x)) for k, x in v.items()))
    return (t, v)


def json_equal(a: Any, b: Any) -> bool:
    """`json_key(a) == json_key(b)`, in time linear in the distinct pairs of parts compared: a value
    built as a DAG (a schema copied into its own parts, sharing them) has each shared pair compared
    once, where `json_key` walks it as a tree, 2^depth times. TypeError for a value not JSON.

    Example:
        >>> shared = {"a": [1, 2.0]}
        >>> json_equal({"x": shared, "y": shared}, {"y": {"a": [1.0, 2]}, "x": shared}), json_equal(1, True)
        (True, False)
    """
    seen: set[tuple[int, int]] = set()
    todo = [(a, b)]
    while todo:
        x, y = todo.pop()
        if x is y and type(x) is not float:          # (NaN is no JSON value: not equal to itself here)
            continue
        tx, ty = json_type(x), json_type(y)
        if tx in ("integer", "number") and ty in ("integer", "number"):
            if to_decimal(x) != to_decimal(y):
                return False
        elif tx != ty:
            return False
        elif tx == "array" or tx == "object":
            pair = (id(x), id(y))
            if pair in seen:
                continue
            seen.add(pair)
            if len(x) != len(y):
                return False
            if tx == "array":
                todo.extend(zip(x, y))
            else:
                if x.keys() != y.keys():
                    return False
                todo.extend((x[k], y[k]) for k in x)
        elif x != y:
            return False
    return True


# ---------------------------------------------------------------------------
# Value nodes


def value_node(v: Any, ws: Whitespace, path: str = "$", numbers: str = "double") -> Node:
    """Every serialization of the JSON value v (numbers by value, escapes, key order).

    `numbers`: "double" compares numbers as `json.loads` reads them (see
    `grammars.json_doubles`), "exact" as decimals.
    """
    try:
        t = json_type(v)
    except TypeError:
        raise InvalidSchemaError("`enum`/`const` values must be JSON values", path, v) from None
    if t == "null":
        return literal(b"null")
    if t == "boolean":
        return literal(b"true" if v else b"false")
    if t in ("integer", "number"):
        try:
            return double_value(exact_value(v)) if numbers == "double" else number_value(to_decimal(v))
        except ValueError:
            raise InvalidSchemaError("numbers must be finite", path, v) from None
    if t == "string":
        return quoted(key_literal(v))
    if t == "array":
        items = [value_node(x, ws, path, numbers) for x in v]
        return ws.arr(_join(items, ws.sep))
    for k in v:
        if not isinstance(k, str):
            raise InvalidSchemaError("object keys must be strings", path, k)
    members = [seq(quoted(key_literal(k)), ws.colon, value_node(x, ws, path, numbers)) for k, x in v.items()]
    orders: Iterable[tuple[Node, ...]] = (
        itertools.permutations(members) if len(members) <= PERMUTATION_LIMIT else [tuple(members)])
    return ws.obj(union(*(_join(list(o), ws.sep) for o in orders)))


def _join(items: list[Node], sep: Node) -> Node:
    out: list[Node] = []
    for i, item in enumerate(items):
        if i:
            out.append(sep)
        out.append(item)
    return seq(*out)


def any_value_rule(ws: Whitespace, numbers: str = "double") -> Node:
    """Body of the rule `ANY_RULE`: any JSON value, nesting through `Ref`.

    One object per (`Whitespace`, number policy), shared (`share`): most
    schemas have open objects, and its NFA fragment is then built once per process.
    """
    rules = ws.__dict__.setdefault("_any_rules", {})
    rule = rules.get(numbers)
    if rule is None:
        rule = rules[numbers] = share(_any_value_rule(ws, ANY_DOUBLE if numbers == "double" else ANY_NUMBER))
    return rule


def _any_value_rule(ws: Whitespace, number: Node) -> Node:
    inner = Ref(ANY_RULE)
    array = ws.arr(ws.listing(inner))
    obj = ws.obj(ws.listing(seq(ANY_STRING, ws.colon, inner)))
    return alt(literal(b"null"), literal(b"true"), literal(b"false"), number, ANY_STRING, array, obj)
