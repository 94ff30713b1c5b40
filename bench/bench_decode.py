"""Constrained vs unconstrained decoding throughput on MLX (one JSON line per case).

Same tiny random model, same prompts, same number of generated tokens, all
variants timed in one run, interleaved, best of `--reps` (the machine is shared,
so ratios matter, not absolute tokens/s):

- ``engine=constrained``: `constrained.generate` on the `MLXLM` backend (the
  trie path): no constraint vs a JSON schema vs a regex, at batch 1 and 8
  (``n`` samples of one prompt). The trie's logprobs are cleared before each
  run so no run replays another's cache. Neither constrained workload can
  finish within the budget, so every sample runs the same `--tokens`; the
  schema's forced tokens (``{"name":"`` at the start) still skip sampling.
- ``engine=mlx_lm``: mlx-lm's own ``BatchGenerator`` (no stop tokens, so every
  row makes exactly `--tokens` tokens): no processor vs `constrained.mlx_processor`
  vs xgrammar's matcher with its plain-``mx`` bitmask kernel (when xgrammar is
  installed). outlines-core ships only a Metal kernel for MLX, which cannot run
  on this CPU, so it is not in this table.

``ratio`` is tokens/s of the variant divided by the unconstrained tokens/s of
the same engine and batch size (target >= 0.97).

Run: ``python -m bench.bench_decode [--vocab llama-bpe] [--tokens 64] [--reps 3]``
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

# Long on purpose (a 500-character string, 1000 letters or spaces): no row can finish within the
# token budget, so constrained rows generate exactly as many tokens as unconstrained ones.
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "minLength": 500}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
REGEX = r"[a-z ]{1000}"
PROMPT = "Write a list of people as JSON:"


def _emit(**row: Any) -> None:
    print(json.dumps(row), flush=True)


def _interleaved(fns: dict[str, Callable[[], int]], reps: int) -> dict[str, tuple[float, int]]:
    """Best-of-`reps` (seconds, tokens) per variant; variants interleaved so load hits all alike."""
    best: dict[str, tuple[float, int]] = {k: (float("inf"), 0) for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            tokens = fn()
            dt = time.perf_counter() - t0
            if dt < best[name][0]:
                best[name] = (dt, tokens)
    return best


def _report(engine: str, batch: int, results: dict[str, tuple[float, int]], **extra: Any) -> None:
    base_s, base_tok = results["none"]
    base = base_tok / base_s
    for name, (s, tok) in results.items():
        _emit(engine=engine, batch=batch, constraint=name, tokens=tok, seconds=round(s, 4),
              tok_per_s=round(tok / s, 1), ratio=round(tok / s / base, 3), **extra)


# ----------------------------------------------------------------------------- our engine


def bench_constrained(lm: Any, batch: int, tokens: int, reps: int) -> dict[str, tuple[float, int]]:
    from constrained.generate import generate

    def run(**constraint: Any) -> Callable[[], int]:
        def fn() -> int:
            lm.clear_cache()  # no replaying another run's logprobs
            gens = generate(lm, PROMPT, n=batch, max_tokens=tokens, seed=0, **constraint)
            return sum(len(g.token_ids) for g in gens)

        return fn

    variants = {"none": run(), "schema": run(schema=SCHEMA, whitespace="compact"), "regex": run(regex=REGEX)}
    for fn in variants.values():  # warm-up: compile, first masks, MLX kernels
        fn()
    return _interleaved(variants, reps)


# ----------------------------------------------------------------------------- mlx-lm's own loop


def _xgrammar_factory(tok: Any, vocab_size: int) -> Callable[[], Any] | None:
    try:
        import xgrammar
        from xgrammar.kernels.apply_token_bitmask_mlx import apply_token_bitmask_mlx
    except ImportError:
        return None
    import mlx.core as mx

    info = xgrammar.TokenizerInfo.from_huggingface(tok, vocab_size=vocab_size)
    compiled = xgrammar.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMA), any_whitespace=False)

    class XGrammarProcessor:
        """xgrammar's contrib/mlxlm.py processor, minus its prompt-token quirk, with the plain-mx kernel."""

        def __init__(self) -> None:
            self.matcher = xgrammar.GrammarMatcher(compiled)
            self.bitmask = xgrammar.allocate_token_bitmask(1, vocab_size)
            self.seen: int | None = None

        def __call__(self, tokens: Any, logits: Any) -> Any:
            if self.seen is not None and tokens.size > self.seen and not self.matcher.is_terminated():
                self.matcher.accept_token(tokens[-1].item())
            self.seen = tokens.size
            if self.matcher.is_terminated():
                return logits
            self.matcher.fill_next_token_bitmask(self.bitmask)
            return apply_token_bitmask_mlx(mx.array(self.bitmask.numpy()), logits, vocab_size)

    return XGrammarProcessor


def bench_mlx_lm(model: Any, tok: Any, batch: int, tokens: int, reps: int) -> dict[str, tuple[float, int]]:
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.sample_utils import make_sampler

    from constrained.processors import mlx_processor

    prompt = tok.encode(PROMPT)
    sampler = make_sampler(temp=1.0)
    vocab_size = int(model.model.embed_tokens.weight.shape[0])

    def run(make: Callable[[], Any] | None) -> Callable[[], int]:
        def fn() -> int:
            gen = BatchGenerator(model, max_tokens=tokens, sampler=sampler)
            procs = [[make()] if make else [] for _ in range(batch)]
            uids = gen.insert([prompt] * batch, logits_processors=procs)
            done, count = set(), 0
            while len(done) < len(uids):
                for r in gen.next_generated():
                    count += 1
                    if r.finish_reason is not None:
                        done.add(r.uid)
            gen.close()
            return count

        return fn

    variants = {"none": run(None), "schema": run(lambda: mlx_processor(SCHEMA, tok, whitespace="compact"))}
    xgr = _xgrammar_factory(tok, vocab_size)
    if xgr is not None:
        variants["schema_xgrammar"] = run(xgr)
    for fn in variants.values():
        fn()
    return _interleaved(variants, reps)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", default="llama-bpe", help="tiny model vocabulary (llama-spm, llama-bpe, qwen2)")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args(argv)

    from mlx_lm.utils import load_model
    from transformers import PreTrainedTokenizerFast

    from backends.mlx import MLXLM
    from backends.tiny import tiny_model_dir

    model_dir = tiny_model_dir("qwen2" if args.vocab == "qwen2" else "llama", args.vocab)
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = load_model(model_dir)[0]
    lm = MLXLM(model, tok)
    lm.ensure_loaded()
    for batch in args.batches:
        _report("constrained", batch, bench_constrained(lm, batch, args.tokens, args.reps), vocab=args.vocab)
        _report("mlx_lm", batch, bench_mlx_lm(model, tok, batch, args.tokens, args.reps), vocab=args.vocab)
    lm.close()


if __name__ == "__main__":
    main()
