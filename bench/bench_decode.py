"""Constrained vs unconstrained decoding throughput on MLX (one JSON line per case).

Same model, same prompt, same number of generated tokens, every variant timed
in one run, interleaved, best of `--reps` (the machine is shared, so ratios
matter, not absolute tokens/s). Loops (the ``engine`` field):

- ``mlx_lm.generate_step`` (batch 1) and ``mlx_lm.BatchGenerator`` (batch > 1,
  no stop tokens): mlx-lm's own loops, with no processor (``none``), with
  `constrained.mlx_processor` (``schema``), and with each peer's own MLX
  integration (``schema_xgrammar``: its contrib/mlxlm.py processor with its
  plain-``mx`` bitmask kernel; outlines-core and llguidance ship only Metal
  kernels, so here they print a ``skipped`` line with the error they raise),
  and ``read_id``: a processor that only reads the newest token id and masks
  nothing, the least any processor pays whose next mask depends on that id
  (it waits for the step in flight, which ends mlx-lm's one-step pipelining);
- ``constrained``: `constrained.generate` on the `MLXLM` backend (our loop,
  with forced-token fast-forward): no constraint vs a JSON schema vs a regex,
  at batch 1 and ``n = batch`` samples of one prompt.

Neither constraint can finish within the budget (a 500-character string, 1000
letters), so constrained rows make exactly as many tokens as unconstrained
ones. ``ratio`` is tokens/s over the unconstrained tokens/s of the same loop,
batch, model and vocabulary (target >= 0.97); ``cpu_ratio`` the same in CPU
seconds of this process (less hit by other processes). ``prefix_ok``: every
constrained row's tokens are accepted by our guide (a cross-check of the peers).

Shapes: ``tiny`` is `backends.tiny` (64 wide, 2 layers), where a forward pass
costs about as much as sampling over a 128k vocabulary, so per-token processor
cost is at its most visible; ``small`` (512 wide, 8 layers, random init) has a
model step a few times larger, closer to a real model's share.

Run: ``python -m bench.bench_decode [--vocabs llama-spm llama-bpe] [--shapes tiny small] [--tokens 64] [--reps 3]``
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
SHAPES: dict[str, dict[str, int] | None] = {
    "tiny": None,  # backends.tiny.TINY_CONFIG, weights from the cached directory
    "small": {"hidden_size": 512, "num_hidden_layers": 8, "intermediate_size": 1536,
              "num_attention_heads": 8, "num_key_value_heads": 4},
}

Rows = list[list[int]]


def _emit(**row: Any) -> None:
    print(json.dumps(row), flush=True)


def _interleaved(fns: dict[str, Callable[[], Rows]], reps: int) -> dict[str, dict[str, Any]]:
    """Best-of-`reps` wall and CPU seconds per variant, variants interleaved so load hits all alike."""
    best = {k: {"wall": float("inf"), "cpu": float("inf"), "rows": []} for k in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            rows = fn()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            b = best[name]
            b["cpu"] = min(b["cpu"], cpu)
            if wall < b["wall"]:
                b.update(wall=wall, rows=rows)
    return best


def _report(engine: str, batch: int, results: dict[str, dict[str, Any]], check: Callable[[str, Rows], bool],
            **extra: Any) -> None:
    base = results["none"]
    base_tok = sum(map(len, base["rows"]))
    for name, r in results.items():
        tok = sum(map(len, r["rows"]))
        _emit(engine=engine, batch=batch, constraint=name, tokens=tok, seconds=round(r["wall"], 4),
              tok_per_s=round(tok / r["wall"], 1), ratio=round(tok / r["wall"] / (base_tok / base["wall"]), 3),
              cpu_ratio=round(tok / r["cpu"] / (base_tok / base["cpu"]), 3),
              prefix_ok=None if name in ("none", "read_id") else check(name, r["rows"]), **extra)


def _prefix_checker(tok: Any) -> Callable[[str, Rows], bool]:
    """True when our guide accepts every row's tokens (the schema, or the regex for ``regex`` rows)."""
    from constrained.processors import mlx_processor

    fsms = {"schema": mlx_processor(SCHEMA, tok, whitespace="compact").cursor.fsm,
            "regex": mlx_processor(REGEX, tok, regex=True).cursor.fsm}

    def check(name: str, rows: Rows) -> bool:
        fsm = fsms["regex" if name == "regex" else "schema"]
        for row in rows:
            guide = fsm.guide()
            if not all(guide.advance(t) for t in row):
                return False
        return True

    return check


# ----------------------------------------------------------------------------- our engine


def bench_constrained(lm: Any, batch: int, tokens: int, reps: int) -> dict[str, dict[str, Any]]:
    """`constrained.generate` (n = `batch` samples of one prompt): none vs schema vs regex."""
    from constrained.generate import generate

    def run(**constraint: Any) -> Callable[[], Rows]:
        def fn() -> Rows:
            lm.clear_cache()  # no replaying another run's logprobs
            # budget_aware off: the regex needs 1000 characters, more than a run's tokens, which a
            # user's request is refused for up front; here every variant writes `tokens` tokens
            gens = generate(lm, PROMPT, n=batch, max_tokens=tokens, seed=0, budget_aware=False, **constraint)
            return [list(g.token_ids) for g in gens]

        return fn

    variants = {"none": run(), "schema": run(schema=SCHEMA, whitespace="compact"), "regex": run(regex=REGEX)}
    for fn in variants.values():  # warm-up: compile, first masks, MLX kernels
        fn()
    return _interleaved(variants, reps)


# ----------------------------------------------------------------------------- mlx-lm's own loops


def _xgrammar_factory(tok: Any, vocab_size: int) -> Callable[[], Any]:
    import mlx.core as mx
    import xgrammar
    from xgrammar.kernels.apply_token_bitmask_mlx import apply_token_bitmask_mlx

    info = xgrammar.TokenizerInfo.from_huggingface(tok, vocab_size=vocab_size)
    compiled = xgrammar.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMA), any_whitespace=False,
                                                                     separators=(",", ":"))

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


def _kernel_peer(name: str, module: str, tok: Any) -> Callable[[], Any]:
    """A peer's matcher (the `bench.engines` adapter) with its own MLX kernel `module.apply_token_bitmask`.

    The kernel is tried first on a dummy row: outlines-core's and llguidance's
    are Metal-only and raise on CPU, so they are skipped with their error.
    """
    import importlib

    import mlx.core as mx
    import numpy as np

    from bench.engines import ENGINES
    from constrained.processors import vocabulary_for

    apply = importlib.import_module(module).apply_token_bitmask
    mx.eval(apply(mx.zeros((1, 64)), np.full((1, 2), -1, dtype=np.int32)))
    vocab = vocabulary_for(tok)
    engine = ENGINES[name]()
    engine.setup(tok, vocab)
    compiled = engine.compile(SCHEMA)
    words = (vocab.size + 31) // 32

    class PeerProcessor:
        def __init__(self) -> None:
            self.matcher = engine.matcher(compiled)
            self.buf = np.zeros((1, words), dtype=np.int32)
            self.seen: int | None = None

        def __call__(self, tokens: Any, logits: Any) -> Any:
            if self.seen is not None and tokens.size > self.seen:
                self.matcher.accept(tokens[-1].item())
            self.seen = tokens.size
            self.matcher.fill(self.buf[0])
            return apply(logits, self.buf)

    return PeerProcessor


def _peer_processors(tok: Any, vocab_size: int) -> dict[str, Callable[[], Any] | str]:
    """Processor factory per peer, or the reason it cannot run here."""
    probes: dict[str, Callable[[], Callable[[], Any]]] = {
        "xgrammar": lambda: _xgrammar_factory(tok, vocab_size),
        "outlines-core": lambda: _kernel_peer("outlines-core", "outlines_core.kernels.mlx", tok),
        "llguidance": lambda: _kernel_peer("llguidance", "llguidance.mlx", tok),
    }
    out: dict[str, Callable[[], Any] | str] = {}
    for name, probe in probes.items():
        try:
            out[name] = probe()
        except Exception as e:  # ImportError, or the Metal-only kernel's RuntimeError
            out[name] = f"{type(e).__name__}: {e}"
    return out


def _step_runner(model: Any, prompt: list[int], make: Callable[[], Any] | None, tokens: int) -> Callable[[], Rows]:
    """`mlx_lm.generate.generate_step` at batch 1: exactly `tokens` sampled ids (it never stops early)."""
    import mlx.core as mx
    from mlx_lm.generate import generate_step
    from mlx_lm.sample_utils import make_sampler

    sampler = make_sampler(temp=1.0)

    def fn() -> Rows:
        procs = [make()] if make else None
        steps = generate_step(mx.array(prompt), model, max_tokens=tokens, sampler=sampler, logits_processors=procs)
        return [[int(y) for y, _ in steps]]

    return fn


def _batch_runner(model: Any, prompt: list[int], make: Callable[[], Any] | None, tokens: int,
                  batch: int) -> Callable[[], Rows]:
    """`mlx_lm.generate.BatchGenerator`, `batch` copies of the prompt, one processor per row, no stop tokens."""
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.sample_utils import make_sampler

    sampler = make_sampler(temp=1.0)

    def fn() -> Rows:
        gen = BatchGenerator(model, max_tokens=tokens, sampler=sampler)
        procs = [[make()] if make else [] for _ in range(batch)]
        uids = gen.insert([prompt] * batch, logits_processors=procs)
        out: dict[int, list[int]] = {u: [] for u in uids}
        done: set[int] = set()
        while len(done) < len(uids):
            for r in gen.next_generated():
                out[r.uid].append(r.token)
                if r.finish_reason is not None:
                    done.add(r.uid)
        gen.close()
        return [out[u] for u in uids]

    return fn


class _ReadNewestId:
    """An mlx-lm processor that reads the newest token id and returns the logits unchanged (``read_id``)."""

    def __call__(self, tokens: Any, logits: Any) -> Any:
        tokens[-1].item()
        return logits


def bench_mlx_lm(model: Any, tok: Any, batch: int, tokens: int, reps: int,
                 skipped: Callable[[str, str], None], peers: bool = True) -> dict[str, dict[str, Any]]:
    """mlx-lm's loop (generate_step at batch 1, BatchGenerator above): none vs ours vs the peers."""
    from constrained.processors import mlx_processor

    prompt = tok.encode(PROMPT)
    vocab_size = int(model.model.embed_tokens.weight.shape[0])
    makers: dict[str, Callable[[], Any] | None] = {
        "none": None, "read_id": _ReadNewestId, "schema": lambda: mlx_processor(SCHEMA, tok, whitespace="compact")}
    for name, factory in (_peer_processors(tok, vocab_size) if peers else {}).items():
        if isinstance(factory, str):
            skipped(f"schema_{name}", factory)
        else:
            makers[f"schema_{name}"] = factory
    if batch == 1:
        variants = {k: _step_runner(model, prompt, m, tokens) for k, m in makers.items()}
    else:
        variants = {k: _batch_runner(model, prompt, m, tokens, batch) for k, m in makers.items()}
    for fn in variants.values():  # warm-up: compile, first masks, MLX kernels
        fn()
    return _interleaved(variants, reps)


# ----------------------------------------------------------------------------- models


def load(shape: str, vocab: str) -> tuple[Any, Any]:
    """(mlx model, HF tokenizer) of the tiny llama with `vocab`, or a random-init llama of `shape` over it."""
    import mlx.core as mx
    from mlx_lm.utils import load_model
    from transformers import PreTrainedTokenizerFast

    from backends.tiny import TINY_CONFIG, tiny_model_dir

    model_dir = tiny_model_dir("qwen2" if vocab == "qwen2" else "llama", vocab)
    tok = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = load_model(model_dir)[0]
    if SHAPES[shape] is None:
        return model, tok
    from mlx_lm.models import llama

    rows = int(model.model.embed_tokens.weight.shape[0])
    cfg = {k: TINY_CONFIG[k] for k in ("rms_norm_eps", "rope_theta", "tie_word_embeddings")}
    bigger = llama.Model(llama.ModelArgs(model_type="llama", vocab_size=rows, **cfg, **SHAPES[shape]))
    mx.eval(bigger.parameters())
    return bigger, tok


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocabs", nargs="+", default=["llama-spm", "llama-bpe"],
                   help="tiny model vocabularies (llama-spm, llama-bpe, qwen2)")
    p.add_argument("--shapes", nargs="+", default=["tiny"], choices=sorted(SHAPES))
    p.add_argument("--loops", nargs="+", default=["mlx_lm", "constrained"], choices=["mlx_lm", "constrained"])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--no-peers", dest="peers", action="store_false", help="only ours (no xgrammar, ... rows)")
    args = p.parse_args(argv)

    from backends.mlx import MLXLM

    for shape in args.shapes:
        for vocab in dict.fromkeys(args.vocabs):
            model, tok = load(shape, vocab)
            check = _prefix_checker(tok)
            lm = MLXLM(model, tok)
            lm.ensure_loaded()
            for batch in args.batches:
                extra = {"vocab": vocab, "shape": shape}
                if "mlx_lm" in args.loops:
                    engine = "mlx_lm.generate_step" if batch == 1 else "mlx_lm.BatchGenerator"

                    def skipped(name: str, why: str) -> None:
                        _emit(engine=engine, batch=batch, constraint=name, skipped=why, **extra)

                    results = bench_mlx_lm(model, tok, batch, args.tokens, args.reps, skipped, args.peers)
                    _report(engine, batch, results, check, **extra)
                if "constrained" in args.loops:
                    _report("constrained", batch, bench_constrained(lm, batch, args.tokens, args.reps), check, **extra)
            lm.close()


if __name__ == "__main__":
    main()
