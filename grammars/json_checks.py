"""Schema keyword checks: malformed values, unsupported and unknown keywords.

`check_schema` looks at one schema object (not its children, which are
checked when the compiler reaches them) and returns it unchanged, or without
the unsupported keywords when `approximate` is on (each drop is warned).

Example:
    >>> check_schema({"maxLength": 3}, "$", False)
    {'maxLength': 3}
    >>> check_schema({"maxLength": -1}, "$.properties.name", False)
    Traceback (most recent call last):
    ...
    grammars.errors.InvalidSchemaError: `maxLength` must be a non-negative integer at $.properties.name, got -1
"""

from __future__ import annotations

import warnings
from decimal import Decimal
from functools import lru_cache
from typing import Any

from grammars.errors import InvalidSchemaError, SchemaNote, UnsupportedSchemaError
from grammars.json_merge import ANNOTATIONS, LACKS, TYPES
from grammars.json_negation import negation

__all__ = ["check_schema", "shape_errors", "dependent_names", "KNOWN_KEYWORDS"]

_NONNEG_INT = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
               "minContains", "maxContains")
_NUMBER = ("minimum", "maximum")
_SCHEMA_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA = ("not", "additionalProperties", "propertyNames", "additionalItems", "contains", "if", "then",
           "else", "unevaluatedProperties", "unevaluatedItems")
_OTHER = ("type", "enum", "const", "required", "pattern", "format", "multipleOf", "items", "uniqueItems",
          "exclusiveMinimum", "exclusiveMaximum", "$ref", "dependentRequired", "dependencies",
          "$dynamicRef", "$recursiveRef", "$recursiveAnchor")
KNOWN_KEYWORDS = frozenset(_NONNEG_INT + _NUMBER + _SCHEMA_MAP + _SCHEMA_LIST + _SCHEMA + _OTHER) | ANNOTATIONS
_MAYBE_UNSUPPORTED = frozenset(("dependentSchemas", "dependentRequired", "dependencies", "$dynamicRef",
                                "$recursiveRef", "if"))     # (`unevaluated*`: `Compiler._unevaluated`)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, Decimal)) and not isinstance(v, bool)


def _is_schema(v: Any) -> bool:
    return isinstance(v, (dict, bool))


def _nonneg_int(v: Any) -> bool:
    if isinstance(v, int):
        return v >= 0 and not isinstance(v, bool)
    return isinstance(v, float) and v.is_integer() and v >= 0


def _each(values: Any, types: Any) -> bool:
    """Whether every one of `values` is an instance of `types` (a loop: no generator per call)."""
    for x in values:
        if not isinstance(x, types):
            return False
    return True


def _schema_map(v: Any) -> bool:
    return isinstance(v, dict) and _each(v.values(), (dict, bool))


def _schema_list(v: Any) -> bool:
    return isinstance(v, list) and _each(v, (dict, bool))


def _type_names(t: Any) -> bool:
    if isinstance(t, str):
        return t in TYPES
    if not isinstance(t, list):
        return False
    for n in t:
        if not (isinstance(n, str) and n in TYPES):
            return False
    return len(set(t)) == len(t)


# keyword -> (whether its value is well-formed, what it must be): each subschema's own keys are
# looked up here (a few per subschema), instead of testing it for every keyword checked
_CHECKS: dict[str, tuple[Any, str]] = {
    **{k: (_nonneg_int, "a non-negative integer") for k in _NONNEG_INT},
    **{k: (_is_number, "a number") for k in _NUMBER},
    **{k: (lambda v: _is_number(v) or isinstance(v, bool), "a number (or a boolean in draft 4)")
       for k in ("exclusiveMinimum", "exclusiveMaximum")},
    "multipleOf": (lambda v: _is_number(v) and v > 0, "a number greater than 0"),
    **{k: (_schema_map, "an object whose values are schemas") for k in _SCHEMA_MAP},
    **{k: (_schema_list, "an array of schemas") for k in _SCHEMA_LIST},
    **{k: (_is_schema, "a schema (an object or a boolean)") for k in _SCHEMA},
    "items": (lambda v: _is_schema(v) or _schema_list(v), "a schema or an array of schemas"),
    "type": (_type_names, f"a type name or a list of unique type names from {list(TYPES)}"),
    "required": (lambda v: isinstance(v, list) and _each(v, str), "an array of strings"),
    "enum": (lambda v: isinstance(v, list), "an array"),
    **{k: (lambda v: isinstance(v, str), "a string") for k in ("pattern", "format", "$ref")},
    "uniqueItems": (lambda v: isinstance(v, bool), "a boolean"),
}
_NON_EMPTY = frozenset(("allOf", "anyOf", "oneOf"))
_NONNEG_INT_KEYS = frozenset(_NONNEG_INT)


def shape_errors(s: dict, path: str) -> None:
    """Raise `InvalidSchemaError` for the first keyword of `s` whose value has the wrong shape."""
    checks = _CHECKS
    for key, value in s.items():
        check = checks.get(key)
        if check is not None and not check[0](value):
            raise InvalidSchemaError(f"`{key}` must be {check[1]}", path, value)
        if not value and key in _NON_EMPTY and isinstance(value, list):
            raise InvalidSchemaError(f"`{key}` must be a non-empty array", path, value)


def _unsupported(s: dict, draft: int = 2020) -> list[str]:
    """Keywords of `s` that would constrain instances in ways we cannot encode."""
    if _MAYBE_UNSUPPORTED.isdisjoint(s):
        return []
    out = []
    trivial = {"dependentRequired": {}, "dependentSchemas": {}, "dependencies": {}}
    for key in ("dependentSchemas", "dependentRequired", "dependencies", "$dynamicRef", "$recursiveRef"):
        if key in s and not (key in trivial and s[key] == trivial[key]) and not _exact_dependencies(key, s[key]):
            out.append(key)
    if "if" in s and ("then" in s or "else" in s) and negation(s["if"], draft=draft) is None:  # else rewritten
        out.append("if")
    return out


def _why(key: str, s: dict, path: str, draft: int = 2020) -> str:
    """Why `_unsupported` refuses `key` of `s` (at `path`)."""
    if key == "if":
        why: list[str] = []
        negation(s["if"], why=why, at=f"{path}.if", draft=draft)
        return ("the instances the condition rejects (its negation) have no exact form here"
                + (f": {why[0]}" if why else ""))
    if key in ("$dynamicRef", "$recursiveRef"):
        return "dynamic references are not resolved here; use `$ref`"
    return "a dependent schema of this form does not compile exactly"


def _exact_dependencies(key: str, value: Any) -> bool:
    """Whether `dependentRequired` / `dependentSchemas` / `dependencies` `value` is of the forms
    compiled exactly: names required by a name, and dependent schemas that only require names or
    forbid them (``"properties": {"x": false}``, or ``{"not": {}}``), which objects enforce
    (`grammars.json_objects`); any other dependent schema becomes a condition
    (`json_merge.normalize`), exact where its schema compiles."""
    if key not in ("dependentRequired", "dependentSchemas", "dependencies") or not isinstance(value, dict):
        return False
    return all(dependent_names(key, v) is not None or (key != "dependentRequired" and isinstance(v, (dict, bool)))
               for v in value.values())


def dependent_names(key: str, v: Any) -> tuple[list[str], list[str]] | None:
    """(names required, names forbidden) when an object has the name `v` depends on; None for another form."""
    if isinstance(v, list) and key != "dependentSchemas":
        return (v, []) if all(isinstance(n, str) for n in v) else None
    if key == "dependentRequired" or not isinstance(v, dict):
        return ([], []) if v is True and key != "dependentRequired" else None
    required = v.get("required", [])
    props = v.get("properties", {})
    if not (isinstance(required, list) and all(isinstance(n, str) for n in required) and isinstance(props, dict)):
        return None
    if any(k not in ("required", "properties") and k not in ANNOTATIONS for k in v):
        return None
    if not all(p is False or p == {"not": {}} for p in props.values()):
        return None
    return list(required), list(props)


@lru_cache(maxsize=4096)
def _likely(key: str) -> str | None:
    """The known keyword `key` is likely a typo of: within 2 edits (1 for short keys), else None.
    (Memoized: real schemas repeat their vendor and annotation keys, and this costs ~0.1 ms a key.)"""
    best, best_d = None, 2 if len(key) > 4 else 1
    for known in _KNOWN_SORTED:
        if abs(len(known) - len(key)) <= best_d:
            d = _edits(key.lower(), known.lower(), best_d)
            if d <= best_d and (best is None or d < _edits(key.lower(), best.lower(), 2)):
                best, best_d = known, d
    return best


_KNOWN_SORTED = sorted(KNOWN_KEYWORDS)
# keywords only some drafts have (`json_refs.draft_of` numbers them): draft-04's `id` is its `$id`
_DRAFT_KEYWORDS = {4: frozenset({"id"})}


def _edits(a: str, b: str, limit: int) -> int:
    """Levenshtein distance with adjacent transpositions, or limit + 1 once it exceeds `limit`."""
    prev2, prev = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if prev2 is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > limit:
            return limit + 1
        prev2, prev = prev, cur
    return prev[-1] if prev[-1] <= limit else limit + 1


def _note(notes: list[SchemaNote] | None, note: SchemaNote) -> None:
    if notes is not None:
        notes.append(note)
    elif note.warns:
        warnings.warn(note, stacklevel=4)


def check_schema(s: dict, path: str, approximate: bool, warn_unknown: bool = True,
                 notes: list[SchemaNote] | None = None, draft: int = 2020) -> dict:
    """Validate keyword shapes; raise (or, when approximating, drop) unsupported ones.

    Ignored and dropped keywords are appended to `notes` (warned when it is None).
    `draft` (`json_refs.draft_of`): keywords of that draft only (`id`, draft-04's `$id`) are known too.
    """
    shape_errors(s, path)
    if not _NONNEG_INT_KEYS.isdisjoint(s):
        floats = {k: int(s[k]) for k in _NONNEG_INT if isinstance(s.get(k), float)}
        s = {**s, **floats} if floats else s
    drop = _unsupported(s, draft)
    later = [k for k in drop if draft != 2020 and k in LACKS[draft]]
    for key in later:               # a keyword the declared draft lacks: ignored, as its validators do
        _note(notes, SchemaNote(key, path, "later draft", f"draft-{draft:02d}'s validators ignore it, and it is "
                                f"ignored here: enforcing it is not exact ({_why(key, s, path, draft)})"))
    if later:
        gone = set(later) | ({"then", "else"} if "if" in later else set())
        s = {k: v for k, v in s.items() if k not in gone}
        drop = [k for k in drop if k not in later]
    if drop and not approximate:
        raise UnsupportedSchemaError(drop[0], path, _why(drop[0], s, path, draft))
    if warn_unknown and not KNOWN_KEYWORDS.issuperset(s):
        for key in s:
            if key not in KNOWN_KEYWORDS and key not in _DRAFT_KEYWORDS.get(draft, ()):
                vendor = key.startswith("x-")
                _note(notes, SchemaNote(key, path, "vendor" if vendor else "unknown",
                                        suggestion=None if vendor else _likely(key)))
    if not drop:
        return s
    for key in drop:
        _note(notes, SchemaNote(key, path, "approximated"))
    gone = set(drop) | ({"then", "else"} if "if" in drop else set())
    return {k: v for k, v in s.items() if k not in gone}
