"""`python -m bench SUITE ...`: reproducible benchmarks (also `constrained bench SUITE ...`).

Suites:

- ``masks``: compile time (TTFM), mask time (TBM) and correctness over a schema
  corpus, ours against llguidance, xgrammar and outlines-core when installed;
- ``decode``: end-to-end tokens/s, constrained vs unconstrained, MLX and HF;
- ``cache``: the prefix trie's reuse (wraps `bench/bench_cache.py`);
- ``serve``: `constrained serve` under concurrent load, constrained vs
  unconstrained, and mlx_lm.server (see `bench/serve.py`);
- ``vllm``: tokens/s, validity and TTFT through vLLM, our processor vs its xgrammar / guidance backends;
- ``corpus``: rebuild / check the corpus in `bench/corpus/`.

Every suite prints one JSON line per case (stdout, or ``--jsonl FILE``) and a
summary table (stdout when the JSON lines go to a file, else stderr).

Example:
    >>> main(["corpus", "--check"])  # doctest: +SKIP
    0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import time
from typing import Callable, Iterator, Sequence

__all__ = ["main"]

_TOKENIZERS = ("gpt-2", "llama-bpe", "llama-spm", "qwen2", "phi-3")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one suite; returns the process exit code (2 on a usage or corpus error)."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if not getattr(args, "run", None):
        _parser().print_help(sys.stderr)
        return 2
    from bench.corpus import CorpusError

    try:
        with _output(getattr(args, "jsonl", None)) as (emit, say):
            return args.run(args, emit, say)
    except CorpusError as e:
        print(f"bench: corpus error: {e}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description="constrained-decoding benchmarks")
    sub = p.add_subparsers(dest="suite")

    m = sub.add_parser("masks", help="TTFM / TBM / correctness over a schema corpus, with the peers")
    m.add_argument("--corpus", help="directory of MaskBench-style {schema, tests} files (default: bench/corpus)")
    m.add_argument("--tokenizer", default="llama-bpe", choices=_TOKENIZERS)
    m.add_argument("--engines", nargs="+", default=["ours", "llguidance", "xgrammar", "outlines-core"],
                   choices=["ours", "llguidance", "xgrammar", "outlines-core"])
    m.add_argument("--styles", nargs="+", default=["compact", "default"], choices=["compact", "default"])
    m.add_argument("--schemas", nargs="+", help="only these case names")
    m.add_argument("--quick", action="store_true", help="a small subset of the default corpus")
    m.add_argument("--time-limit", type=float, default=20.0, help="seconds per (engine, schema)")
    m.add_argument("--order", choices=["turns", "engine"], default="turns",
                   help="with --isolation engine: engines take turns schema by schema, in an order drawn per "
                        "schema (default), or each runs all its schemas in a row")
    m.add_argument("--mem-limit-gb", type=float, default=4.0, help="extra address space per worker")
    m.add_argument("--isolation", choices=["engine", "case"], default="engine",
                   help="one long-lived worker per engine (a server's steady state; default) or a fresh "
                        "forked worker per (engine, schema) (adds copy-on-write page faults)")
    m.add_argument("--any-order", action="store_true",
                   help="ours compiles with any_order=True (object members in any order; default: declared order)")
    m.add_argument("--jsonl", help="write the JSON lines here instead of stdout")
    m.set_defaults(run=_run_masks)

    r = sub.add_parser("regex", help="the masks suite on the real-world `pattern` regexes of a corpus (full match)")
    r.add_argument("--corpus", required=True, help="MaskBench-style folder whose schemas' patterns to use "
                   "(e.g. ../shared/corpus/maskbench-dev)")
    r.add_argument("--limit", type=int, help="only the first N patterns (sorted)")
    for action in m._actions:
        if action.dest in ("tokenizer", "engines", "time_limit", "order", "mem_limit_gb", "isolation", "jsonl"):
            r._add_action(action)
    r.set_defaults(run=_run_masks, styles=["compact"], schemas=None, quick=False)

    d = sub.add_parser("decode", help="tokens/s constrained vs unconstrained (MLX, HF)")
    d.add_argument("--model", help="local model directory (default: the tiny random llama, llama-bpe vocab), or "
                                   "'qwen2-0.5b': a random model with Qwen2-0.5B's shapes and vocabulary, built once")
    d.add_argument("--backends", nargs="+", default=["mlx", "hf"], choices=["mlx", "hf"])
    d.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8])
    d.add_argument("--max-tokens", type=int, default=64)
    d.add_argument("--reps", type=int, default=3)
    d.add_argument("--vocabs", nargs="+", default=["llama-spm", "llama-bpe"],
                   help="MLX: tiny model vocabularies (llama-spm, llama-bpe, qwen2)")
    d.add_argument("--shapes", nargs="+", default=["tiny"], choices=["tiny", "small"],
                   help="MLX: model shapes (small: 512 wide, 8 layers, random init)")
    d.add_argument("--device", default="cpu",
                   help="HF: the torch device of the model, `generate` and the processors (e.g. cuda; there our "
                        "own loop, generate:*, draws on the device, and /device is the default it measures)")
    d.add_argument("--loop-only", action="store_true",
                   help="HF: time only our own loop (generate:*, live KV and /trie), not transformers' generate")
    d.add_argument("--rejoin", action="store_true",
                   help="HF: also time our loop with forced runs re-entering through the trie (generate:ours/rejoin)")
    d.add_argument("--device-draw", action="store_true",
                   help="HF: also time our loop drawing tokens with torch ops on the model's device, as on a GPU "
                        "(generate:*/device; on the CPU the host draws by default)")
    d.add_argument("--no-peers", dest="peers", action="store_false",
                   help="skip llguidance/xgrammar/outlines-core (run by default when installed)")
    d.add_argument("--jsonl")
    d.set_defaults(run=_run_decode)

    c = sub.add_parser("cache", help="prefix-trie reuse (bench/bench_cache.py)")
    c.add_argument("--backends", nargs="+", default=["mlx", "hf"], choices=["mlx", "hf"])
    c.add_argument("--vocabs", nargs="+", default=["byte-bpe", "llama-spm"])
    c.add_argument("--shapes", nargs="+", default=["tiny", "deep"], choices=["tiny", "deep"],
                   help="model shapes: tiny (2x64, the test model), deep (8x128: layers dominate like real models)")
    c.add_argument("--reps", type=int, default=5)
    c.add_argument("--torch-threads", type=int, default=None,
                   help="torch.set_num_threads for the HF runs (a busy shared machine stalls torch's thread barriers)")
    c.add_argument("--jsonl")
    c.set_defaults(run=_run_cache)

    v = sub.add_parser("serve", help="constrained serve: req/s, tok/s, TTFT at concurrency 1/8/32 (bench/serve.py)")
    v.add_argument("--model", help="local model directory (default: the tiny random llama, llama-spm vocab)")
    v.add_argument("--backend", choices=["mlx", "hf"], default="mlx")
    v.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 32])
    v.add_argument("--max-tokens", type=int, default=48)
    v.add_argument("--requests-per-client", type=int, default=2, help="requests per concurrent client")
    v.add_argument("--min-requests", type=int, default=6, help="at least this many requests per case")
    v.add_argument("--no-peers", dest="peers", action="store_false", help="skip mlx_lm.server")
    v.add_argument("--jsonl")
    v.set_defaults(run=_run_serve)

    w = sub.add_parser("vllm", help="tokens/s, validity, TTFT: our processor vs vLLM's xgrammar / guidance")
    w.add_argument("--model", help="local model directory (default: the tiny random llama for vLLM)")
    w.add_argument("--modes", nargs="+", default=["none", "ours", "xgrammar", "guidance"],
                   choices=["none", "ours", "xgrammar", "guidance"])
    w.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 32])
    w.add_argument("--requests", type=int, default=8, help="requests per run (at least the concurrency)")
    w.add_argument("--reps", type=int, default=2, help="runs per (mode, concurrency); tokens/s is their median")
    w.add_argument("--max-tokens", type=int, default=256)
    w.add_argument("--max-model-len", type=int, default=1024)
    w.add_argument("--jsonl")
    w.set_defaults(run=_run_vllm)

    k = sub.add_parser("corpus", help="rebuild (--build) or check the default corpus")
    k.add_argument("--build", action="store_true", help="rewrite bench/corpus from tests/schema_corpus.py + api_shapes")
    k.add_argument("--corpus", help="check this directory instead")
    k.set_defaults(run=_run_corpus)
    return p


@contextlib.contextmanager
def _output(path: str | None) -> Iterator[tuple[Callable[[dict], None], Callable[[str], None]]]:
    """(emit a JSON line, print a summary line); the summary goes to stdout only when the JSON does not."""
    fh = open(path, "w", encoding="utf-8") if path else sys.stdout
    summary = sys.stdout if path else sys.stderr

    def emit(row: dict) -> None:
        fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        fh.flush()

    def say(text: str) -> None:
        print(text, file=summary, flush=True)

    try:
        yield emit, say
    finally:
        if path:
            fh.close()


def machine() -> str:
    import os

    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def _run_masks(args: argparse.Namespace, emit: Callable[[dict], None], say: Callable[[str], None]) -> int:
    from bench.corpus import DEFAULT_CORPUS, QUICK, load_corpus
    from bench.masks import STYLES, run_masks, setup_engines
    from bench.report import masks_disagreements, masks_head_to_head, masks_neighbours, masks_summary
    from constrained.gguf_tokenizers import hf_tokenizer
    from constrained.vocab import Vocabulary

    if args.suite == "regex":
        from bench.regex_corpus import regex_cases

        cases = regex_cases(args.corpus, args.limit)
    else:
        names = args.schemas or (list(QUICK) if args.quick else None)
        cases = load_corpus(args.corpus or DEFAULT_CORPUS, names)
    t0 = time.perf_counter()
    tok = hf_tokenizer(args.tokenizer)
    vocab = Vocabulary.from_tokenizer(tok)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    any_order = getattr(args, "any_order", False)
    engines = setup_engines(args.engines, tok, vocab, log, {"ours": {"any_order": True}} if any_order else None)
    header = {"suite": args.suite, "event": "setup", "corpus": str(args.corpus or DEFAULT_CORPUS),
              "tokenizer": args.tokenizer, "vocab_size": vocab.size,
              "machine": machine(), "styles": {s: repr(STYLES[s]) for s in args.styles},
              "time_limit_s": args.time_limit, "mem_limit_gb": args.mem_limit_gb, "isolation": args.isolation,
              "order": args.order, "any_order": any_order,
              "schemas": len(cases),
              "engines": {n: {k: v for k, v in i.items() if k != "engine"} for n, i in engines.items()}}
    emit(header)
    records = run_masks(cases, engines, tok, vocab, args.styles, time_limit=args.time_limit,
                        mem_limit=int(args.mem_limit_gb * (1 << 30)), emit=emit, isolation=args.isolation,
                        order=args.order, log=log)
    what = "regexes (full match, oracle: Python re)" if args.suite == "regex" else "schemas"
    say(f"\n## {args.suite}: {len(cases)} {what} from {args.corpus or 'bench/corpus'}, tokenizer {args.tokenizer} "
        f"({vocab.size} tokens), {machine()}")
    if args.suite == "regex":
        say("texts: as they are (corpus strings and hypothesis-generated ones), EOS after the last token")
    else:
        say("styles: " + "; ".join(f"{s} = json.dumps(**{STYLES[s]!r})" for s in args.styles)
            + "; object members in schema order" + (" (ours compiled with any_order=True)" if any_order else ""))
    for name, info in engines.items():
        if "engine" in info:
            say(f"- {name}: {info['engine'].settings}")
    turns = "engines taking turns schema by schema, in an order drawn per schema (seeded)"
    worker = ("a fresh worker per (engine, schema)" if args.isolation == "case" else
              "one long-lived worker per engine, " + (turns if args.order == "turns" else "each engine's schemas in a row"))
    say(f"isolation: {worker}; limits per (engine, schema): {args.time_limit:g}s, +{args.mem_limit_gb:g} GiB "
        f"address space; wall {time.perf_counter() - t0:.0f}s\n")
    say(masks_summary(records, engines))
    if len({r["engine"] for r in records}) > 1:
        say("\nHead to head (ratios < 1: ours is faster):\n")
        say(masks_head_to_head(records))
        if args.isolation == "engine" and args.order == "turns":
            say("\nTTFM median ms by the engine that ran just before, on the schemas all compiled (count):\n")
            say(masks_neighbours(records))
    say("\nFailures and disagreements with " + ("Python's re" if args.suite == "regex" else "jsonschema") + ":\n")
    say(masks_disagreements(records))
    return 0


def _run_decode(args: argparse.Namespace, emit: Callable[[dict], None], say: Callable[[str], None]) -> int:
    from bench.decode import run_decode

    return run_decode(args, emit, say)


def _run_vllm(args: argparse.Namespace, emit: Callable[[dict], None], say: Callable[[str], None]) -> int:
    from bench.vllm_bench import run_vllm

    return run_vllm(args, emit, say)


def _run_cache(args: argparse.Namespace, emit: Callable[[dict], None], say: Callable[[str], None]) -> int:
    from bench.cache import run_cache

    return run_cache(args, emit, say)


def _run_serve(args: argparse.Namespace, emit: Callable[[dict], None], say: Callable[[str], None]) -> int:
    from bench.serve import run_serve

    return run_serve(args, emit, say)


def _run_corpus(args: argparse.Namespace, emit: Callable[[dict], None], say: Callable[[str], None]) -> int:
    from bench.corpus import DEFAULT_CORPUS, build_corpus, load_corpus

    if args.build:
        paths = build_corpus()
        say(f"wrote {len(paths)} case files to {DEFAULT_CORPUS}")
    cases = load_corpus(args.corpus or DEFAULT_CORPUS)
    n = sum(len(c.tests) for c in cases)
    valid = sum(c.n_valid for c in cases)
    emit({"suite": "corpus", "schemas": len(cases), "tests": n, "valid": valid, "invalid": n - valid})
    say(f"corpus OK: {len(cases)} schemas, {n} tests ({valid} valid, {n - valid} invalid), every label checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
