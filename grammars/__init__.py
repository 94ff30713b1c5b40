"""Constraint languages (regex, JSON Schema) compiled to byte-level automata.

This package depends only on the standard library, numpy and small pure-Python
libraries; it never imports `constrained` or `backends`.
"""

from __future__ import annotations

from grammars.errors import (
    ConstraintError,
    InvalidSchemaError,
    RegexSyntaxError,
    StateBudgetError,
    UnsupportedRegexError,
    UnsupportedSchemaError,
)

__all__ = [
    "ConstraintError",
    "InvalidSchemaError",
    "RegexSyntaxError",
    "StateBudgetError",
    "UnsupportedRegexError",
    "UnsupportedSchemaError",
]
