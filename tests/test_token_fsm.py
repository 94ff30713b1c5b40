"""Token FSM and Guide, on real vocabularies, against a brute-force oracle.

The oracle walks *every* token's bytes through the byte DFA from a state
(vectorized over a padded token x byte matrix: it shares no code with the trie
walk or the slices) and allows EOS iff the state accepts.  States come from
walking valid strings of regexes and JSON schemas byte by byte, so they
include states inside multi-byte characters, counters and escapes.
"""

from __future__ import annotations

import json
import marshal
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained.compile import compile_json_schema, compile_regex
from constrained.errors import ConstraintError, EmptyConstraintError, IncompatibleVocabularyError, StateBudgetError
from constrained.equivalence import equivalent as equivalent_states
from constrained.token_fsm import TokenFSM
from constrained.vocab import Vocabulary
from grammars.dfa import LazyDFA
from grammars.regex import regex_grammar
from bench.mask_corpus import CASES as BENCH_CASES
from tests.conftest import requires_jit
from tests.schema_corpus import BY_NAME

VOCABS = ["gpt-2", "llama-bpe", "llama-spm", "qwen2"]

# (regex, valid strings whose byte prefixes give the states to check)
REGEXES = [
    (r"[a-z]+@[a-z]+\.com", ["john@example.com", "a@b.com"]),
    (r"\d{3}-\d{4}", ["555-1234"]),
    (r"(foo|bar)*baz", ["foobarfoobaz"]),
    (r".{0,12}", ["héllo wörld!", "日本語のテキスト"]),
    (r'"([^"\\]|\\.)*"', ['"a \\"quoted\\" word, ok"', '"ünïcödé 😀"']),
    (r"[a-z ]{2,40}", ["the quick brown fox jumps"]),
    (r'\{"id": [0-9]{1,5}, "tags": \[("[a-z]{1,8}"(, )?)*\]\}', ['{"id": 42, "tags": ["ab", "cdef"]}']),
    # a long counter: slice chains over many character levels
    (r'[^"\\\x00-\x1f]{0,300}', ["Ünïcode text, 日本語, emoji 😀 and plain ASCII words " * 3]),
]
SCHEMAS = ["object_required", "string_length", "format_email", "enum_mixed", "tool_call",
           "pydantic_like", "not_enum", "number_plain", "format_datetime", "array_of_objects", "contains_prefix",
           "contains_and_item_counts"]


# ---------------------------------------------------------------------------
# the oracle


class Oracle:
    """Every usable token's bytes as a padded matrix, walked through a DFA column by column."""

    def __init__(self, vocab: Vocabulary) -> None:
        eos = set(vocab.eos_token_ids)
        self.ids = np.array([i for i, b in enumerate(vocab.token_bytes) if b and i not in eos], dtype=np.int64)
        toks = [vocab.token_bytes[i] for i in self.ids]
        self.lens = np.array([len(t) for t in toks])
        width = int(self.lens.max())
        buf = b"".join(t.ljust(width, b"\0") for t in toks)
        self.mat = np.frombuffer(buf, dtype=np.uint8).reshape(len(toks), width)
        self.eos = np.array(sorted(eos), dtype=np.int64)

    def walk(self, dfa, state: int) -> tuple[np.ndarray, np.ndarray]:
        """(allowed sorted ids incl. EOS iff accepting, next state per usable token or -1)."""
        states = np.full(len(self.ids), state, dtype=np.int64)
        for j in range(self.mat.shape[1]):
            idx = np.flatnonzero((self.lens > j) & (states >= 0))
            if not len(idx):
                break
            dfa.expand(np.unique(states[idx]))
            states[idx] = dfa.table[states[idx], dfa.byte_class[self.mat[idx, j]]]
        allowed = self.ids[states >= 0]
        if dfa.is_accepting(state):
            allowed = np.union1d(allowed, self.eos)
        return np.sort(allowed), states


_oracles: dict[str, Oracle] = {}


@pytest.fixture(scope="session")
def oracle(vocabulary):
    def get(name: str) -> Oracle:
        if name not in _oracles:
            _oracles[name] = Oracle(vocabulary(name))
        return _oracles[name]
    return get


def prefix_states(dfa, texts: list[bytes], limit: int) -> list[int]:
    """Distinct DFA states at every byte prefix of `texts` (evenly subsampled to `limit`)."""
    states: list[int] = []
    for text in texts:
        q = dfa.initial
        states.append(q)
        for b in text:
            q = dfa.next_state(q, b)
            assert q >= 0, text
            states.append(q)
    states = list(dict.fromkeys(states))
    if len(states) > limit:
        states = [states[i * len(states) // limit] for i in range(limit)]
    return states


def unpack(bitmask: np.ndarray, size: int) -> np.ndarray:
    return np.flatnonzero(np.unpackbits(bitmask.view(np.uint8), bitorder="little")[:size])


def check_states(fsm: TokenFSM, oracle: Oracle, states: list[int], rng: random.Random) -> None:
    dfa, size = fsm.dfa, fsm.index.size
    for q in states:
        expected, nxt = oracle.walk(dfa, q)
        got = fsm.allowed_token_ids(q)
        assert got.dtype == np.int32 and np.all(np.diff(got) > 0)
        if not np.array_equal(got, expected):
            extra, missing = np.setdiff1d(got, expected), np.setdiff1d(expected, got)
            tb = fsm.vocab.token_bytes
            pytest.fail(f"state {q}: {len(extra)} extra e.g. {[tb[i] for i in extra[:5]]}, "
                        f"{len(missing)} missing e.g. {[tb[i] for i in missing[:5]]}")
        assert np.array_equal(unpack(fsm.bitmask(q), size), expected)
        # next states of a sample of allowed tokens: the DFA's own, or an equivalent state
        alive = np.flatnonzero(nxt >= 0)
        for k in rng.sample(list(alive), min(25, len(alive))):
            want, have = int(nxt[k]), fsm.next_state(q, int(oracle.ids[k]))
            assert have == want or equivalent_states(dfa, have, want), (q, oracle.ids[k])


# ---------------------------------------------------------------------------
# differential tests


@pytest.mark.parametrize("name", VOCABS)
@pytest.mark.parametrize("pattern,texts", REGEXES, ids=[r[0][:24] for r in REGEXES])
def test_regex_masks_match_brute_force(name, pattern, texts, vocabulary, oracle):
    vocab = vocabulary(name)
    fsm = TokenFSM(LazyDFA(regex_grammar(pattern)), vocab)
    states = prefix_states(fsm.dfa, [t.encode() for t in texts], limit=8)
    check_states(fsm, oracle(name), states, random.Random(0))


@pytest.mark.parametrize("name", VOCABS)
@pytest.mark.parametrize("case", SCHEMAS)
def test_schema_masks_match_brute_force(name, case, vocabulary, oracle):
    vocab = vocabulary(name)
    entry = BY_NAME[case]
    fsm = compile_json_schema(entry["schema"], vocab, **entry["options"])
    texts = [json.dumps(v, ensure_ascii=False).encode() for v in entry["valid"]]
    texts = [t for t in texts if fsm.dfa.matches(t)]
    assert texts, case
    check_states(fsm, oracle(name), prefix_states(fsm.dfa, texts, limit=8), random.Random(1))


@pytest.mark.parametrize("name", ["llama-bpe", "gpt-2"])
@pytest.mark.parametrize("case", BENCH_CASES, ids=[c["name"] for c in BENCH_CASES])
def test_realistic_schema_masks_match_brute_force(name, case, vocabulary, oracle):
    fsm = compile_json_schema(case["schema"], vocabulary(name))
    texts = [json.dumps(v, ensure_ascii=False).encode() for v in case["instances"]]
    check_states(fsm, oracle(name), prefix_states(fsm.dfa, texts, limit=10), random.Random(2))


def test_slices_off_gives_same_masks(vocabulary):
    vocab = vocabulary("llama-bpe")
    for pattern, texts in REGEXES:
        dfa = LazyDFA(regex_grammar(pattern))
        sliced, plain = TokenFSM(dfa, vocab), TokenFSM(dfa, vocab, use_slices=False)
        for q in prefix_states(dfa, [t.encode() for t in texts], limit=8):
            assert np.array_equal(sliced.bitmask(q), plain.bitmask(q)), (pattern, q)


# ---------------------------------------------------------------------------
# Guide semantics


@pytest.fixture(scope="session")
def gpt2(vocabulary):
    return vocabulary("gpt-2")


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False).ids


def test_guide_walk_eos_and_finish(gpt2, tokenizer):
    fsm = compile_regex(r"(ab|cd)+", gpt2)
    g = fsm.guide()
    eos = gpt2.eos_token_ids[0]
    assert eos not in g.allowed_token_ids()              # empty text is no match
    assert not g.advance(eos) and g.num_tokens == 0
    for tok in encode(tokenizer("gpt-2"), "abcdab"):
        assert g.advance(tok)
    assert eos in g.allowed_token_ids() and not g.is_finished()
    assert g.advance(eos)
    assert g.is_finished() and g.allowed_token_ids().tolist() == [eos]
    assert not g.advance(encode(tokenizer("gpt-2"), "ab")[0])


def test_guide_rejects_bad_tokens_unchanged(gpt2, tokenizer):
    g = compile_regex(r"[0-9]{2,4}", gpt2).guide()
    assert g.advance(encode(tokenizer("gpt-2"), "12")[0])
    before = (g.state, g.num_tokens, g.allowed_token_ids().copy())
    for bad in (encode(tokenizer("gpt-2"), "x")[0], -1, gpt2.size, 10**12, "7", None, 1.5):
        assert g.advance(bad) is False
    assert (g.state, g.num_tokens) == before[:2]
    assert np.array_equal(g.allowed_token_ids(), before[2])
    three = encode(tokenizer("gpt-2"), "3")[0]
    assert g.advance(three + 0.9) is False and g.advance(np.float64(three)) is False   # 51.9 is not token 51
    assert (g.state, g.num_tokens) == before[:2]
    assert g.advance(np.int64(three)) and g.advance(np.array(three))   # numpy integers are fine
    g.rollback(2)
    ok = np.zeros((gpt2.size + 31) // 32, np.int32)
    g.fill_bitmask(ok)
    assert np.array_equal(np.flatnonzero(np.unpackbits(ok.view(np.uint8), bitorder="little")), g.allowed_token_ids())
    for bad in (np.zeros(len(ok), np.float32), np.zeros(len(ok) - 1, np.int32), np.zeros((2, len(ok)), np.int32)):
        with pytest.raises(ValueError, match=rf"int32 row of at least {len(ok)} words"):
            g.fill_bitmask(bad)
    torch = pytest.importorskip("torch")
    row = torch.zeros(len(ok), dtype=torch.int32)
    g.fill_bitmask(row)                                   # a CPU tensor is written through its numpy view
    assert np.array_equal(row.numpy(), ok)


def test_fork_and_rollback(gpt2, tokenizer):
    toks = encode(tokenizer("gpt-2"), '{"a": [1, 2, 3]}')
    fsm = compile_json_schema({"type": "object"}, gpt2)
    g = fsm.guide()
    seen = [g.allowed_token_ids().copy()]
    for t in toks:
        assert g.advance(t)
        seen.append(g.allowed_token_ids().copy())
    f = g.fork()
    g.rollback(3)
    assert np.array_equal(g.allowed_token_ids(), seen[-4]) and g.num_tokens == len(toks) - 3
    assert f.num_tokens == len(toks) and np.array_equal(f.allowed_token_ids(), seen[-1])
    assert f.advance(gpt2.eos_token_ids[0]) and f.is_finished() and not g.is_finished()
    f.rollback(1)
    assert not f.is_finished()
    with pytest.raises(ValueError):
        g.rollback(len(toks))
    g.rollback(0)
    g.reset()
    assert g.num_tokens == 0 and np.array_equal(g.allowed_token_ids(), seen[0])


def test_fill_bitmask_matches_allowed(vocabulary, tokenizer):
    vocab = vocabulary("llama-bpe")
    fsm = compile_json_schema(BY_NAME["tool_call"]["schema"], vocab)
    g = fsm.guide()
    buf = np.full((2, (vocab.size + 31) // 32), -1, dtype=np.int32)
    text = json.dumps(BY_NAME["tool_call"]["valid"][0])
    for t in encode(tokenizer("llama-bpe"), text) + [vocab.eos_token_ids[0]]:
        g.fill_bitmask(buf[1])
        assert np.array_equal(unpack(buf[1], vocab.size), g.allowed_token_ids())
        assert (buf[0] == -1).all()                       # only the given row is written
        assert g.advance(t)
    g.fill_bitmask(buf[1])
    assert unpack(buf[1], vocab.size).tolist() == list(vocab.eos_token_ids)


def test_nothing_but_eos(gpt2):
    g = compile_regex(r"ok", gpt2).guide()
    assert g.advance(gpt2.token_bytes.index(b"ok"))
    assert g.allowed_token_ids().tolist() == list(gpt2.eos_token_ids)
    assert g.is_finished() and g.forced_tokens() == ()


def test_special_tokens_never_allowed(vocabulary):
    vocab = vocabulary("llama-bpe")
    g = compile_regex(r"(.|\n)*", vocab).guide()          # anything at all
    allowed = set(g.allowed_token_ids().tolist())
    special = {i for i, b in enumerate(vocab.token_bytes) if b is None}
    assert special and not (special - set(vocab.eos_token_ids)) & allowed
    assert set(vocab.eos_token_ids) <= allowed


def test_forced_tokens(vocabulary, tokenizer):
    vocab = vocabulary("llama-bpe")
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    fsm = compile_json_schema(schema, vocab, whitespace="compact")
    g = fsm.guide()
    # declared keys are written as encoders write them (never `"\u006eame"`): the whole key is forced
    assert vocab.decode(g.forced_tokens()) == b'{"name":"'
    for t in g.forced_tokens():
        assert g.advance(t)
    assert g.forced_tokens() == ()                         # inside the string: free
    for t in encode(tokenizer("llama-bpe"), 'Bob",'):
        assert g.advance(t)
    assert vocab.decode(g.forced_tokens()) == b'"age":'


def test_incompatible_vocabulary():
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"ab", None], eos_token_ids=[3])
    with pytest.raises(IncompatibleVocabularyError) as err:
        compile_regex(r"x[ab]*", vocab)
    assert err.value.missing == [ord("x")]
    assert compile_regex(r"(ab)*", vocab).guide().allowed_token_ids().tolist() == [0, 2, 3]


@pytest.mark.parametrize("schema, where", [
    ({"type": "integer", "minimum": 10, "maximum": 5}, "$"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "$"),
    ({"enum": []}, "$"),
    (False, "$"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, "$"),
    ({"type": "object", "properties": {"a": {"type": "integer", "minimum": 3, "maximum": 1}}, "required": ["a"]},
     "$.properties.a, $"),
])
def test_unsatisfiable_schemas_say_so_with_the_path(gpt2, schema, where):
    """Not `IncompatibleVocabularyError` with an empty byte list: the schema is at fault, and where."""
    with pytest.raises(EmptyConstraintError) as err:
        compile_json_schema(schema, gpt2)
    assert str(err.value) == f"this JSON schema matches nothing: no JSON value satisfies it (subschemas matching nothing: {where})"
    assert isinstance(err.value, ConstraintError) and not isinstance(err.value, IncompatibleVocabularyError)


def test_empty_regex_says_so(gpt2):
    with pytest.raises(EmptyConstraintError, match=r"^this regex matches nothing: no string satisfies it$"):
        compile_regex(r"a$b", gpt2)


def test_compile_cache_and_inputs(gpt2):
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    a = compile_json_schema(schema, gpt2)
    assert compile_json_schema(json.dumps(schema), gpt2) is a
    assert compile_json_schema(schema, gpt2, whitespace="compact") is not a
    pydantic = pytest.importorskip("pydantic")

    class Point(pydantic.BaseModel):
        x: int
        y: int

    g = compile_json_schema(Point, gpt2).guide()
    for t in gpt2_encode(gpt2, '{"x": 1, "y": 2}'):
        assert g.advance(t)
    assert gpt2.eos_token_ids[0] in g.allowed_token_ids()


def test_compile_cache_tells_json_values_apart(gpt2):
    """The cache key (the schema's `marshal` bytes) separates what JSON texts separate: 1 from 1.0
    and from true. A schema marshal refuses (too deep) is keyed by its text, and still cached."""
    one, one_f, true = ({"const": v} for v in (1, 1.0, True))
    fsms = [compile_json_schema(x, gpt2) for x in (one, one_f, true)]
    assert len({id(f) for f in fsms}) == 3
    assert compile_json_schema({"const": 1}, gpt2) is fsms[0]
    assert fsms[2].matches(b"true") and not fsms[0].matches(b"true")
    deep: dict = {"type": "string"}
    for _ in range(2100):
        deep = {"anyOf": [deep]}
    with pytest.raises(ValueError):
        marshal.dumps(deep, 2)
    try:
        first = compile_json_schema(deep, gpt2)
    except StateBudgetError:                  # nesting past the compiler's own limit: said, not crashed
        return
    assert compile_json_schema(deep, gpt2) is first


def test_compile_cache_keys_options_by_value(gpt2):
    """Options are keyed by value and type: equal options (an equal `WhitespacePolicy`) find the
    cached FSM, ``True`` and ``1`` do not share one, and a value that cannot be hashed is keyed
    by its JSON text."""
    from constrained.compile import _options_key
    from grammars.json_values import WhitespacePolicy

    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    plain, any_order = compile_json_schema(schema, gpt2), compile_json_schema(schema, gpt2, any_order=True)
    assert any_order is not plain
    assert compile_json_schema(schema, gpt2, any_order=True) is any_order
    assert any_order.matches(b'{"b":"x","a":1}') and not plain.matches(b'{"b":"x","a":1}')
    policy = compile_json_schema(schema, gpt2, whitespace=WhitespacePolicy(max_spaces=1))
    assert compile_json_schema(schema, gpt2, whitespace=WhitespacePolicy(max_spaces=1)) is policy
    assert _options_key({"any_order": True}) != _options_key({"any_order": 1})
    assert _options_key({"x": [1, 2]}) == _options_key({"x": [1, 2]}) == '{"x": [1, 2]}'


def test_compile_cache_keeps_declared_member_order(gpt2):
    """Members are laid out in the schema's order, so schemas that differ only in
    the order of `properties` are different constraints, cached apart."""
    def schema(names):
        return {"type": "object", "properties": {n: {"type": "integer"} for n in names},
                "required": ["a", "b"], "additionalProperties": False}

    ab, ba = compile_json_schema(schema("ab"), gpt2), compile_json_schema(schema("ba"), gpt2)
    assert ab is not ba
    assert ab.matches(b'{"a":1,"b":2}') and not ab.matches(b'{"b":2,"a":1}')
    assert ba.matches(b'{"b":2,"a":1}') and not ba.matches(b'{"a":1,"b":2}')


def test_compile_cache_is_bounded_by_bytes(gpt2, monkeypatch: pytest.MonkeyPatch) -> None:
    """The FSM cache evicts its oldest entries once they hold more than `CACHE_BYTES`; the newest stays."""
    import constrained.compile as compile_module

    def cached() -> list[TokenFSM]:
        return list(compile_module._cache.values())

    compile_module.clear_cache()
    fsms = []
    for n in range(4):
        fsms.append(compile_regex(f"[a-z]{{{n + 1},40}}", gpt2))
        fsms[-1].guide().allowed_token_ids()            # a visited state: its masks are held
    assert cached() == fsms
    held = [f.held_bytes for f in fsms]
    # the DFA and the visited state's tables as first computed (its id list, materialized since, is not counted)
    assert held[0] >= fsms[0].dfa.nbytes + fsms[0].masks(fsms[0].initial).bitmask.nbytes > 0
    budget = held[2] + held[3] + held[0] // 2
    monkeypatch.setattr(compile_module, "CACHE_BYTES", budget)
    newest = compile_regex("[0-9]{1,40}", gpt2)          # a miss: the oldest go until the rest fit
    kept = cached()
    assert kept[-1] is newest and fsms[0] not in kept and kept[:-1] == fsms[4 - len(kept) + 1:]
    assert sum(f.held_bytes for f in kept) <= budget
    monkeypatch.setattr(compile_module, "CACHE_BYTES", 1)
    big = compile_regex("[0-9]{2,40}", gpt2)
    assert cached() == [big] and compile_regex("[0-9]{2,40}", gpt2) is big   # the newest always stays
    compile_module.clear_cache()


def test_compile_cache_frees_evicted_fsms_and_recounts_growth(gpt2, monkeypatch: pytest.MonkeyPatch) -> None:
    """An evicted FSM is freed (on the reaper thread, soon); growth after caching is counted after
    `_RECOUNT` compiles, by the reaper once the engine is idle, or inline after `_RECOUNT_INLINE`
    compiles without an idle moment."""
    import gc
    import time
    import weakref

    import constrained.compile as compile_module

    compile_module.clear_cache()
    monkeypatch.setattr(compile_module, "_CACHE_SIZE", 2)
    monkeypatch.setattr(compile_module, "_REAP_BATCH", 1)
    first = weakref.ref(compile_regex("[a-c]{1,30}", gpt2))
    compile_regex("[d-f]{1,30}", gpt2)
    compile_regex("[g-i]{1,30}", gpt2)                  # evicts the first
    deadline = time.monotonic() + 10
    while first() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
        gc.collect()
    assert first() is None

    compile_module.clear_cache()
    monkeypatch.setattr(compile_module, "_CACHE_SIZE", 128)
    grown = compile_regex("[a-z]{1,40}[0-9]", gpt2)
    size_when_added = compile_module._sizes[next(iter(compile_module._sizes))]
    g = grown.guide()
    for t in gpt2_encode(gpt2, "abcdefghij"):            # new states and masks: it grows after caching
        assert g.advance(t)
    assert grown.held_bytes > size_when_added
    for n in range(compile_module._RECOUNT):
        compile_regex(f"[0-9]{{{n + 1}}}", gpt2)
    assert compile_module._held["asked"]                 # asked of the reaper, not done in the compile
    deadline = time.monotonic() + 10
    while compile_module._held["asked"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert compile_module._sizes[next(iter(compile_module._sizes))] == grown.held_bytes
    assert compile_module._held["bytes"] == sum(f.held_bytes for f in compile_module._cache.values())

    compile_module.clear_cache()                         # never idle: inline, after `_RECOUNT_INLINE`
    monkeypatch.setattr(compile_module.WORK, "idle_for", lambda: 0.0)
    grown = compile_regex("[a-z]{1,40}[0-9]", gpt2)
    g = grown.guide()
    for t in gpt2_encode(gpt2, "abcdefghij"):
        assert g.advance(t)
    for n in range(compile_module._RECOUNT_INLINE - 2):         # (with `grown`, one short of it)
        compile_regex(f"[0-9]{{{n + 1}}}x", gpt2)
        assert compile_module._sizes[next(iter(compile_module._sizes))] < grown.held_bytes, (n, compile_module._held)
    compile_regex("[0-9]x{2}", gpt2)
    assert compile_module._sizes[next(iter(compile_module._sizes))] == grown.held_bytes
    assert compile_module._held["since"] == 0
    compile_module.clear_cache()


def test_evicted_fsms_are_handed_to_the_reaper_in_batches(gpt2, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each handing over wakes the reaper inside a compile: evictions wait for `_REAP_BATCH` of them
    (or `_REAP_BATCH_BYTES`), then go together and are freed."""
    import gc
    import time
    import weakref

    import constrained.compile as compile_module

    compile_module.clear_cache()
    monkeypatch.setattr(compile_module, "_CACHE_SIZE", 1)
    monkeypatch.setattr(compile_module, "_REAP_BATCH", 3)
    monkeypatch.setattr(compile_module, "_IDLE_S", 0.0)
    evicted = [weakref.ref(compile_regex(f"[a-c]{{{n + 1}}}", gpt2)) for n in range(3)]
    assert len(compile_module._evicted) == 2 and compile_module._reap.empty()   # two evicted, held back
    compile_regex("[a-c]{9}", gpt2)                      # the third eviction: the batch goes
    assert not compile_module._evicted
    deadline = time.monotonic() + 10
    while any(r() is not None for r in evicted) and time.monotonic() < deadline:
        time.sleep(0.01)
        gc.collect()
    assert all(r() is None for r in evicted)
    monkeypatch.setattr(compile_module, "_REAP_BATCH_BYTES", 0)   # large ones go at once
    big = weakref.ref(compile_module._cache[next(iter(compile_module._cache))])
    compile_regex("[a-c]{10}", gpt2)
    assert not compile_module._evicted
    deadline = time.monotonic() + 10
    while big() is not None and time.monotonic() < deadline:
        time.sleep(0.01)
        gc.collect()
    assert big() is None
    compile_module.clear_cache()


def test_dismantle_empties_only_what_it_alone_holds() -> None:
    """The reaper's `_dismantle` empties the evicted object's own containers, never one shared with others."""
    from types import SimpleNamespace

    from constrained.compile import _dismantle

    def build() -> SimpleNamespace:
        inner = SimpleNamespace(table={i: [i] for i in range(5)}, shared=shared)
        return SimpleNamespace(memo={1: inner}, rows=[[1, 2], shared], shared=shared)

    shared = {"kept": [1, 2, 3]}
    root = build()
    # root: 3 attributes, memo: 1 item, inner: 2 attributes, table: 5 items and their lists 1 each,
    # rows: 2 items, [1, 2]: 2
    assert sum(1 for _ in _dismantle(root)) == 20
    assert vars(root) == {} and shared == {"kept": [1, 2, 3]}   # shared: let go of, never emptied
    root = build()
    table = root.memo[1].table                           # held here too: table is let go of whole
    assert sum(1 for _ in _dismantle(root)) == 10
    assert table == {i: [i] for i in range(5)}


def test_an_evicted_fsm_still_in_use_keeps_working(gpt2, monkeypatch: pytest.MonkeyPatch) -> None:
    """An FSM evicted while a guide uses it is left whole by the reaper; the guide's masks stay right."""
    import time

    import constrained.compile as compile_module

    compile_module.clear_cache()
    monkeypatch.setattr(compile_module, "_CACHE_SIZE", 1)
    monkeypatch.setattr(compile_module, "_IDLE_S", 0.0)
    pattern = "[a-z]{1,20}[0-9]{1,3}"
    g = compile_regex(pattern, gpt2).guide()
    text = gpt2_encode(gpt2, "abcdefghij42")
    for t in text[:3]:
        assert g.advance(t)
    compile_regex("[d-f]{1,30}", gpt2)                   # evicts the FSM that `g` uses
    deadline = time.monotonic() + 10
    while not compile_module._reap.empty() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    compile_module.clear_cache()
    fresh = compile_regex(pattern, gpt2).guide()
    for t in text[:3]:
        assert fresh.advance(t)
    for t in text[3:]:
        assert np.array_equal(g.allowed_token_ids(), fresh.allowed_token_ids())
        assert g.advance(t) and fresh.advance(t)
    assert g.is_accepting() and fresh.is_accepting()
    compile_module.clear_cache()


def test_the_reaper_waits_for_idle_time_unless_evictions_pile_up(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    import constrained.compile as compile_module
    from constrained.work import WORK
    from tests.test_work import work_in_another_thread

    monkeypatch.setattr(compile_module, "_IDLE_S", 0.05)
    with WORK:
        pass
    t = time.perf_counter()
    compile_module._wait_idle()
    assert time.perf_counter() - t >= 0.04               # waited for 50 ms without work
    # work that started but has not ended (a long mask, a long compile) is not idle time
    with work_in_another_thread(WORK):
        waited = threading.Thread(target=compile_module._wait_idle)
        waited.start()
        waited.join(0.2)
        assert waited.is_alive()                         # 200 ms into the work, still waiting
    waited.join(10)
    assert not waited.is_alive()                         # and done once it ended and 50 ms passed
    monkeypatch.setattr(compile_module, "_REAP_BACKLOG", 0)
    with WORK:
        pass
    t = time.perf_counter()
    compile_module._wait_idle()
    assert time.perf_counter() - t < 0.04                # a backlog is freed at once


def test_per_state_records_are_not_walked_by_the_cyclic_gc(vocabulary, tokenizer) -> None:
    """A cached FSM's per-state records (and their slice views) are out of the GC's lists: in a
    worker holding the dev corpus' FSMs they were 83% of what a full collection walked."""
    import gc

    from constrained.untracked import _UNTRACK

    vocab = vocabulary("llama-bpe")
    fsm = compile_json_schema({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}},
                               "required": ["name"]}, vocab)
    guide = fsm.guide()
    for t in tokenizer("llama-bpe").encode('{"name": "Ada Lovelace"}', add_special_tokens=False).ids:
        guide.fill_bitmask(np.zeros(fsm.index.n_words, np.int32))
        assert guide.advance(t)
    records = list(fsm._memo.values())
    views = [m.view for m in records if m.view is not None]
    assert len(records) > 5 and views                   # the string's states have slice views
    tracked = _UNTRACK is None                          # (other interpreters: left as they are)
    assert all(gc.is_tracked(x) == tracked for x in records + views)


def test_the_reaper_lets_go_of_the_gil_between_slices_when_backlogged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Freeing a backlog, the reaper hands the GIL back after each slice: a thread whose calls release
    it (a mask's kernels) gets it back then, not after the interpreter's switch interval (set to
    1 s here, so that waiting for it cannot pass for a slow machine)."""
    import sys
    import time
    import weakref

    import constrained.compile as compile_module

    class Held:
        pass

    monkeypatch.setattr(compile_module, "_REAP_BACKLOG", 0)      # always backlogged: no idle wait
    batch = [Held()]                                             # held by the batch alone, as evictions are
    vars(batch[0]).update({f"a{i}": [i] for i in range(300_000)})   # let go of one by one: seconds of slices
    alive = weakref.ref(batch[0])
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    try:
        compile_module._start_reaper()
        compile_module._reap.put(batch)
        del batch
        waits = []
        deadline = time.monotonic() + 60
        while alive() is not None and vars(alive()) and time.monotonic() < deadline:
            t = time.perf_counter()
            time.sleep(0)                                         # lets go of the GIL, then wants it back
            waits.append(time.perf_counter() - t)
    finally:
        sys.setswitchinterval(interval)
    assert len(waits) > 10                                        # the reaper was freeing all along
    assert max(waits) < 0.5


def gpt2_encode(vocab: Vocabulary, text: str) -> list[int]:
    """Greedy longest-match segmentation (a valid, non-canonical tokenization)."""
    return segment(vocab, text.encode(), random.Random(0), greedy=True)


# ---------------------------------------------------------------------------
# every tokenization of allowed text is allowed


def segment(vocab: Vocabulary, data: bytes, rng: random.Random, greedy: bool = False) -> list[int]:
    """Split `data` into random pieces that are tokens of `vocab` (single bytes always exist)."""
    index = _piece_index(vocab)
    out, i = [], 0
    while i < len(data):
        options = [n for n in range(1, min(16, len(data) - i) + 1) if data[i:i + n] in index]
        n = max(options) if greedy else rng.choice(options)
        out.append(rng.choice(index[data[i:i + n]]))
        i += n
    return out


_pieces: dict[str, dict[bytes, list[int]]] = {}


def _piece_index(vocab: Vocabulary) -> dict[bytes, list[int]]:
    key = vocab.fingerprint
    if key not in _pieces:
        eos = set(vocab.eos_token_ids)
        index: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b and i not in eos:
                index.setdefault(b, []).append(i)
        _pieces[key] = index
    return _pieces[key]


PROPERTY_REGEXES = [r"[a-z]{1,6}(-[a-z0-9]{1,4}){0,3}", r"\d{1,3}(\.\d{1,3}){3}",
                    r"[A-Za-zÀ-ÿ ]{1,30}", r'"([^"\\\n]|\\[nt"])*"']


@pytest.mark.parametrize("pattern", PROPERTY_REGEXES)
@pytest.mark.parametrize("name", ["llama-bpe", "qwen2", "llama-spm"])
def test_every_tokenization_is_accepted(pattern, name, vocabulary, tokenizer):
    vocab = vocabulary(name)
    fsm = compile_regex(pattern, vocab)
    canonical = name != "llama-spm"                # SentencePiece prepends a space to the text

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_regex(pattern, fullmatch=True), st.randoms(use_true_random=False))
    def run(text, rng):
        data = text.encode()
        encodings = [segment(vocab, data, rng), segment(vocab, data, rng, greedy=True)]
        if canonical:
            encodings.append(encode(tokenizer(name), text))
        for ids in encodings:
            assert vocab.decode(ids) == data
            g = fsm.guide()
            for t in ids:
                assert g.advance(t), (text, ids, t)
            assert set(vocab.eos_token_ids) <= set(g.allowed_token_ids().tolist())

    run()


_BYTESETS = [b"0123456789", b"abcdefghijklmnopqrstuvwxyz", b"0123456789ABCDEFabcdef", b" ", b"\"\\/bfnrt",
             bytes(range(0x20, 0x7F)), bytes(range(0x80)), b"_-."]


@pytest.mark.parametrize("name", ["llama-bpe", "gpt-2", "llama-spm"])
def test_byteset_slice_matches_generic_construction(name, vocabulary):
    """The fast byte-set slice (prefix byte sets) equals the generic one (automaton run down the trie)."""
    from constrained.slices import build_byteset_slice, build_slice, byteset_table
    from constrained.vocab_index import VocabIndex

    index = VocabIndex.for_vocab(vocabulary(name))
    for chars in _BYTESETS:
        mask = sum(1 << b for b in chars)
        fast = build_byteset_slice(mask, index.trie, index.usable, index.n_words)
        slow = build_slice(f"bytes:{mask:x}", byteset_table(mask), index.trie, index.usable, index.n_words)
        assert fast.name == slow.name and fast.max_started == slow.max_started, chars
        for field in ("table", "end", "member", "bitmask", "exits", "exit_from", "exit_level",
                      "exit_first", "used_from"):
            np.testing.assert_array_equal(getattr(fast, field), getattr(slow, field), err_msg=f"{field} {chars!r}")
        members = slow.member
        for field in ("complete", "started"):       # only slice tokens have a character count
            np.testing.assert_array_equal(getattr(fast, field)[members], getattr(slow, field)[members], err_msg=f"{field} {chars!r}")
    with pytest.raises(ValueError, match="ASCII"):
        build_byteset_slice(1 << 200, index.trie, index.usable, index.n_words)


@requires_jit
@pytest.mark.parametrize("name", ["llama-bpe", "llama-spm"])
def test_native_fsm_matches_python_fsm(name, vocabulary):
    """A `JitDFA` FSM (compiled rows and walk) and a `LazyDFA` one (Python rows, numpy walk) allow the
    same tokens at the same byte prefixes, and the tokens lead to states allowing the same tokens."""
    from constrained.dfa_jit import JitDFA
    from grammars.json_schema import json_schema_grammar

    vocab = vocabulary(name)
    rng = random.Random(0)
    cases = [(regex_grammar(p), 64, [t.encode() for t in texts]) for p, texts in REGEXES]
    for case in BENCH_CASES[:6]:
        g = json_schema_grammar(case["schema"])
        cases.append((g, g.info["max_depth"], [json.dumps(v, ensure_ascii=False).encode() for v in case["instances"]]))
    checked = 0
    for grammar, depth, texts in cases:
        native = TokenFSM(JitDFA(grammar, max_depth=depth), vocab)
        plain = TokenFSM(LazyDFA(grammar, max_depth=depth), vocab)
        prefixes = list(dict.fromkeys(t[:i] for t in texts for i in range(len(t) + 1)))
        for prefix in rng.sample(prefixes, min(16, len(prefixes))):
            q1, q2 = native.dfa.walk(native.initial, prefix), plain.dfa.walk(plain.initial, prefix)
            assert np.array_equal(native.bitmask(q1), plain.bitmask(q2)), (grammar, prefix)
            allowed = plain.allowed_token_ids(q2).tolist()
            for tok in rng.sample(allowed, min(8, len(allowed))):
                n1, n2 = native.next_state(q1, tok), plain.next_state(q2, tok)
                assert np.array_equal(native.bitmask(n1), plain.bitmask(n2)), (grammar, prefix, tok)
            checked += 1
    assert checked > 100


def test_one_fsm_shared_by_threads_gives_the_same_masks(hf_tok, vocabulary):
    """Guides of one FSM walked from 4 threads at once (first visits included: the compiled
    kernels release the GIL) fill the same masks as a single thread on a fresh FSM."""
    import threading

    from constrained.compile import clear_cache
    from bench.corpus import DEFAULT_CORPUS, load_corpus

    tok, vocab = hf_tok("llama-bpe"), vocabulary("llama-bpe")
    case = next(c for c in load_corpus(DEFAULT_CORPUS, ["api_order"]))
    walks = [tok.encode(json.dumps(t["data"], ensure_ascii=False), add_special_tokens=False)
             for t in case.tests if t["valid"]] * 2

    def masks_along(fsm, ids):
        guide, buf, out = fsm.guide(), np.zeros(vocab.size // 32 + 1, np.int32), []
        for t in ids:
            guide.fill_bitmask(buf)
            out.append(buf.copy())
            if not guide.advance(t):
                break
        return out

    clear_cache()
    want = [masks_along(compile_json_schema(case.schema, vocab), ids) for ids in walks]
    clear_cache()
    shared = compile_json_schema(case.schema, vocab)
    got: dict[int, list] = {}
    threads = [threading.Thread(target=lambda k=k: got.__setitem__(k, masks_along(shared, walks[k])))
               for k in range(len(walks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(walks) >= 4 and all(len(got[k]) == len(walks[k]) for k in range(len(walks)))
    for k in range(len(walks)):
        assert all(np.array_equal(a, b) for a, b in zip(got[k], want[k])), k


def test_lookup_scans_long_unsorted_ids_then_sorts_them() -> None:
    from constrained import state_masks

    rng = np.random.default_rng(0)
    ids = rng.permutation(100_000)[: state_masks._MAX_SCAN + 500].astype(np.int32)   # long and sparse
    nxt = rng.integers(0, 1000, len(ids)).astype(np.int32)
    want = dict(zip(ids.tolist(), nxt.tolist()))
    absent = next(i for i in range(100_000) if i not in want)
    m = state_masks.StateMasks(ids, nxt, None, False, np.zeros(1, np.int32), sorted=False)
    probes = [int(ids[7]), absent, int(ids[-1]), int(ids[0]), absent]
    got = [m.lookup(t) for t in probes]
    assert got == [want.get(t, -1) for t in probes]
    # scanned for the first lookups, sorted once they keep coming; the answers never change
    assert m._sorted and list(m.ids) == sorted(want) and m.next.tolist() == [want[i] for i in sorted(want)]
