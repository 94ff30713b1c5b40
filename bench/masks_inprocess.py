"""Suite `masks` for our engine only, in this process: no fork, optional profile.

`python -m bench masks` isolates every (engine, schema) in a forked worker,
which is right for comparing engines but hides where our time goes. This
walks the same corpus instances token by token in one process (compile cache
cleared per schema, the vocabulary index shared as in a server) and prints
compile / TTFM / TBM percentiles and the most expensive cases (after an untimed
warm-up on `bench.masks.WARMUP_SCHEMA`); `--profile`
adds a cProfile table.

Run: ``python -m bench.masks_inprocess [--corpus DIR] [--tokenizer llama-bpe] [--schemas a b] [--profile]
[--any-order] [--jsonl FILE]``
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["run", "main"]


def run(cases: list, tokenizer: Any, vocab: Any, **options: Any) -> tuple[list[dict], np.ndarray]:
    """Compile and walk every case; returns (per-case rows, every mask time in ns)."""
    from bench.masks import STYLES, prepare_walks
    from constrained.compile import clear_cache, compile_json_schema
    from grammars.errors import ConstraintError

    buf = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    rows, all_masks = [], []
    for case in cases:
        walks, _ = prepare_walks(case, tokenizer, vocab.token_bytes, list(STYLES))
        clear_cache()
        t0 = time.perf_counter_ns()
        try:
            fsm = compile_json_schema(case.schema, vocab, **options)
        except ConstraintError:
            continue
        t1 = time.perf_counter_ns()
        guide = fsm.guide()
        guide.fill_bitmask(buf)
        t2 = time.perf_counter_ns()
        masks = []
        for i, walk in enumerate(walks):
            guide = fsm.guide()
            for k, tok in enumerate(walk.ids + (None,)):
                if k or i:
                    a = time.perf_counter_ns()
                    guide.fill_bitmask(buf)
                    masks.append(time.perf_counter_ns() - a)
                if tok is None or not guide.advance(tok):
                    break
        all_masks += masks
        rows.append({"case": case.name, "compile_ms": (t1 - t0) / 1e6, "ttfm_ms": (t2 - t0) / 1e6,
                     "masks": len(masks), "masks_ms": sum(masks) / 1e6})
    return rows, np.array(all_masks, dtype=np.int64)


def main(argv: Sequence[str] | None = None) -> int:
    from bench.corpus import DEFAULT_CORPUS, load_corpus
    from constrained.gguf_tokenizers import VOCABS, hf_tokenizer
    from constrained.vocab import Vocabulary
    from constrained.vocab_index import VocabIndex

    p = argparse.ArgumentParser(prog="python -m bench.masks_inprocess", description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer", default="llama-bpe", choices=sorted(VOCABS))
    p.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="MaskBench-style folder (default: bench/corpus)")
    p.add_argument("--schemas", nargs="+", help="only these case names")
    p.add_argument("--every", type=int, default=1, metavar="K", help="only every K-th case (a quick sample)")
    p.add_argument("--profile", action="store_true", help="print a cProfile table (sorted by own time)")
    p.add_argument("--gc", action="store_true", help="time the cyclic GC's collections (gc.callbacks)")
    p.add_argument("--any-order", action="store_true", help="compile with any_order=True (members in any order)")
    p.add_argument("--jsonl", help="write the per-case rows here")
    args = p.parse_args(argv)
    tokenizer = hf_tokenizer(args.tokenizer)
    vocab = Vocabulary.from_tokenizer(tokenizer)
    VocabIndex.for_vocab(vocab)
    # one-time per-process costs (numba loading its compiled walk, lazy imports) stay out of the numbers
    from bench.masks import WARMUP_SCHEMA
    from constrained.compile import clear_cache, compile_json_schema
    compile_json_schema(WARMUP_SCHEMA, vocab).guide().allowed_token_ids()
    clear_cache()
    cases = load_corpus(args.corpus, args.schemas)[::args.every]
    prof = cProfile.Profile() if args.profile else None
    if prof:
        prof.enable()
    pauses = _time_gc() if args.gc else None
    rows, masks = run(cases, tokenizer, vocab, **({"any_order": True} if args.any_order else {}))
    if args.jsonl:
        import json

        with open(args.jsonl, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    if not rows:
        print("no case compiled")
        return 1
    compile_ms = np.array([r["compile_ms"] for r in rows])
    ttfm = np.array([r["ttfm_ms"] for r in rows])
    print(f"{len(rows)} schemas compiled; compile ms p50 {np.median(compile_ms):.2f} mean {compile_ms.mean():.2f} "
          f"max {compile_ms.max():.1f}; TTFM ms p50 {np.median(ttfm):.2f} p90 {np.percentile(ttfm, 90):.2f} "
          f"p99 {np.percentile(ttfm, 99):.1f} max {ttfm.max():.1f}")
    if len(masks):
        print(f"{len(masks)} masks: mean {masks.mean() / 1e3:.1f} µs, p50 {np.median(masks) / 1e3:.1f}, "
              f"p99 {np.percentile(masks, 99) / 1e3:.1f}, max {masks.max() / 1e3:.0f}")
    if pauses is not None:
        for gen in range(3):
            ms = np.array([t for g, t in pauses if g == gen]) * 1e3
            if len(ms):
                print(f"GC generation {gen}: {len(ms)} collections, max {ms.max():.1f} ms, total {ms.sum():.0f} ms")
    for r in sorted(rows, key=lambda r: -(r["ttfm_ms"] + r["masks_ms"]))[:10]:
        print(f"  {r['case']:32s} compile {r['compile_ms']:7.1f} ms  masks {r['masks_ms']:7.1f} ms over {r['masks']}")
    return 0


def _time_gc() -> list[tuple[int, float]]:
    """(generation, seconds) of every collection of the cyclic GC from now on."""
    import gc

    pauses: list[tuple[int, float]] = []
    start = [0.0]

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            start[0] = time.perf_counter()
        else:
            pauses.append((info["generation"], time.perf_counter() - start[0]))

    gc.callbacks.append(callback)
    return pauses


if __name__ == "__main__":
    raise SystemExit(main())
