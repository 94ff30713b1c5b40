"""A generation under a large `minLength`: the DFA states it makes, with and without the budget planner.

Generates one string (HF, the tiny random llama with the Llama-3 vocabulary from
`backends.tiny`, seed 1) under ``{"type": "string", "minLength": N}``, alone and
with ``maxLength: 100000`` beside it, with ``budget_aware`` on (the default) and
off, each from a fresh compile. The random model writes past the bound before
the budget binds, so the rows differ only in what the planner's searches made
(`constrained.budget`) and in what the twins shared (`constrained.twins`).

Run: ``python -m bench.min_length [MIN_LENGTH [MAX_TOKENS]]`` (default 5000 and 1500).
"""
from __future__ import annotations

import sys
import time
import warnings


def main(argv: list[str] | None = None) -> int:
    from backends.base import load_model_by_name
    from backends.tiny import tiny_model_dir
    from constrained.compile import clear_cache, compile_json_schema
    from constrained.generate import generate, model_vocabulary

    args = sys.argv[1:] if argv is None else argv
    min_length = int(args[0]) if args else 5000
    max_tokens = int(args[1]) if len(args) > 1 else 1500
    warnings.simplefilter("ignore")
    lm = load_model_by_name(str(tiny_model_dir("llama", "llama-bpe")), "hf")
    print(f"`minLength: {min_length}`, one sample of at most {max_tokens:,} tokens "
          "(HF, tiny random llama, llama-bpe, seed 1)\n")
    print("| schema | budget_aware | status | characters | tokens | DFA states | s |")
    print("|---|---|---|---|---|---|---|")
    for schema in ({"type": "string", "minLength": min_length},
                   {"type": "string", "minLength": min_length, "maxLength": 100_000}):
        for budget in (True, False):
            clear_cache()
            t = time.perf_counter()
            g = generate(lm, "Write:", schema=schema, max_tokens=max_tokens, seed=1, budget_aware=budget)[0]
            wall = time.perf_counter() - t
            states = compile_json_schema(schema, model_vocabulary(lm)).dfa.num_states
            print(f"| `{schema}` | {budget} | {g.status} | {len(g.text):,} | {len(g.token_ids):,} | {states:,} | "
                  f"{wall:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
