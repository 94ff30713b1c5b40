"""Suite `cache`: the prefix trie's reuse, a thin wrapper around `bench/bench_cache.py`.

The cases and their timing live in `bench_cache` (n=16 requests sharing a
512-token prompt with and without the trie, `batch_sample` of 16 with and
without, batched throughput at batch 1/4/8 vs one by one, bytes held by the
trie), on the "tiny" and "deep" model shapes; this module runs them, forwards
their JSON lines and prints the summary table.

Example:
    >>> class _Args: backends, vocabs, shapes, reps = ["hf"], ["byte-bpe"], ["tiny"], 1
    >>> run_cache(_Args(), print, print)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any, Callable

__all__ = ["run_cache"]


class _Lines(io.TextIOBase):
    """A stdout stand-in that hands every complete JSON line to `sink`."""

    def __init__(self, sink: Callable[[dict], None]) -> None:
        self.sink, self.pending = sink, ""

    def write(self, s: str) -> int:
        self.pending += s
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            if line.strip():
                self.sink(json.loads(line))
        return len(s)


def run_cache(args: Any, emit: Callable[[dict], None], say: Callable[[str], None]) -> int:
    """Run `bench_cache`'s cases for each shape, vocabulary and backend (arguments from `python -m bench cache`)."""
    from bench import bench_cache

    rows: list[dict] = []

    def sink(row: dict) -> None:
        row = {"suite": "cache", **row}
        rows.append(row)
        emit(row)

    shapes = getattr(args, "shapes", None) or list(bench_cache.SHAPES)
    with contextlib.redirect_stdout(_Lines(sink)):
        bench_cache.run(args.backends, args.vocabs, shapes, args.reps, getattr(args, "torch_threads", None))
    say(_summary(rows))
    return 0


def _summary(rows: list[dict]) -> str:
    from bench.report import table

    out, model = [], None
    for r in rows:
        if r["case"] == "setup":
            model = f"{r['shape']} ({r['layers']}x{r['hidden_size']}), {r['vocab']} ({r['vocab_size']})"
            if r.get("torch_threads"):
                model += f", {r['torch_threads']} torch thread(s)"
            est = f"{r['flop_estimate']}x (lm_head row = {r['lm_head_row_in_tokens']} tokens)"
        elif r["case"] == "shared_prompt":
            met = "yes" if r["target_met"] else "NO"
            out.append([model, r["backend"], "16 x (shared 512-token prompt + 1)", f"{r['trie_over_prefill']}x (<= 1.3: {met})",
                        f"{r['no_trie_over_prefill']}x", est, f"{r['model_tokens_trie']} vs {r['model_tokens_no_trie']}",
                        r["trie_bytes"]])
        elif r["case"] == "shared_prompt_one_by_one":
            out.append([model, r["backend"], "the same 16, one at a time: KV cut vs not", f"{r['cut_over_prefill']}x (not cut: {r['uncut_over_prefill']}x)",
                        None, None, f"{r['model_tokens_cut']} (not cut: {r['model_tokens_uncut']})", None])
        elif r["case"] == "sample_n16":
            out.append([model, r["backend"], "batch_sample n=16 x 16 tokens", f"{r['sample_over_prefill']}x",
                        f"{r['sample_no_trie_over_prefill']}x", None, f"{r['model_tokens']} vs {r['model_tokens_no_trie']}", None])
        elif r["case"] == "full_trie":
            met = "yes" if r["target_met"] else "NO"
            out.append([model, r["backend"], f"{r['requests']} requests, trie budget reached ({r['evictions']} evictions)",
                        f"{r['full_over_unbounded']}x an unbounded trie (<= 1.2: {met})", None, None, None,
                        f"budget {r['budget_bytes']}"])
        elif r["case"] == "throughput" and r["mode"] != "sequential":
            peak = r["peak_memory_bytes"]
            out.append([model, r["backend"], f"8 x 128-token prompts, {r['mode']}",
                        f"speedup {r['speedup_vs_sequential']}x vs one by one", None, None, r["tokens"],
                        None if peak is None else f"peak {peak}"])
    header = ["model, vocab", "backend", "case", "time / one prefill (with trie)", "without trie", "FLOP estimate",
              "model tokens (trie vs none)", "trie bytes"]
    return "\n## cache: random llamas, best-of-N wall times as ratios\n\n" + table(header, out)
