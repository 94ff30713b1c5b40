"""Micro-benchmarks of lazy compile: the bounds that used to be unrolled (issue "Compile lazily").

Run: ``python -m pytest bench/bench_lazy_compile.py --benchmark-only -q``.

Each case is timed from a cold compile cache to the first mask (TTFM), on
Llama-3's vocabulary; `walk` cases also walk one long valid text, mask by
mask, so the states the bounds create during generation are timed too.
Before counters, these took seconds to minutes or ran out of memory
(`maxLength: 1000000`: 5.5 GB after ~50 s; `.{1000}`: 34 s of masks); the
targets are the issue's: no compile over 1 s, no single mask over 50 ms.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable

import numpy as np
import pytest

from constrained.compile import clear_cache, compile_json_schema, compile_regex
from constrained.gguf_tokenizers import hf_tokenizer
from constrained.vocab import Vocabulary
from constrained.vocab_index import VocabIndex

pytest.importorskip("pytest_benchmark")

ITEMS = {"type": "array", "maxItems": 100, "items": {"type": "object", "additionalProperties": False, "properties": {
    "key": {"type": "string", "maxLength": 1024}, "type": {"type": "string", "maxLength": 1024}}}}

# name -> (compile, a valid text to walk or None)
CASES: dict[str, tuple[Callable[[Vocabulary], Any], str | None]] = {
    "maxLength_1e6": (lambda v: compile_json_schema({"type": "string", "maxLength": 10**6}, v),
                      json.dumps("hello world " * 100)),
    "minLength_1e6": (lambda v: compile_json_schema({"type": "string", "minLength": 10**6}, v), None),
    "minItems_1e6": (lambda v: compile_json_schema({"type": "array", "minItems": 10**6}, v), None),
    "objects_maxLength_1024_maxItems_100": (lambda v: compile_json_schema(ITEMS, v),
                                            json.dumps([{"key": f"k{i}", "type": "t" * 50} for i in range(20)])),
    # 20,000 characters: past the default state budget before masks were shared (`constrained.twins`)
    "maxLength_1e5_text_20000": (lambda v: compile_json_schema({"type": "string", "maxLength": 10**5}, v),
                                 json.dumps(("Structured output, token by token. " * 600)[:20_000])),
    "regex_dot_1000": (lambda v: compile_regex(".{1000}", v), "x" * 1000),
    "regex_hex_881": (lambda v: compile_regex("[A-F0-9]{881}", v), "A0F9" * 220 + "A"),
}


@functools.cache
def _setup() -> tuple[Any, Vocabulary]:
    tok = hf_tokenizer("llama-bpe")
    vocab = Vocabulary.from_tokenizer(tok)
    VocabIndex.for_vocab(vocab)
    compile_regex("[a-z]+", vocab).guide().allowed_token_ids()     # load the kernels outside the timings
    return tok, vocab


@pytest.mark.parametrize("name", sorted(CASES))
def test_ttfm(benchmark: Any, name: str) -> None:
    """Compile (cache cleared) + the first mask."""
    _, vocab = _setup()
    make = CASES[name][0]
    buf = np.zeros((vocab.size + 31) // 32, np.int32)

    def ttfm() -> None:
        clear_cache()
        make(vocab).guide().fill_bitmask(buf)

    benchmark.pedantic(ttfm, rounds=5, warmup_rounds=1)


@pytest.mark.parametrize("name", sorted(n for n, (_, text) in CASES.items() if text))
def test_walk(benchmark: Any, name: str) -> None:
    """Compile, then every mask along one long valid text (each bound's new states on first visit)."""
    tok, vocab = _setup()
    make, text = CASES[name]
    ids = tok.encode(text, add_special_tokens=False)
    buf = np.zeros((vocab.size + 31) // 32, np.int32)

    def walk() -> None:
        clear_cache()
        guide = make(vocab).guide()
        for t in ids:
            guide.fill_bitmask(buf)
            if not guide.advance(t):
                raise AssertionError(f"{name}: token {t} refused")
        guide.fill_bitmask(buf)

    benchmark.pedantic(walk, rounds=3, warmup_rounds=1)
