"""`anyOf` and `oneOf` of a schema as unions of its branches.

`anyOf` is the union of its branches, each merged with the sibling keywords.
`oneOf` holds exactly one branch: a pair of branches provably disjoint
(`json_disjoint.disjoint`: types, enum values, a discriminator, a member one
requires and the other forbids) stays as it is; types of which two branches
take every value are left out of both; a branch that may overlap another
holds with its negation (`json_negation.negation`), at most `ONE_OF_NEGATIONS`
in all; else the `oneOf` is unsupported (compiled as `anyOf` under
`allow_approximate`, with a note).

Example:
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.json_schema import json_schema_grammar
    >>> g = json_schema_grammar({"oneOf": [{"type": "string"}, {"maxLength": 2}]})
    >>> dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    >>> [dfa.matches(s) for s in (b'"abc"', b'"ab"', b"3")]
    [True, False, True]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from grammars.ast import Node
from grammars.errors import SchemaNote, UnsupportedSchemaError
from grammars.json_disjoint import disjoint, type_set, whole_types
from grammars.json_merge import ANNOTATIONS, TYPES
from grammars.json_negation import negation
from grammars.json_values import union

if TYPE_CHECKING:
    from grammars.json_schema import Compiler

__all__ = ["branches_node", "ONE_OF_NEGATIONS"]

# A `oneOf` whose branches may overlap holds each branch with the negations of those it may overlap:
# at most this many negations in all (each can multiply the branches of the merged schema).
ONE_OF_NEGATIONS = 16


def branches_node(c: "Compiler", s: dict, path: str, base: str) -> Node:
    """The values valid under `s`, whose `anyOf` or `oneOf` holds (see the module docstring)."""
    rest = {k: v for k, v in s.items() if k not in ("anyOf", "oneOf")}
    if "anyOf" in s:
        if "oneOf" in s:
            rest["oneOf"] = s["oneOf"]
        return union(*(c.node(_with_siblings(c, rest, br, f"{path}.anyOf[{i}]", base), f"{path}.anyOf[{i}]", base)
                     for i, br in enumerate(s["anyOf"])))
    branches = [_with_siblings(c, rest, br, f"{path}.oneOf[{i}]", base) for i, br in enumerate(s["oneOf"])]
    # branch i holds alone: it and the negation of every branch it may overlap (exact, and the
    # resulting branches are disjoint); provably disjoint pairs need nothing. Overlaps are found
    # between the branches as negated (without the keywords their draft lacks: they may take more)
    if c.lacks_keywords():
        flat = [c.flatten({"allOf": [rest, b]} if rest else b, f"{path}.oneOf[{i}]", base, negated=True)
                for i, b in enumerate(s["oneOf"])]
    else:                      # (read as negated, as they are: the merges above serve)
        flat = [c.flatten(b, f"{path}.oneOf[{i}]", base) for i, b in enumerate(branches)]
    excluded: list[list[Any]] = [[] for _ in flat]
    for i in range(len(flat)):
        for j in range(i + 1, len(flat)):
            if disjoint(flat[i], flat[j], c.draft):
                continue
            # types of which both take every value never hold "exactly one": without them the
            # two may be disjoint (objects without type: `required` against `additionalProperties`)
            free = whole_types(flat[i]) & whole_types(flat[j])
            if free and disjoint(_without_types(flat[i], free), _without_types(flat[j], free), c.draft):
                rest = [t for t in TYPES if t not in free]
                excluded[i].append({"type": rest})
                excluded[j].append({"type": rest})
                continue
            why = _overlap(c, s["oneOf"], (i, j), excluded, path, base)
            if why is not None:
                if not c.approximate:
                    raise UnsupportedSchemaError("oneOf", path, why)
                c.notes.append(SchemaNote("oneOf", path, "approximated", f"compiled as anyOf: {why}"))
                excluded = [[] for _ in flat]
                break
        else:
            continue
        break
    nodes = []
    for i, (b, negs) in enumerate(zip(branches, excluded)):
        sub = f"{path}.oneOf[{i}]"
        if not negs:
            nodes.append(c.node(b, sub, base))
            continue
        try:
            nodes.append(c.node(_with_siblings(c, {"allOf": negs}, b, sub, base), sub, base))
        except UnsupportedSchemaError as e:   # the negations are ours: say what they were for
            why = f"branch {i} may overlap others, and it without them is not exact: {e}"
            if not c.approximate:
                raise UnsupportedSchemaError("oneOf", path, why) from None
            c.notes.append(SchemaNote("oneOf", path, "approximated", f"compiled as anyOf: {why}"))
            return union(*(c.node(b, f"{path}.oneOf[{k}]", base) for k, b in enumerate(branches)))
    return union(*nodes)


def _overlap(c: "Compiler", raw: list, pair: tuple[int, int], excluded: list[list[Any]], path: str,
             base: str) -> str | None:
    """Make branches `pair` of a `oneOf` exclude each other (`json_negation.negation` of the other
    one, appended to `excluded`), or say why they cannot be."""
    i, j = pair
    negs = []
    for a, b in ((i, j), (j, i)):
        why: list[str] = []
        neg = negation(raw[b], c.resolving(f"{path}.oneOf[{b}]", base), why, f"{path}.oneOf[{b}]", c.draft)
        if neg is None:
            return (f"branches {i} and {j} may both match, and branch {b}'s negation has no exact form: "
                    f"{why[0]} (negated exactly: types, enum/const, bounds, required, properties, items, "
                    "contains, pattern, format, dependencies, not/allOf/anyOf/oneOf/$ref of those)")
        negs.append((a, neg))
    for a, neg in negs:
        excluded[a].append(neg)
    if sum(len(e) for e in excluded) > ONE_OF_NEGATIONS:
        return (f"branches overlap pairwise in more than {ONE_OF_NEGATIONS} ways; 'exactly one' would "
                "need that many negations")
    return None


def _with_siblings(c: "Compiler", rest: dict, branch: Any, path: str, base: str) -> Any:
    """`branch` and the sibling keywords (only merged when they constrain anything)."""
    if all(k in ANNOTATIONS for k in rest):
        return branch
    c.merger.base = base
    return c.merger.merge(rest, branch, path)


def _without_types(s: Any, types: set[str]) -> Any:
    """`s` limited to its types not in `types` (for `disjoint`)."""
    if not isinstance(s, dict):
        return s
    rest = type_set(s) - types
    return {**s, "type": [t for t in TYPES if t in rest and not (t == "integer" and "number" in rest)]}

