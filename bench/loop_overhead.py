"""Where our decode loop's time goes: inside the model's forward calls, and everything else.

`constrained.generate_batch` over `HFLM` (greedy, `bench.decode`'s schema and
prompts), with the model's `forward` (and its decoder's, used by prefill)
timed. "Overhead" is wall time outside them: sampling, guides, the event loop
and worker hand-off, and on the trie path the trie lookups and KV copies.
One JSON line per case, on the live KV batch and on the per-step trie path.

    python bench/loop_overhead.py [--backend hf|mlx] [--model qwen2-0.5b] [--max-tokens 64] [--batches 1 8]
                                  [--reps 3] [--no-budget]
"""

from __future__ import annotations

import argparse
import functools
import json
import time


def _timed(fn, acc):
    """`fn`, adding its time to ``acc[0]`` unless it runs inside another timed call (``acc[1]``: depth)."""

    @functools.wraps(fn)
    def wrapper(*a, **k):
        acc[1] += 1
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc[1] -= 1
            if not acc[1]:
                acc[0] += time.perf_counter() - t
    return wrapper


def main(argv: list[str] | None = None) -> None:
    from backends.hf import HFLM
    from bench.decode import PROMPTS, SCHEMA
    from constrained import GenerationRequest, generate_batch

    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--backend", default="hf", choices=["hf", "mlx"],
                    help="mlx: wall time only (its forward calls are lazy, so they cannot be timed apart)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-budget", action="store_true", help="budget_aware=False: allow max_tokens below the schema's shortest")
    args = ap.parse_args(argv)
    if args.model == "qwen2-0.5b":
        from backends.tiny import QWEN2_0_5B_CONFIG, QWEN2_0_5B_VOCAB_ROWS, tiny_model_dir

        path = tiny_model_dir("qwen2", "qwen2", config=QWEN2_0_5B_CONFIG, pad_vocab_to=QWEN2_0_5B_VOCAB_ROWS)
    else:
        from backends.tiny import tiny_model_dir

        path = args.model or tiny_model_dir("llama", "llama-bpe")
    acc = [0.0, 0]
    if args.backend == "hf":
        lm = HFLM.from_name(str(path))
        lm.ensure_loaded()
        lm.model.forward = _timed(lm.model.forward, acc)
        decoder = lm.model.get_decoder()
        decoder.forward = _timed(decoder.forward, acc)   # prefill calls it directly (and forward calls it)
    else:
        from backends.mlx import MLXLM

        lm = MLXLM.from_name(str(path))
        lm.ensure_loaded()
    prompts = [lm.tokenizer.encode(p, add_special_tokens=False) for p in PROMPTS]
    for bs in args.batches:
        for constrained in (False, True):
            reqs = [GenerationRequest(prompts[i % len(prompts)], schema=SCHEMA if constrained else None,
                                      max_tokens=args.max_tokens, temperature=0, budget_aware=not args.no_budget)
                    for i in range(bs)]
            best: dict[str, tuple] = {}
            for _ in range(args.reps):                  # the two paths interleaved: load drifts hit both alike
                for path_name in ("live", "trie"):
                    lm.live_decoding = path_name == "live"
                    lm.clear_cache()
                    acc[0] = 0.0
                    t = time.perf_counter()
                    gens = [r[0] for r in generate_batch(lm, reqs)]
                    wall = time.perf_counter() - t
                    model = acc[0] if args.backend == "hf" else None
                    tokens = sum(len(g.token_ids) for g in gens)
                    if path_name not in best or wall < best[path_name][0]:
                        best[path_name] = (wall, model, tokens)
            for path_name, (wall, model, tokens) in best.items():
                print(json.dumps({"suite": "loop_overhead", "backend": args.backend, "model": str(path), "batch": bs,
                                  "constrained": constrained, "path": path_name, "tokens": tokens,
                                  "wall_s": round(wall, 4), "model_s": None if model is None else round(model, 4),
                                  "us_per_token": round(wall / tokens * 1e6, 1),
                                  "overhead_us_per_token": None if model is None else
                                  round((wall - model) / tokens * 1e6, 1)}), flush=True)


if __name__ == "__main__":
    main()
