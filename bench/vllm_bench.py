"""Suite `vllm`: the same schemas through vLLM with our processor and with vLLM's built-in backends.

Modes, each at concurrency 1, 8 and 32 (requests in flight), on one `AsyncLLM`
per structured-output backend (vLLM picks that backend per engine, not per
request); each engine runs ``none``, ``ours`` and its backend, taking turns:

- ``none``: no constraint (the ceiling);
- ``ours``: ``extra_args={"constrained": {"json_schema": ...}}``, masked by
  `ConstrainedLogitsProcessor`;
- ``xgrammar`` / ``guidance``: vLLM's ``structured_outputs=StructuredOutputsParams(json=...)``
  on an engine started with that backend.

Every mode sends the same prompts, seeds and ``max_tokens``, sampling at
temperature 1. A row reports output tokens/s over the wall time of a run (the
median of ``--reps`` runs), the share of outputs valid under `jsonschema`
(truncated output counts as invalid) and of outputs cut off at ``max_tokens``,
time to first token and time per later token (p50) on warm caches. A run
sends 4x the concurrency in requests (at least ``--requests``), a new one as
each finishes, so the batch stays full although the modes write outputs of
different lengths. Before timing, one
request per schema warms each mode; its time to first token, less the warm
p50, is reported as the cold start of that schema (our compile in the
engine core process, or the backend's own).

On the default tiny random model (2 layers, 128 wide, 32000-token vocabulary)
a forward pass costs little, so the per-token overhead of a mask shows at its
most visible; a random model also writes long strings, so budgets matter.

Example:
    >>> SCHEMA_NAMES[:2]
    ['api_tool_call_weather', 'api_enum_classification']
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any, Callable

__all__ = ["run_vllm", "SCHEMA_NAMES"]

# Schemas of bench/corpus that every compared backend accepts (vLLM falls back from xgrammar
# to guidance per request on some others, which would blur the comparison).
SCHEMA_NAMES = ["api_tool_call_weather", "api_enum_classification", "api_user_profile", "api_order"]
CORPUS = Path(__file__).parent / "corpus"


def _schemas() -> dict[str, Any]:
    return {name: json.loads((CORPUS / f"{name}.json").read_text())["schema"] for name in SCHEMA_NAMES}


def _prompts(n: int) -> list[str]:
    return [f"Request {i}: answer as JSON:" for i in range(n)]


async def _one(engine: Any, prompt: str, params: Any, rid: str) -> tuple[float, str, int, float]:
    """(seconds to first token, final text, output tokens, seconds per later token) of one streamed request."""
    start, first, out = time.perf_counter(), None, None
    async for out in engine.generate(prompt, params, rid):
        if first is None and out.outputs[0].token_ids:
            first = time.perf_counter() - start
    total = time.perf_counter() - start
    first = total if first is None else first
    n = len(out.outputs[0].token_ids)
    return first, out.outputs[0].text, n, (total - first) / max(n - 1, 1)


async def _run(engine: Any, jobs: list[tuple[str, Any]], concurrency: int, tag: str) -> tuple[float, list[tuple[float, str, int, float]]]:
    """Run `jobs` (prompt, params) with at most `concurrency` in flight; (wall seconds, per-request results)."""
    gate = asyncio.Semaphore(concurrency)

    async def gated(i: int, prompt: str, params: Any) -> tuple[float, str, int, float]:
        async with gate:
            return await _one(engine, prompt, params, f"{tag}-{i}")

    start = time.perf_counter()
    results = await asyncio.gather(*(gated(i, p, q) for i, (p, q) in enumerate(jobs)))
    return time.perf_counter() - start, list(results)


def _params(mode: str, schema: Any, seed: int, max_tokens: int) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    kw: dict[str, Any] = {}
    if mode == "ours":
        kw["extra_args"] = {"constrained": {"json_schema": schema}}
    elif mode in ("xgrammar", "guidance"):
        kw["structured_outputs"] = StructuredOutputsParams(json=schema)
    return SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed, **kw)


def _valid(schema: Any, text: str) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


async def _bench_engine(engine: Any, backend: str, modes: list[str], args: Any, emit: Callable[[dict], None]) -> list[dict]:
    """Every mode at every concurrency on one engine; modes take turns within each repetition, so that a
    change in the machine's load hits them alike. Tokens/s is the median over repetitions."""
    schemas = _schemas()
    await _run(engine, [(p, _params("none", None, 0, 16)) for p in _prompts(8)], 8, f"{backend}-warm")
    cold = {mode: {} for mode in modes}
    for mode in modes:
        for k, (name, schema) in enumerate(schemas.items()):     # the first request of each schema
            ((ttft, _, _, _),) = (await _run(engine, [("Warm-up: JSON:", _params(mode, schema, 10_000 + k, 8))], 1,
                                          f"{backend}-cold-{mode}-{k}"))[1]
            cold[mode][name] = ttft
    rows = []
    for conc in args.concurrency:
        n = max(args.requests, 4 * conc)      # the gate refills: the batch stays full, whatever each mode's lengths
        runs: dict[str, list[tuple[float, list[tuple[float, str, int, float]]]]] = {mode: [] for mode in modes}
        for rep in range(args.reps):
            for mode in modes:
                jobs = [(p, _params(mode, schemas[SCHEMA_NAMES[i % len(SCHEMA_NAMES)]], i, args.max_tokens))
                        for i, p in enumerate(_prompts(n))]
                runs[mode].append(await _run(engine, jobs, conc, f"{backend}-{mode}-{conc}-{rep}"))
        for mode in modes:
            rates = [sum(r[2] for r in results) / wall for wall, results in runs[mode]]
            results = runs[mode][0][1]          # same seeds every repetition: the outputs repeat
            valid = [_valid(schemas[SCHEMA_NAMES[i % len(SCHEMA_NAMES)]], r[1]) for i, r in enumerate(results)]
            warm = statistics.median(r[0] for _, res in runs[mode] for r in res)
            itl = statistics.median(r[3] for _, res in runs[mode] for r in res)
            row = {"suite": "vllm", "engine": backend, "mode": mode, "concurrency": conc, "requests": n,
                   "reps": args.reps, "max_tokens": args.max_tokens, "tokens": sum(r[2] for r in results),
                   "tokens_per_s": round(statistics.median(rates), 1), "tokens_per_s_all": [round(x, 1) for x in rates],
                   "valid_pct": None if mode == "none" else round(100 * sum(valid) / n, 1),
                   "cut_off_pct": round(100 * sum(r[2] >= args.max_tokens for r in results) / n, 1),
                   "ttft_p50_ms": round(1000 * warm, 1), "itl_p50_ms": round(1000 * itl, 2),
                   "cold_start_ms": {k: round(1000 * max(v - warm, 0.0), 1) for k, v in cold[mode].items()}}
            emit(row)
            rows.append(row)
    return rows


def _engine(model: str, backend: str, max_model_len: int) -> Any:
    from vllm.config import StructuredOutputsConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from backends.vllm import _entry_point_installed
    from constrained.vllm_processor import ConstrainedLogitsProcessor

    procs = [] if _entry_point_installed() else [ConstrainedLogitsProcessor]
    return AsyncLLM.from_engine_args(AsyncEngineArgs(
        model=model, dtype="float32", enforce_eager=True, max_model_len=max_model_len, disable_log_stats=True,
        structured_outputs_config=StructuredOutputsConfig(backend=backend), logits_processors=procs))


def run_vllm(args: Any, emit: Callable[[dict], None], say: Callable[[str], None]) -> int:
    """The suite (see the module docstring): one engine per built-in backend, one after the other, each
    also running ``none`` and ``ours`` so that every ratio compares runs of one engine."""
    import gc

    if args.model is None:
        from backends.tiny import VLLM_TINY_CONFIG, tiny_model_dir

        args.model = str(tiny_model_dir("llama", "llama-spm", config=VLLM_TINY_CONFIG))
    rows: list[dict] = []
    for backend in ("xgrammar", "guidance"):
        modes = [m for m in ("none", "ours", backend) if m in args.modes]
        if backend not in args.modes and backend == "guidance":
            continue

        async def go(backend: str = backend, modes: list[str] = modes) -> list[dict]:
            engine = _engine(args.model, backend, args.max_model_len)   # built on this loop
            try:
                return await _bench_engine(engine, backend, modes, args, emit)
            finally:
                engine.shutdown()
                del engine
                gc.collect()          # vLLM's __del__ shuts down again; let it run while modules are alive

        rows += asyncio.run(go())
    _summary(rows, say)
    return 0


def _summary(rows: list[dict], say: Callable[[str], None]) -> None:
    rate = {(r["engine"], r["mode"], r["concurrency"]): r["tokens_per_s"] for r in rows}
    say("| engine | mode | concurrency | tokens/s | vs none | ours vs this | valid % | cut off % | TTFT p50 ms | "
        "ms/token p50 | cold start ms (max) |")
    say("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        key = (r["engine"], r["concurrency"])
        none = rate.get((key[0], "none", key[1]))
        ours = rate.get((key[0], "ours", key[1]))
        vs_none = f"{r['tokens_per_s'] / none:.2f}x" if none else "-"
        vs_this = f"{ours / r['tokens_per_s']:.2f}x" if ours and r["mode"] not in ("none", "ours") else "-"
        valid = "-" if r["valid_pct"] is None else f"{r['valid_pct']:.0f}"
        say(f"| {r['engine']} | {r['mode']} | {r['concurrency']} | {r['tokens_per_s']:.0f} | {vs_none} | {vs_this} | "
            f"{valid} | {r['cut_off_pct']:.0f} | {r['ttft_p50_ms']:.0f} | {r['itl_p50_ms']:.1f} | "
            f"{max(r['cold_start_ms'].values()):.0f} |")
