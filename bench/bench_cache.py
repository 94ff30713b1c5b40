"""Prefix-cache and batching benchmarks for the MLX and HF backends (one JSON line per case).

Cases, on a tiny random llama with a real vocabulary (ratios matter, not absolute times):

- ``shared_prompt``: n=16 requests ``prompt + [t_i]`` sharing a 512-token
  prompt, with the trie vs without (``prefix_caching=False``), as a ratio to
  the cost of prefilling the prompt once. Target: with the trie <= 1.3x.
- ``sample_n16``: ``batch_sample`` of 16 continuations (16 tokens each) of
  that prompt, as a ratio to one prefill.
- ``throughput``: 8 distinct 128-token prompts, one at a time vs batch sizes 1/4/8.
- bytes held by the trie after each case.

With a 32k vocabulary and a 64-wide model, each next-token distribution's
logits row (64 x 32000 MACs) costs as much as ~25 prompt tokens, so n rows of
logits dominate; the "byte-bpe" (460 tokens) runs show the cache's own overhead.

Run: ``python -m bench.bench_cache [--backends mlx hf] [--vocabs byte-bpe llama-spm] [--reps 3]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _timed(fn: Callable[[], Any], reps: int) -> float:
    """Median wall time of `fn` over `reps` runs (each run starts cold: callers clear caches)."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _make(kind: str, model_dir: str, **opts: Any) -> Any:
    if kind == "mlx":
        from backends.mlx import MLXLM

        lm = MLXLM.from_name(model_dir, **opts)
    else:
        from backends.hf import HFLM

        lm = HFLM.from_name(model_dir, **opts)
    lm.ensure_loaded()
    return lm


def _emit(**row: Any) -> None:
    print(json.dumps(row), flush=True)


def bench_shared_prompt(kind: str, model_dir: str, prompt: list[int], reps: int, n: int = 16) -> None:
    reqs = [prompt + [100 + i] for i in range(n)]
    with _make(kind, model_dir, batch_size=n, timeout=0.01) as lm:

        def prefill_one() -> None:
            lm.clear_cache()
            lm.next_token_logprobs_sync(prompt)

        def concurrent() -> None:
            lm.clear_cache()

            async def main() -> None:
                await asyncio.gather(*(lm.next_token_logprobs(r) for r in reqs))

            asyncio.run(main())

        t_one = _timed(prefill_one, reps)
        t_trie = _timed(concurrent, reps)
        held = lm.trie.nbytes
        lm.stats.clear()
        concurrent()
        tokens_trie = lm.stats["model_tokens"]
        t_sample = _timed(lambda: (lm.clear_cache(), lm.batch_sample_sync([prompt] * n, 16, [], seed=0)), reps)
        lm.stats.clear()
        lm.clear_cache()
        lm.batch_sample_sync([prompt] * n, 16, [], seed=0)
        tokens_sample = lm.stats["model_tokens"]
    with _make(kind, model_dir, batch_size=n, timeout=0.01, prefix_caching=False) as plain:

        def no_trie() -> None:
            plain.clear_cache()
            plain.batch_next_token_logprobs_sync(reqs)

        t_plain = _timed(no_trie, reps)
        plain.stats.clear()
        no_trie()
        tokens_plain = plain.stats["model_tokens"]
    _emit(
        case="shared_prompt", backend=kind, n=n, prompt_tokens=len(prompt),
        prefill_one_s=round(t_one, 5), trie_s=round(t_trie, 5), no_trie_s=round(t_plain, 5),
        trie_over_prefill=round(t_trie / t_one, 3), no_trie_over_prefill=round(t_plain / t_one, 3),
        model_tokens_trie=tokens_trie, model_tokens_no_trie=tokens_plain, trie_bytes=held,
    )  # fmt: skip
    _emit(
        case="sample_n16", backend=kind, n=n, max_tokens=16, prompt_tokens=len(prompt),
        sample_s=round(t_sample, 5), sample_over_prefill=round(t_sample / t_one, 3), model_tokens=tokens_sample,
    )  # fmt: skip


def bench_throughput(kind: str, model_dir: str, prompts: list[list[int]], reps: int) -> None:
    n_tokens = sum(len(p) for p in prompts)
    with _make(kind, model_dir, prefix_caching=False) as lm:

        def sequential() -> None:
            lm.clear_cache()
            for p in prompts:
                lm.next_token_logprobs_sync(p)

        t_seq = _timed(sequential, reps)
        _emit(case="throughput", backend=kind, mode="sequential", batch_size=1, tokens_per_s=round(n_tokens / t_seq, 1))
    for bs in (1, 4, 8):
        with _make(kind, model_dir, batch_size=bs, prefix_caching=False) as lm:

            def batched() -> None:
                lm.clear_cache()
                lm.batch_next_token_logprobs_sync(prompts)

            t = _timed(batched, reps)
            peak = getattr(lm, "peak_memory_bytes", None)
        _emit(
            case="throughput", backend=kind, mode="batched", batch_size=bs, tokens_per_s=round(n_tokens / t, 1),
            speedup_vs_sequential=round(t_seq / t, 3), peak_memory_bytes=peak,
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", nargs="+", default=["mlx", "hf"], choices=["mlx", "hf"])
    parser.add_argument("--vocabs", nargs="+", default=["byte-bpe", "llama-spm"])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()

    from backends.tiny import tiny_model_dir

    for vocab in args.vocabs:
        model_dir = str(tiny_model_dir("llama", vocab))
        n_vocab = json.load(open(f"{model_dir}/config.json"))["vocab_size"]
        rng = np.random.default_rng(0)
        prompt = rng.integers(3, n_vocab - 200, size=512).tolist()
        prompts = [rng.integers(3, n_vocab, size=128).tolist() for _ in range(8)]
        for kind in args.backends:
            _emit(case="setup", backend=kind, vocab=vocab, vocab_size=n_vocab)
            bench_shared_prompt(kind, model_dir, prompt, args.reps)
            bench_throughput(kind, model_dir, prompts, args.reps)


if __name__ == "__main__":
    main()
