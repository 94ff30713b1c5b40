"""Mutation fuzzing on a corpus: each test instance edited at random, our automata against the oracle.

A corpus's own instances are few (maskbench-dev: 1,422 valid, 2,306 invalid
over 599 schemas). This edits them (`mutate`: a value replaced by one of
another type, a string or number changed, a number respelled as `12.0`, a
member dropped or added, an item dropped, repeated or inserted; one to three
edits), serializes each mutant compact or with spaces, asks the oracle
(`bench.oracle`) and then our engine, for as long as asked:

- ``--level byte``: the byte automaton `compile_json_schema` builds (both
  member orders unless ``--any-order``);
- ``--level token``: the token FSM, on the mutant's llama-bpe tokens, and at
  every step whether the token is in the state's mask exactly when the FSM
  moves on it.

With ``--edit-schemas`` each schema is edited too (`edit_schema`: bounds,
`required`, `additionalProperties`, `enum`, types, `pattern`, `format`,
`uniqueItems`), and a compile that raises anything but a `ConstraintError`
is a bug; one that crashes the process ends the run (run it under
``python -X faulthandler``). It prints how many mutants each verdict got. An invalid mutant accepted, or
a mask that disagrees with the move, is a bug. A valid mutant refused is
counted by its reason (`refusal_kind`): members out of the declared order,
a number README's "Numbers" refuses (`1.0` for an integer, a float past
1e308), a `format` (ours is checked where a draft lacks it, and jsonschema's
`email` wants an `@` only); one with none of these is a bug too. Mutants
the oracle takes over `ORACLE_SECONDS` to judge (its backtracking `re`), or
cannot judge (an edited schema whose `$ref` reaches a non-schema), are
counted and skipped. `tests/test_corpus_mutations.py` runs a fixed, small
sample on every test run.

Run: ``python -m bench.mutations [--corpus DIR] [--minutes M] [--seed S] [--level byte|token] [--any-order]
[--edit-schemas [--structural]] [--jsonl FILE]``
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import signal
import threading
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Iterator

from bench.schema_edits import edit_schema

__all__ = ["mutate", "mutants", "edit_schema", "verdict", "walk_tokens", "refusal_kind", "without_formats",
           "integral_numbers", "main", "SHARED_CORPUS", "ORACLE_SECONDS"]

SHARED_CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "maskbench-dev"

STRINGS = ["", "a", "ABC", "x" * 300, "é", "日本", "\u0000", "\n", "\"", "\\", "a\"b", "😀", "2024-01-31",
           "2024-01-31T10:00:00Z", "10:00:00Z", "P1D", "http://x.org/a", "a@b.co", "192.168.0.1", "::1",
           "00000000-0000-0000-0000-000000000000", "1", "-1", "true", "null", " ", "\t", "abc-def", "ABC_DEF"]
NUMBERS = [0, -0.0, 1, -1, 2, 3, 7, 10, 100, 101, 255, 256, 1000, 65535, 2 ** 31, 2 ** 53 + 1, -2 ** 63, 1e308,
           1e-7, 0.5, 1.5, 0.1, 0.01, 2.5, 3.14, -2.5, 1e3, 12.0, 99.99, 100.0]
OTHERS = [1, "s", None, {}, [], True, 0.5]
# The oracle's patterns run on Python's backtracking `re`: a dev-corpus pattern such as
# `^([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*)*$` takes exponential time on a long
# mutated string that fails at its end. Past this many seconds the mutant is not judged.
ORACLE_SECONDS = 2.0


class _Slow(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Slow


def verdict(check: Any, value: Any, seconds: float = ORACLE_SECONDS) -> bool | None:
    """`check.is_valid(value)`, or None when the oracle takes longer than `seconds` (main thread
    only: `re` checks signals while it backtracks; elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread():
        return check.is_valid(value)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return check.is_valid(value)
    except _Slow:
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def mutate(value: Any, rng: random.Random) -> Any:
    """`value` with one edit somewhere inside it (a copy; `value` is left as it was)."""
    if isinstance(value, dict) and value and rng.random() < 0.9:
        value, key = dict(value), rng.choice(list(value))
        op = rng.random()
        if op < 0.25:
            del value[key]
        elif op < 0.4:
            value[rng.choice(["extra", key + "x", "", "a", key.upper()])] = rng.choice(OTHERS)
        else:
            value[key] = mutate(value[key], rng)
        return value
    if isinstance(value, list) and value and rng.random() < 0.9:
        value, i, op = list(value), rng.randrange(len(value)), rng.random()
        if op < 0.2:
            del value[i]
        elif op < 0.35:
            value.append(copy.deepcopy(value[i]))
        elif op < 0.45:
            value.insert(i, rng.choice(OTHERS))
        else:
            value[i] = mutate(value[i], rng)
        return value
    if isinstance(value, bool) or value is None:
        return rng.choice([True, False, None, 0, "", [], {}])
    if isinstance(value, (int, float)):
        r = rng.random()
        if r < 0.2 and abs(value) < 1e15:        # the same value spelled as the other kind: 12 <-> 12.0
            return float(value) if isinstance(value, int) else int(value) if value.is_integer() else -value
        if r < 0.6:
            return rng.choice(NUMBERS)
        return value + rng.choice([1, -1, 0.5, 1e-9, 1e9]) if r < 0.8 else rng.choice(["1", None, True, [value]])
    if isinstance(value, str):
        r = rng.random()
        if r < 0.5:
            return rng.choice(STRINGS)
        if r < 0.7:
            return value + rng.choice(STRINGS)
        return value[: rng.randrange(len(value) + 1)] if r < 0.85 else rng.choice([1, None, True, [value], {}])
    return rng.choice(OTHERS)


def mutants(tests: list[dict], rng: random.Random, count: int) -> list[str]:
    """`count` texts of mutants of `tests`' instances (zero to three edits each), compact or spaced."""
    out = []
    for _ in range(count):
        value = rng.choice(tests)["data"]
        for _ in range(rng.randint(0, 3)):
            value = mutate(value, rng)
        separators = rng.choice([(",", ":"), (", ", ": ")])
        out.append(json.dumps(value, separators=separators, ensure_ascii=rng.random() < 0.5))
    return out


def walk_tokens(fsm: Any, tok: Any, text: str) -> tuple[bool, str | None]:
    """`text`'s tokens (`tok.encode`) through token FSM `fsm`: (accepted, problem), where problem
    names the first token that is in its state's mask but refused by the move, or the reverse."""
    import numpy as np

    state = fsm.initial
    for k, t in enumerate(tok.encode(text, add_special_tokens=False)):
        nxt = fsm.next_state(state, t)
        if bool(np.isin(t, fsm.allowed_token_ids(state))) != (nxt >= 0):
            return False, f"token {k} ({tok.decode([t])!r}): {'in' if nxt < 0 else 'not in'} the mask, moved to {nxt}"
        state = nxt
        if state < 0:
            break
    return state >= 0 and fsm.is_accepting(state), None


# keywords whose value maps names to subschemas (a key there is a name, not a keyword), and those
# whose value is data, not a schema
_NAME_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas", "dependencies")
_DATA = ("enum", "const", "default", "examples")


def without_formats(schema: Any) -> Any:
    """A copy of `schema` without its `format` keywords (a property named "format" is kept)."""
    def strip(node: Any, names: bool) -> Any:
        if isinstance(node, list):
            return [strip(x, False) for x in node]
        if not isinstance(node, dict):
            return node
        return {k: v if k in _DATA and not names else strip(v, k in _NAME_MAPS and not names)
                for k, v in node.items() if names or k != "format"}
    return strip(schema, False)


def integral_numbers(value: Any) -> Any:
    """`value` with every integral float written as an int (`12.0` -> `12`, `-0.0` -> `0`)."""
    if isinstance(value, dict):
        return {k: integral_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integral_numbers(v) for v in value]
    if isinstance(value, float) and value.is_integer():      # (exact: every integral double is an int)
        return int(value)
    return value


def _floats(value: Any) -> Iterator[float]:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            yield from _floats(v)
    elif isinstance(value, float):
        yield value


def refusal_kind(schema: Any, text: str, accepts: Any, declared: bool = False) -> str:
    """Why our automaton refuses `text`, an instance of `schema` the oracle calls valid.

    `accepts(schema, text, any_order)` is our verdict. The first of these that holds:
    "member order": `declared` and accepted with ``any_order=True`` (declared
    order, the default, is a choice), or an object of the schema keeps declared
    order even with ``any_order=True`` (a "declared order" note in its report); "number range": a float at or past 1e308
    or below 1e-323 (README "Numbers": none overflows or underflows); "number
    spelling": accepted with its integral numbers written as integers (`1.0` is
    not an integer's spelling, by design); "format": accepted with the
    schema's `format`s dropped (ours are checked where a draft lacks them, and
    `email` is stricter than jsonschema's, by design); "draft keywords": the
    instance is invalid when the schema's draft also has the keywords it
    lacks, those of 2020-12 (`const` in draft 4, `if` in draft 6) or, for
    2020-12, draft 7's `dependencies`, or we accept it once the schema
    declares 2020-12: such keywords are enforced outside negations and
    ignored inside them, by design (`json_merge.LACKS`); "other": none of
    these, a bug to look at. From "number spelling" on, members may come in any order.
    """
    if declared and accepts(schema, text, True):
        return "member order"
    if _keeps_declared_order(schema):
        return "member order"
    value = json.loads(text)
    if any(abs(x) >= 1e308 or 0 < abs(x) < 1e-323 for x in _floats(value)):
        return "number range"

    def either(sch: Any, v: Any) -> bool:
        return any(accepts(sch, json.dumps(v, separators=sep, ensure_ascii=text.isascii()), True)
                   for sep in ((",", ":"), (", ", ": ")))

    respelled = integral_numbers(value)
    if json.dumps(respelled) != json.dumps(value) and either(schema, respelled):
        return "number spelling"
    bare = without_formats(schema)
    if bare != schema and (accepts(bare, text, True) or either(bare, respelled)):
        return "format"
    if _valid_with_every_drafts_keywords(schema, value) is False or _accepted_as_2020(schema, text, accepts):
        return "draft keywords"
    return "other"


def _accepted_as_2020(schema: Any, text: str, accepts: Any) -> bool:
    """Whether a schema that declares draft 4, 6 or 7 accepts `text` once it declares 2020-12 (in
    which no keyword is ignored inside negations: `json_merge.LACKS`)."""
    from grammars.json_refs import draft_of

    if draft_of(schema) == 2020:
        return False
    return bool(accepts({**schema, "$schema": "https://json-schema.org/draft/2020-12/schema"}, text, True))


def _keeps_declared_order(schema: Any) -> bool:
    """Whether an object of `schema` keeps declared member order even with ``any_order=True`` (a
    "declared order" note: more than 62 properties, or counts beside dependencies)."""
    import warnings

    from grammars.json_schema import json_schema_grammar

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report = json_schema_grammar(schema, any_order=True).info["report"]
    except Exception:
        return False
    return any(n.kind == "declared order" for n in report)


def _valid_with_every_drafts_keywords(schema: Any, value: Any) -> bool | None:
    """Whether `value` is valid under `schema` when its draft's validator also enforces the keywords
    that draft lacks (`json_merge.LACKS`), each as the draft that has it does; None where the
    oracle cannot read the schema so."""
    import jsonschema

    from bench.oracle import validator
    from grammars.json_merge import LACKS
    from grammars.json_refs import draft_of

    base = type(validator(schema))
    donor = jsonschema.Draft7Validator if draft_of(schema) == 2020 else jsonschema.Draft202012Validator
    added = {k: donor.VALIDATORS[k] for k in LACKS[draft_of(schema)] if k in donor.VALIDATORS}
    if draft_of(schema) in (6, 7):       # (2020-12's `contains` reads `minContains`/`maxContains`)
        added["contains"] = donor.VALIDATORS["contains"]
    def without_drafts(node: Any) -> Any:
        # no `$schema` left: jsonschema switches to a draft's own class at each one, `$ref`s to the
        # root included, which would drop the keywords added here below it
        if isinstance(node, dict):
            return {k: without_drafts(v) for k, v in node.items() if k != "$schema" or not isinstance(v, str)}
        return [without_drafts(v) for v in node] if isinstance(node, list) else node

    try:
        cls = jsonschema.validators.extend(base, added)
        return cls(without_drafts(schema), format_checker=validator(schema).format_checker).is_valid(value)
    except Exception:       # (jsonschema's errors for a schema it cannot read this way)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    from bench.oracle import validator
    from constrained.compile import clear_cache, compile_json_schema
    from constrained.gguf_tokenizers import hf_tokenizer
    from constrained.vocab import Vocabulary
    from constrained.vocab_index import VocabIndex
    from grammars.errors import ConstraintError

    p = argparse.ArgumentParser(prog="python -m bench.mutations", description=__doc__.splitlines()[0])
    p.add_argument("--corpus", default=str(SHARED_CORPUS), help="MaskBench-style folder (default: ../shared/corpus/maskbench-dev)")
    p.add_argument("--minutes", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--level", choices=("byte", "token"), default="byte")
    p.add_argument("--any-order", action="store_true", help="only any_order=True (default: both member orders)")
    p.add_argument("--edit-schemas", action="store_true", help="edit each schema's keywords too (`edit_schema`); a "
                   "compile raising anything but a ConstraintError is a bug")
    p.add_argument("--structural", action="store_true", help="with --edit-schemas: structural edits too (`not`, "
                   "`oneOf`, `if`, dependencies, `contains`, `$ref` to the root, ...)")
    p.add_argument("--jsonl", help="write every bug found here")
    args = p.parse_args(argv)
    files = sorted(Path(args.corpus).glob("*.json"))
    if not files:
        p.error(f"no schemas in {args.corpus}")
    warnings.simplefilter("ignore")               # schema notes (unknown keywords)
    rng = random.Random(args.seed)
    modes = {"any_order": {"any_order": True}} if args.any_order else {"declared": {}, "any_order": {"any_order": True}}
    tok = hf_tokenizer("llama-bpe")
    vocab = Vocabulary.from_tokenizer(tok)
    VocabIndex.for_vocab(vocab)
    counts: Counter = Counter()

    def byte_accepts(schema: Any, text: str, any_order: bool) -> bool:
        try:
            return bool(compile_json_schema(schema, vocab, any_order=any_order).dfa.matches(text.encode()))
        except ConstraintError:
            return False
    bugs: list[dict] = []
    oracle_failures: list[dict] = []   # cases the oracle could not judge: none of ours is checked on them
    end = time.monotonic() + 60 * args.minutes
    while time.monotonic() < end:
        path = rng.choice(files)
        case = json.loads(path.read_text())
        if not case["tests"]:
            continue
        if args.edit_schemas:
            case["schema"] = edit_schema(case["schema"], rng, structural=args.structural)
        check = validator(case["schema"])
        if args.edit_schemas:
            try:
                check.check_schema(case["schema"])
            except Exception:  # noqa: BLE001 - an edit the metaschema refuses (jsonschema's SchemaError)
                counts[("schema edits refused by the metaschema",)] += 1
                continue
        judged = []
        try:
            for text in mutants(case["tests"], rng, 20):
                valid = verdict(check, json.loads(text))
                if valid is None:
                    counts[("oracle too slow",)] += 1
                else:
                    judged.append((text, valid))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # noqa: BLE001 - the oracle failing on an edited schema: a `$ref` to a
            # non-schema, or one that loops without reading anything (RecursionError, which the
            # `referencing` package's Rust core turns into a PanicException, not an Exception)
            counts[("oracle raised", type(e).__name__)] += 1
            oracle_failures.append({"schema": path.stem, "problem": f"oracle raised {type(e).__name__}: {e}",
                                    "edited": case["schema"]})
            continue
        for mode, options in modes.items():
            clear_cache()
            try:
                fsm = compile_json_schema(case["schema"], vocab, **options)
            except ConstraintError:
                continue
            except Exception as e:  # noqa: BLE001 - a crash of the compiler, reported
                bugs.append({"schema": path.stem, "mode": mode, "problem": f"compile raised {type(e).__name__}: {e}",
                             "edited": case["schema"] if args.edit_schemas else None, "text": ""})
                continue
            for text, valid in judged:
                problem = None
                try:
                    if args.level == "byte":
                        accepted = fsm.dfa.matches(text.encode())
                    else:
                        accepted, problem = walk_tokens(fsm, tok, text)
                except ConstraintError:                         # a state budget: refused, loudly
                    counts[(mode, "budget")] += 1
                    continue
                counts[(mode, "valid" if valid else "invalid", "accepted" if accepted else "refused")] += 1
                if valid and not accepted and not problem:
                    kind = refusal_kind(case["schema"], text, byte_accepts, declared=mode == "declared")
                    counts[(mode, "valid refused:", kind)] += 1
                    if kind == "other":
                        problem = "valid refused"
                if problem or (accepted and not valid):
                    bugs.append({"schema": path.stem, "mode": mode, "valid": valid, "accepted": accepted,
                                 "problem": problem, "text": text[:2000],
                                 "edited": case["schema"] if args.edit_schemas else None})
    edited = ", schemas edited" if args.edit_schemas else ""
    print(f"mutants of {args.corpus} ({args.level} level{edited}, seed {args.seed}, {args.minutes} min):")
    for key, n in sorted(counts.items()):
        print(f"  {' '.join(key)}: {n}")
    print(f"bugs (invalid accepted, valid refused for no reason above, or mask and move disagreeing): {len(bugs)}")
    for bug in bugs[:10]:
        print(f"  {bug['schema']} ({bug['mode']}): {bug['problem'] or 'invalid accepted'}: {bug['text'][:200]}")
    if args.jsonl:
        with open(args.jsonl, "w") as f:
            f.writelines(json.dumps(b) + "\n" for b in bugs)
        if oracle_failures:
            with open(args.jsonl + ".oracle", "w") as f:
                f.writelines(json.dumps(b) + "\n" for b in oracle_failures)
    return 1 if bugs else 0


if __name__ == "__main__":
    raise SystemExit(main())
