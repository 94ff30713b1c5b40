"""Masks shared by DFA states whose counts are far from their bounds (`constrained.twins`):
every mask along random token walks equals the one computed without sharing."""

import json
import random

import numpy as np
import pytest

from constrained.compile import compile_grammar
from constrained.dfa_jit import native_dfa_class
from constrained.gguf_tokenizers import hf_tokenizer
from constrained.guide import Guide
from constrained import token_fsm
from constrained.state_masks import TwinMasks
from constrained.token_fsm import FINISHED, TokenFSM
from constrained.vocab import Vocabulary
from grammars.json_schema import json_schema_grammar
from grammars.regex import regex_grammar

pytestmark = pytest.mark.skipif(native_dfa_class() is None, reason="twins read the native DFA's configurations")

CASES = [
    ("schema", {"type": "string", "maxLength": 600}),
    ("schema", {"type": "string", "minLength": 250, "maxLength": 700}),
    ("schema", {"type": "array", "items": {"type": "string", "maxLength": 300}, "maxItems": 3}),
    ("schema", {"type": "object", "properties": {"a": {"type": "string", "maxLength": 400}, "b": {"type": "integer"}},
                "required": ["a", "b"], "additionalProperties": False}),
    ("regex", "([a-z ]{0,400}x){1,3}"),
    # nested counts: the array's frame lies under the string's
    ("schema", {"type": "array", "items": {"type": "string", "maxLength": 200}, "minItems": 2, "maxItems": 1000}),
    # `Counted` strings: a pattern with length bounds past their product, alone and in an array
    ("schema", {"type": "string", "pattern": "^[a-z]+( [a-z]+)*$", "minLength": 40, "maxLength": 3000}),
    ("schema", {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+( [a-z]+)*$", "maxLength": 2500},
                "maxItems": 3}),
    # unbounded loops: the count stops at the lower bound, its one threshold
    ("schema", {"type": "string", "minLength": 300}),
    ("regex", "(ab|c){150,}d"),
    # rule calls (recursion) between the frames
    ("schema", {"type": "object", "properties": {"name": {"type": "string", "maxLength": 500},
                                                 "kids": {"type": "array", "items": {"$ref": "#"}}},
                "required": ["name"]}),
]


@pytest.fixture(autouse=True)
def from_the_first_state(request, monkeypatch):
    """Share from the first state on (by default, from the DFA's 2048th), unless a test says otherwise."""
    if "default_threshold" not in request.keywords:
        monkeypatch.setattr(token_fsm, "_TWIN_MIN_STATES", 0)


@pytest.fixture(scope="module")
def vocab():
    return Vocabulary.from_tokenizer(hf_tokenizer("llama-spm"))


def _pair(kind, spec, vocab, **options):
    def make():
        grammar = json_schema_grammar(spec, **options) if kind == "schema" else regex_grammar(spec)
        return compile_grammar(grammar, vocab)
    fsm, ref = make(), make()
    ref.share_counts = False
    return fsm, ref


def _configurations(fsm: TokenFSM, state: int) -> tuple:
    """The DFA state's configurations as (NFA state, its stack's frames from the top), sorted, and
    whether it accepts: comparable between two DFAs of one grammar (their ids differ)."""
    d = fsm.dfa
    cfgs = d._cfg_data[d._cfg_ptr[state]:d._cfg_ptr[state + 1]].tolist()
    out = []
    for c in cfgs:
        if c < 0:
            continue
        k, p = divmod(c, d._n)
        frames = []
        while k > 0:
            frames.append(int(d._stk_ret[k]))
            k = int(d._stk_parent[k])
        out.append((p, tuple(frames)))
    return bool(cfgs) and cfgs[0] < 0, sorted(out)


def _pick(rng: random.Random, fsm: TokenFSM, state: int, vocab) -> int:
    ids = fsm.allowed_token_ids(state)
    text = [t for t in ids.tolist() if t not in vocab.eos_token_ids and (vocab.token_bytes[t] or b"").isalpha()]
    if text and rng.random() < 0.9:                 # mostly letters: the counts grow toward the bounds
        return rng.choice(text)
    return int(rng.choice(ids.tolist()))


def _compare_walks(fsm: TokenFSM, ref: TokenFSM, vocab, seeds: int = 3, steps: int = 400) -> int:
    """Random walks, the same tokens through both FSMs: equal masks and configurations at every
    step. Returns how many steps had a shared mask."""
    shared = 0
    for seed in range(seeds):
        rng = random.Random(seed)
        s, r = fsm.initial, ref.initial
        for _ in range(steps):
            assert np.array_equal(fsm.bitmask(s), ref.bitmask(r))
            assert fsm.is_accepting(s) == ref.is_accepting(r)
            assert _configurations(fsm, s) == _configurations(ref, r)     # the counts are exact
            shared += isinstance(fsm.masks(s), TwinMasks)
            assert fsm.forced_tokens(s) == ref.forced_tokens(r)
            tok = _pick(rng, fsm, s, vocab)
            s, r = fsm.next_state(s, tok), ref.next_state(r, tok)
            assert (s >= 0) == (r >= 0) and (s == FINISHED) == (r == FINISHED)
            if s == FINISHED:
                break
    return shared


@pytest.mark.parametrize("kind,spec", CASES, ids=[json.dumps(c[1])[:40] for c in CASES])
def test_shared_masks_equal_the_masks_computed_alone(kind, spec, vocab):
    fsm, ref = _pair(kind, spec, vocab)
    assert _compare_walks(fsm, ref, vocab) > 50       # the walks met states sharing a mask
    assert not any(isinstance(m, TwinMasks) for m in ref._memo.values())
    assert fsm.dfa.num_states < ref.dfa.num_states


def test_shared_masks_with_llama3_tokens():
    """Llama-3's longest token has 128 bytes: counts are far between 129 and the bound less 128."""
    bpe = Vocabulary.from_tokenizer(hf_tokenizer("llama-bpe"))
    fsm, ref = _pair("schema", {"type": "string", "minLength": 10, "maxLength": 800}, bpe)
    assert _compare_walks(fsm, ref, bpe, seeds=2, steps=500) > 50


def test_a_shared_state_gives_every_transition_of_its_own(vocab):
    fsm, ref = _pair("schema", {"type": "string", "maxLength": 600}, vocab)
    g, h = Guide(fsm), Guide(ref)
    word = vocab.token_bytes.index(b"hello")
    for tok in [vocab.token_bytes.index(b'"')] + [word] * 40:
        g.advance(tok)
        h.advance(tok)
    assert isinstance(fsm.masks(g.state), TwinMasks)
    ids, nxt = fsm.transitions(g.state)
    ref_ids, ref_nxt = ref.transitions(h.state)
    assert np.array_equal(ids, ref_ids)
    for i in range(0, len(ids), max(1, len(ids) // 50)):
        assert fsm.next_state(g.state, int(ids[i])) == nxt[i]
        assert np.array_equal(fsm.bitmask(int(nxt[i])), ref.bitmask(int(ref_nxt[i])))


@pytest.mark.default_threshold
def test_a_long_string_walks_the_sampled_token_only(vocab):
    """Without sharing, each new count walked the whole vocabulary and memoized a mask."""
    fsm, ref = _pair("schema", {"type": "string", "maxLength": 100_000}, vocab)
    word = vocab.token_bytes.index(b"hello")
    for f in (fsm, ref):
        s = f.next_state(f.initial, vocab.token_bytes.index(b'"'))
        for _ in range(600):
            f.bitmask(s)
            s = f.next_state(s, word)
    walked = [sum(not isinstance(m, TwinMasks) for m in f._memo.values()) for f in (fsm, ref)]
    # masks computed by a vocabulary walk: until the DFA has 2048 states (about 50 tokens), then a few
    assert walked[0] < 100 and walked[1] > 600
    assert fsm.dfa.num_states < ref.dfa.num_states and fsm.held_bytes < 0.8 * ref.held_bytes


def test_bounds_are_kept_exactly(vocab):
    """At the bound the string must close, as without sharing."""
    fsm, ref = _pair("schema", {"type": "string", "minLength": 100, "maxLength": 300}, vocab)
    a = vocab.token_bytes.index(b"a")
    quote = vocab.token_bytes.index(b'"')
    for f in (fsm, ref):
        s = f.next_state(f.initial, quote)
        for i in range(300):
            assert (f.next_state(s, quote) >= 0) == (i >= 100)     # too short below 100
            s = f.next_state(s, a)
        assert f.next_state(s, a) < 0                # too long
        assert f.is_accepting(f.next_state(s, quote))
    assert any(isinstance(m, TwinMasks) for m in fsm._memo.values())


def test_any_order_objects_share_too(vocab):
    """An `AnyOrder`'s frame (the set of members taken) is kept as it is, the counts above and
    below it shared; members in any order, one a long string."""
    spec = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 400}, "b": {"type": "integer"},
                                             "c": {"type": "array", "items": {"type": "string", "maxLength": 300}}},
            "required": ["a"]}
    fsm, ref = _pair("schema", spec, vocab, any_order=True)
    text = '{"c": ["' + "hello " * 40 + '", "x"], "a": "' + "hello " * 60 + '", "b": 7}'
    ids = hf_tokenizer("llama-spm").encode(text, add_special_tokens=False)
    s, r = fsm.initial, ref.initial
    shared = 0
    for tok in ids:
        assert np.array_equal(fsm.bitmask(s), ref.bitmask(r))
        assert _configurations(fsm, s) == _configurations(ref, r)
        shared += isinstance(fsm.masks(s), TwinMasks)
        s, r = fsm.next_state(s, tok), ref.next_state(r, tok)
        assert s >= 0 and r >= 0
    assert fsm.is_accepting(s) and ref.is_accepting(r)
    assert shared > 50 and fsm._twins.usable
    assert fsm.dfa.num_states < ref.dfa.num_states


def test_sets_of_members_taken_build_no_twins(vocab):
    """An `AnyOrder`'s set frame holds a bit per member taken, past a token's length (28 bytes in
    llama-spm) once member 5 is: not a count, so no twins are built for it, while a string's
    count past it builds them."""
    props = {f"k{i}": {"type": "integer"} for i in range(12)}
    props["s"] = {"type": "string", "maxLength": 400}
    fsm, ref = _pair("schema", {"type": "object", "properties": props}, vocab, any_order=True)
    tok = hf_tokenizer("llama-spm")

    def walk(text: str) -> None:
        s, r = fsm.initial, ref.initial
        for t in tok.encode(text, add_special_tokens=False):
            assert np.array_equal(fsm.bitmask(s), ref.bitmask(r))
            s, r = fsm.next_state(s, t), ref.next_state(r, t)
            assert s >= 0 and r >= 0
        assert fsm.is_accepting(s)

    members = ", ".join(f'"k{i}": {i}' for i in (11, 9, 7, 5, 6, 10))
    walk("{" + members + ', "s": "short"}')
    sets = -2 - fsm.dfa._stk_ret[: int(fsm.dfa._counts[2])]
    assert (sets > 28).any()                     # a set frame that looks like a far count
    assert fsm._twins is None
    walk("{" + members + ', "s": "' + "hello " * 40 + '"}')
    assert fsm._twins is not None and fsm._twins.usable


def test_twins_have_one_mask_key(vocab):
    """Caches of device masks per state (`mask_key`) keep one entry for a class of twins."""
    fsm, _ = _pair("schema", {"type": "string", "maxLength": 5000}, vocab)
    word = vocab.token_bytes.index(b"hello")
    s = fsm.next_state(fsm.initial, vocab.token_bytes.index(b'"'))
    states = []
    for _ in range(200):
        states.append(s)
        s = fsm.next_state(s, word)
    keys = {fsm.mask_key(q) for q in states}
    assert len(set(states)) == 200 and len(keys) < 10      # (counts under 28 are not far: llama-spm)
    for q in states:
        assert np.array_equal(fsm.bitmask(q), fsm.bitmask(fsm.mask_key(q)))
    assert fsm.mask_key(FINISHED) == FINISHED and fsm.mask_key(fsm.initial) == fsm.initial


def test_a_long_text_stays_well_within_the_state_budget():
    """20,000 characters under `maxLength: 100000` (Llama-3's vocabulary): without shared masks
    and moved counts this passed the default budget of 100,000 DFA states at about 9,000."""
    import jsonschema

    from constrained.compile import compile_json_schema

    tok = hf_tokenizer("llama-bpe")
    bpe = Vocabulary.from_tokenizer(tok)
    schema = {"type": "string", "maxLength": 100_000}
    fsm = compile_json_schema(schema, bpe)
    text = ("Structured output, token by token: " * 600)[:20_000]
    ids = tok.encode(json.dumps(text), add_special_tokens=False)
    g = Guide(fsm)
    buf = np.zeros((bpe.size + 31) // 32, dtype=np.int32)
    for t in ids:
        g.fill_bitmask(buf)
        assert (int(buf[t >> 5]) >> (t & 31)) & 1
        g.advance(t)
    assert fsm.is_accepting(g.state)
    assert fsm.dfa.num_states < 15_000
    jsonschema.validate(json.loads(bpe.decode(ids)), schema)


def test_forced_tokens_of_a_twin_are_its_own(vocab):
    """Inside `(abcdefgh){0,3000}` each letter forces the next ones up to `h`; a twin's forced
    tokens come from its twin's forced bytes (no row of its own is made)."""
    fsm, ref = _pair("regex", "(abcdefgh){0,3000}(xyz){2}", vocab)
    s, r = fsm.initial, ref.initial
    shared = 0
    for piece in [b"ab", b"cd", b"ef", b"gh"] * 100 + [b"a"]:
        tok = vocab.token_bytes.index(piece)
        s, r = fsm.next_state(s, tok), ref.next_state(r, tok)
        assert fsm.forced_tokens(s) == ref.forced_tokens(r)
        assert np.array_equal(fsm.bitmask(s), ref.bitmask(r))
        shared += isinstance(fsm.masks(s), TwinMasks)
    assert shared > 250                            # (counts up to 28 are not far: llama-spm)
    assert vocab.decode(fsm.forced_tokens(s)) == b"bcdefgh"


def test_an_fsm_with_twins_is_freed(vocab):
    """A `TwinMasks` holds no reference to its FSM: untracked by the cyclic GC, a cycle through it
    would keep every dropped FSM (its masks, its DFA) alive."""
    import gc
    import weakref

    fsm, _ = _pair("schema", {"type": "string", "maxLength": 600}, vocab)
    word = vocab.token_bytes.index(b"hello")
    s = fsm.next_state(fsm.initial, vocab.token_bytes.index(b'"'))
    for _ in range(40):
        fsm.bitmask(s)
        s = fsm.next_state(s, word)
    assert any(isinstance(m, TwinMasks) for m in fsm._memo.values())
    ref = weakref.ref(fsm)
    del fsm
    gc.collect()
    assert ref() is None


def _inside_string(fsm: TokenFSM, chars: int) -> int:
    """The state after an opening quote and `chars` characters of text, token by token (llama-spm),
    each state's masks computed (which builds the twins once a count passes 28)."""
    s = fsm.initial
    for t in hf_tokenizer("llama-spm").encode('"' + ("hello " * (chars // 6 + 1))[:chars], add_special_tokens=False):
        s = fsm.next_state(s, t)
        fsm.masks(s)
    return s


def test_min_bytes_is_the_count_left_to_the_exit_bound(vocab):
    """`CounterTwins.min_bytes`: every completion of a string under ``minLength: 600`` with
    `c` characters read reads at least 600 - c more; a count past the bound needs none."""
    fsm, _ = _pair("schema", {"type": "string", "minLength": 600, "maxLength": 5000}, vocab)
    states = {n: _inside_string(fsm, n) for n in (40, 300, 700)}
    assert {n: fsm._twins.min_bytes(s) for n, s in states.items()} == {40: 560, 300: 300, 700: 0}


def test_the_planner_goes_straight_under_a_large_min_length(vocab):
    """From a count far below a large ``minLength``, the budget planner's search goes depth first:
    the states it makes are those of the rows along the bytes left (9 a byte in a string here; a
    breadth-first search made 10,000 more before it), and the completion it plans is valid from the state."""
    from constrained.budget import BREADTH, completions

    fsm, _ = _pair("schema", {"type": "string", "minLength": 2000}, vocab)
    s = _inside_string(fsm, 400)
    before = fsm.dfa.num_states
    plan = completions(fsm)
    w = plan.shortest(s)
    assert w is not None and len(w) >= 1600
    assert fsm.dfa.is_accepting(fsm.dfa.walk(s, w))
    assert fsm.dfa.num_states - before <= 1600 * 10 < BREADTH + 1600 * 9
    assert plan.tokens_needed(s) is not None


def test_the_planner_does_not_search_for_what_it_cannot_reach(vocab):
    """Under ``minLength: 50000`` a completion is past what a search of `MAX_SEARCH` states can reach
    (9 states a byte): the planner says it has none (the row runs unsteered) without making them."""
    from constrained.budget import completions

    fsm, _ = _pair("schema", {"type": "string", "minLength": 50_000}, vocab)
    s = _inside_string(fsm, 400)
    before = fsm.dfa.num_states
    assert completions(fsm).shortest(s) is None
    assert fsm.dfa.num_states - before < 100         # (the rows along 8 bytes it probes)
