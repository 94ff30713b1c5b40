"""constrained: guaranteed-valid structured generation for MLX and Hugging Face."""

from __future__ import annotations

from constrained.errors import (
    BackendUnavailableError,
    ConstraintError,
    IncompatibleVocabularyError,
    InvalidSchemaError,
    RegexSyntaxError,
    StateBudgetError,
    UnsupportedRegexError,
    UnsupportedSchemaError,
)

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "ConstraintError",
    "IncompatibleVocabularyError",
    "InvalidSchemaError",
    "RegexSyntaxError",
    "StateBudgetError",
    "UnsupportedRegexError",
    "UnsupportedSchemaError",
]
