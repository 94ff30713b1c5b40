"""Per-step cost of the logits processors, on the real llama-bpe vocabulary (128k tokens).

Run: ``python -m pytest bench/bench_processors.py --benchmark-only -q``.

One round walks the tool call of `bench.decode.SCHEMA` token by token, calling
the processor once per step as a framework's loop does (the ids so far, a
fresh copy of the scores), with every state already visited: the steady state
of a long generation. Divide a round's time by `STEPS` for the µs per step
that the processor adds to each generated token (`python -m bench decode`
reports the same inside transformers' `generate`, where the forward pass
leaves the CPU caches cold). Batch 8 runs eight copies of the walk in one
batch (one mask shared by all rows) and eight different tool calls (rows in
different states; a row that has ended reads EOS, as a padded batch does).
"""

from __future__ import annotations

import functools
import json
from typing import Any

import numpy as np
import pytest

from bench.decode import SCHEMA
from constrained.gguf_tokenizers import hf_tokenizer
from constrained.vocab import Vocabulary

pytest.importorskip("pytest_benchmark")

DOC = {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 3, "alerts": True}}
PROMPT = [1, 2, 3]


def _doc(r: int) -> dict:
    """The r-th of eight different tool calls (r = 0: `DOC`)."""
    city = ["Paris", "Rome", "Oslo", "Lima", "Berlin", "Quito", "Bern", "Kyiv"][r]
    return {"name": ["get_weather", "web_search"][r % 2] if r else "get_weather",
            "arguments": {"city": city, "unit": ["celsius", "fahrenheit"][r % 2], "days": 1 + r, "alerts": r % 3 == 0}}


@functools.cache
def _setup() -> tuple[Vocabulary, list[list[int]]]:
    tok = hf_tokenizer("llama-bpe")
    vocab = Vocabulary.from_tokenizer(tok)
    eos = vocab.eos_token_ids[0]
    return vocab, [tok.encode(json.dumps(_doc(r)), add_special_tokens=False) + [eos] for r in range(8)]


def _steps(rows: int, different: bool) -> list[list[list[int]]]:
    """Per step, each row's generated ids: copies of the first walk, or the eight walks (EOS once ended)."""
    vocab, docs = _setup()
    walks = [docs[r if different else 0] for r in range(rows)]
    n = max(len(w) for w in walks)
    eos = vocab.eos_token_ids[0]
    return [[(w + [eos] * n)[:k] for w in walks] for k in range(n)]


@pytest.mark.parametrize("rows,different", [(1, False), (8, False), (8, True)])
def test_hf_processor_step(benchmark: Any, rows: int, different: bool) -> None:
    import torch

    from constrained.processors import hf_logits_processor

    torch.set_num_threads(1)
    vocab, _ = _setup()
    inputs = [torch.tensor([PROMPT + w for w in step]) for step in _steps(rows, different)]
    scores = torch.from_numpy(np.random.default_rng(0).normal(size=(rows, vocab.size)).astype(np.float32))

    def walk() -> Any:
        proc = hf_logits_processor(SCHEMA, vocab)
        out = None
        for x in inputs:
            out = proc(x, scores)
        return out

    out = walk()                            # every state visited once: memoized masks from here on
    assert torch.isinf(out).any() and torch.isfinite(out).any()
    benchmark.extra_info["steps"] = len(inputs)
    benchmark(walk)


def test_mlx_processor_step(benchmark: Any) -> None:
    mx = pytest.importorskip("mlx.core")
    from constrained.processors import mlx_processor

    vocab, docs = _setup()
    ids = docs[0]
    logits = mx.array(np.random.default_rng(0).normal(size=(1, vocab.size)).astype(np.float32))
    seqs = [mx.array(PROMPT + ids[:k]) for k in range(len(ids))]

    def walk() -> Any:
        proc = mlx_processor(SCHEMA, vocab)
        out = None
        for seq in seqs:
            out = proc(seq, logits)
            mx.eval(out)
        return out

    out = np.array(walk())
    assert np.isinf(out).any() and np.isfinite(out).any()
    benchmark.extra_info["steps"] = len(seqs)
    benchmark(walk)
