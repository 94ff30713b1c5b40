"""constrained: guaranteed-valid structured generation for MLX and Hugging Face."""

from __future__ import annotations

from constrained.errors import (
    BackendUnavailableError,
    ConstraintError,
    EmptyConstraintError,
    IncompatibleVocabularyError,
    InvalidSchemaError,
    RegexSyntaxError,
    StateBudgetError,
    UnsupportedRegexError,
    UnsupportedSchemaError,
)

from constrained.compile import compile_json_schema, compile_regex
from constrained.generate import (
    Generation,
    GenerationRequest,
    agenerate,
    agenerate_batch,
    generate,
    generate_batch,
)
from constrained.guide import Guide
from constrained.streaming import astream, stream
from constrained.processors import hf_logits_processor, mlx_processor
from constrained.token_fsm import TokenFSM
from constrained.token_trie import TokenTrie
from constrained.vocab import Vocabulary

__version__ = "0.1.0"

__all__ = [
    "Vocabulary",
    "compile_json_schema",
    "compile_regex",
    "TokenFSM",
    "Guide",
    "TokenTrie",
    "mlx_processor",
    "hf_logits_processor",
    "generate",
    "agenerate",
    "generate_batch",
    "agenerate_batch",
    "stream",
    "astream",
    "Generation",
    "GenerationRequest",
    "BackendUnavailableError",
    "ConstraintError",
    "EmptyConstraintError",
    "IncompatibleVocabularyError",
    "InvalidSchemaError",
    "RegexSyntaxError",
    "StateBudgetError",
    "UnsupportedRegexError",
    "UnsupportedSchemaError",
]
