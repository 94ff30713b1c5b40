"""Language-model backends: MLX (mlx-lm), Hugging Face (torch), vLLM and a deterministic mock.

Frameworks are imported only by the submodule that needs them, so
`import backends` works with none installed; `backends.MLXLM`,
`backends.HFLM` and `backends.AsyncVirtualLM` load their module on first access.

Example:
    >>> from backends import load_model_by_name          # doctest: +SKIP
    >>> lm = load_model_by_name("path/to/model", backend="mlx")  # doctest: +SKIP
    >>> lm.next_token_logprobs_sync([1, 2, 3]).shape      # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from backends.base import AsyncLM, load_model_by_name
from backends.mock import MockLM
from backends.model import ModelLM

__all__ = ["AsyncLM", "AsyncVirtualLM", "HFLM", "MLXLM", "MockLM", "ModelLM", "load_model_by_name"]


def __getattr__(name: str) -> Any:
    if name == "MLXLM":
        from backends.mlx import MLXLM

        return MLXLM
    if name == "HFLM":
        from backends.hf import HFLM

        return HFLM
    if name == "AsyncVirtualLM":
        from backends.vllm import AsyncVirtualLM

        return AsyncVirtualLM
    raise AttributeError(f"module 'backends' has no attribute {name!r}")
