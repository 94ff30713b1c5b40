"""Shared `any_order` key masks against masks computed alone, over the dev corpus' walks.

Every test instance of every schema of ../shared/corpus/maskbench-dev is
tokenized (Llama-3, compact and default separators) and walked through two
FSMs of the schema compiled with ``any_order=True``: one sharing key masks
(`constrained.key_twins`), one not. At every step both masks must be equal,
and so must whether the token is allowed. Prints how many masks were shared
and how many differed (0 expected); exits 1 on any difference.

Run: ``python -m bench.key_twins_check`` (about a minute).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "maskbench-dev"


def main() -> int:
    from constrained.compile import compile_grammar
    from constrained.gguf_tokenizers import hf_tokenizer
    from constrained.token_fsm import KeyTwinMasks
    from constrained.vocab import Vocabulary
    from grammars.errors import ConstraintError
    from grammars.json_schema import json_schema_grammar

    warnings.simplefilter("ignore")              # schema notes (unknown keywords) on every compile
    tok = hf_tokenizer("llama-bpe")
    vocab = Vocabulary.from_tokenizer(tok)
    shared = differ = schemas = 0
    for path in sorted(CORPUS.glob("*.json")):
        case = json.loads(path.read_text())
        try:
            grammar = json_schema_grammar(case["schema"], any_order=True)
            fsm, ref = compile_grammar(grammar, vocab), compile_grammar(grammar, vocab)
        except ConstraintError:
            continue
        ref.share_keys = False
        schemas += 1
        for test in case["tests"]:
            for style in ({"separators": (",", ":"), "ensure_ascii": False}, {"ensure_ascii": False}):
                s, r = fsm.initial, ref.initial
                for token in tok.encode(json.dumps(test["data"], **style), add_special_tokens=False):
                    if not np.array_equal(fsm.bitmask(s), ref.bitmask(r)):
                        differ += 1
                        print(f"{path.stem}: masks differ", file=sys.stderr)
                    shared += isinstance(fsm.masks(s), KeyTwinMasks)
                    s, r = fsm.next_state(s, token), ref.next_state(r, token)
                    if (s < 0) != (r < 0):
                        differ += 1
                        print(f"{path.stem}: a token allowed by one only", file=sys.stderr)
                    if s < 0 or r < 0:
                        break
    print(f"{schemas} schemas; {shared} steps at a shared key mask; {differ} differences")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
