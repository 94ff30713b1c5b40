"""`allOf` as a real merge of schemas, and the draft-specific rewriting (`normalize`) before it.

`merge(a, b)` returns one schema whose instances are exactly those valid
under both: types intersect, bounds tighten, `required` unions, `properties`
merge key by key (a key declared on one side only must also satisfy the
other side's `additionalProperties`), `anyOf`/`oneOf` distribute. A pair
of keywords that cannot be combined exactly (two different `pattern`s,
`multipleOf` 3 and 5 on numbers, `patternProperties` against `properties`,
two different `contains`)
raises `UnsupportedSchemaError`; nothing is ever concatenated or dropped.
Negating a schema is `grammars.json_negation`'s; proving two schemas
disjoint, `grammars.json_disjoint`'s.

Example:
    >>> m = Merger(lambda ref, base, path: ({}, base, path), draft=2020)
    >>> m.merge({"type": ["integer", "string"], "minimum": 1}, {"type": "number", "minimum": 3}, "$")
    {'type': ['integer'], 'minimum': 3}
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from math import gcd, lcm
from typing import Any, Callable

from grammars.ecma import both_patterns
from grammars.errors import StateBudgetError, UnsupportedSchemaError
from grammars.json_values import json_equal, json_key

__all__ = ["Merger", "LACKS", "consts_as_enums", "lacking", "normalize", "TYPES", "ANNOTATIONS", "UNEVALUATED"]

TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "readOnly", "writeOnly", "deprecated",
    "contentMediaType", "contentEncoding", "contentSchema", "$schema", "$id", "$anchor",
    "$dynamicAnchor", "$vocabulary", "$defs", "definitions", "discriminator",
})
_MAX_KW = ("maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum")
_MIN_KW = ("minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum")
_OBJECT_SHAPE = ("properties", "additionalProperties", "patternProperties")
_ARRAY_SHAPE = ("prefixItems", "items", "contains", "minContains", "maxContains")

Schema = Any
ResolveFn = Callable[[str, str, str], tuple[Schema, str, str]]


# Keywords each draft lacks (`json_refs.draft_of` numbers them; 2020 stands for 2019-09 and 2020-12,
# a document without `$schema` too): that draft's validators ignore them, 2020-12's do not. What is
# generated for a schema that uses one must be valid under both readings, so the keyword is enforced
# where that only narrows what passes, and ignored inside negations (`not`, the other branches of a
# `oneOf`, an `if`'s), where enforcing it would let more pass: `normalize(..., negated=True)` and
# `json_negation.negation` drop them. (A keyword the draft lacks that does not compile exactly is
# ignored, as its validators do: `grammars.json_checks`.)
_SINCE_2019 = ("dependentRequired", "dependentSchemas", "minContains", "maxContains", "unevaluatedProperties",
               "unevaluatedItems", "prefixItems")
LACKS: dict[int, tuple[str, ...]] = {4: ("const", "contains", "propertyNames", "if", "then", "else", *_SINCE_2019),
                                     6: ("if", "then", "else", *_SINCE_2019),
                                     7: _SINCE_2019,
                                     2020: ("dependencies",)}
UNEVALUATED = ("unevaluatedProperties", "unevaluatedItems")
_COUNTS = ("minContains", "maxContains")


def lacking(s: dict, draft: int) -> dict:
    """`s` without the keywords its draft lacks (the same dict when it has none)."""
    lacks = LACKS.get(draft, ())
    if s.keys().isdisjoint(lacks):
        return s
    return {k: v for k, v in s.items() if k not in lacks}


def consts_as_enums(s: Any) -> Any:
    """`s` with each `const` (where no `enum` is beside it) written as a one-value `enum`, through
    `not`, `anyOf`, `allOf`, `oneOf` and `if`/`then`/`else`.

    For the value of a keyword the document's draft lacks and that is enforced (`propertyNames` in
    draft 4): only later drafts read that value, so a `const` inside a negation there keeps its
    meaning, instead of being dropped as the draft's own negations drop it (`lacking`): draft 4's
    `"propertyNames": {"not": {"const": "a"}}` admits every name but "a", not none.

    Example:
        >>> consts_as_enums({"not": {"const": "a"}, "anyOf": [{"const": 1}, {"type": "string"}]})
        {'not': {'enum': ['a']}, 'anyOf': [{'enum': [1]}, {'type': 'string'}]}
    """
    if not isinstance(s, dict):
        return s
    out = {}
    for key, value in s.items():
        if key == "const" and "enum" not in s:
            out["enum"] = [value]
        elif key in ("not", "if", "then", "else"):
            out[key] = consts_as_enums(value)
        elif key in ("anyOf", "allOf", "oneOf") and isinstance(value, list):
            out[key] = [consts_as_enums(v) for v in value]
        else:
            out[key] = value
    return out


def normalize(s: dict, draft: int, negated: bool = False) -> dict:
    """Rewrite draft-07 forms into 2020-12 ones (tuple `items`, boolean exclusive bounds), and drop
    keywords that have no effect: `minContains`/`maxContains` without `contains`, and, `negated`
    (inside a negation), those the draft lacks (`LACKS`). Outside negations those are enforced
    beside the draft's own reading: draft 6 and 7's `contains` wants one item at least whatever
    `minContains` says, and draft 4 to 7's `items` (one schema) holds for the items `prefixItems`
    constrains too."""
    out = dict(lacking(s, draft) if negated else s)
    if draft <= 7 and not negated:
        if draft >= 6 and out.get("minContains") == 0:
            del out["minContains"]
        if "prefixItems" in out:
            items = out.get("items", True)
            if isinstance(items, list):      # the draft's tuple: the later one has no reading beside it
                del out["prefixItems"]
            elif items is not True and isinstance(out["prefixItems"], list):
                out["prefixItems"] = [{"allOf": [p, items]} for p in out["prefixItems"]]
    if "contains" not in out and (_COUNTS[0] in out or _COUNTS[1] in out):
        out.pop(_COUNTS[0], None)
        out.pop(_COUNTS[1], None)
    if isinstance(out.get("items"), list):
        out["prefixItems"] = out.pop("items")
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
    else:
        out.pop("additionalItems", None)  # without tuple items it has no effect
    for ex, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(out.get(ex), bool):
            if out.pop(ex) and plain in out:
                out[ex] = out.pop(plain)
    if "const" in out:
        const = out.pop("const")
        out["enum"] = [v for v in out["enum"] if _same(v, const)] if "enum" in out else [const]
    if draft <= 7 and "$ref" in out:
        return {"$ref": out["$ref"]}
    if "dependentSchemas" in out or "dependencies" in out:
        _dependent_schemas(out)
    if "if" in out or "not" in out:
        _logic(out, draft)
    return out


def _dependent_schemas(out: dict) -> None:
    """Dependencies that hold a schema (other than names required or forbidden, which an
    object's layout enforces itself) as conditions: a value that is no object, an object
    without the name, or one with it that satisfies the schema."""
    from grammars.json_checks import dependent_names   # (it imports this module)
    from grammars.json_negation import negation        # (the same)

    for key in ("dependentSchemas", "dependencies"):
        deps = out.get(key)
        if not isinstance(deps, dict):
            continue
        moved = {name: v for name, v in deps.items()
                 if isinstance(v, (dict, bool)) and dependent_names(key, v) is None}
        if not moved:
            continue
        conditions = []
        for name, v in moved.items():
            present = {"required": [name]}
            absent = negation(present)
            if absent is None:
                return
            conditions.append({"anyOf": [{"type": [t for t in TYPES if t != "object"]}, absent,
                                         {"allOf": [{"type": "object", **present}, v]}]})
        rest = {name: v for name, v in deps.items() if name not in moved}
        if rest:
            out[key] = rest
        else:
            del out[key]
        out["allOf"] = [*out.get("allOf", []), *conditions]


def _logic(out: dict, draft: int) -> None:
    """`if`/`then`/`else`, and a `not` the compiler does not negate itself, as `allOf`/`anyOf` of
    schemas it compiles exactly (`negation`); left as they are where no such form exists (and
    refused by `grammars.json_checks`)."""
    from grammars.json_negation import negation, plain_not   # (it imports this module)

    if "if" in out:
        cond, then, other = out["if"], out.get("then", True), out.get("else", True)
        neg = None if then is True and other is True else negation(cond, draft=draft)  # without then/else: none
        if neg is not None or (then is True and other is True):
            for key in ("if", "then", "else"):
                out.pop(key, None)
        if neg is not None:                       # (if and then) or (not if and else)
            out["allOf"] = [*out.get("allOf", []), {"anyOf": [{"allOf": [cond, then]}, {"allOf": [neg, other]}]}]
    if "not" in out and not plain_not(out["not"]):
        neg = negation(out["not"], draft=draft)
        if neg is not None:
            del out["not"]
            out["allOf"] = [*out.get("allOf", []), neg]



# Merging recurses along the subschemas merged (their properties, items). A recursive `$ref`
# merged with other keywords recurses forever: `{"allOf": [{"$ref": "#/definitions/item"}],
# "additionalProperties": ...}` inside `item` itself merges the same two schemas again at each level
# (compiled, that overflowed the C stack and crashed the process). From `CYCLE_CHECK_DEPTH` nested
# merges on, each pair merged is looked for among those still being merged (`_shallow`: by the identity
# of their members, which the merges in progress keep alive): a repeat is refused. Below it nothing is
# looked up (real schemas merge a few levels deep). Past `MAX_MERGE_DEPTH` (the schema compiler's
# nesting limit, `json_schema.MAX_NESTING`) a merge is refused as too deep.
CYCLE_CHECK_DEPTH = 64
MAX_MERGE_DEPTH = 2000
# `allOf` of `anyOf`s (or `oneOf`s) is one `anyOf` of every pair of branches: merged again and again
# (the negation of an `allOf` of `if`s, merged with its siblings), the count multiplies. Past this
# many branches in one merge it is refused, not left to grow for minutes.
MAX_MERGED_BRANCHES = 1024


def _shallow(s: Schema) -> Any:
    """What identifies a schema being merged, in O(its keys): its members' names with the strings
    themselves and every other value by identity (equal keys mean equal schemas; a repeat whose
    numbers are different objects goes unseen, up to `MAX_MERGE_DEPTH`)."""
    if type(s) is not dict:
        return id(s) if type(s) is not bool else s
    return tuple((k, v if type(v) is str else id(v)) for k, v in s.items())


class Merger:
    """Merges schemas; `resolve(ref, base, path)` follows `$ref` one level."""

    def __init__(self, resolve: ResolveFn, draft: int, base: str = "") -> None:
        self.resolve = resolve
        self.draft = draft
        self.negated = False                     # merging inside a negation (`normalize`'s `negated`)
        self.base = base
        self._expanding: list[int] = []
        self._depth = 0                          # merges in progress, nested (see CYCLE_CHECK_DEPTH)
        self._outer = "$"                        # the path of the outermost one
        self._merging: set[tuple] = set()         # (a, b) keys of the merges in progress past that depth

    def flatten(self, s: Schema, path: str) -> Schema:
        """`s` without a top-level `$ref` or `allOf` (both merged in)."""
        if not isinstance(s, dict):
            return s
        s = normalize(s, self.draft, self.negated)
        if "$ref" in s:
            target, _, tpath = self.resolve(s["$ref"], self.base, path)
            if id(target) in self._expanding:
                raise UnsupportedSchemaError("$ref", path, "a reference cycle through allOf/$ref cannot be merged")
            self._expanding.append(id(target))
            try:
                expanded = self.flatten(target, tpath)
            finally:
                self._expanding.pop()
            rest = {k: v for k, v in s.items() if k != "$ref"}
            s = self.merge(expanded, rest, path) if rest else expanded
        if isinstance(s, dict) and "allOf" in s:
            acc: Schema = {k: v for k, v in s.items() if k != "allOf"}
            for i, branch in enumerate(s["allOf"]):
                acc = self.merge(acc, branch, f"{path}.allOf[{i}]")
            s = acc
        return s

    def merge(self, a: Schema, b: Schema, path: str) -> Schema:
        depth = self._depth
        if depth == 0:
            self._outer = path
        elif depth >= CYCLE_CHECK_DEPTH:
            return self._merge_deep(a, b, path)
        self._depth = depth + 1
        try:
            return self._merge(a, b, path)
        finally:
            self._depth = depth

    def _merge_deep(self, a: Schema, b: Schema, path: str) -> Schema:
        """`merge` past `CYCLE_CHECK_DEPTH` nested merges: refused when the same pair is being merged
        further out (a recursive `$ref` merged with other keywords), or past `MAX_MERGE_DEPTH`."""
        if self._depth >= MAX_MERGE_DEPTH:
            raise StateBudgetError(MAX_MERGE_DEPTH, f"merging the subschemas at {self._outer}",
                                   unit="levels of nesting", option=None)
        key = (_shallow(a), _shallow(b))
        if key in self._merging:
            raise UnsupportedSchemaError("$ref", self._outer, "a recursive $ref merged with other keywords (allOf, or "
                                         "keywords beside $ref) merges the same schemas again inside themselves: "
                                         "the merged schema would be infinite")
        self._merging.add(key)
        self._depth += 1
        try:
            return self._merge(a, b, path)
        finally:
            self._depth -= 1
            self._merging.discard(key)

    def _merge(self, a: Schema, b: Schema, path: str) -> Schema:
        from grammars.json_checks import shape_errors   # (it imports this module)

        a, b = self.flatten(a, path), self.flatten(b, path)
        for side in (a, b):           # keywords are combined below: a malformed one is an error here
            if type(side) is dict:
                shape_errors(side, path)
        for side in (a, b):
            for key in UNEVALUATED:
                if isinstance(side, dict) and side.get(key, True) is not True:
                    raise UnsupportedSchemaError(key, path, "in a subschema merged with others (allOf, or $ref beside "
                                                 "other keywords): what it counts as evaluated would change")
        if a is True:
            return b
        if b is True:
            return a
        if a is False or b is False:
            return False
        out: dict = {}
        for key in list(a) + [k for k in b if k not in a]:
            if key in _OBJECT_SHAPE or key in _ARRAY_SHAPE:
                continue
            if key in a and key in b:
                out[key] = self._keyword(key, a[key], b[key], path)
            else:
                out[key] = a[key] if key in a else b[key]
        self._objects(a, b, out, path)
        self._arrays(a, b, out, path)
        self._contains(a, b, out, path)
        if out.get("type") == []:
            return False
        return out

    def _keyword(self, key: str, x: Any, y: Any, path: str) -> Any:
        if key in ANNOTATIONS or _same(x, y):
            return x
        if key == "type":
            tx = {x} if isinstance(x, str) else set(x)
            ty = {y} if isinstance(y, str) else set(y)
            both = (tx & ty) | ({"integer"} if ("integer" in tx and "number" in ty)
                                or ("number" in tx and "integer" in ty) else set())
            return [t for t in TYPES if t in both]
        if key == "enum":
            # scalars by key; objects and arrays pairwise (`json_key` walks a shared part once per path)
            keys = {json_key(v) for v in y if type(v) not in (dict, list)}
            boxes = [v for v in y if type(v) in (dict, list)]
            return [v for v in x if (any(_same(v, w) for w in boxes) if type(v) in (dict, list)
                                     else json_key(v) in keys)]
        if key == "required":
            return list(x) + [k for k in y if k not in x]
        if key in _MAX_KW:
            return min(x, y)
        if key in _MIN_KW:
            return max(x, y)
        if key == "multipleOf":
            return _merge_multiple(x, y, path)
        if key == "propertyNames":
            return self.merge(x, y, f"{path}.{key}")
        if key == "not":
            return {"anyOf": [x, y]}
        if key in ("anyOf", "oneOf"):  # (oneOf: exactly one of X and exactly one of Y == exactly one pair)
            if len(x) * len(y) > MAX_MERGED_BRANCHES:
                raise StateBudgetError(MAX_MERGED_BRANCHES, f"merging the {key} branches at {path} "
                                       f"({len(x)} with {len(y)})", unit="branches", option=None)
            return [{"allOf": [p, q]} for p in x for q in y]
        if key == "uniqueItems":
            return bool(x or y)
        if key == "pattern" and isinstance(x, str) and isinstance(y, str):
            both = both_patterns(x, y)
            if both is not None:
                return both
        from grammars.json_checks import KNOWN_KEYWORDS   # (it imports this module)

        if key not in KNOWN_KEYWORDS:      # vendor (`x-...`) or unknown: ignored, so never in conflict
            return x
        raise UnsupportedSchemaError(key, path, f"allOf combines different values {x!r} and {y!r}")

    def _objects(self, a: dict, b: dict, out: dict, path: str) -> None:
        sides = [s for s in (a, b) if any(k in s for k in _OBJECT_SHAPE)]
        if len(sides) == 1:
            out.update({k: sides[0][k] for k in _OBJECT_SHAPE if k in sides[0]})
            return
        if not sides:
            return
        pa, pb = a.get("properties", {}), b.get("properties", {})
        ea, eb = a.get("additionalProperties", True), b.get("additionalProperties", True)
        qa, qb = a.get("patternProperties") or {}, b.get("patternProperties") or {}
        if (qa or qb) and (ea is not True or eb is not True):
            # a side's additionalProperties covers the names its own properties and patterns miss,
            # which the other side's patterns would take in the merged schema
            raise UnsupportedSchemaError("patternProperties", path, "allOf of schemas with patternProperties, "
                                         "one of them with additionalProperties")
        props = {}
        for name in list(pa) + [k for k in pb if k not in pa]:
            props[name] = self.merge(pa.get(name, ea), pb.get(name, eb), f"{path}.properties.{name}")
        out["properties"] = props
        if qa or qb:
            # every name a pattern of either side matches holds that pattern's schema, declared or not
            # (the object's layout merges a declared name's schema with the patterns it matches)
            out["patternProperties"] = {p: (self.merge(qa[p], qb[p], f"{path}.patternProperties")
                                            if p in qa and p in qb else qa.get(p, qb.get(p)))
                                        for p in list(qa) + [p for p in qb if p not in qa]}
        if "additionalProperties" in a or "additionalProperties" in b:
            out["additionalProperties"] = self.merge(ea, eb, f"{path}.additionalProperties")

    def _arrays(self, a: dict, b: dict, out: dict, path: str) -> None:
        if not any(k in s for s in (a, b) for k in ("prefixItems", "items")):
            return
        pa, pb = a.get("prefixItems", []), b.get("prefixItems", [])
        ia, ib = a.get("items", True), b.get("items", True)
        n = max(len(pa), len(pb))
        if n:
            out["prefixItems"] = [
                self.merge(pa[i] if i < len(pa) else ia, pb[i] if i < len(pb) else ib, f"{path}.prefixItems[{i}]")
                for i in range(n)]
        if "items" in a or "items" in b:
            out["items"] = self.merge(ia, ib, f"{path}.items")

    def _contains(self, a: dict, b: dict, out: dict, path: str) -> None:
        """`contains` with its counts: a side's as they are, or both sides' counts of one schema
        (the intervals intersect). Two different schemas would count items under each at once."""
        if "contains" not in a or "contains" not in b:
            side = a if "contains" in a else b
            out.update({k: side[k] for k in ("contains", *_COUNTS) if k in side})
            return
        x, y = a["contains"], b["contains"]
        if not _same(x, y):
            raise UnsupportedSchemaError("contains", path, f"allOf of two different `contains` ({x!r} and {y!r}): "
                                         "items counted under each schema at once are not supported")
        out["contains"] = x
        if _COUNTS[0] in a or _COUNTS[0] in b:
            out["minContains"] = max(a.get("minContains", 1), b.get("minContains", 1))
        highs = [s["maxContains"] for s in (a, b) if "maxContains" in s]
        if highs:
            out["maxContains"] = min(highs)


def _same(x: Any, y: Any) -> bool:
    """JSON-equal (`json_values.json_equal`); False for what is not JSON."""
    try:
        return json_equal(x, y)
    except (TypeError, ValueError):
        return False


def _merge_multiple(x: Any, y: Any, path: str) -> Any:
    """Least common multiple: the multiples of both are exactly its multiples."""
    fx, fy = (Fraction(Decimal(repr(v)) if isinstance(v, float) else v) for v in (x, y))
    if fx <= 0 or fy <= 0:
        raise UnsupportedSchemaError("multipleOf", path, f"non-positive multipleOf {x!r} / {y!r}")
    common = Fraction(lcm(fx.numerator, fy.numerator), gcd(fx.denominator, fy.denominator))
    if common.denominator == 1:
        return int(common)
    return Decimal(common.numerator) / Decimal(common.denominator)  # a finite decimal: 2^a 5^b
