"""Constraint languages (regex, JSON Schema) compiled to byte-level automata.

This package depends only on the standard library, numpy and small pure-Python
libraries; it never imports `constrained` or `backends`.
"""

from __future__ import annotations

from grammars import native as _native

_native.install()    # before any other module: their compiled copies, where fresh (see `grammars.native`)

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
from grammars.json_refs import load_schema
from grammars.json_schema import WhitespacePolicy, json_schema_grammar
from grammars.regex import regex_grammar, regex_node

__all__ = [
    "Grammar",
    "LazyDFA",
    "compile_dfa",
    "DEAD",
    "json_schema_grammar",
    "load_schema",
    "WhitespacePolicy",
    "regex_grammar",
    "regex_node",
    "ConstraintError",
    "InvalidSchemaError",
    "RegexSyntaxError",
    "StateBudgetError",
    "UnsupportedRegexError",
    "UnsupportedSchemaError",
]
