"""Shared fixtures: real tokenizers rebuilt from llama.cpp's vocab files.

The first use downloads the llama-cpp-python sdist once (see
`constrained.vocab_files`); a failed download raises `VocabDownloadError`, so
tests that need a tokenizer error out instead of skipping.

Use the factories (``tokenizer("qwen2")``, ``hf_tok("llama-spm")``,
``vocabulary("gpt-2")``) or the named fixtures (``gpt2_tok``, ...). Each object
is built once per session.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any, Callable

import pytest
from hypothesis import settings

from constrained.gguf_tokenizers import hf_tokenizer, load_tokenizer
from constrained.vocab import Vocabulary

# Tests of the compiled kernels: they need numba, and are skipped when the
# kernels are switched off on purpose (CONSTRAINED_JIT=0 runs the numpy paths).
requires_jit = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None or os.environ.get("CONSTRAINED_JIT", "1") == "0",
    reason="compiled kernels unavailable (numba missing or CONSTRAINED_JIT=0)")

_load = functools.cache(load_tokenizer)

# Property tests explore new examples on every local run; under CI they draw the
# same examples each time, so whether a commit lands does not depend on the draw.
# A failure found locally is fixed, and its case added to the test, before it lands.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# MLX's and torch's thread pools sometimes abort in their static destructors when the
# interpreter exits ("terminate called without an active exception", status 134),
# after every test passed: measured 3 of 6 runs of tests/test_cli.py. As the CLI does
# (`constrained.cli.run`), the session leaves with os._exit once pytest has printed
# everything, so the status is pytest's own.
_exit_status: list[int] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _exit_status.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _exit_status and os.environ.get("CONSTRAINED_PYTEST_NORMAL_EXIT") != "1":
        import sys

        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exit_status[-1])
_hf = functools.cache(hf_tokenizer)


@functools.cache
def _vocabulary(name: str) -> Vocabulary:
    return Vocabulary.from_tokenizer(_hf(name))


@pytest.fixture(scope="session")
def tokenizer() -> Callable[[str], Any]:
    """Factory: ``tokenizer(name)`` -> `tokenizers.Tokenizer` for a name in `VOCABS`."""
    return _load


@pytest.fixture(scope="session")
def hf_tok() -> Callable[[str], Any]:
    """Factory: ``hf_tok(name)`` -> transformers `PreTrainedTokenizerFast` (bos/eos/unk/pad set)."""
    return _hf


@pytest.fixture(scope="session")
def vocabulary() -> Callable[[str], Vocabulary]:
    """Factory: ``vocabulary(name)`` -> `Vocabulary` built from the HF tokenizer."""
    return _vocabulary


@pytest.fixture(scope="session")
def gpt2_tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer("gpt-2")


@pytest.fixture(scope="session")
def llama_bpe_tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer("llama-bpe")


@pytest.fixture(scope="session")
def llama_spm_tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer("llama-spm")


@pytest.fixture(scope="session")
def qwen2_tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer("qwen2")


@pytest.fixture(scope="session")
def phi3_tok(tokenizer: Callable[[str], Any]) -> Any:
    return tokenizer("phi-3")
