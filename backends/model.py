"""`ModelLM`: what the framework backends (`MLXLM`, `HFLM`) share on top of `AsyncLM`.

Construction from a model and tokenizer or a loader run on the worker
thread, `from_name` for a local model directory, and step accounting for
live decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from backends.base import AsyncLM

__all__ = ["ModelLM"]


class ModelLM(AsyncLM):
    """What `MLXLM` and `HFLM` share: construction from a model and tokenizer or a loader, `from_name`.

    Subclasses implement `_load_pretrained(name, allow_download)`, which runs
    on the worker thread and returns ``(model, tokenizer)``.

    Args:
        model: the framework's causal LM (with `tokenizer`; or pass `loader`).
        tokenizer: its tokenizer.
        prefill_step_size: most prompt tokens per model call while prefilling.
        loader: a zero-argument callable returning ``(model, tokenizer)``, run on the worker thread.
        **opts: `AsyncLM` options: batch_size, timeout, cache_size (bytes), max_segments, prefix_caching.

    Example:
        >>> from backends.hf import HFLM  # doctest: +SKIP
        >>> lm = HFLM.from_name("path/to/model", batch_size=8)  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Any = None,
        tokenizer: Any = None,
        *,
        prefill_step_size: int = 2048,
        loader: Callable[[], tuple[Any, Any]] | None = None,
        **opts: Any,
    ) -> None:
        if not isinstance(prefill_step_size, int) or prefill_step_size < 1:
            raise ValueError(f"`prefill_step_size` must be a positive integer, got {prefill_step_size!r}")
        self.prefill_step_size = prefill_step_size
        if loader is None:
            if model is None or tokenizer is None:
                name = type(self).__name__
                raise ValueError(f"{name} needs `model` and `tokenizer`, or use {name}.from_name(path)")
            loader = lambda: (model, tokenizer)  # noqa: E731
        super().__init__(loader, **opts)

    @classmethod
    def from_name(cls, name: str, *, allow_download: bool = False, **opts: Any) -> ModelLM:
        """Load the model directory `name` on the worker thread; `ensure_loaded()` surfaces failures.

        Args:
            name: a local model directory; a hub repo id only if `allow_download`.
            allow_download: permit fetching `name` from the Hugging Face hub.
            **opts: constructor options (prefill_step_size, batch_size, ...).
        """

        def loader() -> tuple[Any, Any]:
            if not allow_download and not Path(name).is_dir():
                raise FileNotFoundError(f"no model directory at {name!r} (pass allow_download=True to fetch a hub repo)")
            return cls._load_pretrained(str(name), allow_download)

        return cls(loader=loader, **opts)

    @staticmethod
    def _load_pretrained(name: str, allow_download: bool) -> tuple[Any, Any]:
        raise NotImplementedError

    def _count_step(self, rows: int) -> None:
        """Account one live decoding step of `rows` tokens."""
        self.stats["model_tokens"] += rows
        self.stats["forward_calls"] += 1
