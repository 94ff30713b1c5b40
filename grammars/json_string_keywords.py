"""A schema's string keywords (`minLength`, `maxLength`, `pattern`, `format`, `not`) as string bodies.

`string_body` is the node of the string bodies (between the quotes) valid
under them: lengths on the syntax tree where that stays small
(`json_length.restrict_length`), else by a product of automata
(`json_counted.bounded_strings`); a pattern with a format, values a `not`
excludes and strings its patterns or formats match, by a product too
(`json_string_sets.difference`). One node per distinct set of keywords
(`Compiler.string_bodies`): products are built once per compile.

Example:
    >>> from grammars.ast import Grammar
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.json_schema import Compiler
    >>> from grammars.json_values import Whitespace, WhitespacePolicy
    >>> c = Compiler({}, ws=Whitespace(WhitespacePolicy()))
    >>> dfa = LazyDFA(Grammar({"start": string_body(c, {"minLength": 2, "pattern": "^a"}, ["ab"], "$")}))
    >>> [dfa.matches(s) for s in (b"abc", b"ab", b"a", b"ba")]
    [True, False, False, False]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grammars.ast import Node
from grammars.errors import SchemaNote, UnsupportedSchemaError
from grammars.json_counted import bounded_strings
from grammars.json_formats import format_node
from grammars.json_length import EXPANSION_BUDGET, restrict_length
from grammars.json_patterns import pattern_body
from grammars.json_string_sets import difference
from grammars.json_strings import any_string_body, string_literal, string_not_in

if TYPE_CHECKING:
    from grammars.json_schema import Compiler

__all__ = ["string_body"]


def string_body(c: "Compiler", s: dict, excluded: list, path: str, not_patterns: list[str] = ()) -> Node:
    """Bodies of the strings valid under the string keywords of `s`, minus the `excluded`
    values and the strings that `not_patterns` match."""
    lo, hi = s.get("minLength", 0), s.get("maxLength")
    body = None
    if "format" in s:
        body = format_node(s["format"])
        if body is None:     # an annotation (2020-12): any string of the other keywords is valid
            c.notes.append(SchemaNote("format", path, "annotation", repr(s["format"])))
    # the same string keywords at several paths (a pattern with length bounds in each of three
    # `*_ref` objects) give one node: their products of automata are built once
    try:
        key = (lo, hi, s.get("format"), s.get("pattern"), tuple(excluded), tuple(not_patterns))
        hit = c.string_bodies.get(key)
    except TypeError:        # an unhashable keyword value: the node is built here, not kept
        key, hit = None, None
    if hit is None:
        hit = _new_string_body(c, s, body, lo, hi, excluded, path, not_patterns)
        if key is not None:
            c.string_bodies[key] = hit
    return hit


def _new_string_body(c: "Compiler", s: dict, body: Node | None, lo: Any, hi: Any, excluded: list, path: str,
                     not_patterns: list[str]) -> Node:
    """`string_body`'s node, built (`body`: the format's, or None)."""
    length_product = False
    required = []
    if "pattern" in s:
        pattern = pattern_body(c, s["pattern"], path)
        if body is None:
            body = pattern
        else:                # a format's strings that the pattern matches too: a product (below)
            required.append(pattern)
    if excluded and body is None and not lo and hi is None and not not_patterns and not required:
        return string_not_in(excluded, c.tries)
    # lengths first, on the syntax tree (the product's node may split characters across its parts);
    # where that expands too far or cannot split the body, the lengths join the product instead
    if body is None:
        rest = any_string_body(lo, hi)
    else:
        try:
            rest = restrict_length(body, lo, hi, path=path, budget=EXPANSION_BUDGET)
        except UnsupportedSchemaError:
            rest, required = any_string_body(lo, hi), [body, *required]
            length_product = True
    if not excluded and not not_patterns and not required:
        return rest
    gone = [pattern_body(c, p, path) if isinstance(p, str) else format_node(p[1]) for p in not_patterns]
    gone += [string_literal(v) for v in excluded]
    keyword = "not" if gone else "pattern" if "pattern" in s else "format"
    if length_product:
        return bounded_strings(required, gone, lo, hi, path=path, tries=c.tries,
                               keyword="maxLength" if hi is not None else "minLength")
    return difference(rest, gone, required=required, path=path, tries=c.tries, keyword=keyword)

