"""A schema without combinators left as the union of its types' nodes, with `enum` and a plain `not`.

`typed_node` is the last step of compiling a subschema: `$ref`, `allOf`,
`anyOf` and `oneOf` are gone (merged, or `json_branches`'), and what is left
is a union over its `type`s: null and booleans here, numbers by
`json_number_keywords`, strings by `json_string_keywords`, arrays and
objects by `json_arrays` and `json_objects`. An `enum` lists its values of
those types that the other keywords accept (`Compiler.accepts`). A `not` of
types, enum/const, a pattern or a format (and anyOf of those) excludes what
it names directly; any other `not` was rewritten as its negation before.

Example:
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.json_schema import json_schema_grammar
    >>> g = json_schema_grammar({"type": ["string", "null"], "not": {"enum": ["a", None]}})
    >>> dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    >>> [dfa.matches(s) for s in (b'"b"', b'"a"', b"null")]
    [True, False, False]
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from grammars.ast import NOTHING, Node, alt, literal
from grammars.errors import InvalidSchemaError, UnsupportedSchemaError
from grammars.json_arrays import array_node
from grammars.json_checks import KNOWN_KEYWORDS
from grammars.json_disjoint import KEYWORD_TYPE
from grammars.json_formats import DRAFT_FORMATS, FORMATS, format_node
from grammars.json_merge import ANNOTATIONS, TYPES
from grammars.json_number_keywords import integer_node, number_node
from grammars.json_numbers import int_range
from grammars.json_objects import object_node
from grammars.json_patterns import pattern_body, string_matches
from grammars.json_string_keywords import string_body
from grammars.json_strings import quoted
from grammars.json_values import json_type, union, value_node

if TYPE_CHECKING:
    from grammars.json_schema import Compiler

__all__ = ["typed_node"]


def typed_node(c: "Compiler", s: dict, path: str, base: str) -> Node:
    """The values valid under `s`, a schema without `$ref`, `allOf`, `anyOf` or `oneOf` left."""
    if all(k in ANNOTATIONS for k in s):
        return c.any()
    declared = s.get("type", list(TYPES))
    types = [t for t in TYPES if t in ({declared} if isinstance(declared, str) else set(declared))]
    excluded_types, excluded, not_patterns = (_not_excludes(c, s["not"], path, base) if "not" in s
                                              else (set(), [], []))
    if "enum" in s:
        if not_patterns:
            excluded = excluded + [v for v in s["enum"] if isinstance(v, str) and any(
                string_matches(c, p, v, path) for p in not_patterns)]
        return _enum_node(c, s, types, excluded_types, excluded, path, base)
    if "number" in types:
        types.remove("integer") if "integer" in types else None
        if "integer" in excluded_types and "number" not in excluded_types:
            raise UnsupportedSchemaError("not", path, "`not: integer` on numbers (non-integers) is not exact")
    parts = []
    for t in types:
        if t in excluded_types:
            continue
        mine = [v for v in excluded if json_type(v) == t or (t == "number" and json_type(v) == "integer")]
        parts.append(_type_node(c, t, s, mine, path, base, not_patterns))
    return union(*parts)


def _enum_node(c: "Compiler", s: dict, types: list, excluded_types: set, excluded: list, path: str, base: str) -> Node:
    """The values of `s`'s `enum` of the `types`, not excluded, that its other keywords accept."""
    allowed = set(types) | ({"integer"} if "number" in types else set())
    # `type` admits integers and no other number: an integer value is then spelled the way
    # `integer` spells every integer, `-?(0|[1-9][0-9]*)`, not by value (`1.0` is no integer
    # in draft 4; README "Numbers")
    whole = "number" not in types
    gone = {json.dumps(v, sort_keys=True) for v in excluded}
    rest = _enum_checks(s, ("enum", "type", "not"))
    nodes = []
    for v in s["enum"]:
        t = json_type(v)
        if t not in allowed or t in excluded_types or (gone and json.dumps(v, sort_keys=True) in gone):
            continue
        if rest and not c.accepts(rest, v, path, base):
            continue
        if t == "integer" and whole:
            nodes.append(int_range(int(v), int(v)))
        else:
            nodes.append(value_node(v, c.ws, f"{path}.enum", c.numbers))
    return union(*nodes)


def _type_node(c: "Compiler", t: str, s: dict, excluded: list, path: str, base: str,
               not_patterns: list[str] = ()) -> Node:
    """The values of type `t` valid under `s`, but the `excluded` values and strings `not_patterns` match."""
    if t == "null":
        return NOTHING if excluded else literal(b"null")
    if t == "boolean":
        return alt(*(literal(b"true" if v else b"false") for v in (True, False) if v not in excluded))
    if t in ("array", "object") and excluded:
        raise UnsupportedSchemaError("not", path, f"excluding {t} values is not exact")
    if t == "integer":
        return integer_node(c, s, excluded, path)
    if t == "number":
        return number_node(c, s, excluded, path)
    if t == "string":
        return quoted(string_body(c, s, excluded, path, not_patterns))
    if t == "array":
        return array_node(c, s, path, base)
    return object_node(c, s, path, base)


def _not_excludes(c: "Compiler", n: Any, path: str, base: str) -> tuple[set[str], list, list[str]]:
    """(excluded types, excluded values, patterns excluded strings match) of `not: n`, or raise."""
    n = c.flatten(n, f"{path}.not", base, negated=True)
    if n is True:
        return set(TYPES), [], []
    if n is False:
        return set(), [], []
    keys = {k for k in n if k not in ANNOTATIONS}
    if keys == {"anyOf"}:
        types: set[str] = set()
        values: list = []
        patterns: list[str] = []
        for br in n["anyOf"]:
            t, v, p = _not_excludes(c, br, path, base)
            types |= t
            values += v
            patterns += p
        return types, values, patterns
    if keys <= {"type", "enum"}:
        named = n.get("type", list(TYPES))
        named = {named} if isinstance(named, str) else set(named)
        if "number" in named:
            named.add("integer")
        if "enum" in n:
            return set(), [v for v in n["enum"] if json_type(v) in named], []
        return named, [], []
    if keys <= {"type", "pattern"} and "pattern" in keys and n.get("type", "string") == "string":
        pattern_body(c, n["pattern"], f"{path}.not")        # checks it, with its path
        # without `type`, `n` holds for every non-string too: `not` excludes them all
        return (set() if "type" in keys else set(TYPES) - {"string"}), [], [n["pattern"]]
    if keys <= {"type", "format"} and "format" in keys and n.get("type", "string") == "string":
        others = set() if "type" in keys else set(TYPES) - {"string"}
        if not isinstance(n["format"], str):
            raise InvalidSchemaError("`format` must be a string", f"{path}.not", n["format"])
        if format_node(n["format"]) is None or n["format"] not in DRAFT_FORMATS.get(c.draft, FORMATS):
            # an annotation (unknown, or not in the schema's draft): every string passes it, `not` fails them
            return others | {"string"}, [], []
        return others, [], [("format", n["format"])]
    raise UnsupportedSchemaError("not", path, "only `not` of types, enum/const, a pattern, a format and anyOf "
                                 "of those is exact")


def _enum_checks(s: dict, handled: tuple[str, ...]) -> dict:
    """The keywords of `s` (but `handled`) that may refuse some value of its `enum`.

    Annotations, unknown and vendor keywords assert nothing, and a keyword
    for one JSON type (`KEYWORD_TYPE`) passes the values of every other
    type: checking values against those built an automaton per schema for
    nothing (a median schema's `propertyOrder` or `readonly` beside an enum
    made its grammar 5x slower).
    """
    present = {json_type(v) for v in s["enum"]}
    if "integer" in present:
        present.add("number")
    return {k: v for k, v in s.items() if k in KNOWN_KEYWORDS and k not in ANNOTATIONS and k not in handled
            and (k not in KEYWORD_TYPE or KEYWORD_TYPE[k] in present)}
