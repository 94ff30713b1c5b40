"""The validity oracle for benchmark corpora: `jsonschema` plus the spec's exact readings.

`jsonschema` is the judge of every test's `valid` flag, with these fixes so
that it reads the spec as written (the same ones `tests/test_json_schema.py`
uses by importing them from here):

- with `numbers="exact"` (the compile option of the same name), `multipleOf`
  in decimal (jsonschema divides floats and calls 19.99 not a multiple of
  0.01); by default it divides floats, as every double-based validator does;
- `pattern` read as ECMA-262 reads it (`ecma_regex`): ASCII `\\d` / `\\w`, `$` only at the end,
  `.` and `\\s` as ECMA defines them;
- reference checks for the formats whose optional checkers (rfc3339-validator,
  fqdn, rfc3987, isoduration) are usually not installed, so that a malformed
  `date-time` is not silently "valid".

Example:
    >>> is_valid({"type": "number", "multipleOf": 0.01}, 19.99), is_valid({"type": "number", "multipleOf": 0.01}, 19.99, "exact")
    (False, True)
    >>> is_valid({"type": "string", "format": "date-time"}, "2024-01-31 23:59:59Z")
    False
"""

from __future__ import annotations

import copy
import datetime
import functools
import re
from decimal import Decimal
from typing import Any, Iterator

import jsonschema

__all__ = ["validator", "is_valid", "ecma_regex", "key_order", "canonical", "strict_schema"]

_RFC3339_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?([zZ]|[+-]([01]\d|2[0-3]):[0-5]\d)")
_DURATION = re.compile(
    r"P(?:(?:\d+D|\d+M(?:\d+D)?|\d+Y(?:\d+M(?:\d+D)?)?)(?:T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S))?"
    r"|T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)|\d+W)")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_URI_CHARS = re.compile(r"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?#\[\]]|%[0-9A-Fa-f]{2})*")


def _is_time(value: Any) -> bool:
    return not isinstance(value, str) or _RFC3339_TIME.fullmatch(value) is not None


def _is_date_time(value: Any) -> bool:
    if not isinstance(value, str):
        return True
    date, sep, time = value[:10], value[10:11], value[11:]
    try:
        datetime.date.fromisoformat(date)
    except ValueError:
        return False
    return re.fullmatch(r"\d{4}-\d\d-\d\d", date) is not None and sep in ("T", "t") and _is_time(time)


def _is_hostname(value: Any) -> bool:
    return not isinstance(value, str) or (
        len(value) <= 253 and all(_LABEL.fullmatch(label) for label in value.split(".")))


def _is_uri(value: Any) -> bool:
    if not isinstance(value, str):
        return True
    scheme, colon, rest = value.partition(":")
    if not colon or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+\-.]*", scheme) or not _URI_CHARS.fullmatch(rest):
        return False
    # one fragment, one IP literal
    return "#" not in rest.partition("#")[2] and "[" not in rest.replace("[", "", 1)


def _is_duration(value: Any) -> bool:
    return not isinstance(value, str) or _DURATION.fullmatch(value) is not None


def _format_checker(cls: Any) -> jsonschema.FormatChecker:
    checker = copy.deepcopy(cls.FORMAT_CHECKER)
    for name, fn in (("time", _is_time), ("date-time", _is_date_time), ("hostname", _is_hostname),
                     ("uri", _is_uri), ("duration", _is_duration)):
        checker.checks(name)(fn)
    return checker


def _decimal_multiple_of(validator: Any, multiple: Any, instance: Any, schema: Any) -> Iterator[Exception]:
    if validator.is_type(instance, "number"):
        q = Decimal(repr(instance)) / Decimal(repr(multiple))
        if q != q.to_integral_value():
            yield jsonschema.ValidationError(f"{instance!r} is not a multiple of {multiple!r}")


# ECMA-262's WhiteSpace and LineTerminator code points: what `\s` matches there (Python's `\s` with
# re.ASCII has only the first six)
_ECMA_SPACES = "\\t\\n\\v\\f\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"


@functools.lru_cache(maxsize=4096)
def ecma_regex(pattern: str) -> re.Pattern:
    """`pattern` read as ECMA-262 reads it (no flags), compiled by Python's `re`.

    `re.ASCII` gives ECMA's ASCII `\\d`, `\\w` and `\\b`; the rest is rewritten:
    `$` is the end of the input (Python's also matches before a final newline:
    "ab\\n" matched ``^ab$``), `.` is any character but a line terminator (\\n,
    \\r, U+2028, U+2029; Python's only excludes \\n), and `\\s` / `\\S` are
    ECMA's white space and line terminators (U+00A0, U+FEFF, ...), inside a
    class too where they can be (`\\S` inside a class stays Python's). A pattern
    Python cannot read (ECMA-only syntax) raises `re.error`.

    Example:
        >>> bool(ecma_regex("^ab$").search("ab\\n")), bool(re.search("^ab$", "ab\\n"))
        (False, True)
    """
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            e = pattern[i + 1]
            if e == "s":
                out.append(_ECMA_SPACES if in_class else f"[{_ECMA_SPACES}]")
            elif e == "S" and not in_class:
                out.append(f"[^{_ECMA_SPACES}]")
            else:
                out.append(c + e)
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if pattern.startswith("^]", i + 1) or pattern.startswith("]", i + 1):
                # ECMA's `[]` / `[^]` end there (nothing / anything); Python reads the `]` as a member
                out.append("(?!)" if pattern[i + 1] == "]" else "[\\s\\S]")
                i += 2 if pattern[i + 1] == "]" else 3
                in_class = False
                continue
        elif c == ".":
            c = "[^\\n\\r\\u2028\\u2029]"
        elif c == "$":
            c = "\\Z"
        out.append(c)
        i += 1
    return re.compile("".join(out), re.ASCII)


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Exception]:
    if validator.is_type(instance, "string") and not ecma_regex(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def validator(schema: Any, numbers: str = "double") -> Any:
    """A jsonschema validator for `schema` (its declared draft, else 2020-12) with the fixes above."""
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    fixes: dict[str, Any] = {"pattern": _ecma_pattern}
    if numbers == "exact":
        fixes["multipleOf"] = _decimal_multiple_of
    cls = jsonschema.validators.extend(base, fixes)
    return cls(schema, format_checker=_format_checker(base))


def is_valid(schema: Any, instance: Any, numbers: str = "double") -> bool:
    """True iff `instance` is valid under `schema` (see the module docstring)."""
    return validator(schema, numbers).is_valid(instance)


def key_order(schema: Any) -> dict[str, int]:
    """Rank of every property name in schema order (declared `properties`, then required-only names).

    Every engine benchmarked emits object members in this order by default,
    so instances are serialized in it (extra keys keep their place after).
    """
    order: dict[str, int] = {}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                for name in list(props) + [r for r in node.get("required", []) if r not in props]:
                    order.setdefault(name, len(order))
            for name in _dependency_names(node):
                order.setdefault(name, len(order))
            for key, value in node.items():
                if key not in ("enum", "const", "examples", "default"):
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)
    return order


def _dependency_names(node: dict) -> list[str]:
    """The names an object's dependencies mention, in the order its layout places them (after its
    declared properties: `grammars.json_objects.object_node`); none for forms it refuses."""
    from grammars.errors import ConstraintError
    from grammars.json_objects import dependencies, dependency_names

    try:
        return dependency_names(*dependencies(node, "$"))
    except ConstraintError:
        return []


def canonical(value: Any, order: dict[str, int]) -> Any:
    """`value` with object keys in schema order, unknown keys after them in their own order."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (order.get(k, len(order)), list(value).index(k)))
        return {k: canonical(value[k], order) for k in keys}
    if isinstance(value, list):
        return [canonical(v, order) for v in value]
    return value


def strict_schema(schema: Any) -> Any:
    """`schema` with additionalProperties false made explicit (what the compiler's strict=True means)."""
    if isinstance(schema, dict):
        out = {k: strict_schema(v) if k not in ("enum", "const") else v for k, v in schema.items()}
        if out.get("type") == "object" or "properties" in out:
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [strict_schema(x) for x in schema]
    return schema
