"""The error hierarchy users catch.

Compile-time errors come from `grammars` and are re-exported here, so
``except constrained.ConstraintError`` catches every constraint problem.
"""

from __future__ import annotations

from grammars.errors import (
    ConstraintError,
    EmptyConstraintError,
    InvalidSchemaError,
    RegexSyntaxError,
    StateBudgetError,
    UnsupportedRegexError,
    UnsupportedSchemaError,
)

__all__ = [
    "ConstraintError",
    "EmptyConstraintError",
    "InvalidSchemaError",
    "RegexSyntaxError",
    "StateBudgetError",
    "UnsupportedRegexError",
    "UnsupportedSchemaError",
    "IncompatibleVocabularyError",
    "BackendUnavailableError",
]


class IncompatibleVocabularyError(ConstraintError):
    """No token (or token sequence) of the vocabulary can spell some bytes.

    Example:
        >>> str(IncompatibleVocabularyError([0x7B]))
        "no token of the vocabulary can spell the byte(s) 0x7b ('{')"
    """

    def __init__(self, missing: list[int], what: str = "") -> None:
        self.missing = sorted(missing)
        shown = ", ".join(f"{b:#04x} ({chr(b)!r})" if 0x20 <= b < 0x7F else f"{b:#04x}" for b in self.missing[:16])
        more = f" and {len(self.missing) - 16} more" if len(self.missing) > 16 else ""
        suffix = f" needed by {what}" if what else ""
        super().__init__(f"no token of the vocabulary can spell the byte(s) {shown}{more}{suffix}")

    @classmethod
    def width(cls, vocab_size: int, columns: int) -> "IncompatibleVocabularyError":
        """Logits narrower than the constraint's vocabulary: another model's tokenizer.

        Example:
            >>> str(IncompatibleVocabularyError.width(50257, 32000))[:60]
            'the constraint was compiled for a vocabulary of 50257 tokens'
        """
        err = cls([])
        ConstraintError.__init__(err, f"the constraint was compiled for a vocabulary of {vocab_size} tokens, but the "
                                      f"logits have {columns} columns: compile it with this model's tokenizer")
        return err


class BackendUnavailableError(ImportError):
    """A backend's framework is not installed.

    Example:
        >>> str(BackendUnavailableError("mlx", "mlx"))
        "the 'mlx' backend needs extra packages: pip install 'constrained[mlx]'"
    """

    def __init__(self, backend: str, extra: str, cause: str = "") -> None:
        self.backend = backend
        msg = f"the {backend!r} backend needs extra packages: pip install 'constrained[{extra}]'"
        super().__init__(f"{msg} ({cause})" if cause else msg)
