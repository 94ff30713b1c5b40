"""Negating a JSON schema: a schema valid exactly where another is not, made of forms compiled exactly.

`not`, the other branches of a `oneOf` that may overlap one, an `if`'s
condition failing, and `contains` under `maxContains` all need the instances
a schema rejects. `negation` rewrites them as `allOf`/`anyOf` of forms the
compiler handles exactly (types, enum/const, bounds, required, properties,
...), or says why there is none; `plain_not` tells the `not`s the compiler
excludes directly, which need no rewriting. Merging (`grammars.json_merge`)
and disjointness proofs (`grammars.json_disjoint`) are elsewhere.

Example:
    >>> negation({"required": ["a"], "minProperties": 2})
    {'anyOf': [{'type': 'object', 'properties': {'a': False}}, {'type': 'object', 'maxProperties': 1}]}
"""

from __future__ import annotations

from typing import Any, Callable

from grammars.errors import UnsupportedSchemaError
from grammars.json_disjoint import disjoint
from grammars.json_merge import ANNOTATIONS, lacking

__all__ = ["negation", "plain_not", "NEGATION_DEPTH", "NEGATION_SIZE", "ONE_OF_PAIRS"]

Schema = Any

# Subschemas nested in one negation (`negation`): a recursive `$ref` has no negation of this kind.
NEGATION_DEPTH = 8
NEGATION_SIZE = 2000
# Keywords that constrain nothing when their schema is `true` or `{}`.
_VACUOUS_WHEN_TRUE = frozenset(("additionalProperties", "additionalItems", "items", "propertyNames",
                                "unevaluatedProperties", "unevaluatedItems"))
# A negated `oneOf` ("none of its branches, or two") whose branches may overlap in more pairs than
# this has no form here (each pair is a branch of the negation).
ONE_OF_PAIRS = 6


def plain_not(n: Schema) -> bool:
    """`not: n` of the forms the compiler excludes directly: types, scalar enum/const, a pattern, a format,
    anyOf of those."""
    if isinstance(n, bool):
        return True
    if not isinstance(n, dict):
        return False
    keys = {k for k in n if k not in ANNOTATIONS}
    if keys == {"anyOf"}:
        return isinstance(n["anyOf"], list) and all(plain_not(b) for b in n["anyOf"])
    if "pattern" in keys:      # strings matching it (`json_string_sets`)
        return keys <= {"type", "pattern"} and n.get("type", "string") == "string"
    if "format" in keys:       # strings in it (the same)
        return keys <= {"type", "format"} and n.get("type", "string") == "string"
    return keys <= {"type", "enum", "const"}


# A numeric bound fails on the numbers past it: (the type it applies to, the opposite bound, same value).
_BOUND_NEGATIONS = {"minimum": ("number", "exclusiveMaximum"), "maximum": ("number", "exclusiveMinimum"),
                    "exclusiveMinimum": ("number", "maximum"), "exclusiveMaximum": ("number", "minimum")}
# A count bound fails on the instances past it: (their type, the opposite bound, its value minus this one).
_COUNT_NEGATIONS = {"minLength": ("string", "maxLength", -1), "maxLength": ("string", "minLength", 1),
                    "minItems": ("array", "maxItems", -1), "maxItems": ("array", "minItems", 1),
                    "minProperties": ("object", "maxProperties", -1), "maxProperties": ("object", "minProperties", 1)}


def negation(s: Schema, resolve: Callable[[Schema], Schema] | None = None,
             why: list[str] | None = None, at: str = "$", draft: int = 2020) -> Schema | None:
    """A schema valid exactly where `s` is not, made of forms compiled exactly; None if there is none here.

    Negation goes through `not` (twice is none), `allOf` and `anyOf` (De Morgan), and splits a schema's
    keywords (each constrains alone): types and scalar `enum`/`const` are excluded by `not`; a
    `required` name becomes "an object without it"; a property's schema, "an object with it, and
    its value valid under the property's negation"; `if`, "valid under it and not under `then`, or
    under neither it nor `else`"; `contains` (without `minContains`/`maxContains`),
    "an array whose items are all valid under its negation"; `items` (one schema), "an array with
    an item valid under its negation"; `dependentRequired`, `dependentSchemas` and `dependencies`,
    "an object with the name, and without a name it requires or invalid under its schema";
    `oneOf`, "none of its branches, or two that may overlap
    (not provably `disjoint`)"; a bound, a value of its type beyond
    it (`minimum: 3` fails on numbers below 3, `maxLength: 5` on strings of 6 or more); a
    `pattern` or a `format`, a string that does not match it; `propertyNames: false`, an object
    with a member; `propertyNames` that rules out listed names (`not` of an `enum` or `const`), an
    object with one of them. Other keywords (`multipleOf`, `additionalProperties`, ...) have no such form here.

    `resolve`, where given, is applied to `s` and to every subschema negated inside it first: the
    compiler's (`Compiler.resolving`) merges a `$ref` and `allOf` in and drops what it ignores
    (unknown keywords, a `format` it does not know). Past `NEGATION_DEPTH` nested subschemas (a
    recursive `$ref`) or `NEGATION_SIZE` subschemas negated in all (references shared by many
    parts) there is no form. Where there is none, `why` (a list, when given) gets the reason: the
    keyword and where it is (`at`: the path of `s`).

    Example:
        >>> negation({"properties": {"mode": {"const": "a"}}, "required": ["mode"]})
        {'anyOf': [{'type': 'object', 'required': ['mode'], 'properties': {'mode': {'not': {'const': 'a'}}}}, \
{'type': 'object', 'properties': {'mode': False}}]}
    """
    return _negation(s, resolve, draft, 0, [NEGATION_SIZE], [] if why is None else why, at)


def _none(why: list[str], reason: str) -> None:
    """No form: keep the first (innermost) reason."""
    if not why:
        why.append(reason)


def _negation(s: Schema, resolve: Callable[[Schema], Schema] | None, draft: int, depth: int, left: list[int],
              why: list[str], at: str) -> Schema | None:
    left[0] -= 1
    if depth > NEGATION_DEPTH:
        return _none(why, f"{at} is nested more than {NEGATION_DEPTH} subschemas deep (a recursive $ref: "
                          "the values it fails are not a regular language)")
    if left[0] < 0:
        return _none(why, f"it has more than {NEGATION_SIZE} subschemas to negate")
    if isinstance(s, dict):
        s = lacking(s, draft)                     # (ignored here: the draft lacks them)
    if resolve is not None and isinstance(s, dict):
        try:
            s = resolve(s)
        except UnsupportedSchemaError as e:         # a reference cycle through $ref/allOf, say
            return _none(why, f"{at} cannot be resolved ({e})")
    if isinstance(s, bool):
        return not s
    if not isinstance(s, dict):
        return _none(why, f"{at} is not a schema")
    inner = depth + 1
    keys = [k for k in s if k not in ANNOTATIONS]
    parts: list[Schema] = []                      # `s` fails when any of these holds
    simple = {k: s[k] for k in keys if k in ("type", "enum", "const")}
    if simple:
        values = list(simple.get("enum", [])) + ([simple["const"]] if "const" in simple else [])
        if any(isinstance(v, (dict, list)) for v in values):
            return _none(why, f"`enum`/`const` at {at} lists objects or arrays")
        parts.append({"not": simple})
    for key in keys:
        value = s[key]
        if key in simple or (key in _VACUOUS_WHEN_TRUE and (value is True or value == {})):
            continue                                # (`additionalProperties: true` fails nothing)
        if key == "not":
            parts.append(value)
        elif key in ("allOf", "anyOf") and isinstance(value, list):
            negs = [_negation(b, resolve, draft, inner, left, why, f"{at}.{key}[{i}]") for i, b in enumerate(value)]
            if any(n is None for n in negs):
                return None
            if key == "allOf":
                parts.extend(negs)
            else:
                parts.append({"allOf": negs} if len(negs) > 1 else negs[0])
        elif key == "oneOf" and isinstance(value, list):
            # no branch holds, or two do (only branches not provably disjoint can both hold; those
            # read as negated, which may take more, and "both hold" read as written)
            branches = [lacking(b, draft) if isinstance(b, dict) else b for b in value]
            if resolve is not None:
                try:
                    branches = [resolve(b) if isinstance(b, dict) else b for b in branches]
                except UnsupportedSchemaError as e:
                    return _none(why, f"{at}.oneOf cannot be resolved ({e})")
            negs = [_negation(b, resolve, draft, inner, left, why, f"{at}.oneOf[{i}]") for i, b in enumerate(branches)]
            if any(n is None for n in negs):
                return None
            both = [{"allOf": [value[i], value[k]]} for i in range(len(value)) for k in range(i + 1, len(value))
                    if not disjoint(branches[i], branches[k])]
            if len(both) > ONE_OF_PAIRS:
                return _none(why, f"{at}.oneOf has more than {ONE_OF_PAIRS} pairs of branches that may overlap")
            parts.append({"allOf": negs} if len(negs) > 1 else negs[0])
            parts.extend(both)
        elif key == "required" and isinstance(value, list):
            parts.extend({"type": "object", "properties": {r: False}} for r in value)
        elif key == "properties" and isinstance(value, dict):
            for name, prop in value.items():
                neg = _negation(prop, resolve, draft, inner, left, why, f"{at}.properties.{name}")
                if neg is None:
                    return None
                if neg is not False:
                    parts.append({"type": "object", "required": [name], "properties": {name: neg}})
        elif key in _BOUND_NEGATIONS and type(value) in (int, float):
            applies, opposite = _BOUND_NEGATIONS[key]     # minimum m fails on numbers below m, ...
            parts.append({"type": applies, opposite: value})
        elif key in _COUNT_NEGATIONS and type(value) is int and value >= 0:
            applies, opposite, step = _COUNT_NEGATIONS[key]   # minLength n fails on strings shorter, ...
            if value + step >= 0:
                parts.append({"type": applies, opposite: value + step})
        elif key == "pattern" and isinstance(value, str):
            parts.append({"type": "string", "not": {"pattern": value}})     # a string it does not match
        elif key == "format" and isinstance(value, str):
            parts.append({"type": "string", "not": {"format": value}})       # a string not in the format
        elif key == "propertyNames" and value is False:
            parts.append({"type": "object", "minProperties": 1})             # an object with any member
        elif key == "propertyNames" and (listed := _listed_names(value)) is not None:
            # names not in a list: fails on an object with a member of the list
            parts.extend({"type": "object", "required": [n]} for n in listed)
        elif key == "if":
            # fails where the condition holds and `then` fails, or it fails and `else` does
            then, other = s.get("then", True), s.get("else", True)
            if then is not True:
                neg = _negation(then, resolve, draft, inner, left, why, f"{at}.then")
                if neg is None:
                    return None
                if neg is not False:
                    parts.append({"allOf": [value, neg]})
            if other is not True:
                neg = _negation(other, resolve, draft, inner, left, why, f"{at}.else")
                cond = None if neg is None else _negation(value, resolve, draft, inner, left, why, f"{at}.if")
                if cond is None:
                    return None
                if neg is not False and cond is not False:
                    parts.append({"allOf": [cond, neg]})
        elif key in ("then", "else"):
            continue                                # (with `if`, above; alone they constrain nothing)
        elif key == "contains":       # (with minContains or maxContains beside it: no form, below)
            neg = _negation(value, resolve, draft, inner, left, why, f"{at}.contains")
            if neg is None:
                return None
            parts.append({"type": "array", "items": neg})
        elif key in ("dependentRequired", "dependentSchemas", "dependencies") and isinstance(value, dict):
            # fails on an object with a name and without a name it requires, or with one and
            # invalid under its schema
            for name, dep in value.items():
                if isinstance(dep, list) and key != "dependentSchemas" and all(isinstance(r, str) for r in dep):
                    parts.extend({"type": "object", "required": [name], "properties": {r: False}} for r in dep)
                elif isinstance(dep, (dict, bool)) and key != "dependentRequired":
                    neg = _negation(dep, resolve, draft, inner, left, why, f"{at}.{key}.{name}")
                    if neg is None:
                        return None
                    if neg is not False:
                        parts.append({"allOf": [{"type": "object", "required": [name]}, neg]})
                else:
                    return _none(why, f"`{key}` at {at} has no negation here")
        elif key == "items" and isinstance(value, (dict, bool)) and "prefixItems" not in s:
            neg = _negation(value, resolve, draft, inner, left, why, f"{at}.items")  # (past prefixItems: the rest only)
            if neg is None:
                return None
            if neg is not False:
                parts.append({"type": "array", "contains": neg})
        else:
            return _none(why, f"`{key}` at {at} has no negation here")
    parts = [p for p in parts if p is not False]
    if any(p is True for p in parts):
        return True
    if not parts:
        return False
    return parts[0] if len(parts) == 1 else {"anyOf": parts}


def _listed_names(names: Schema) -> list[str] | None:
    """The names ``{"not": {"enum": [...]}}`` (or `const`) as `propertyNames` rules out, else None."""
    if not (isinstance(names, dict) and set(names) == {"not"} and isinstance(names["not"], dict)):
        return None
    listed = names["not"]
    if set(listed) == {"enum"} and isinstance(listed["enum"], list):
        return [n for n in listed["enum"] if isinstance(n, str)]
    if set(listed) == {"const"}:
        return [listed["const"]] if isinstance(listed["const"], str) else []
    return None
