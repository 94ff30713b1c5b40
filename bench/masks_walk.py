"""Walk realistic instances token by token and time every mask, first visits included.

For each schema of `bench.mask_corpus`: compile it (fresh, not cached), then
for each instance (serialized with `json.dumps` defaults, and then again
compact, so states repeat as they would across requests) time
`guide.fill_bitmask(buf)` before every token (this is where a state's first
visit is computed) and `guide.advance(token)`.  One JSON line per schema, then
one "ALL" line.

With `--warm-dfa`, the instances are first walked once with a throwaway FSM,
so that the lazy DFA's rows already exist: the times then show the
token-level work alone (trie walks, slices, masks), without determinization.

Usage:
    python -m bench.masks_walk [--vocab llama-bpe] [--no-slices] [--warm-dfa]

Example:
    >>> summarize([1e-6, 3e-6])["mean_us"]
    2.0
"""

from __future__ import annotations

import argparse
import gc
import json
import time

import numpy as np

from bench.mask_corpus import CASES
from constrained.compile import compile_grammar
from constrained.gguf_tokenizers import hf_tokenizer
from constrained.token_fsm import TokenFSM
from constrained.vocab import Vocabulary
from constrained.vocab_index import VocabIndex
from grammars.json_schema import json_schema_grammar


def summarize(seconds: list[float]) -> dict[str, float]:
    a = np.asarray(seconds) * 1e6
    return {"mean_us": round(float(a.mean()), 1), "p50_us": round(float(np.percentile(a, 50)), 1),
            "p99_us": round(float(np.percentile(a, 99)), 1), "max_us": round(float(a.max()), 1)}


def walk_case(case: dict, vocab: Vocabulary, tokenizer, use_slices: bool,
              warm_dfa: bool = False) -> tuple[dict, list[float]]:
    t0 = time.perf_counter()
    fsm = compile_grammar(json_schema_grammar(case["schema"]), vocab)
    compile_s = time.perf_counter() - t0
    texts = [json.dumps(x, ensure_ascii=False) for x in case["instances"]]
    texts += [json.dumps(x, ensure_ascii=False, separators=(",", ":")) for x in case["instances"]]
    if warm_dfa:
        _walk(fsm, texts, tokenizer, vocab, [], [])
        fsm = TokenFSM(fsm.dfa, vocab)
    fsm._use_slices = use_slices
    mask_s: list[float] = []
    advance_s: list[float] = []
    rejected = _walk(fsm, texts, tokenizer, vocab, mask_s, advance_s)
    row = {"schema": case["name"], "compile_ms": round(compile_s * 1e3, 2), "tokens": len(mask_s),
           **summarize(mask_s), "advance_mean_us": summarize(advance_s)["mean_us"],
           "states": fsm.num_states_visited, "bytes_held": fsm.nbytes, "rejected": rejected}
    return row, mask_s


def _walk(fsm: TokenFSM, texts: list[str], tokenizer, vocab: Vocabulary,
          mask_s: list[float], advance_s: list[float]) -> int:
    buf = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    rejected = 0
    for text in texts:
        g = fsm.guide()
        ids = tokenizer.encode(text, add_special_tokens=False) + [vocab.eos_token_ids[0]]
        for tok in ids:
            t = time.perf_counter()
            g.fill_bitmask(buf)
            mask_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            ok = g.advance(tok)
            advance_s.append(time.perf_counter() - t)
            if not ok:
                rejected += 1
                break
    return rejected


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", default="llama-bpe")
    parser.add_argument("--no-slices", action="store_true")
    parser.add_argument("--warm-dfa", action="store_true", help="time token-level work only")
    args = parser.parse_args()
    tokenizer = hf_tokenizer(args.vocab)
    vocab = Vocabulary.from_tokenizer(tokenizer)
    t = time.perf_counter()
    index = VocabIndex.for_vocab(vocab)
    print(json.dumps({"vocab": args.vocab, "size": vocab.size, "index_build_ms": round((time.perf_counter() - t) * 1e3),
                      "index_bytes": index.nbytes, "slices": not args.no_slices, "warm_dfa": args.warm_dfa}))
    # A server loads its vocabulary once; freezing it keeps the collector from
    # rescanning its ~10^6 objects in the middle of a mask (100+ ms pauses).
    gc.collect()
    gc.freeze()
    everything: list[float] = []
    compiles: list[float] = []
    for case in CASES:
        row, masks = walk_case(case, vocab, tokenizer, not args.no_slices, args.warm_dfa)
        everything += masks
        compiles.append(row["compile_ms"])
        print(json.dumps(row))
    print(json.dumps({"schema": "ALL", "tokens": len(everything), **summarize(everything),
                      "compile_p50_ms": float(np.median(compiles)), "compile_max_ms": max(compiles)}))


if __name__ == "__main__":
    main()
