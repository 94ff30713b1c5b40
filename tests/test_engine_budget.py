"""The budget as an engine-side processor applies it (vLLM): `TokenFSM.transitions`, `Completions.fitting`
and `restrict`, checked against the per-token `next_state` / `fits` our own loop uses.

A processor cannot draw a token again, so it masks beforehand the tokens
after which the output could not complete within `max_tokens`. The last test
plays such an engine with a sampler that picks uniformly among the allowed
tokens, whatever they open, and checks that every output still ends complete.
"""

from __future__ import annotations

import numpy as np
import pytest

from constrained.budget import completions
from constrained.compile import compile_json_schema, compile_regex
from constrained.token_fsm import FINISHED

CONSTRAINTS = {
    "weather call": {"type": "object", "properties": {
        "name": {"const": "get_weather"},
        "arguments": {"type": "object", "properties": {
            "location": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14}},
            "required": ["location", "unit"], "additionalProperties": False}},
        "required": ["name", "arguments"], "additionalProperties": False},
    "bounded strings": {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 12},
                        "minItems": 1, "maxItems": 3},
    "optional object": {"type": "object", "properties": {
        "id": {"type": "integer"},
        "extra": {"type": "object", "properties": {"a": {"type": "string", "minLength": 8}, "b": {"type": "boolean"}},
                  "required": ["a", "b"], "additionalProperties": False}},
        "required": ["id"], "additionalProperties": False},
    "regex": r"[a-z]{2,6}(-[0-9]{3}){1,3}",
}


def _fsm(vocab, name):
    c = CONSTRAINTS[name]
    return compile_regex(c, vocab, ascii=True) if isinstance(c, str) else compile_json_schema(c, vocab)


def _walk(fsm, rng, steps):
    """States met on a uniformly random walk over the allowed non-EOS tokens."""
    guide, states = fsm.guide(), []
    eos = set(fsm.vocab.eos_token_ids)
    for _ in range(steps):
        states.append(guide.state)
        ids = [t for t in fsm.allowed_token_ids(guide.state).tolist() if t not in eos]
        if not ids:
            break
        guide.advance(int(rng.choice(ids)))
    return states


@pytest.mark.parametrize("vocab_name", ["llama-spm", "gpt-2"])
@pytest.mark.parametrize("name", sorted(CONSTRAINTS))
def test_transitions_match_next_state(vocabulary, vocab_name, name):
    fsm = _fsm(vocabulary(vocab_name), name)
    eos = set(fsm.vocab.eos_token_ids)
    for state in _walk(fsm, np.random.default_rng(0), 12)[::3]:
        ids, nxt = fsm.transitions(state)
        assert set(ids.tolist()) == set(fsm.allowed_token_ids(state).tolist()) - eos
        assert np.all(np.diff(ids) > 0)
        for t, n in zip(ids.tolist()[::7], nxt.tolist()[::7]):
            assert fsm.next_state(state, t) == n
    assert len(fsm.transitions(FINISHED)[0]) == 0


@pytest.mark.parametrize("name", sorted(CONSTRAINTS))
def test_fitting_is_fits_for_every_token(vocabulary, name):
    fsm = _fsm(vocabulary("llama-spm"), name)
    budget = completions(fsm)
    for state in _walk(fsm, np.random.default_rng(1), 20)[::4]:
        need = budget.tokens_needed(state)
        for remaining in (need, need + 1, need + 4):
            allowed = fsm.allowed_token_ids(state).tolist()
            fit = {t for t in allowed if budget.fits(state, t, remaining) or t in fsm.vocab.eos_token_ids}
            got = budget.fitting(state, remaining)
            assert (set(allowed) if got is None else set(got.tolist())) == fit


@pytest.mark.parametrize("name", sorted(CONSTRAINTS))
def test_engine_that_samples_anything_allowed_ends_complete(vocabulary, name):
    fsm = _fsm(vocabulary("llama-spm"), name)
    budget = completions(fsm)
    fewest = budget.tokens_needed(fsm.initial)
    eos = set(fsm.vocab.eos_token_ids)
    for seed, slack in enumerate([0, 1, 3, 10, 30] * 2):
        rng, guide, max_tokens = np.random.default_rng(seed), fsm.guide(), fewest + slack
        for produced in range(max_tokens + 1):
            if guide.is_finished():
                break
            ids = budget.restrict(guide.state, max_tokens - produced)
            ids = fsm.allowed_token_ids(guide.state) if ids is None else ids
            assert produced < max_tokens or set(ids.tolist()) <= eos, "the budget ran out before the output completed"
            tok = int(rng.choice(ids))
            if tok in eos:
                break
            assert guide.advance(tok)
        assert guide.is_accepting(), (name, seed, slack)
