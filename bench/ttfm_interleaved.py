"""Time to first mask, ours against llguidance, interleaved in one process.

`python -m bench masks` runs each engine in its own worker, with the other
engines' work between two of our compiles (cold caches); this compiles each
schema with both engines in turn, in one process, R times, and keeps the
minimum of each: the steadier number when comparing two commits of ours.
Ours is compiled with its cache cleared (`clear_cache`), llguidance from
scratch (`LLMatcher` + the first bitmask). Schemas either engine refuses are
skipped.

Run: ``python -m bench.ttfm_interleaved [EVERY [R [FLUSH_MB [SLEEP_MS]]]] [--any-order]`` (every
EVERY-th schema of ../shared/corpus/maskbench-dev, default 2 and 3); needs
llguidance. With FLUSH_MB, each compile (either engine's) comes after a write
over that many megabytes and a SLEEP_MS sleep (default 2): the cold caches of
`python -m bench masks`' workers, where the other engine ran in between.
FLUSH_MB 0 is the idle wait alone (``0 20``: both engines run 2-3x slower).
``--any-order`` compiles ours with ``any_order=True``.
"""
import gc
import glob
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "maskbench-dev"


def main(argv: list[str] | None = None) -> int:
    import llguidance
    import llguidance.hf
    import llguidance.numpy as lnp

    from constrained.compile import clear_cache, compile_json_schema
    from constrained.gguf_tokenizers import hf_tokenizer
    from constrained.vocab import Vocabulary
    from constrained.vocab_index import VocabIndex
    from grammars.errors import ConstraintError

    args = sys.argv[1:] if argv is None else argv
    options = {"any_order": True} if "--any-order" in args else {}
    args = [a for a in args if a != "--any-order"]
    every = int(args[0]) if args else 2
    reps = int(args[1]) if len(args) > 1 else 3
    flush = np.zeros(int(args[2]) << 20, dtype=np.uint8) if len(args) > 2 else None
    sleep_s = float(args[3]) / 1e3 if len(args) > 3 else 2e-3

    def cool() -> None:
        if flush is None:
            return
        if len(flush):
            flush[::64] += 1              # a byte per cache line
        time.sleep(sleep_s)
    warnings.simplefilter("ignore")       # schema notes (unknown keywords) on every compile
    tok = hf_tokenizer("llama-bpe")
    vocab = Vocabulary.from_tokenizer(tok)
    VocabIndex.for_vocab(vocab)
    llt = llguidance.hf.from_tokenizer(tok, n_vocab=vocab.size)
    buf = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    lbuf = lnp.allocate_token_bitmask(1, llt.vocab_size)

    def ours(s: dict) -> int:
        clear_cache()
        cool()
        t = time.perf_counter_ns()
        compile_json_schema(s, vocab, **options).guide().fill_bitmask(buf)
        return time.perf_counter_ns() - t

    def llg(s: dict) -> int:
        cool()
        t = time.perf_counter_ns()
        m = llguidance.LLMatcher(llt, llguidance.LLMatcher.grammar_from_json_schema(json.dumps(s)))
        if m.is_error():
            raise ValueError(m.get_error())
        lnp.fill_next_token_bitmask(m, lbuf, 0)
        return time.perf_counter_ns() - t

    ours({"type": "object"})
    llg({"type": "object"})
    gc.collect()
    mine, peer = [], []
    for f in sorted(glob.glob(str(CORPUS / "*.json")))[::every]:
        s = json.load(open(f))["schema"]
        try:
            ours(s)
            llg(s)
        except (ConstraintError, ValueError):
            continue
        a, b = [], []
        for _ in range(reps):
            a.append(ours(s))
            b.append(llg(s))
        mine.append(min(a))
        peer.append(min(b))
    o, p = np.array(mine) / 1e6, np.array(peer) / 1e6

    def stats(x: np.ndarray) -> str:
        return f"p50 {np.median(x):.3f} p90 {np.percentile(x, 90):.3f} p99 {np.percentile(x, 99):.2f} max {x.max():.1f}"

    print(f"n={len(o)} ours {stats(o)} | llguidance {stats(p)} | median ratio {np.median(o / p):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
