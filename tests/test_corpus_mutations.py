"""Soundness on real-world schemas: mutated instances of ../shared/corpus/maskbench-dev.

`bench masks` checks each dev-corpus schema on its own test instances, which
are few (1,422 valid, 2,306 invalid over 599 schemas). Here each instance is
mutated, deterministically per schema (`bench.mutations.mutate`: a value
replaced by one of another type, a string or number changed, a number
respelled as `12.0`, a member dropped or added, an item dropped, repeated or
inserted; one to three edits), serialized compact and with
spaces, judged by the benchmark's oracle (`bench.oracle`: jsonschema with the
spec's exact readings), and read by the byte automaton the engine compiles,
in declared member order and with ``any_order=True``.

Whatever the oracle calls invalid must be refused. Some mutants the oracle
calls valid are refused on purpose, so a valid mutant refused must have one
of the reasons `bench.mutations.refusal_kind` names: members out of the
declared order, a number README's "Numbers" refuses (`1.0` for an integer,
a float past 1e308), or a `format` (ours is checked where the draft lacks it,
and jsonschema checks `email` for an `@` only); any other is a bug.
`python -m bench.mutations` runs the same for longer, at the token level too.
"""

from __future__ import annotations

import json
import random
import warnings

import pytest

from bench.mutations import SHARED_CORPUS, mutants, mutate, refusal_kind, verdict, walk_tokens
from bench.oracle import validator
from grammars.dfa import LazyDFA
from grammars.errors import ConstraintError
from grammars.json_schema import json_schema_grammar

CORPUS = SHARED_CORPUS
PER_INSTANCE = 8          # mutants of each test instance


def _dfa(schema, **options):
    from constrained.dfa_jit import native_dfa_class

    g = json_schema_grammar(schema, **options)
    return (native_dfa_class() or LazyDFA)(g, max_depth=int(g.info.get("max_depth", 64)))


def _cases() -> list:
    return sorted(CORPUS.glob("*.json")) if CORPUS.is_dir() else []


@pytest.mark.parametrize("chunk", range(4))
def test_mutants_the_oracle_refuses_are_refused(chunk):
    if not CORPUS.is_dir():
        pytest.skip(f"{CORPUS} is absent (../shared/corpus/maskbench-dev: see shared/corpus/README.md)")
    accepted, checked, schemas = [], 0, 0
    for path in _cases()[chunk::4]:
        case = json.loads(path.read_text())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # schema notes: unknown keywords
            try:
                dfas = {"declared": _dfa(case["schema"]), "any_order": _dfa(case["schema"], any_order=True)}
            except (ConstraintError, RecursionError):
                continue                         # refused: `bench masks` reports those
            check = validator(case["schema"])
        schemas += 1
        rng = random.Random(path.stem)
        for test in case["tests"]:
            for _ in range(PER_INSTANCE):
                mutant = test["data"]
                for _ in range(rng.randint(1, 3)):
                    mutant = mutate(mutant, rng)
                for separators in ((",", ":"), (", ", ": ")):
                    text = json.dumps(mutant, separators=separators, ensure_ascii=rng.random() < 0.5)
                    if verdict(check, json.loads(text)) is not False:
                        continue                 # valid, or too slow for the oracle's backtracking `re`
                    checked += 1
                    for mode, dfa in dfas.items():
                        try:
                            ok = dfa.matches(text.encode())
                        except ConstraintError:          # a state budget: refused, loudly
                            ok = False
                        if ok:
                            accepted.append((path.stem, mode, text[:300]))
    assert schemas > 100 and checked > 1000, (schemas, checked)
    assert not accepted, f"{len(accepted)} invalid mutants accepted, e.g. {accepted[:5]}"


def test_valid_mutants_are_refused_only_for_a_known_reason():
    """Every 3rd schema, 4 mutants per instance: a mutant the oracle calls valid and our automaton
    refuses has a reason `refusal_kind` names (member order, a number spelling or range README
    refuses, a `format`), never "other"."""
    if not CORPUS.is_dir():
        pytest.skip(f"{CORPUS} is absent (../shared/corpus/maskbench-dev: see shared/corpus/README.md)")
    memo: dict = {}

    def accepts(schema, text, any_order):
        key = (json.dumps(schema), any_order)
        if key not in memo:
            try:
                memo[key] = _dfa(schema, any_order=any_order)
            except (ConstraintError, RecursionError):
                memo[key] = None
        try:
            return memo[key] is not None and bool(memo[key].matches(text.encode()))
        except ConstraintError:
            return False

    unexplained, refused, valid_seen = [], 0, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in _cases()[1::3]:
            case = json.loads(path.read_text())
            if not case["tests"]:
                continue
            memo.clear()
            schema, check = case["schema"], validator(case["schema"])
            for text in mutants(case["tests"], random.Random(path.stem), 4 * len(case["tests"])):
                if not verdict(check, json.loads(text)):
                    continue                     # invalid, or too slow for the oracle
                valid_seen += 1
                for any_order in (False, True):
                    if accepts(schema, text, any_order) or memo[(json.dumps(schema), any_order)] is None:
                        continue
                    refused += 1
                    if refusal_kind(schema, text, accepts, declared=not any_order) == "other":
                        unexplained.append((path.stem, any_order, text[:300]))
    assert valid_seen > 500 and refused > 20, (valid_seen, refused)   # the check ran, and had refusals to explain
    assert not unexplained, f"{len(unexplained)} valid mutants refused for no known reason, e.g. {unexplained[:5]}"


def test_mutants_through_the_token_fsm(hf_tok, vocabulary):
    """Every 4th schema, 6 mutants, as `python -m bench.mutations --level token` walks them: the
    mutant's llama-bpe tokens through the token FSM, each token in its state's mask exactly when
    the FSM moves on it, and no invalid mutant accepted (both member orders)."""
    if not CORPUS.is_dir():
        pytest.skip(f"{CORPUS} is absent (../shared/corpus/maskbench-dev: see shared/corpus/README.md)")
    from constrained.compile import clear_cache, compile_json_schema

    tok, vocab = hf_tok("llama-bpe"), vocabulary("llama-bpe")
    bugs, walked = [], 0
    for path in _cases()[::4]:
        case = json.loads(path.read_text())
        if not case["tests"]:
            continue
        check = validator(case["schema"])
        judged = [(text, verdict(check, json.loads(text))) for text in mutants(case["tests"], random.Random(path.stem), 6)]
        for options in ({}, {"any_order": True}):
            clear_cache()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    fsm = compile_json_schema(case["schema"], vocab, **options)
                except (ConstraintError, RecursionError):
                    continue
            for text, valid in judged:
                if valid is None:
                    continue
                try:
                    accepted, problem = walk_tokens(fsm, tok, text)
                except ConstraintError:
                    continue
                walked += 1
                if problem or (accepted and not valid):
                    bugs.append((path.stem, options, problem or "invalid accepted", text[:300]))
    clear_cache()
    assert walked > 800, walked
    assert not bugs, bugs[:5]


def test_a_later_drafts_keyword_below_a_ref_to_the_root_is_a_draft_keywords_refusal():
    """jsonschema switches to a draft's own validator at each `$schema`, the root's too when a `$ref`
    leads back to it: the check that also enforces the keywords the draft lacks must hold below such
    a `$ref` (these refusals were named "other" in a structural run, seed 19)."""
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"children": {"items": {"$ref": "#"}}},
              "dependentRequired": {"value": ["c"]}}

    def accepts(sch, text, any_order):
        return bool(_dfa(sch, any_order=any_order).matches(text.encode()))

    nested = json.dumps({"children": [{"children": [{"value": "T"}]}]})
    assert verdict(validator(schema), json.loads(nested)) and not accepts(schema, nested, True)
    assert refusal_kind(schema, nested, accepts) == "draft keywords"
    assert accepts(schema, json.dumps({"children": [{"children": [{"value": "T", "c": 1}]}]}), True)


def test_an_integral_float_at_two_to_the_63_is_a_number_spelling_refusal():
    """`-9.223372036854776e+18` is -2**63, an integer jsonschema takes for `type: integer` and that we
    spell only as `-9223372036854775808`: a "number spelling" refusal (it was "other", seed 61)."""
    schema = {"type": "object", "properties": {"replicas": {"type": ["integer", "null"]}}}

    def accepts(sch, text, any_order):
        return bool(_dfa(sch, any_order=any_order).matches(text.encode()))

    text = '{"replicas":-9.223372036854776e+18}'
    assert verdict(validator(schema), json.loads(text)) and not accepts(schema, text, True)
    assert accepts(schema, '{"replicas":-9223372036854775808}', True)
    assert refusal_kind(schema, text, accepts) == "number spelling"
