"""Lazy compile: counter loops, subroutines, bounded work at compile time, deep schemas.

Compile builds an NFA whose size follows the schema text, never the product of
its bounds: counted repeats are counter loops whose values live in the lazy
DFA's configurations, and large nodes used twice are subroutine calls.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from constrained.compile import clear_cache, compile_json_schema, compile_regex
from constrained.dfa_jit import load_kernels, native_dfa_class
from grammars.ast import Grammar, Ref, alt, byteset, literal, repeat, seq
from grammars.dfa import LazyDFA
from grammars.errors import ConstraintError, StateBudgetError
from grammars.json_schema import json_schema_grammar
from grammars.nfa import FREE, NFA
from grammars.regex import regex_grammar
from tests.test_dfa import _random_node, check_random_grammar, live_states, reference_match

CORPUS = Path(__file__).resolve().parent.parent / "bench" / "corpus"
DFA_CLASSES = [LazyDFA] + ([native_dfa_class()] if native_dfa_class() else [])


@pytest.mark.parametrize("cls", DFA_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("seed", range(40))
def test_counter_loops_match_the_reference_and_stay_live(seed: int, cls: type) -> None:
    """Counted repeats (with rule calls inside and around them) vs the reference matcher; every state live."""
    check_random_grammar(seed, cls, max_rules=2, counted=True, max_states=20000, texts=80, max_len=14)


@pytest.mark.parametrize("cls", DFA_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("pattern", [r"a{5,7}", r"(ab){3,9}c", r"[0-9]{1,100}", r"x(a{2,3}){3,5}y", r"(a?){5,8}b",
                                     r"((ab){2,6}c){1,8}", r"(a{10,}b){2,5}", r"[A-F0-9]{881}", r"(\d{1,3}\.){3}\d{1,3}",
                                     r"(a?b?){5,}", r"((a?){2,7}b){3,9}"])
def test_counted_regexes_agree_with_re(pattern: str, cls: type) -> None:
    dfa = cls(regex_grammar(pattern))
    rng = random.Random(pattern)
    texts = ["a" * 5, "a" * 8, "ab" * 3 + "c", "1" * 100, "1" * 101, "A" * 881, "A" * 880, "a" * 10 + "b" + "a" * 12 + "b",
             "xaaaaaaaay", "10.0.0.255", "1.2.3.4444"]
    texts += ["".join(rng.choice("ab.c1") for _ in range(rng.randint(0, 20))) for _ in range(400)]
    for text in texts:
        assert dfa.matches(text.encode()) == (re.fullmatch(pattern, text) is not None), text


@pytest.mark.parametrize("cls", DFA_CLASSES, ids=lambda c: c.__name__)
def test_counted_repeats_of_nullable_items_stay_small(cls: type) -> None:
    """r0 = ((r0{0,5}){7,}){2,3}: empty rounds of a counter used to make every
    closure list every combination of counts (MemoryError); now a handful of states."""
    r0 = repeat(repeat(repeat(Ref("r0"), 0, 5), 7, None), 2, 3)
    g = Grammar({"r0": seq(r0, literal(b"a")), "r1": alt(r0, byteset(b"b"))}, start="r1")
    dfa = cls(g, max_depth=3, max_states=500)
    live, _ = live_states(dfa)
    assert dfa.num_states < 50 and live == set(range(dfa.num_states))
    for n in range(6):
        for data in (b"a" * n, b"b", b"ab"):
            assert dfa.matches(data) == reference_match(g, data, 3), data


def _compile_time_states(schema: dict) -> tuple[int, int]:
    """(NFA states, DFA states) that compiling `schema` creates, before any token is generated."""
    g = json_schema_grammar(schema)
    dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    return dfa.nfa.num_states, dfa.num_states


@pytest.mark.parametrize("make", [
    lambda n: {"type": "string", "maxLength": n},
    lambda n: {"type": "string", "minLength": n},
    lambda n: {"type": "array", "items": {"type": "integer"}, "minItems": n},
    lambda n: {"type": "array", "items": {"type": "object", "properties": {
        "key": {"type": "string", "maxLength": n}, "type": {"type": "string", "maxLength": n}},
        "additionalProperties": False}, "maxItems": n},
    lambda n: {"type": "string", "pattern": f"^[A-F0-9]{{{n}}}$"},
    lambda n: {"type": "string", "pattern": "^[a-z]+$", "maxLength": n},
], ids=["maxLength", "minLength", "minItems", "objects_maxItems", "pattern_count", "pattern_maxLength"])
def test_compile_work_does_not_grow_with_bounds(make) -> None:
    """The automaton built at compile time is the same size whatever the bounds (issue: compile lazily)."""
    sizes = {n: _compile_time_states(make(n)) for n in (10, 1000, 1_000_000)}
    assert len(set(sizes.values())) == 1, sizes


@pytest.mark.parametrize("pattern", [r"[a-z]{0,1000000}", r"(ab|c){10,100000}", r".{1000}"])
def test_regex_compile_work_does_not_grow_with_bounds(pattern: str) -> None:
    small = NFA(regex_grammar(re.sub(r"\d+", "100", pattern))).num_states
    assert NFA(regex_grammar(pattern)).num_states == small


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json")), ids=lambda p: p.stem)
def test_subroutines_keep_the_language(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large nodes built again are called, not copied; the language is the same."""
    case = json.loads(path.read_text())
    try:
        g = json_schema_grammar(case["schema"], whitespace="compact")
    except ConstraintError:
        pytest.skip("unsupported schema")
    called = LazyDFA(g, max_depth=g.info["max_depth"])
    monkeypatch.setattr(NFA, "subroutines", False)
    copied = LazyDFA(g, max_depth=g.info["max_depth"])
    for t in case["tests"]:
        text = json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False).encode()
        assert called.matches(text) == copied.matches(text) == t["valid"], text


def test_a_definition_used_many_times_is_built_about_twice() -> None:
    """Each further use costs its own member (name, separator, a call), not a copy of the definition."""
    item = {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 40 + i} for i in range(30)}}

    def states(uses: int) -> int:
        schema = {"type": "object", "$defs": {"item": item}, "additionalProperties": False,
                  "properties": {f"k{i}": {"$ref": "#/$defs/item"} for i in range(uses)}}
        return NFA(json_schema_grammar(schema)).num_states

    one, many = states(1), states(20)
    assert many < 3 * one, (one, many)


def _nested(depth: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"], "additionalProperties": False}
    return schema


def test_deep_nesting_compiles_without_recursion_error(vocabulary) -> None:
    vocab = vocabulary("gpt-2")
    clear_cache()
    fsm = compile_json_schema(_nested(250), vocab, whitespace="compact")
    text = '{"a":' * 250 + "7" + "}" * 250
    guide = fsm.guide()
    for tok in vocab_encode(vocab, text):
        assert guide.advance(tok)
    assert guide.is_finished() or guide.fsm.is_accepting(guide.state)


def test_absurd_nesting_is_a_budget_error_not_a_crash() -> None:
    """100,000 levels, as a dict and as JSON text: json's C encoder and decoder recurse along
    the nesting, and at `deep_call`'s former limit (200,000) they overflowed its thread's stack
    and killed the process. Run in a subprocess, so that a crash fails this test alone."""
    import subprocess
    import sys

    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "from types import SimpleNamespace\n"
        "from constrained.compile import compile_json_schema\n"
        "from grammars.errors import StateBudgetError\n"
        "v = SimpleNamespace(token_bytes=(b'[', b']', b'1', None), eos_token_ids=(3,), size=4, fingerprint='deep')\n"
        "d = 100_000\n"
        "schema = {'type': 'integer'}\n"
        "for _ in range(d):\n"
        "    schema = {'items': schema}\n"
        "text = '{\"items\":' * d + '{}' + '}' * d\n"
        "for s in (schema, text):\n"
        "    try:\n"
        "        compile_json_schema(s, v)\n"
        "    except StateBudgetError as e:\n"
        "        print('budget:', e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, (done.returncode, done.stderr[-1500:])
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all("the schema's nesting needs more than" in line for line in lines), lines


def test_nesting_past_the_compilers_limit_names_where(vocabulary) -> None:
    """2,500 nested `items` (no `$ref`): a budget error at the subschema that reached the limit."""
    schema: dict = {"type": "integer"}
    for _ in range(2500):
        schema = {"type": "array", "items": schema}
    with pytest.raises(StateBudgetError, match=r"the subschema at \$\.items\.items.* needs more than 2000 levels of "
                                               r"nesting") as err:
        compile_json_schema(schema, vocabulary("gpt-2"))
    assert len(str(err.value)) < 600                           # the path is shortened in the middle


def test_deeply_nested_regex_groups_compile(vocabulary) -> None:
    """Python's regex parser recurses per group: 3,000 nested groups parse on a deep stack (they were
    reported as an invalid regex, "maximum recursion depth exceeded")."""
    fsm = compile_regex("(" * 3000 + "ab" + ")" * 3000, vocabulary("gpt-2"))
    assert fsm.matches(b"ab") and not fsm.matches(b"a")


def test_regex_errors_quote_long_patterns_by_their_ends() -> None:
    bad = "a" * 5000 + "("
    with pytest.raises(ConstraintError, match=r"'aaaa.*'\.\.\.\(5001 characters\)\.\.\.'a*\('") as err:
        regex_grammar(bad)
    assert len(str(err.value)) < 400


def test_bounds_past_64_bits(vocabulary) -> None:
    """Counters are 64-bit: a larger maximum admits every text that could be written (it was an
    OverflowError), a larger minimum is a budget error naming the repeat."""
    vocab = vocabulary("gpt-2")
    fsm = compile_json_schema({"type": "string", "maxLength": 10**30}, vocab)
    guide = fsm.guide()
    for tok in vocab_encode(vocab, '"abc"'):
        assert guide.advance(tok)
    assert fsm.is_accepting(guide.state)
    with pytest.raises(StateBudgetError, match="counted repeat's minimum"):
        compile_json_schema({"type": "array", "minItems": 10**20}, vocab)


def test_deep_ref_chain_compiles(vocabulary) -> None:
    n = 400
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"type": "boolean"}
    fsm = compile_json_schema({"$ref": "#/$defs/d0", "$defs": defs}, vocabulary("gpt-2"))
    assert fsm.guide().allowed_token_ids().size > 0


def test_state_budget_is_settable_and_names_the_limit(vocabulary) -> None:
    vocab = vocabulary("gpt-2")
    fsm = compile_regex(r"[a-z]{0,100000}", vocab, max_states=40)   # compiling is cheap ...
    guide = fsm.guide()
    with pytest.raises(StateBudgetError, match=r"40 states \(growing at regex .*max_states"):  # ... generation grows
        for _ in range(100):
            ids = guide.allowed_token_ids()
            guide.advance(int(ids[(ids != vocab.eos_token_ids[0])][0]))
    with pytest.raises(ValueError, match="max_states"):
        compile_regex("a", vocab, max_states=0)


def vocab_encode(vocab, text: str) -> list[int]:
    """Greedy longest-match token ids spelling `text` (any tokenization is a valid walk)."""
    by_bytes = {b: i for i, b in enumerate(vocab.token_bytes) if b}
    data, out = text.encode(), []
    while data:
        n = max(k for k in range(1, min(len(data), 32) + 1) if data[:k] in by_bytes)
        out.append(by_bytes[data[:n]])
        data = data[n:]
    return out


def test_state_budget_error_names_the_json_path(hf_tok) -> None:
    tok = hf_tok("gpt-2")
    from constrained.vocab import Vocabulary

    vocab = Vocabulary.from_tokenizer(tok)
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string", "maxLength": 10**5}},
              "required": ["name"]}
    guide = compile_json_schema(schema, vocab, max_states=80, whitespace="compact").guide()
    with pytest.raises(StateBudgetError, match=r"more than 80 states \(growing at \$\.properties\.name\)"):
        for t in tok.encode('{"name":"' + "hello world " * 200, add_special_tokens=False):
            assert guide.advance(t)


def test_recursion_through_a_one_branch_allof_is_a_rule() -> None:
    """`items: {allOf: [{$ref: <self>}]}` (real-world menus) compiles as recursion, not an endless merge."""
    item = {"type": "object", "properties": {"label": {"type": "string"},
                                             "children": {"type": "array", "items": {"allOf": [{"$ref": "#/$defs/m"}]}}},
            "required": ["label"], "additionalProperties": False}
    g = json_schema_grammar({"$defs": {"m": item}, "$ref": "#/$defs/m"}, whitespace="compact")
    dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    assert dfa.matches(b'{"label":"a","children":[{"label":"b","children":[{"label":"c"}]}]}')
    assert not dfa.matches(b'{"label":"a","children":[{"children":[]}]}')


def test_recursion_through_a_merge_is_refused_with_the_path(vocabulary) -> None:
    schema = {"definitions": {"n": {"type": "object", "properties": {
        "c": {"allOf": [{"$ref": "#/definitions/n"}, {"minProperties": 0}]}}}}, "$ref": "#/definitions/n"}
    with pytest.raises(StateBudgetError, match=r"at \$\.definitions\.n\.properties\.c.* needs more than \d+ levels of "
                                               r"nesting \(a recursive `\$ref` merged"):
        compile_json_schema(schema, vocabulary("gpt-2"))


@pytest.mark.skipif(native_dfa_class() is None, reason="needs numba (CONSTRAINED_JIT=0 or not installed)")
@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json"))[::2], ids=lambda p: p.stem)
def test_compiled_need_equals_the_python_fixpoint(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        g = json_schema_grammar(json.loads(path.read_text())["schema"])
    except ConstraintError:
        pytest.skip("unsupported schema")
    assert _needs(g, g.info["max_depth"], monkeypatch)


@pytest.mark.skipif(native_dfa_class() is None, reason="needs numba (CONSTRAINED_JIT=0 or not installed)")
@pytest.mark.parametrize("seed", range(30))
def test_compiled_need_on_random_counter_grammars(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    names = [f"r{i}" for i in range(rng.randint(1, 3))]
    g = Grammar({n: _random_node(rng, names, 0, counted=True) for n in names}, start=names[0])
    assert _needs(g, 3, monkeypatch)


def _needs(g: Grammar, max_depth: int, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether the Python fixpoint, the compiled one, the one straight from the columns and the
    one inside `finish_from_columns` agree."""
    from constrained import need_kernel   # numba: only where the callers' skipif found it

    k = load_kernels()
    monkeypatch.setattr(NFA, "fast_need", False)
    found = []
    for kernel, columns, finish in ((None, None, None), (k.compute_need, None, None),
                                    (None, need_kernel.need_from_columns, None),
                                    (None, None, need_kernel.finish_from_columns)):
        monkeypatch.setattr(NFA, "need_kernel", kernel and staticmethod(kernel))
        monkeypatch.setattr(NFA, "need_columns_kernel", columns and staticmethod(columns))
        monkeypatch.setattr(NFA, "finish_kernel", finish and staticmethod(finish))
        found.append(np.asarray(NFA(g, max_depth=max_depth).need).tolist())
    return found[0] == found[1] == found[2] == found[3]


@pytest.mark.parametrize("path", sorted(CORPUS.glob("*.json"))[::3], ids=lambda p: p.stem)
def test_vectorized_forward_equals_forward(path: Path) -> None:
    try:
        g = json_schema_grammar(json.loads(path.read_text())["schema"])
    except ConstraintError:
        pytest.skip("unsupported schema")
    nfa = NFA(g, max_depth=g.info["max_depth"])
    states = list(range(nfa.num_states))
    want = [nfa.forward(s) for s in states]
    assert nfa.forward_many(states).tolist() == want
    if native_dfa_class() is not None:
        from constrained import need_kernel

        a = nfa.arrays
        # every state as a rule call's return: forwarded; per call edge, a loop exit stays where it says
        states = np.arange(nfa.num_states, dtype=np.int64)
        got = need_kernel.call_returns_native(states, np.zeros(len(states), np.int64), FREE, a.eps_ptr, a.eps_dst,
                                              a.edge_ptr, a.call_ptr, np.asarray(nfa.is_end, dtype=np.bool_))
        assert got.tolist() == want
        rets = need_kernel.call_returns_native(a.call_dst, a.call_op, FREE, a.eps_ptr, a.eps_dst, a.edge_ptr,
                                               a.call_ptr, np.asarray(nfa.is_end, dtype=np.bool_))
        assert rets.tolist() == [want[d] if op <= FREE else d for d, op in zip(a.call_dst.tolist(),
                                                                                a.call_op.tolist())]
        # ... and with the byte classes, in one call, as a new DFA takes them
        raw = np.frombuffer(b"".join(m.to_bytes(32, "little") for m in a.masks), np.uint8).reshape(len(a.masks), 32)
        both = need_kernel.classes_and_returns_native(raw, a.call_dst, a.call_op, FREE, a.eps_ptr, a.eps_dst,
                                                      a.edge_ptr, a.call_ptr, np.asarray(nfa.is_end, dtype=np.bool_))
        alone = need_kernel.byte_classes_native(raw)
        assert all(np.array_equal(x, y) for x, y in zip(both, (*alone, rets)))


def _live_nodes() -> int:
    """Syntax-tree nodes the cyclic GC tracks in this process (`Seq`, `Alt`, `Repeat`)."""
    import gc

    from grammars.ast import Alt, Repeat, Seq

    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) in (Seq, Alt, Repeat))


def test_compiled_constraints_keep_no_syntax_trees(vocabulary) -> None:
    """A server keeps up to 128 compiled FSMs: each full GC collection walks what they hold.
    Compiling distinct schemas (objects with extra keys: key complements) and dropping them
    leaves no syntax trees behind, in the FSMs or in process-wide tables. An FSM holds the
    syntax of the subschemas it has not built yet (`NFA.build_lazy`), and no more once a walk
    has built them all."""
    vocab = vocabulary("llama-bpe")

    def schema(i: int) -> dict:
        return {"type": "object", "properties": {f"name{i}x{j}": {"type": ["string", "number"]} for j in range(6)},
                "required": [f"name{i}x0"]}

    clear_cache()
    compile_json_schema(schema(-1), vocab).guide().allowed_token_ids()   # process-wide tables warmed
    clear_cache()
    before = _live_nodes()
    kept = [compile_json_schema(schema(i), vocab) for i in range(40)]
    for i, fsm in enumerate(kept):
        fsm.guide().allowed_token_ids()
        guide = fsm.guide()
        doc = {f"name{i}x{j}": "a" if j % 2 else 1.5 for j in range(6)} | {f"name{i}x{j}X": 2 for j in range(6)}
        for tok in vocab_encode(vocab, json.dumps(doc)):
            assert guide.advance(tok)
        assert fsm.is_accepting(guide.state)
        assert fsm.dfa.nfa.unbuilt == 0
    held = _live_nodes() - before
    del kept, fsm
    clear_cache()
    assert held < 40, f"40 compiled FSMs hold {held} syntax-tree nodes"
    assert _live_nodes() - before < 40
