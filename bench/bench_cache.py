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
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def _interleaved(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    """Best-of-`reps` wall time per variant, variants interleaved so machine load hits all alike."""
    best = {k: float("inf") for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


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
    lm = _make(kind, model_dir, batch_size=n, timeout=0.01)
    plain = _make(kind, model_dir, batch_size=n, timeout=0.01, prefix_caching=False)

    def concurrent() -> None:
        async def main() -> None:
            await asyncio.gather(*(lm.next_token_logprobs(r) for r in reqs))

        asyncio.run(main())

    def cold(backend: Any, fn: Callable[[], Any]) -> Callable[[], Any]:
        return lambda: (backend.clear_cache(), fn())

    t = _interleaved(
        {
            "prefill_one": cold(lm, lambda: lm.next_token_logprobs_sync(prompt)),
            "trie": cold(lm, concurrent),
            "no_trie": cold(plain, lambda: plain.batch_next_token_logprobs_sync(reqs)),
            "sample": cold(lm, lambda: lm.batch_sample_sync([prompt] * n, 16, [], seed=0)),
        },
        reps,
    )
    tokens = {}
    for name, backend, fn in [("trie", lm, concurrent), ("no_trie", plain, lambda: plain.batch_next_token_logprobs_sync(reqs)),
                              ("sample", lm, lambda: lm.batch_sample_sync([prompt] * n, 16, [], seed=0))]:  # fmt: skip
        backend.clear_cache()
        backend.stats.clear()
        fn()
        tokens[name] = backend.stats["model_tokens"]
    lm.clear_cache()
    concurrent()
    held = lm.trie.nbytes
    lm.close()
    plain.close()
    one = t["prefill_one"]
    _emit(
        case="shared_prompt", backend=kind, n=n, prompt_tokens=len(prompt),
        trie_over_prefill=round(t["trie"] / one, 3), no_trie_over_prefill=round(t["no_trie"] / one, 3),
        prefill_one_s=round(one, 5), trie_s=round(t["trie"], 5), no_trie_s=round(t["no_trie"], 5),
        model_tokens_trie=tokens["trie"], model_tokens_no_trie=tokens["no_trie"], trie_bytes=held,
    )  # fmt: skip
    _emit(
        case="sample_n16", backend=kind, n=n, max_tokens=16, prompt_tokens=len(prompt),
        sample_over_prefill=round(t["sample"] / one, 3), sample_s=round(t["sample"], 5), model_tokens=tokens["sample"],
    )  # fmt: skip


def bench_throughput(kind: str, model_dir: str, prompts: list[list[int]], reps: int) -> None:
    n_tokens = sum(len(p) for p in prompts)
    lm = _make(kind, model_dir, prefix_caching=False)

    def with_batch(bs: int) -> Callable[[], Any]:
        def run() -> None:
            lm.batch_size = bs
            lm.clear_cache()
            lm.batch_next_token_logprobs_sync(prompts)

        return run

    def sequential() -> None:
        lm.clear_cache()
        for p in prompts:
            lm.next_token_logprobs_sync(p)

    t = _interleaved({"sequential": sequential, **{f"batch_{bs}": with_batch(bs) for bs in (1, 4, 8)}}, reps)
    peak = getattr(lm, "peak_memory_bytes", None)
    lm.close()
    for name, secs in t.items():
        _emit(
            case="throughput", backend=kind, mode=name, prompts=len(prompts), tokens=n_tokens,
            tokens_per_s=round(n_tokens / secs, 1), speedup_vs_sequential=round(t["sequential"] / secs, 3),
            peak_memory_bytes=peak,
        )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", nargs="+", default=["mlx", "hf"], choices=["mlx", "hf"])
    parser.add_argument("--vocabs", nargs="+", default=["byte-bpe", "llama-spm"])
    parser.add_argument("--reps", type=int, default=5)
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
