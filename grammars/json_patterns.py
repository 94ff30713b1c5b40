"""A schema's `pattern`s (ECMA-262, search semantics) as string bodies, and tests on their automata.

`pattern_body` is the node of the string bodies a pattern matches, in every
JSON spelling of each character (lookaheads at the start, `^(?=X)(?!Y)Z`, by
a product of automata); `pattern_matches` and `string_matches` decide a
name or a value at compile time (`patternProperties`, `enum` beside `not`),
and `pattern_universal` proves that a pattern matches every property name.
Each compiler keeps its bodies and matchers (`Compiler.pattern_bodies`,
`Compiler.matchers`); the syntax trees are shared by all (`_regex`).

Example:
    >>> from grammars.json_schema import Compiler
    >>> from grammars.json_values import Whitespace, WhitespacePolicy
    >>> c = Compiler({}, ws=Whitespace(WhitespacePolicy()))
    >>> pattern_matches(c, "^a+$", "aa", "$"), pattern_matches(c, "^a+$", "ab", "$")
    (True, False)
    >>> pattern_universal(c, "", "$"), pattern_universal(c, "a", "$")
    (True, False)
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from grammars.ast import Grammar, Node
from grammars.ecma import leading_lookarounds
from grammars.errors import InvalidSchemaError, RegexSyntaxError, UnsupportedRegexError, UnsupportedSchemaError
from grammars.json_formats import format_node
from grammars.json_string_sets import difference
from grammars.json_strings import json_char

if TYPE_CHECKING:
    from grammars.json_schema import Compiler

__all__ = ["pattern_body", "pattern_matches", "pattern_universal", "string_matches"]

# state pairs walked to prove a patternProperties pattern matches every name (`pattern_universal`)
_UNIVERSAL_PAIRS = 512


def pattern_body(c: "Compiler", pattern: Any, path: str) -> Node:
    """String bodies containing a match of the ECMA regex (search semantics)."""
    if not isinstance(pattern, str):
        raise InvalidSchemaError("`pattern` must be a string", path, pattern)
    if pattern not in c.pattern_bodies:
        try:
            c.pattern_bodies[pattern] = _regex(pattern, json_char)
        except RegexSyntaxError as e:
            raise InvalidSchemaError(f"`pattern` is not a valid regex ({e})", path, pattern) from None
        except UnsupportedRegexError as e:
            split = leading_lookarounds(pattern)
            if split is None:
                raise UnsupportedSchemaError("pattern", path, str(e)) from None
            c.pattern_bodies[pattern] = _looking_ahead(c, *split, path)
    return c.pattern_bodies[pattern]


def _looking_ahead(c: "Compiler", looks: list[tuple[bool, str]], rest: str, path: str) -> Node:
    """`^(?=X)(?!Y)Z`: the strings `^Z` matches (search semantics) that start with a match of
    every X and of no Y, by a product of their automata (`json_string_sets.difference`)."""
    body = pattern_body(c, f"^(?:{rest})", path)
    required = [pattern_body(c, f"^(?:{x})", path) for positive, x in looks if positive]
    excluded = [pattern_body(c, f"^(?:{x})", path) for positive, x in looks if not positive]
    return difference(body, excluded, required=required, path=path, keyword="pattern", tries=c.tries)


def string_matches(c: "Compiler", excluded: Any, value: str, path: str) -> bool:
    """Whether the string `value` is one a `not` excludes: a pattern (str) matches it, or it is
    in a format (``("format", name)``)."""
    if isinstance(excluded, str):
        return pattern_matches(c, excluded, value, path)
    from grammars.dfa import LazyDFA

    key = "\0format " + excluded[1]           # (no pattern is spelled so)
    if key not in c.matchers:
        c.matchers[key] = LazyDFA(Grammar({"start": format_node(excluded[1])}))
    return c.matchers[key].matches(json.dumps(value, ensure_ascii=False)[1:-1].encode())


def pattern_matches(c: "Compiler", pattern: Any, name: str, path: str) -> bool:
    """Whether the property name `name` matches the ECMA regex (search)."""
    from grammars.dfa import LazyDFA

    if pattern not in c.matchers:
        pattern_body(c, pattern, path)    # validates and reports errors with the path
        try:
            c.matchers[pattern] = LazyDFA(Grammar({"start": _regex(pattern, None)}))
        except UnsupportedRegexError:     # `^(?=X)(?!Y)Z`, which `pattern_body` compiled by parts
            c.matchers[pattern] = leading_lookarounds(pattern)
    matcher = c.matchers[pattern]
    if isinstance(matcher, tuple):        # Z matches, and each lookahead holds or fails as it should
        looks, rest = matcher
        return pattern_matches(c, f"^(?:{rest})", name, path) and all(
            pattern_matches(c, f"^(?:{x})", name, path) == positive for positive, x in looks)
    return matcher.matches(name.encode())


def pattern_universal(c: "Compiler", pattern: Any, path: str) -> bool:
    """Whether the ECMA regex (search) matches every property name: a product walk of its
    automaton beside that of every UTF-8 text (`[\\s\\S]*`), which fails on a text the first
    accepts and it does not; False past `_UNIVERSAL_PAIRS` pairs (not proven)."""
    from grammars.dfa import LazyDFA

    if not pattern_matches(c, pattern, "", path):    # (builds its automaton and checks the pattern)
        return False                                 # the empty name is a text it fails on
    if "[\\s\\S]*" not in c.matchers:
        c.matchers["[\\s\\S]*"] = LazyDFA(Grammar({"start": _regex("[\\s\\S]*", None)}))
    every, it = c.matchers["[\\s\\S]*"], c.matchers[pattern]
    if isinstance(it, tuple):                        # lookaheads (see `pattern_matches`): not proven
        return False
    seen = {(every.initial, it.initial)}
    todo = list(seen)
    while todo:
        a, b = todo.pop()
        if every.is_accepting(a) and not it.is_accepting(b):
            return False
        for byte in range(256):
            a2 = every.next_state(a, byte)
            if a2 < 0:
                continue
            b2 = it.next_state(b, byte)
            if b2 < 0:                               # (every live state of `every` reaches a text)
                return False
            if (a2, b2) not in seen:
                if len(seen) >= _UNIVERSAL_PAIRS:
                    return False
                seen.add((a2, b2))
                todo.append((a2, b2))
    return True


@lru_cache(maxsize=512)
def _regex(pattern: str, encode: Any) -> Node:
    """The syntax tree of ECMA `pattern` (search semantics), characters spelled by `encode`.

    Memoized like `json_numbers.int_range`: a third of maskbench-dev's 631
    patterns repeat one in another schema (dates, hex ids, semantic versions). A pattern
    that raises is not cached, and raises again the same way.
    """
    from grammars.regex import regex_node

    if encode is None:
        return regex_node(pattern, dialect="ecma", search=True)
    return regex_node(pattern, dialect="ecma", search=True, encode=encode)
