"""End-to-end constrained generation on tiny random models with real vocabularies.

The models' weights are random, so outputs are valid but meaningless and
often long: schemas here are mostly bounded, whitespace is compact, and a
sample may legitimately stop at `max_tokens` — but then it must say so
(status "max_tokens", value None), and a clear majority must complete.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections import Counter

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from constrained.errors import UnsupportedSchemaError
from constrained.generate import Generation, GenerationRequest, agenerate, generate, generate_batch, model_vocabulary
from constrained.sampling import masked_probs, sample_masked
from tests.schema_corpus import BY_NAME
from tests.tiny_lms import async_lm

# Schemas from the shared corpus (varied keywords), plus two of our own.
SCHEMA_NAMES = [
    "boolean", "null", "int_range", "int_multiple_3_bounded", "number_cents_double", "type_list", "enum_strings",
    "enum_mixed", "const_object", "string_length", "pattern_anchored", "format_date", "format_uuid",
    "format_ipv4", "object_closed", "object_counts", "array_items", "array_prefix", "draft7_tuple",
    "anyOf_types", "oneOf_discriminated", "allOf_merge", "ref_defs", "not_enum", "tool_call", "property_names",
]
EXTRA_SCHEMAS = [
    {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
     "required": ["ok", "n"], "additionalProperties": False},
]
SCHEMAS = [BY_NAME[n]["schema"] for n in SCHEMA_NAMES] + EXTRA_SCHEMAS
REGEXES = [
    r"(a|b|c)", r"[0-9]{3}-[0-9]{4}", r"(yes|no|maybe)", r"[A-Z][a-z]{1,8}", r"-?(0|[1-9][0-9]{0,5})(\.[0-9]{1,3})?",
    r"\d{4}-\d{2}-\d{2}", r"#[0-9a-fA-F]{6}", r"(ab|cd){2,4}", r"[a-z]+@[a-z]+\.(com|org)", r"é[ñü]{1,3}",
    r"(\+|-)?[0-9]{1,4}", r"[a-f0-9]{8}",
]
CASES = [("llama-spm", "mlx"), ("llama-bpe", "mlx"), ("qwen2", "mlx"),
         ("llama-spm", "hf"), ("llama-bpe", "hf"), ("qwen2", "hf")]
FORMATS = jsonschema.FormatChecker()


def _requests(seed: int) -> list[GenerationRequest]:
    reqs = [GenerationRequest(f"Item {i}:", schema=s, max_tokens=32, seed=seed + i, options={"whitespace": "compact"})
            for i, s in enumerate(SCHEMAS)]
    reqs += [GenerationRequest(f"Pattern {i}:", regex=r, max_tokens=16, seed=seed + 100 + i)
             for i, r in enumerate(REGEXES)]
    return reqs


def _check(req: GenerationRequest, gen: Generation) -> None:
    """A complete sample validates; a cut one says so and has no value."""
    assert gen.status in ("complete", "max_tokens"), f"{req.schema or req.regex}: {gen.error}"
    if gen.status == "max_tokens":
        assert gen.value is None and len(gen.token_ids) == req.max_tokens
        return
    if req.regex is not None:
        assert re.fullmatch(req.regex, gen.text), (req.regex, gen.text)
        assert gen.value == gen.text
    else:
        assert gen.value == json.loads(gen.text)
        cls = jsonschema.validators.validator_for(req.schema)
        cls(req.schema, format_checker=FORMATS).validate(gen.value)


@functools.cache
def _corpus_results(vocab_name: str, backend: str) -> list[list[Generation]]:
    return generate_batch(async_lm(vocab_name, backend), _requests(seed=7))


@pytest.mark.parametrize("vocab_name,backend", CASES, ids=[f"{b}-{v}" for v, b in CASES])
def test_corpus_outputs_validate_or_report_max_tokens(vocab_name: str, backend: str) -> None:
    reqs = _requests(seed=7)
    results = _corpus_results(vocab_name, backend)
    statuses: Counter[str] = Counter()
    for req, gens in zip(reqs, results):
        assert len(gens) == 1
        _check(req, gens[0])
        statuses[gens[0].status] += 1
    # Random weights ramble inside strings and numbers, but bounded constraints mostly finish.
    assert statuses["complete"] >= 0.7 * len(reqs), statuses


@pytest.mark.parametrize("vocab_name", ["llama-spm", "llama-bpe", "qwen2"])
def test_mlx_and_torch_sample_the_same_outputs(vocab_name: str) -> None:
    """Same weights and seeds: the two backends' logprobs agree, so samples coincide (but for rare near-ties)."""
    mlx, hf = _corpus_results(vocab_name, "mlx"), _corpus_results(vocab_name, "hf")
    same = sum(a[0].text == b[0].text for a, b in zip(mlx, hf))
    assert same >= 0.9 * len(mlx), f"{same}/{len(mlx)} identical"


# ----------------------------------------------------------------------------- sampling statistics


def _chi2(observed: np.ndarray, expected_p: np.ndarray) -> float:
    expected = expected_p * observed.sum()
    return float(((observed - expected) ** 2 / expected).sum())


# Upper 0.1% points of the chi-square distribution by degrees of freedom.
CHI2_999 = {2: 13.82, 4: 18.47, 5: 20.52}


def test_sample_masked_draws_from_the_renormalized_distribution() -> None:
    rng = np.random.default_rng(1234)
    logprobs = np.log(rng.dirichlet(np.ones(50))).astype(np.float32)
    allowed = np.array([3, 7, 8, 20, 41, 49])
    for temperature, top_p in [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8)]:
        p = masked_probs(logprobs, allowed, temperature, top_p)
        draws = [sample_masked(logprobs, allowed, temperature, top_p, rng) for _ in range(20000)]
        counts = Counter(draws)
        assert set(counts) <= {int(a) for a in allowed[p > 0]}  # top-p drops the tail, never adds
        keep = p > 0
        observed = np.array([counts[int(a)] for a in allowed[keep]], dtype=float)
        stat = _chi2(observed, p[keep] / p[keep].sum())
        assert stat < CHI2_999[int(keep.sum()) - 1], (temperature, top_p, stat)
    # The test has power: the same draws are far from the un-renormalized-by-temperature distribution.
    raw = np.exp(logprobs[allowed].astype(np.float64))
    draws = [sample_masked(logprobs, allowed, 0.5, 1.0, rng) for _ in range(20000)]
    observed = np.array([Counter(draws)[int(a)] for a in allowed], dtype=float)
    assert _chi2(observed, raw / raw.sum()) > 100


def test_first_token_of_a_regex_follows_the_model_renormalized() -> None:
    lm = async_lm("llama-spm", "mlx")
    vocab = model_vocabulary(lm)
    prompt = lm.tokenizer.encode("Choose a letter:")
    gens = generate(lm, prompt, regex="(a|b|c)", n=3000, seed=5)
    assert all(g.status == "complete" for g in gens)
    texts = Counter(g.text for g in gens)
    # Expected: the model's next-token probabilities of every token spelling a, b or c, renormalized.
    lp = lm.next_token_logprobs_sync(prompt).astype(np.float64)
    mass = {c: sum(np.exp(lp[i]) for i, b in enumerate(vocab.token_bytes) if b == c.encode()) for c in "abc"}
    expected = np.array([mass[c] for c in "abc"])
    stat = _chi2(np.array([texts[c] for c in "abc"], dtype=float), expected / expected.sum())
    assert stat < CHI2_999[2], (texts, expected / expected.sum())


# ----------------------------------------------------------------------------- behaviour


def test_seeds_reproduce_and_differ() -> None:
    lm = async_lm("llama-spm", "mlx")
    a = [g.text for g in generate(lm, "Digits:", regex="[0-9]{6}", n=4, seed=3)]
    b = [g.text for g in generate(lm, "Digits:", regex="[0-9]{6}", n=4, seed=3)]
    c = [g.text for g in generate(lm, "Digits:", regex="[0-9]{6}", n=4, seed=4)]
    assert a == b and a != c and len(set(a)) > 1


def test_samples_share_the_prompt_prefill() -> None:
    lm = async_lm("llama-spm", "mlx")
    prompt = lm.tokenizer.encode("A long prompt that every sample shares: " + "lorem ipsum dolor sit amet " * 6)
    before = lm.stats["model_tokens"]
    gens = generate(lm, prompt, regex="[a-z]{5}", n=4, seed=0, max_tokens=5)
    ran = lm.stats["model_tokens"] - before
    generated = sum(len(g.token_ids) for g in gens)
    assert ran <= len(prompt) + generated < 4 * len(prompt)


def test_forced_tokens_skip_sampling_and_share_model_calls() -> None:
    lm = async_lm("llama-bpe", "mlx")
    schema = {"type": "object", "properties": {"a_rather_long_property_name": {"type": "boolean"},
                                               "another_long_property_name": {"enum": ["one", "two"]}},
              "required": ["a_rather_long_property_name", "another_long_property_name"], "additionalProperties": False}
    calls = lm.stats["forward_calls"]
    [gen] = generate(lm, "Fill in:", schema=schema, seed=1, whitespace="compact")
    calls = lm.stats["forward_calls"] - calls
    assert gen.status == "complete" and set(gen.value) == set(schema["required"])
    assert gen.forced_tokens > len(gen.token_ids) / 2
    assert calls <= len(gen.token_ids) - gen.forced_tokens + 1  # one call per sampled token, at most


def test_truncated_output_is_never_reported_valid() -> None:
    lm = async_lm("qwen2", "mlx")
    schema = BY_NAME["tool_call"]["schema"]
    gens = generate(lm, "Record:", schema=schema, max_tokens=3, n=3, seed=0, budget_aware=False)
    assert all(g.status == "max_tokens" and g.value is None and len(g.token_ids) == 3 for g in gens)
    with pytest.raises(ValueError, match="below the shortest complete output"):   # steering on: refused up front
        generate(lm, "Record:", schema=schema, max_tokens=3, n=3, seed=0)


def test_pydantic_schema_returns_model_instances() -> None:
    class Pet(BaseModel):
        kind: str = Field(pattern="^(cat|dog)$")
        age: int = Field(ge=0, le=20)

    lm = async_lm("llama-spm", "hf")
    gens = generate(lm, "A pet:", schema=Pet, n=3, seed=2, max_tokens=40, whitespace="compact")
    complete = [g for g in gens if g.status == "complete"]
    assert complete and all(isinstance(g.value, Pet) for g in complete)
    # (pydantic drops the extra members a schema without additionalProperties: false allows)
    assert all(g.to_dict()["value"] == {k: v for k, v in json.loads(g.text).items() if k in Pet.model_fields}
               for g in complete)


def test_one_bad_request_does_not_affect_the_others() -> None:
    lm = async_lm("llama-spm", "mlx")
    reqs = [
        GenerationRequest("Good:", regex="(x|y)", seed=0),
        GenerationRequest("Bad schema:", schema={"type": "array", "uniqueItems": True}),
        GenerationRequest([1, 10**9], regex="z"),
        GenerationRequest("Also good:", schema={"type": "boolean"}, n=2, seed=0),
    ]
    seen: list[tuple[int, list[Generation]]] = []
    res = generate_batch(lm, reqs, on_result=lambda i, samples: seen.append((i, samples)))
    assert [len(r) for r in res] == [1, 1, 1, 2]
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3]                 # each request once, as it finishes
    assert all([g.to_dict() for g in samples] == [g.to_dict() for g in res[i]] for i, samples in seen)
    assert {i for i, _ in seen[:2]} == {1, 2}                          # the failed ones at once, before decoding
    assert res[0][0].status == "complete" and res[0][0].text in ("x", "y")
    assert res[1][0].status == "error" and "uniqueItems" in res[1][0].error
    assert res[2][0].status == "error" and "1000000000" in res[2][0].error
    assert [g.value in (True, False) and g.status == "complete" for g in res[3]] == [True, True]


def test_backend_error_on_one_row_marks_only_that_row(monkeypatch: pytest.MonkeyPatch) -> None:
    lm = async_lm("llama-spm", "mlx")
    poison = lm.tokenizer.encode("POISON", add_special_tokens=False)[-1]
    real = lm._forward

    def flaky(jobs):  # the model call itself (the live loop's joins and the trie path both make it)
        if any(poison in j.tokens for j in jobs):
            raise RuntimeError("device lost")
        return real(jobs)

    monkeypatch.setattr(lm, "_forward", flaky)
    res = generate_batch(lm, [GenerationRequest("fine", regex="[ab]{3}", seed=0),
                              GenerationRequest("POISON", regex="[ab]{3}", seed=0)])
    assert res[0][0].status == "complete" and re.fullmatch("[ab]{3}", res[0][0].text)
    assert res[1][0].status == "error" and "device lost" in res[1][0].error


def test_generate_raises_on_bad_input() -> None:
    lm = async_lm("llama-spm", "mlx")
    with pytest.raises(UnsupportedSchemaError, match="uniqueItems"):
        generate(lm, "x", schema={"type": "array", "uniqueItems": True})
    with pytest.raises(ValueError, match="top_p"):
        generate(lm, "x", regex="a", top_p=0)
    with pytest.raises(ValueError, match="chat template"):
        generate(lm, "x", regex="a", chat=True)
    with pytest.raises(ValueError, match="either `schema` or `regex`"):
        generate(lm, "x", regex="a", schema={"type": "null"})


def test_unconstrained_and_greedy() -> None:
    lm = async_lm("llama-spm", "mlx")
    free = generate(lm, "Once upon a time", max_tokens=6, seed=0)[0]
    assert free.status in ("complete", "max_tokens") and len(free.token_ids) <= 6
    greedy = {g.text for g in generate(lm, "Pick:", regex="(red|green|blue)", temperature=0, n=3)}
    assert len(greedy) == 1


def test_agenerate_runs_concurrently_on_one_backend() -> None:
    lm = async_lm("qwen2", "mlx")

    async def both() -> list[list[Generation]]:
        return await asyncio.gather(agenerate(lm, "A:", regex="[0-9]{2}", seed=0),
                                    agenerate(lm, "B:", schema={"enum": [1, 2, 3]}, seed=0))

    a, b = asyncio.run(both())
    assert re.fullmatch("[0-9]{2}", a[0].text) and b[0].value in (1, 2, 3)


def test_a_state_budget_error_ends_only_its_own_request() -> None:
    """`max_states` reaches the compiler through `generate`; a request that outgrows it ends with
    status "error" naming the path, and the other requests of the batch are unaffected."""
    lm = async_lm("llama-spm", "hf")
    long_text = {"type": "object", "properties": {"note": {"type": "string", "minLength": 1000}},
                 "required": ["note"], "additionalProperties": False}
    reqs = [GenerationRequest("Note:", schema=long_text, max_tokens=60, seed=0, options={"max_states": 20}),
            GenerationRequest("Digits:", regex="[0-9]{1,3}", max_tokens=8, seed=0)]
    bad, good = generate_batch(lm, reqs)
    assert bad[0].status == "error" and "StateBudgetError" in bad[0].error and "growing at $" in bad[0].error
    assert good[0].status == "max_tokens" or (good[0].status == "complete" and re.fullmatch("[0-9]{1,3}", good[0].text))
    gens = generate(lm, "Note:", schema=long_text, max_tokens=10, seed=0, max_states=20)
    assert gens[0].status == "error" and "more than 20 states" in gens[0].error


_GOOD = [GenerationRequest("Pick:", regex="(red|green|blue)", seed=1, n=2),
         GenerationRequest("Number:", schema={"type": "integer", "minimum": 0, "maximum": 999}, seed=2, max_tokens=12),
         GenerationRequest("Flag:", schema={"type": "boolean"}, seed=3),
         GenerationRequest("Code:", regex="[A-F0-9]{4}", seed=4, max_tokens=8)]
_BAD = [GenerationRequest("Bad:", schema={"type": "array", "uniqueItems": True}),
        GenerationRequest("Empty:", schema={"type": "integer", "minimum": 3, "maximum": 1}),
        GenerationRequest("Regex:", regex="a(?<=b)"),
        GenerationRequest("Keys:", schema={"enum": []}),
        GenerationRequest([1, 10**9], regex="z")]


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(range(len(_GOOD))).map(lambda i: ("good", i)),
                          st.sampled_from(range(len(_BAD))).map(lambda i: ("bad", i))), min_size=2, max_size=7))
def test_bad_requests_never_change_the_good_ones(picks) -> None:
    """A good request's samples are the same in any batch, with any bad requests beside it, as alone."""
    lm = async_lm("llama-spm", "mlx")
    batch = [_GOOD[i] if kind == "good" else _BAD[i] for kind, i in picks]
    results = generate_batch(lm, batch)
    for (kind, i), got in zip(picks, results):
        if kind == "bad":
            assert all(g.status == "error" and g.error for g in got)
        else:
            alone = _alone(i)
            assert [(g.text, g.status) for g in got] == [(g.text, g.status) for g in alone]


@functools.cache
def _alone(i: int) -> list[Generation]:
    return generate_batch(async_lm("llama-spm", "mlx"), [_GOOD[i]])[0]
