"""A long string under a large `maxLength`: masks and memory per token, ours against llguidance.

Walks one English text, token by token (Llama-3 vocabulary), through
``{"type": "string", "maxLength": N}``: each step fills the next mask and takes
the token, as a generation would. Ours runs twice, with states far from their
bounds sharing masks (`constrained.twins`, the default) and without; llguidance
when it is installed. Each run reports how far it got (a `StateBudgetError`,
or llguidance's error, ends it), the time per token of mask + advance, our
DFA's states and what the FSM holds.

Run: ``python -m bench.long_strings [MAX_LENGTH [CHARS]]`` (default 100000 and 60000).
"""
from __future__ import annotations

import json
import sys
import time
import warnings

import numpy as np

TEXT = "The quick brown fox jumps over the lazy dog, and then it rests for a while. "


def _ours(tok, vocab, schema: dict, ids: list[int], share: bool) -> dict:
    from constrained.compile import clear_cache, compile_json_schema
    from constrained.token_fsm import TokenFSM
    from grammars.errors import ConstraintError

    clear_cache()
    fsm = compile_json_schema(schema, vocab)
    fsm.share_counts = share
    g = fsm.guide()
    buf = np.zeros((vocab.size + 31) // 32, dtype=np.int32)
    done, error = 0, ""
    t0 = time.perf_counter()
    try:
        for t in ids:
            g.fill_bitmask(buf)
            g.advance(t)
            done += 1
    except ConstraintError as e:
        error = type(e).__name__
    wall = time.perf_counter() - t0
    assert TokenFSM.share_counts                  # (set on the instance only)
    return {"engine": "ours" + ("" if share else ", no sharing"), "tokens": done, "error": error,
            "ms_per_token": 1e3 * wall / max(done, 1), "dfa_states": fsm.dfa.num_states,
            "held_mb": fsm.held_bytes / 1e6}


def _llguidance(tok, schema: dict, ids: list[int]) -> dict:
    import llguidance
    import llguidance.hf
    import llguidance.numpy as lnp

    llt = llguidance.hf.from_tokenizer(tok)
    m = llguidance.LLMatcher(llt, llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema)),
                             log_level=0)
    buf = lnp.allocate_token_bitmask(1, llt.vocab_size)
    done, error = 0, ""
    t0 = time.perf_counter()
    for t in ids:
        lnp.fill_next_token_bitmask(m, buf, 0)
        if not m.consume_token(t) or m.is_error():
            error = (m.get_error() or "refused").splitlines()[0][:60]
            break
        done += 1
    wall = time.perf_counter() - t0
    return {"engine": "llguidance " + llguidance.__version__, "tokens": done, "error": error,
            "ms_per_token": 1e3 * wall / max(done, 1), "dfa_states": None, "held_mb": None}


def main(argv: list[str] | None = None) -> int:
    from constrained.gguf_tokenizers import hf_tokenizer
    from constrained.vocab import Vocabulary

    args = sys.argv[1:] if argv is None else argv
    max_length = int(args[0]) if args else 100_000
    chars = int(args[1]) if len(args) > 1 else 60_000
    warnings.simplefilter("ignore")
    tok = hf_tokenizer("llama-bpe")
    vocab = Vocabulary.from_tokenizer(tok)
    schema = {"type": "string", "maxLength": max_length}
    text = (TEXT * (chars // len(TEXT) + 1))[:chars]
    ids = tok.encode('"' + text, add_special_tokens=False)
    rows = [_ours(tok, vocab, schema, ids, True), _ours(tok, vocab, schema, ids, False)]
    try:
        rows.append(_llguidance(tok, schema, ids))
    except ImportError:
        pass
    print(f"`{json.dumps(schema)}`, a {chars:,}-character text ({len(ids):,} tokens), llama-bpe\n")
    print("| engine | tokens walked | characters | stopped by | ms per token (mask + advance) | DFA states | held MB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        walked = len(tok.decode(ids[:r["tokens"]])) - 1 if r["tokens"] else 0
        states = "" if r["dfa_states"] is None else f"{r['dfa_states']:,}"
        held = "" if r["held_mb"] is None else f"{r['held_mb']:.1f}"
        print(f"| {r['engine']} | {r['tokens']:,} | {walked:,} | {r['error'] or '(end of text)'} | "
              f"{r['ms_per_token']:.3f} | {states} | {held} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
