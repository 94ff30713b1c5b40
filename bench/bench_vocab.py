"""Micro-benchmarks: building a `Vocabulary` from real tokenizers.

Run: ``python -m pytest bench/bench_vocab.py --benchmark-only -q``.
The tokenizers come from llama.cpp's vocab files (downloaded and cached on
first use, see `constrained.vocab_files`).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from constrained.gguf_tokenizers import hf_tokenizer, load_tokenizer
from constrained.vocab import Vocabulary

pytest.importorskip("pytest_benchmark")

_hf = functools.cache(hf_tokenizer)

# (vocab name, eos id for the raw tokenizer)
CASES = [("llama-bpe", 128001), ("qwen2", 151643), ("llama-spm", 2)]


@pytest.mark.parametrize(("name", "eos"), CASES)
def test_from_hf_fast_tokenizer(benchmark: Any, name: str, eos: int) -> None:
    tok = _hf(name)
    vocab = benchmark(Vocabulary.from_tokenizer, tok)
    assert vocab.eos_token_ids == (eos,)


@pytest.mark.parametrize(("name", "eos"), CASES)
def test_from_raw_tokenizer(benchmark: Any, name: str, eos: int) -> None:
    tok = load_tokenizer(name)
    vocab = benchmark(Vocabulary.from_tokenizer, tok, eos_token_ids=[eos])
    assert vocab.size == tok.get_vocab_size()


def test_fingerprint_qwen2(benchmark: Any) -> None:
    vocab = Vocabulary.from_tokenizer(_hf("qwen2"))

    def fresh_fingerprint() -> str:
        vocab.__dict__.pop("fingerprint", None)  # cached_property: drop the cached value
        return vocab.fingerprint

    assert len(benchmark(fresh_fingerprint)) == 32


def test_check_spells_qwen2(benchmark: Any) -> None:
    vocab = Vocabulary.from_tokenizer(_hf("qwen2"))

    def fresh_check() -> None:
        vocab.__dict__.pop("_covered_bytes", None)
        vocab.check_spells(range(256))

    benchmark(fresh_check)
