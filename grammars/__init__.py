"""Constraint languages (regex, JSON Schema) compiled to byte-level automata.

This package depends only on the standard library, numpy and small pure-Python
libraries; it never imports `constrained` or `backends`.
"""

from __future__ import annotations

from grammars.errors import (  # noqa: I001 (errors first: the compilers import them)
    ConstraintError,
    InvalidSchemaError,
    RegexSyntaxError,
    StateBudgetError,
    UnsupportedRegexError,
    UnsupportedSchemaError,
)

from grammars.ast import Grammar
from grammars.dfa import DEAD, LazyDFA, compile_dfa
from grammars.json_schema import json_schema_grammar
from grammars.regex import regex_grammar, regex_node

__all__ = [
    "Grammar",
    "LazyDFA",
    "compile_dfa",
    "DEAD",
    "json_schema_grammar",
    "regex_grammar",
    "regex_node",
    "ConstraintError",
    "InvalidSchemaError",
    "RegexSyntaxError",
    "StateBudgetError",
    "UnsupportedRegexError",
    "UnsupportedSchemaError",
]
