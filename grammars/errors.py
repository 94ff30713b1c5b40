"""Errors raised while compiling constraints.

They live in `grammars/` because the compilers raise them; `constrained`
re-exports them so users catch one hierarchy.
"""

from __future__ import annotations

__all__ = [
    "ConstraintError",
    "UnsupportedSchemaError",
    "InvalidSchemaError",
    "UnsupportedRegexError",
    "RegexSyntaxError",
    "StateBudgetError",
    "EmptyConstraintError",
    "SchemaNote",
]


class ConstraintError(ValueError):
    """Base class: a constraint could not be compiled or used."""


class UnsupportedSchemaError(ConstraintError):
    """A JSON-schema keyword cannot be enforced exactly.

    Example:
        >>> str(UnsupportedSchemaError("uniqueItems", "$.properties.tags"))
        '`uniqueItems` is not supported at $.properties.tags.uniqueItems'
    """

    def __init__(self, keyword: str, path: str = "$", reason: str = "") -> None:
        self.keyword = keyword
        self.path = path
        self.reason = reason
        where = f"{path}.{keyword}" if keyword else path
        msg = f"`{keyword}` is not supported at {where}"
        super().__init__(f"{msg}: {reason}" if reason else msg)


class InvalidSchemaError(ConstraintError):
    """The schema itself is malformed (wrong type for a keyword, bad JSON, ...).

    Example:
        >>> str(InvalidSchemaError("`maxLength` must be a non-negative integer", "$.properties.name", -1))
        '`maxLength` must be a non-negative integer at $.properties.name, got -1'
    """

    _MISSING = object()

    def __init__(self, message: str, path: str = "$", value: object = _MISSING) -> None:
        self.path = path
        text = f"{message} at {path}"
        if value is not InvalidSchemaError._MISSING:
            text += f", got {value!r}"
        super().__init__(text)


def _shown(pattern: str, limit: int = 160) -> str:
    """`pattern` as quoted in a message: whole, or its two ends around its length when long.

    Example:
        >>> _shown("a" * 400, 20)
        "'aaaaaaaaaa'...(400 characters)...'aaaaaaaaaa'"
    """
    if len(pattern) <= limit:
        return repr(pattern)
    half = limit // 2
    return f"{pattern[:half]!r}...({len(pattern)} characters)...{pattern[-half:]!r}"


class RegexSyntaxError(ConstraintError):
    """The pattern is not a valid regular expression."""

    def __init__(self, pattern: str, message: str, position: int | None = None) -> None:
        self.pattern = pattern
        self.position = position
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"invalid regex {_shown(pattern)}{where}: {message}")


class UnsupportedRegexError(ConstraintError):
    """The pattern uses a construct no finite automaton can express.

    Example:
        >>> str(UnsupportedRegexError(r"(a)\\1", "backreference", 3))
        "backreference at position 3 of regex '(a)\\\\\\\\1' cannot be compiled to a finite automaton"
    """

    def __init__(self, pattern: str, construct: str, position: int | None = None) -> None:
        self.pattern = pattern
        self.construct = construct
        self.position = position
        where = f" at position {position}" if position is not None else ""
        super().__init__(
            f"{construct}{where} of regex {_shown(pattern)} cannot be compiled to a finite automaton"
        )


class StateBudgetError(ConstraintError):
    """A compiled constraint outgrew an explicit budget (automaton states, bytes, nesting).

    Attributes:
        budget: the limit that was reached.
        where: the JSON path or regex part that was growing, when known.
        option: the keyword argument (and CLI flag) that raises the limit, if any.
    """

    def __init__(self, budget: int, what: str = "automaton", *, unit: str = "states", where: str | None = None,
                 option: str | None = "max_states") -> None:
        self.budget, self.what, self.where, self.option = budget, what, where, option
        at = f" (growing at {where})" if where else ""
        fix = f"raise `{option}` or simplify the constraint" if option else "simplify the constraint"
        super().__init__(f"{what} needs more than {budget} {unit}{at}; {fix}")


class EmptyConstraintError(ConstraintError):
    """The constraint matches nothing: no JSON value satisfies the schema, or no string the regex.

    Attributes:
        where: JSON paths of subschemas that match no value (innermost first), when known.

    Example:
        >>> str(EmptyConstraintError("JSON schema", ["$.properties.n"]))
        'this JSON schema matches nothing: no JSON value satisfies it (subschemas matching nothing: $.properties.n)'
    """

    def __init__(self, what: str = "constraint", where: list[str] | None = None) -> None:
        self.what, self.where = what, list(dict.fromkeys(where or []))
        value = {"JSON schema": "JSON value", "regex": "string"}.get(what, "text")
        at = f" (subschemas matching nothing: {', '.join(self.where[:3])})" if self.where else ""
        super().__init__(f"this {what} matches nothing: no {value} satisfies it{at}")


class SchemaNote(UserWarning):
    """One entry of a schema's compile report: a keyword that was ignored or not enforced.

    `compile_json_schema` returns them all as `TokenFSM.report`, and warns once
    per compile those that may change which documents are valid (`warns`;
    category `SchemaNote`, so ``warnings.simplefilter("ignore", SchemaNote)``
    silences them); the CLI prints them all, one line each.

    Attributes:
        keyword: the keyword (`maxLenght`, `x-kubernetes-group`, `oneOf`, ...).
        path: the JSON path of the schema that holds it.
        kind: "unknown" (ignored), "vendor" (an `x-` extension, ignored),
            "approximated" (not enforced: `allow_approximate=True`),
            "annotation" (a `format` this engine does not know: not checked, as
            the spec allows; reported, never warned), "declared order" (an
            object `any_order=True` cannot hold, laid out in declared order) or
            "later draft" (a keyword the schema's declared draft lacks, such as
            `const` in draft 4: enforced, and ignored inside negations, so what
            passes is valid under both readings; ignored where enforcing it is
            not exact).
        suggestion: for an unknown keyword, the known one it is likely a typo of.
        warns: whether `compile_json_schema` warns it. Every kind does but three,
            which change no document's validity: "annotation", "vendor" (the
            spec allows extension keywords), and "unknown" unless it is likely
            a typo of a keyword that asserts something (`maxLenght`, `_format`;
            not `descrption` or `readonly`, typos of annotations). An unknown
            keyword with no likely typo (`propertyOrder`, `javaType`) is
            ignored by every validator, as the spec has it: reported only.

    Example:
        >>> str(SchemaNote("maxLenght", "$.name", "unknown", suggestion="maxLength"))
        'unknown keyword `maxLenght` at $.name is ignored (did you mean `maxLength`?)'
    """

    def __init__(self, keyword: str, path: str, kind: str, detail: str = "", suggestion: str | None = None) -> None:
        self.keyword, self.path, self.kind, self.suggestion = keyword, path, kind, suggestion
        if kind == "approximated":
            text = f"`{keyword}` at {path} is not enforced: {detail or 'the grammar over-approximates the schema'}"
        elif kind == "later draft":
            text = f"`{keyword}` at {path} is a keyword of a later draft than the schema's: {detail}"
        elif kind == "declared order":
            text = f"`{keyword}` at {path}: members only in declared order, not any order ({detail})"
        elif kind == "annotation":
            text = f"unknown `{keyword}` {detail} at {path} is not checked (an annotation, as the spec allows)"
        else:
            what = "vendor keyword" if kind == "vendor" else "unknown keyword"
            hint = f" (did you mean `{suggestion}`?)" if suggestion else " (treated as an annotation)"
            text = f"{what} `{keyword}` at {path} is ignored{hint}"
        self.warns = kind not in ("annotation", "vendor") and (
            kind != "unknown" or suggestion is not None and suggestion not in ANNOTATION_KEYWORDS)
        super().__init__(text)


# Keywords that only annotate: a typo of one changes no document's validity, so it is not
# warned (`SchemaNote.warns`). Those that name schemas or URIs (`$defs`, `$id`) are not here.
ANNOTATION_KEYWORDS = frozenset({"title", "description", "default", "examples", "$comment", "readOnly",
                                 "writeOnly", "deprecated", "contentMediaType", "contentEncoding",
                                 "contentSchema", "$schema"})
