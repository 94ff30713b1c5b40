"""Session-cached tiny models for the generation tests: one tokenizer load per vocabulary.

`AutoTokenizer` costs seconds here (it imports half of transformers); the tiny
model directories pin ``PreTrainedTokenizerFast``, so we load that class
directly and share the object between the MLX and torch models.

Example:
    >>> lm = async_lm("llama-spm", "mlx")  # doctest: +SKIP
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from backends.tiny import tiny_model_dir

__all__ = ["VOCAB_ARCH", "model_dir", "hf_tokenizer", "mlx_model", "hf_model", "async_lm"]

# The real llama.cpp vocabularies the generation tests run on, with their architecture.
VOCAB_ARCH = {"llama-spm": "llama", "llama-bpe": "llama", "qwen2": "qwen2"}


@functools.cache
def model_dir(vocab: str) -> Path:
    return tiny_model_dir(VOCAB_ARCH[vocab], vocab)


@functools.cache
def hf_tokenizer(vocab: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(model_dir(vocab))


@functools.cache
def mlx_model(vocab: str) -> Any:
    from mlx_lm.utils import load_model

    return load_model(model_dir(vocab))[0]


@functools.cache
def hf_model(vocab: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir(vocab), dtype=torch.float32).eval()


@functools.cache
def async_lm(vocab: str, backend: str) -> Any:
    """An `AsyncLM` (MLXLM or HFLM) on the tiny model of `vocab`."""
    if backend == "mlx":
        from backends.mlx import MLXLM

        return MLXLM(mlx_model(vocab), hf_tokenizer(vocab))
    from backends.hf import HFLM

    return HFLM(hf_model(vocab), hf_tokenizer(vocab))
