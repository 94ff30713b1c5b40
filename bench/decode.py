"""Suite `decode`: end-to-end tokens/s, constrained vs unconstrained, on MLX and HF.

- MLX: runs `bench/bench_decode.py` (our `constrained.generate` loop, and
  mlx-lm's `generate_step` at batch 1 / `BatchGenerator` at batch 8 with
  `mlx_processor` or the peers' own MLX integrations) and forwards its JSON
  lines; see that file for the cases.
- HF (here): transformers' `generate`, greedy, without a logits processor,
  with ours (`hf_logits_processor`), and with llguidance, xgrammar and
  outlines-core when installed (``--no-peers`` to skip) through a small
  processor around their matchers (the `bench.engines` adapters, masks
  applied by the same code as ours); ``generate:*`` rows time our own loop,
  `constrained.generate_batch` over the `HFLM` backend.

On the default tiny random model (64-wide, 128k vocabulary) a forward pass
costs about as much as a mask, so the ratio shows the constraint's per-token
overhead at its most visible; on a real model it shrinks toward 1.

Example:
    >>> SCHEMA["required"]
    ['name', 'arguments']
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import numpy as np

__all__ = ["run_decode", "SCHEMA"]

# Bounded output (enums, bounded numbers, a short string) so that even a random model ends its document.
SCHEMA = {"type": "object", "properties": {
    "name": {"enum": ["get_weather", "web_search"]},
    "arguments": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}, "alerts": {"type": "boolean"}},
        "required": ["city", "unit", "days", "alerts"], "additionalProperties": False}},
    "required": ["name", "arguments"], "additionalProperties": False}
PROMPTS = [f"Request {i}: what is the weather in city number {i}? Answer with a tool call as JSON:" for i in range(8)]


class _SyncedMatcher:
    """A peer's matcher fed the ids appended since the last call (the prompt is skipped)."""

    def __init__(self, matcher: Any, n_words: int) -> None:
        self.m = matcher
        self.prompt_len: int | None = None
        self.consumed = 0
        self.buf = np.zeros(n_words, dtype=np.int32)

    def mask(self, length: int, tail: Callable[[int], list[int]]) -> np.ndarray:
        if self.prompt_len is None:
            self.prompt_len = length
        else:
            new = tail(self.prompt_len + self.consumed)
            for t in new:
                self.m.accept(int(t))
            self.consumed += len(new)
        self.m.fill(self.buf)
        return self.buf


def _hf_proc(kind: str, ctx: dict, rows: int) -> Any:
    """A fresh transformers LogitsProcessor for `kind` over `rows` batch rows: ours, or a peer's own
    (xgrammar's `contrib.hf.LogitsProcessor`; llguidance's matchers with its `llguidance.torch`
    bitmask helpers; outlines-core through `_SyncedMatcher` and our mask application)."""
    if kind in ("ours", "ours/inplace"):   # (/inplace: the scores masked in place, as the peers' are)
        from constrained.processors import hf_logits_processor

        return hf_logits_processor(SCHEMA, ctx["vocab"], inplace=kind == "ours/inplace")
    engine, compiled = ctx["peers"][kind]
    if kind == "xgrammar":
        import xgrammar.contrib.hf

        return xgrammar.contrib.hf.LogitsProcessor(compiled)
    from transformers import LogitsProcessor

    if kind == "llguidance":
        import llguidance.torch as lt

        matchers = [compiled.deep_copy() for _ in range(rows)]
        bitmask = lt.allocate_token_bitmask(rows, ctx["vocab"].size)

        class LLGuidanceProcessor(LogitsProcessor):
            prompt_len: int | None = None

            def __call__(self, input_ids: Any, scores: Any) -> Any:
                length = input_ids.shape[1]
                if self.prompt_len is None:
                    self.prompt_len = length
                elif length > self.prompt_len:
                    for m, t in zip(matchers, input_ids[:, -1].tolist()):
                        m.consume_token(t)
                for r, m in enumerate(matchers):
                    lt.fill_next_token_bitmask(m, bitmask, r)
                # (filled on the CPU, applied where the scores are, as vLLM does)
                lt.apply_token_bitmask_inplace(scores, bitmask.to(scores.device, non_blocking=True))
                return scores

        return LLGuidanceProcessor()
    import torch

    from constrained.processors import apply_torch_bitmask

    synced = [_SyncedMatcher(engine.matcher(compiled), ctx["n_words"]) for _ in range(rows)]

    class PeerProcessor(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            length = input_ids.shape[1]
            packed = np.stack([s.mask(length, lambda st, r=r: input_ids[r, st:].tolist())
                               for r, s in enumerate(synced)])
            return apply_torch_bitmask(scores, torch.from_numpy(packed))

    return PeerProcessor()


def _identity(input_ids: Any, scores: Any) -> Any:
    return scores


class _Timed:
    """A logits processor with the time spent in its calls counted (the per-step overhead it adds).

    On a GPU the forward pass is still running when the processor is called, and the processor's first
    read of the ids waits for it; the device is synchronized before the clock starts, so the time is the
    processor's own (the wait would have come at generate's own next read anyway)."""

    def __init__(self, proc: Any) -> None:
        self.proc, self.ns, self.calls = proc, 0, 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if scores.is_cuda:
            import torch

            torch.cuda.synchronize(scores.device)
        t = time.perf_counter_ns()
        out = self.proc(input_ids, scores)
        self.ns += time.perf_counter_ns() - t
        self.calls += 1
        return out


def _run_hf(model: Any, prompts: list[list[int]], eos: set[int], max_tokens: int, proc: Any) -> list[list[int]]:
    import torch
    from transformers import LogitsProcessorList

    width = max(len(p) for p in prompts)
    pad = min(eos)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max_tokens, do_sample=False,
                             logits_processor=LogitsProcessorList([proc]) if proc else None,
                             pad_token_id=pad, eos_token_id=sorted(eos))
    rows = []
    for row in out[:, width:].tolist():
        cut = next((i for i, t in enumerate(row) if t in eos), len(row))
        rows.append(row[:cut])
    return rows


def _setup(model_dir: str, peers: bool, say: Callable[[str], None]) -> dict:
    from transformers import AutoTokenizer

    from bench.engines import ENGINES, available
    from constrained.vocab import Vocabulary

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    n_rows = json.load(open(f"{model_dir}/config.json"))["vocab_size"]
    vocab = Vocabulary.from_tokenizer(tok, size=max(n_rows, len(tok)))
    ctx: dict[str, Any] = {"tok": tok, "vocab": vocab, "n_words": (vocab.size + 31) // 32, "peers": {}}
    for name in (("llguidance", "xgrammar", "outlines-core") if peers else ()):
        if not available(name):
            say(f"[decode] {name}: not installed, skipped")
            continue
        engine = ENGINES[name]()
        engine.setup(tok, vocab)
        engine.prepare_child()
        ctx["peers"][name] = (engine, engine.compile(SCHEMA))
    return ctx


def _load_hf(model_dir: str, device: str = "cpu") -> Any:
    """The model in float32 on the CPU (this machine's BLAS), bfloat16 on an accelerator."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()


def _run_generate(lm: Any, prompts: list[list[int]], max_tokens: int, constrained: bool) -> list[list[int]]:
    """Our own decoding loop (`constrained.generate_batch` over the `AsyncLM` backend), greedy."""
    from constrained import GenerationRequest, generate_batch

    lm.clear_cache()                              # no prefix reuse across repetitions
    reqs = [GenerationRequest(p, schema=SCHEMA if constrained else None, max_tokens=max_tokens, temperature=0)
            for p in prompts]
    return [r[0].token_ids for r in generate_batch(lm, reqs)]


def _has_generate() -> bool:
    import constrained

    return hasattr(constrained, "generate_batch")


def _load_lm(backend: str, model_dir: str) -> Any:
    from backends.base import load_model_by_name

    lm = load_model_by_name(model_dir, backend=backend)
    lm.ensure_loaded()
    return lm


def _wrap_lm(model: Any, tokenizer: Any) -> Any:
    """`HFLM` over `model` where it is (an accelerator: inputs made there, tokens drawn there)."""
    from backends.hf import HFLM

    lm = HFLM(model, tokenizer)
    lm.ensure_loaded()
    return lm


def _valid_rows(rows: list[list[int]], vocab: Any) -> int:
    from bench.oracle import is_valid

    n = 0
    for r in rows:
        try:
            n += is_valid(SCHEMA, json.loads(vocab.decode(r)))
        except ValueError:
            pass
    return n


def run_decode(args: Any, emit: Callable[[dict], None], say: Callable[[str], None]) -> int:
    """The `decode` suite (arguments from `python -m bench decode`)."""
    if "mlx" in args.backends:
        _run_mlx_part(args, emit, say)
    if "hf" in args.backends:
        _run_hf_part(args, emit, say)
    return 0


def _run_mlx_part(args: Any, emit: Callable[[dict], None], say: Callable[[str], None]) -> None:
    """`bench/bench_decode.py` (MLX), its JSON lines forwarded and tabulated."""
    import contextlib
    import importlib.util

    from bench.cache import _Lines
    from bench.report import table

    if importlib.util.find_spec("mlx") is None:
        say("[decode] mlx: not installed, skipped")
        return
    from bench import bench_decode

    rows: list[dict] = []

    def sink(row: dict) -> None:
        row = {"suite": "decode", "backend": "mlx", **row}
        rows.append(row)
        emit(row)

    argv = ["--tokens", str(args.max_tokens), "--reps", str(args.reps), "--batches", *map(str, args.batch_sizes),
            "--vocabs", *getattr(args, "vocabs", ["llama-spm", "llama-bpe"]),
            "--shapes", *getattr(args, "shapes", ["tiny"])] + ([] if args.peers else ["--no-peers"])
    with contextlib.redirect_stdout(_Lines(sink)):
        bench_decode.main(argv)
    say(f"\n## decode, MLX (bench/bench_decode.py): random llama models, {args.max_tokens} tokens per row, "
        f"best of {args.reps}, variants interleaved; ratio = tokens/s over the unconstrained run of the same "
        "loop, batch, shape and vocabulary (cpu: the same in CPU seconds)\n")
    say(table(["shape", "vocab", "loop", "batch", "constraint", "tokens", "tokens/s", "vs unconstrained", "(cpu)",
               "prefix ok"],
              [[r["shape"], r["vocab"], r["engine"], r["batch"], r["constraint"], r.get("tokens", "-"),
                r.get("tok_per_s", "-"), r.get("ratio", "skipped: " + r.get("skipped", "")), r.get("cpu_ratio", "-"),
                r.get("prefix_ok", "-")] for r in rows]))


def _run_hf_part(args: Any, emit: Callable[[dict], None], say: Callable[[str], None]) -> None:
    from bench.report import table

    model_dir = args.model
    if model_dir is None:
        from backends.tiny import tiny_model_dir

        model_dir = str(tiny_model_dir("llama", "llama-bpe"))
    elif model_dir == "qwen2-0.5b":
        from backends.tiny import QWEN2_0_5B_CONFIG, QWEN2_0_5B_VOCAB_ROWS, tiny_model_dir

        model_dir = str(tiny_model_dir("qwen2", "qwen2", config=QWEN2_0_5B_CONFIG, pad_vocab_to=QWEN2_0_5B_VOCAB_ROWS))
    device = getattr(args, "device", "cpu")
    try:
        model = _load_hf(model_dir, device)
    except ImportError as e:
        say(f"[decode] hf: not available ({e}), skipped")
        return
    ctx = _setup(model_dir, args.peers, say)
    ctx["lm"] = None
    if _has_generate():   # our loop's backend: its own copy of the model on the CPU, this one elsewhere
        ctx["lm"] = _load_lm("hf", model_dir) if device == "cpu" else _wrap_lm(model, ctx["tok"])
    vocab = ctx["vocab"]
    prompt_ids = [ctx["tok"].encode(p, add_special_tokens=False) for p in PROMPTS]
    kinds = [] if getattr(args, "loop_only", False) else ["unconstrained", "ours", "ours/inplace", *ctx["peers"]]
    if ctx["lm"] is not None:   # our loop on its live KV batch, and (/trie) on the per-step trie path
        kinds += ["generate:unconstrained", "generate:ours"]
        if device == "cpu":   # (the per-step trie path copies every row's logprobs to the host: not for a GPU)
            kinds += ["generate:unconstrained/trie", "generate:ours/trie"]
        if getattr(args, "device_draw", False):   # the live loop drawing with torch ops (as on a GPU)
            kinds += ["generate:unconstrained/device", "generate:ours/device"]
        if getattr(args, "rejoin", False):   # forced runs re-entering through the trie instead of fed live
            kinds += ["generate:ours/rejoin"]
    rows_out = []
    for bs in args.batch_sizes:
        prompts = [prompt_ids[i % len(prompt_ids)] for i in range(bs)]
        results = _measure(model, prompts, set(vocab.eos_token_ids), args, kinds, ctx)
        for kind in kinds:
            row = _row(kind, bs, results, model_dir, vocab, device)
            emit(row)
            rows_out.append(row)
    say(f"\n## decode, HF on {device} ({model.dtype}): {model_dir}, greedy, max {args.max_tokens} new tokens,"
        f" best of {args.reps}")
    say("schema: bench.decode.SCHEMA (a bounded tool call); tokens/s relative to the unconstrained run of the same"
        " loop and batch (transformers generate; generate:*: constrained.generate_batch over our HFLM backend)\n")
    say(table(["batch", "mode", "tokens", "tokens/s", "µs per token", "vs unconstrained (wall)", "(CPU time)",
               "steps/s vs unconstrained", "processor µs per step, warm (first rep)", "rows ended as valid JSON"],
              [[r["batch"], r["mode"], r["tokens"], r["tokens_per_s"], r["us_per_token"], r["vs_unconstrained"],
                r["cpu_vs_unconstrained"], "-" if r["steps_vs_unconstrained"] is None else r["steps_vs_unconstrained"],
                "-" if r["proc_us_per_step"] is None else f"{r['proc_us_per_step']} ({r['proc_us_per_step_first']})",
                r["valid_json_rows"]] for r in rows_out]))


def _row(kind: str, bs: int, results: dict[str, dict], model_dir: str, vocab: Any, device: str = "cpu") -> dict:
    r = results[kind]
    base = results["generate:unconstrained/trie" if kind.endswith("/trie") else
                   "generate:unconstrained/device" if kind.endswith("/device") else
                   "generate:unconstrained" if kind.startswith("generate:") else "unconstrained"]
    return {"suite": "decode", "backend": "hf", "device": device, "batch": bs, "mode": kind, "model": model_dir,
            "tokens": r["tokens"], "best_s": round(r["best"], 4), "first_s": round(r["first"], 4),
            "tokens_per_s": round(r["tokens"] / r["best"], 1),
            "us_per_token": round(r["best"] / max(r["tokens"], 1) * 1e6, 1),
            "vs_unconstrained": round((r["tokens"] / r["best"]) / (base["tokens"] / base["best"]), 3),
            # generation steps per second: rows that end early lower tokens/s, not the cost of a step
            "steps_per_s": round(r["steps"] / r["best"], 1) if "steps" in r else None,
            "steps_vs_unconstrained": (round((r["steps"] / r["best"]) / (base["steps"] / base["best"]), 3)
                                       if "steps" in r and "steps" in base else None),
            "cpu_s": round(r["cpu"], 4),
            "cpu_vs_unconstrained": round((r["tokens"] / r["cpu"]) / (base["tokens"] / base["cpu"]), 3),
            "valid_json_rows": None if "unconstrained" in kind else _valid_rows(r["rows"], vocab),
            # time inside the logits processor per generation step (all rows): first repetition (states
            # visited for the first time) and the least over repetitions (warm)
            "proc_us_per_step_first": round(r["step_us"][0], 1) if "step_us" in r else None,
            "proc_us_per_step": round(min(r["step_us"]), 1) if "step_us" in r else None}


def _measure(model: Any, prompts: list[list[int]], eos: set[int], args: Any, kinds: list[str],
             ctx: dict) -> dict[str, dict]:
    """Best-of-reps wall time per mode, modes interleaved so machine load hits them alike."""
    out: dict[str, dict] = {k: {"best": float("inf"), "first": None, "cpu": float("inf")} for k in kinds}
    for _ in range(args.reps):
        for kind in kinds:
            t0, c0 = time.perf_counter(), time.process_time()
            if kind.startswith("generate:"):
                lm = ctx["lm"]
                lm.live_decoding = not kind.endswith("/trie")
                lm.device_sampling = kind.endswith("/device")
                from constrained import live

                live.MAX_FEED = 1 if kind.endswith("/rejoin") else None
                before = {k: lm.stats[k] for k in ("decode_host_ns", "live_draw_ns", "decode_steps")}
                rows = _run_generate(lm, prompts, args.max_tokens, kind.startswith("generate:ours"))
                spent = {k: lm.stats[k] - v for k, v in before.items()}
                if spent["decode_steps"]:   # our live loop's host work and draw per step (its processor)
                    us = (spent["decode_host_ns"] + spent["live_draw_ns"]) / spent["decode_steps"] / 1e3
                    out[kind].setdefault("step_us", []).append(us)
            else:
                # (unconstrained: a processor that returns the scores as they are, to count the steps)
                proc = _Timed(_identity if kind == "unconstrained" else _hf_proc(kind, ctx, len(prompts)))
                rows = _run_hf(model, prompts, eos, args.max_tokens, proc)
            dt = time.perf_counter() - t0
            r = out[kind]
            if kind != "unconstrained" and not kind.startswith("generate:"):
                r.setdefault("step_us", []).append(proc.ns / max(proc.calls, 1) / 1e3)
            r["cpu"] = min(r["cpu"], time.process_time() - c0)   # CPU seconds of this process: less hit by neighbours
            r["first"] = dt if r["first"] is None else r["first"]
            if dt < r["best"]:
                r.update(best=dt, rows=rows, tokens=sum(len(x) for x in rows))
                if not kind.startswith("generate:"):
                    r["steps"] = proc.calls
    return out
