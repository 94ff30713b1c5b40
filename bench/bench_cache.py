"""Prefix-cache and batching benchmarks for the MLX and HF backends (one JSON line per case).

Cases, on random llamas with real vocabularies (ratios matter, not absolute times):

- ``shared_prompt``: n=16 requests ``prompt + [t_i]`` sharing a 512-token
  prompt, concurrently through the async batcher, with the trie vs without
  (``prefix_caching=False``), as a ratio to the cost of prefilling the prompt
  once. Target: with the trie <= 1.3x (``target_met``).
- ``shared_prompt_one_by_one``: the same requests one at a time, as a server
  sees them arrive: the first stores the prompt's KV in one segment, the
  second cuts the shared prompt out of it (``kv_splits``), the rest reuse
  that; vs the same backend with cutting off (``splits_kv = False``: the
  second recomputes the shared prompt on its own), as ratios to one prefill.
- ``sample_n16``: ``batch_sample`` of 16 continuations (16 tokens each) of
  that prompt, with the trie vs without, as a ratio to one prefill.
- ``throughput``: 8 distinct 128-token prompts, one at a time vs batch sizes 1/4/8.
- bytes held by the trie after the shared-prompt case; MLX's peak memory.

Model shapes (``--shapes``): "tiny" (64 wide, 2 layers: the test model) and
"deep" (128 wide, 8 layers). With a 32k vocabulary the tiny model's logits
row costs as much as ~27 prompt tokens, so n=16 extra rows are a floor of
~1.34x before any overhead; real models spend most of a token in their
layers (an lm_head row is ~0.02-0.4 of a token's cost for 0.1-8B models).
Each setup line prints ``lm_head_row_in_tokens`` and ``flop_estimate``, the
shared-prompt ratio that counting multiply-adds predicts, next to what is measured.

Run: ``python -m bench.bench_cache [--backends mlx hf] [--vocabs byte-bpe llama-spm] [--shapes tiny deep] [--reps 5]
[--torch-threads 1]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

N, PROMPT_TOKENS, SAMPLE_TOKENS, TARGET = 16, 512, 16, 1.3

# TINY_CONFIG overrides per shape; "deep" keeps MLX's slow CPU BLAS under ~1 s per prefill.
SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {},
    "deep": {"hidden_size": 128, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512},
}


def _interleaved(fns: dict[str, Callable[[], Any]], reps: int, warm: bool = True) -> dict[str, float]:
    """Best-of-`reps` wall time per variant, variants interleaved so machine load hits all alike."""
    for fn in fns.values() if warm else ():  # warm-up: first calls pay for lazy init and allocator growth
        fn()
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


def flop_model(cfg: dict[str, Any], n: int = N, prompt: int = PROMPT_TOKENS) -> dict[str, float]:
    """Multiply-accumulates of the shared-prompt case, from the config alone.

    Example:
        >>> cfg = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        ...        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 32000}
        >>> round(flop_model(cfg)["lm_head_row_in_tokens"], 1)
        27.8
    """
    h, layers, inter, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    per_token = layers * (h * q + 2 * h * kv + q * h + 3 * h * inter)  # projections + SwiGLU MLP
    attn = lambda ctx: layers * 2 * q * ctx  # noqa: E731 - QK^T and AV for one query over `ctx` keys
    # full-square prefill attention: masked kernels compute every (query, key) pair
    prefill = prompt * (per_token + attn(prompt)) + h * vocab  # plus one logits row
    extra = n * (per_token + attn(prompt + 1) + h * vocab)
    return {"lm_head_row_in_tokens": h * vocab / per_token, "flop_estimate": (prefill + extra) / prefill}


def bench_shared_prompt(kind: str, model_dir: str, prompt: list[int], reps: int, n: int = N) -> None:
    reqs = [prompt + [100 + i] for i in range(n)]
    lm = _make(kind, model_dir, batch_size=n, timeout=0.01)
    plain = _make(kind, model_dir, batch_size=n, timeout=0.01, prefix_caching=False)
    uncut = _make(kind, model_dir, batch_size=n, timeout=0.01)
    uncut.splits_kv = False  # the trie as before KV segments could be cut

    def concurrent() -> None:
        async def main() -> None:
            await asyncio.gather(*(lm.next_token_logprobs(r) for r in reqs))

        asyncio.run(main())

    def sample(backend: Any) -> Callable[[], Any]:
        return lambda: backend.batch_sample_sync([prompt] * n, SAMPLE_TOKENS, [], seed=0)

    def one_by_one(backend: Any) -> Callable[[], Any]:
        return lambda: [backend.next_token_logprobs_sync(r) for r in reqs]

    cases = {
        "prefill_one": (lm, lambda: lm.next_token_logprobs_sync(prompt)),
        "trie": (lm, concurrent),
        "no_trie": (plain, lambda: plain.batch_next_token_logprobs_sync(reqs)),
        "one_by_one": (lm, one_by_one(lm)),
        "one_by_one_uncut": (uncut, one_by_one(uncut)),
        "sample": (lm, sample(lm)),
        "sample_no_trie": (plain, sample(plain)),
    }
    cold = {name: (lambda b=b, f=f: (b.clear_cache(), f())) for name, (b, f) in cases.items()}
    # The no-trie baselines cost ~n prefills each: one timed run is plenty (and keeps MLX's slow BLAS bearable).
    slow = {k: cold.pop(k) for k in ("no_trie", "sample_no_trie")}
    t = _interleaved(cold, reps) | _interleaved(slow, 1, warm=False)
    tokens, calls, splits = {}, {}, {}
    for name, (backend, fn) in cases.items():  # one more run each, counting the model's work
        backend.clear_cache()
        backend.stats.clear()
        fn()
        tokens[name], calls[name], splits[name] = backend.stats["model_tokens"], backend.stats["forward_calls"], backend.stats["kv_splits"]
    lm.clear_cache()
    concurrent()
    held = lm.trie.nbytes
    lm.close()
    plain.close()
    uncut.close()
    one = t["prefill_one"]
    _emit(
        case="shared_prompt", backend=kind, n=n, prompt_tokens=len(prompt),
        trie_over_prefill=round(t["trie"] / one, 3), no_trie_over_prefill=round(t["no_trie"] / one, 3),
        target=TARGET, target_met=t["trie"] / one <= TARGET,
        prefill_one_s=round(one, 5), trie_s=round(t["trie"], 5), no_trie_s=round(t["no_trie"], 5),
        model_tokens_trie=tokens["trie"], model_tokens_no_trie=tokens["no_trie"],
        forward_calls_trie=calls["trie"], trie_bytes=held,
    )  # fmt: skip
    _emit(
        case="shared_prompt_one_by_one", backend=kind, n=n, prompt_tokens=len(prompt),
        cut_over_prefill=round(t["one_by_one"] / one, 3), uncut_over_prefill=round(t["one_by_one_uncut"] / one, 3),
        cut_s=round(t["one_by_one"], 5), uncut_s=round(t["one_by_one_uncut"], 5),
        model_tokens_cut=tokens["one_by_one"], model_tokens_uncut=tokens["one_by_one_uncut"], kv_splits=splits["one_by_one"],
    )  # fmt: skip
    _emit(
        case="sample_n16", backend=kind, n=n, max_tokens=SAMPLE_TOKENS, prompt_tokens=len(prompt),
        sample_over_prefill=round(t["sample"] / one, 3), sample_no_trie_over_prefill=round(t["sample_no_trie"] / one, 3),
        sample_s=round(t["sample"], 5), model_tokens=tokens["sample"], model_tokens_no_trie=tokens["sample_no_trie"],
        forward_calls=calls["sample"],
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


def bench_full_trie(kind: str, model_dir: str, prompts: list[list[int]], reps: int) -> None:
    """A stream of requests (4 samples of 8 tokens after a distinct prompt each) once the trie's byte budget
    is reached, vs an unbounded trie: eviction must cost about what it evicts (target: within 1.2x)."""
    def stream(lm: Any) -> Callable[[], Any]:
        def run() -> None:
            lm.clear_cache()
            for p in prompts:
                lm.batch_sample_sync([p] * 4, 8, [], seed=0)

        return run

    free = _make(kind, model_dir)
    stream(free)()
    budget = free.trie.nbytes // 4                     # about a quarter of the stream fits: most inserts evict
    full = _make(kind, model_dir, cache_size=budget)
    t = _interleaved({"unbounded": stream(free), "full": stream(full)}, reps)
    evictions = full.trie.evictions
    free.close()
    full.close()
    _emit(case="full_trie", backend=kind, requests=len(prompts), budget_bytes=budget, evictions=evictions,
          full_over_unbounded=round(t["full"] / t["unbounded"], 3), target=1.2,
          target_met=t["full"] / t["unbounded"] <= 1.2, unbounded_s=round(t["unbounded"], 4),
          full_s=round(t["full"], 4))  # fmt: skip


def run(backends: list[str], vocabs: list[str], shapes: list[str], reps: int, torch_threads: int | None = None) -> None:
    """Every case for each shape x vocabulary x backend (the prompts are seeded, so runs compare).

    `torch_threads` pins torch's intra-op threads: on a small shared machine,
    a busy neighbour stalls torch's thread barriers, which costs small calls
    (one token per row) far more than a prefill and skews the ratios.
    """
    from backends.tiny import tiny_model_dir

    if torch_threads is not None and "hf" in backends:
        import torch

        torch.set_num_threads(torch_threads)

    for shape in shapes:
        for vocab in vocabs:
            model_dir = str(tiny_model_dir("llama", vocab, config=SHAPES[shape]))
            cfg = json.load(open(f"{model_dir}/config.json"))
            rng = np.random.default_rng(0)
            prompt = rng.integers(3, cfg["vocab_size"] - 200, size=PROMPT_TOKENS).tolist()
            prompts = [rng.integers(3, cfg["vocab_size"], size=128).tolist() for _ in range(8)]
            flops = {k: round(v, 3) for k, v in flop_model(cfg).items()}
            for kind in backends:
                threads = _torch_threads() if kind == "hf" else None
                _emit(case="setup", backend=kind, shape=shape, vocab=vocab, vocab_size=cfg["vocab_size"],
                      hidden_size=cfg["hidden_size"], layers=cfg["num_hidden_layers"], torch_threads=threads, **flops)  # fmt: skip
                bench_shared_prompt(kind, model_dir, prompt, reps)
                bench_throughput(kind, model_dir, prompts, reps)
                stream = [rng.integers(3, cfg["vocab_size"], size=64).tolist() for _ in range(24)]
                bench_full_trie(kind, model_dir, stream, reps)


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", nargs="+", default=["mlx", "hf"], choices=["mlx", "hf"])
    parser.add_argument("--vocabs", nargs="+", default=["byte-bpe", "llama-spm"])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--torch-threads", type=int, default=None, help="torch.set_num_threads for the HF runs (default: torch's)")
    args = parser.parse_args()
    run(args.backends, args.vocabs, args.shapes, args.reps, args.torch_threads)


if __name__ == "__main__":
    main()
