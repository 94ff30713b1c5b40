"""Our transformers processor's own cost per step, without a model: a document replayed token by token.

`python -m bench decode` times the processor inside `generate`, where every
forward pass (2 GB of weights for Qwen2-0.5B shapes) leaves the CPU caches
cold before the processor runs. This feeds `hf_logits_processor` the ids of
one valid document of `bench.decode.SCHEMA` (Qwen2's vocabulary, scores of
151,936 columns), one step per token, twice: the first pass computes each
state's mask, the second finds them all cached. The gap between the second
pass here and `decode`'s warm number is what cold caches cost a step.

On a GPU (``--device cuda``) the ids and scores are made there, and the device is
synchronized before each step's clock starts (as `decode` does): the time is
the host's, with the transfer of the new ids.

With ``--flush-mb N`` each step comes after a write over N MB (the cold caches a
forward pass leaves; the scores row itself is touched after it).

Run: ``python -m bench.processor_replay [--inplace] [--threads N] [--device cuda] [--flush-mb N]``
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import numpy as np

__all__ = ["main"]

COLUMNS = 151_936     # Qwen2-0.5B's logits width (its vocabulary padded)


def main(argv: Sequence[str] | None = None) -> int:
    import torch

    from bench.decode import SCHEMA
    from constrained.gguf_tokenizers import hf_tokenizer
    from constrained.processors import hf_logits_processor
    from constrained.vocab import Vocabulary

    p = argparse.ArgumentParser(prog="python -m bench.processor_replay", description=__doc__.splitlines()[0])
    p.add_argument("--inplace", action="store_true", help="hf_logits_processor(inplace=True)")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch CPU threads")
    p.add_argument("--device", default="cpu", help="torch device of the ids and scores (e.g. cuda)")
    p.add_argument("--flush-mb", type=int, default=0,
                   help="before each step, write over this many MB (a forward pass's cold caches; 0: none)")
    args = p.parse_args(argv)
    flush = np.zeros(args.flush_mb << 20, dtype=np.uint8)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.set_num_threads(args.threads)
    tok = hf_tokenizer("qwen2")
    vocab = Vocabulary.from_tokenizer(tok)
    doc = json.dumps({"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 3,
                                                          "alerts": True}})
    ids = tok.encode(doc, add_special_tokens=False)
    ids = list(getattr(ids, "ids", ids))
    prompt = [1, 2, 3]

    def replay() -> np.ndarray:
        proc = hf_logits_processor(SCHEMA, vocab, inplace=args.inplace)
        out = []
        for k in range(len(ids) + 1):
            input_ids = torch.tensor([prompt + ids[:k]], device=device)
            scores = torch.randn(1, COLUMNS, device=device)
            if len(flush):
                flush[::64] += 1          # a byte per cache line
                scores[0, :: 16] += 0     # the scores themselves stay as warm as a forward pass leaves them
            sync()
            t = time.perf_counter_ns()
            proc(input_ids, scores)
            out.append(time.perf_counter_ns() - t)
        return np.array(out) / 1e3

    first, again = replay(), replay()
    cold = f", {args.flush_mb} MB written before each step" if args.flush_mb else ""
    print(f"{len(ids) + 1} steps, {'in place' if args.inplace else 'masked copy'}, {device}, {args.threads} torch threads{cold}: "
          f"first pass mean {first.mean():.0f} µs (p50 {np.median(first):.0f}); masks cached: mean "
          f"{again.mean():.0f} µs, p50 {np.median(again):.0f}, max {again.max():.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
