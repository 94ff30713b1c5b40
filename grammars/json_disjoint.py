"""The types a JSON schema's instances may have, and proofs that two schemas share no instance.

`type_set` reads the types `type` and `enum` allow, `whole_types` those of
which a schema takes every value, and `disjoint` proves that no instance
satisfies two schemas (types, enum values, a required discriminator property,
a member one requires and the other forbids): a sufficient check, never a
guess. `oneOf` uses them to leave provably disjoint branches as they are
(`grammars.json_schema`), and a negated `oneOf` to leave out pairs that
cannot both hold (`grammars.json_negation`).

Example:
    >>> a = {"properties": {"kind": {"const": "a"}}, "required": ["kind"], "type": "object"}
    >>> b = {"properties": {"kind": {"enum": ["b", "c"]}}, "required": ["kind"], "type": "object"}
    >>> disjoint(a, b), disjoint(a, {"type": "object"})
    (True, False)
"""

from __future__ import annotations

from typing import Any

from grammars.json_merge import ANNOTATIONS, TYPES, lacking
from grammars.json_values import json_key, json_type

__all__ = ["KEYWORD_TYPE", "type_set", "whole_types", "disjoint"]

Schema = Any


# Keywords that look at instances of one JSON type only (every value of another type passes them).
KEYWORD_TYPE = {
    **dict.fromkeys(("minLength", "maxLength", "pattern", "format"), "string"),
    **dict.fromkeys(("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"), "number"),
    **dict.fromkeys(("properties", "patternProperties", "additionalProperties", "required", "minProperties",
                     "maxProperties", "propertyNames", "dependentRequired", "dependentSchemas", "dependencies",
                     "unevaluatedProperties"), "object"),
    **dict.fromkeys(("items", "prefixItems", "additionalItems", "contains", "minContains", "maxContains",
                     "minItems", "maxItems", "uniqueItems", "unevaluatedItems"), "array"),
}


def type_set(s: Schema) -> set[str]:
    """Types an instance of `s` may have, from `type` and `enum` only."""
    if s is False:
        return set()
    if not isinstance(s, dict):
        return set(TYPES)
    t = s.get("type")
    types = set(TYPES) if t is None else ({t} if isinstance(t, str) else set(t))
    if "number" in types:
        types.add("integer")  # "integer" here means integer-valued numbers
    if "enum" in s:
        types &= {json_type(v) for v in s["enum"]}
    return types


def _discriminators(s: dict, draft: int) -> dict[str, set]:
    """Required properties whose values are pinned by enum/const (`const` where `draft` has it):
    name -> value keys."""
    out = {}
    props = s.get("properties", {})
    for name in s.get("required", []):
        sub = _read(props.get(name), draft)
        if isinstance(sub, dict):
            vals = sub.get("enum", [sub["const"]] if "const" in sub else None)
            if vals is not None:
                out[name] = {json_key(v) for v in vals}
    return out


def disjoint(a: Schema, b: Schema, draft: int = 2020) -> bool:
    """True when no instance can satisfy both (a sufficient check, never a guess). `draft`: the
    subschemas inside `a` and `b` are read without the keywords it lacks (`LACKS`), as inside a
    negation (`a` and `b` themselves are given so read)."""
    ta, tb = type_set(a), type_set(b)
    if not ta & tb:
        return True
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return False
    if "enum" in a and "enum" in b:
        if not {json_key(v) for v in a["enum"]} & {json_key(v) for v in b["enum"]}:
            return True
    if ta & tb == {"object"}:
        da, db = _discriminators(a, draft), _discriminators(b, draft)
        if any(not da[k] & db[k] for k in da.keys() & db.keys()):
            return True
        return _objects_disjoint(a, b, draft)
    return False


def _forbids(s: dict, name: str) -> bool:
    """No object valid under `s` has a member `name` (`properties` false, or not declared
    where `additionalProperties` is false and no pattern may take it)."""
    props = s.get("properties", {})
    if not isinstance(props, dict):
        return False
    if name in props:
        return props[name] is False
    return s.get("additionalProperties", True) is False and not s.get("patternProperties")


def _objects_disjoint(a: dict, b: dict, draft: int) -> bool:
    """No object is valid under both: one requires a member the other forbids, or both
    require a member whose schemas are disjoint."""
    ra = [k for k in a.get("required", ()) if isinstance(k, str)]
    rb = [k for k in b.get("required", ()) if isinstance(k, str)]
    if any(_forbids(b, k) for k in ra) or any(_forbids(a, k) for k in rb):
        return True
    pa, pb = a.get("properties", {}), b.get("properties", {})
    if not (isinstance(pa, dict) and isinstance(pb, dict)):
        return False
    return any(k in pa and k in pb and disjoint(_read(pa[k], draft), _read(pb[k], draft), draft)
               for k in set(ra) & set(rb))


def _read(s: Schema, draft: int) -> Schema:
    """A nested subschema as `disjoint` may read it: without the keywords its draft lacks, and in
    drafts 4 to 7 a `$ref` as anything (its siblings are ignored there; its target is not looked at)."""
    if not isinstance(s, dict):
        return s
    if draft <= 7 and "$ref" in s:
        return True
    return lacking(s, draft)


def whole_types(s: Schema) -> set[str]:
    """Types of which `s` accepts every value (a sufficient check: its assertions all look at
    other types). "integer" and "number" count only together."""
    if s is True:
        return set(TYPES)
    if not isinstance(s, dict) or "enum" in s or "const" in s:
        return set()
    from grammars.json_checks import KNOWN_KEYWORDS   # (it imports this module)

    out = type_set(s)
    for key in s:
        if key == "type" or key in ANNOTATIONS or key not in KNOWN_KEYWORDS:
            continue
        t = KEYWORD_TYPE.get(key)
        if t is None:                    # a keyword for every type (allOf, not, $ref, ...)
            return set()
        out.discard(t)
    if "number" not in out:
        out.discard("integer")
    return out
