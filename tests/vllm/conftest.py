"""Fixtures for the vLLM tests: one real engine on a tiny random model, shared by the session.

Skipped as a whole where vLLM is not installed (the main suite's venv). On a
machine without CUDA, the CPU settings vLLM needs are set unless the caller
set them: `VLLM_CPU_KVCACHE_SPACE=1` (GiB of KV cache; the default asks for
more than a small machine's memory check allows) and
`VLLM_CPU_OMP_THREADS_BIND=nobind` (do not reserve a core per worker).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["test_*.py"]   # not installed: nothing here is collected (the main suite's venv)
else:
    import torch

    if not torch.cuda.is_available():
        for key, value in {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
                           "VLLM_CPU_OMP_THREADS_BIND": "nobind"}.items():
            os.environ.setdefault(key, value)

# Engine options for the tiny model: float32 (half precision is slow on CPU), no graph capture, short contexts.
ENGINE_OPTS: dict[str, Any] = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512}
# The logprobs cache holds this many bytes: 8 next-token rows of the 32000-token vocabulary.
CACHE_BYTES = 8 * 32000 * 4


@pytest.fixture(scope="session")
def vllm_model_dir() -> Path:
    """A tiny random llama (head_dim 32, Llama-2 tokenizer), built once and cached."""
    from backends.tiny import VLLM_TINY_CONFIG, tiny_model_dir

    return Path(tiny_model_dir("llama", "llama-spm", config=VLLM_TINY_CONFIG))


@pytest.fixture(scope="session")
def vlm(vllm_model_dir: Path) -> Iterator[Any]:
    """The session's one `AsyncVirtualLM` (engine startup takes about a minute on 2 CPU cores)."""
    from backends.base import load_model_by_name

    lm = load_model_by_name(str(vllm_model_dir), backend="vllm",
                            llm_opts={"engine_opts": ENGINE_OPTS, "cache_size": CACHE_BYTES})
    lm.ensure_loaded()
    yield lm
    lm.close()


def record_aborts(lm: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the requests `lm`'s engine aborts from now on (vLLM aborts a request whose caller left)."""
    seen: list[str] = []
    real = lm.model.abort

    async def abort(request_id: Any, *args: Any, **kwargs: Any) -> Any:
        seen.extend([request_id] if isinstance(request_id, str) else request_id)
        return await real(request_id, *args, **kwargs)

    monkeypatch.setattr(lm.model, "abort", abort)
    return seen
