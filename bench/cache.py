"""Suite `cache`: the prefix trie's reuse, a thin wrapper around `bench/bench_cache.py`.

The cases and their timing live in `bench_cache` (n=16 requests sharing a
512-token prompt with and without the trie, `batch_sample` of 16, batched
throughput); this module runs them, forwards their JSON lines and prints the
summary table.

Example:
    >>> class _Args: backends, vocabs, reps = ["hf"], ["byte-bpe"], 1
    >>> run_cache(_Args(), print, print)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any, Callable

import numpy as np

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
    """Run `bench_cache`'s cases for each vocabulary and backend (arguments from `python -m bench cache`)."""
    from backends.tiny import tiny_model_dir
    from bench import bench_cache

    rows: list[dict] = []

    def sink(row: dict) -> None:
        row = {"suite": "cache", **row}
        rows.append(row)
        emit(row)

    for vocab in args.vocabs:
        model_dir = str(tiny_model_dir("llama", vocab))
        n_vocab = json.load(open(f"{model_dir}/config.json"))["vocab_size"]
        rng = np.random.default_rng(0)           # the same prompts as `python -m bench.bench_cache`
        prompt = rng.integers(3, n_vocab - 200, size=512).tolist()
        prompts = [rng.integers(3, n_vocab, size=128).tolist() for _ in range(8)]
        for kind in args.backends:
            with contextlib.redirect_stdout(_Lines(sink)):
                bench_cache._emit(case="setup", backend=kind, vocab=vocab, vocab_size=n_vocab)
                bench_cache.bench_shared_prompt(kind, model_dir, prompt, args.reps)
                bench_cache.bench_throughput(kind, model_dir, prompts, args.reps)
    say(_summary(rows))
    return 0


def _summary(rows: list[dict]) -> str:
    from bench.report import table

    out, vocab = [], None
    for r in rows:
        if r["case"] == "setup":
            vocab = f"{r['vocab']} ({r['vocab_size']})"
        elif r["case"] == "shared_prompt":
            out.append([vocab, r["backend"], "16 x (shared 512-token prompt + 1)", f"{r['trie_over_prefill']}x",
                        f"{r['no_trie_over_prefill']}x", f"{r['model_tokens_trie']} vs {r['model_tokens_no_trie']}",
                        r["trie_bytes"]])
        elif r["case"] == "sample_n16":
            out.append([vocab, r["backend"], "batch_sample n=16 x 16 tokens", f"{r['sample_over_prefill']}x",
                        None, r["model_tokens"], None])
        elif r["case"] == "throughput" and r["mode"] != "sequential":
            out.append([vocab, r["backend"], f"8 x 128-token prompts, {r['mode']}",
                        f"speedup {r['speedup_vs_sequential']}x vs one by one", None, r["tokens"], None])
    header = ["vocab", "backend", "case", "time / one prefill (with trie)", "without trie",
              "model tokens (trie vs none)", "trie bytes"]
    return "\n## cache: tiny random llama, best-of-N wall times as ratios\n\n" + table(header, out)
