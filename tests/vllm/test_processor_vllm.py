"""`ConstrainedLogitsProcessor` registered in a real `vllm.LLM`, next to vLLM's own structured outputs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

jsonschema = pytest.importorskip("jsonschema")

from tests.vllm.conftest import ENGINE_OPTS  # noqa: E402

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
COLORS = {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 2, "maxItems": 3}
# vLLM 0.32's "auto" structured-output backend sends this to xgrammar 0.2.8, which drops `minLength` next to
# `enum` ("no" passes). vLLM does catch the better-known gap, `minLength` next to `pattern`: it falls back to
# llguidance there, so that case is no longer wrong through vLLM.
ANSWER = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["no", "yes", "maybe"], "minLength": 3}},
          "required": ["answer"], "additionalProperties": False}


@pytest.fixture(scope="module")
def llm(vllm_model_dir: Path) -> Iterator[Any]:
    from vllm import LLM

    from constrained.vllm_processor import ConstrainedLogitsProcessor

    engine = LLM(str(vllm_model_dir), logits_processors=[ConstrainedLogitsProcessor], **ENGINE_OPTS)
    yield engine
    engine.llm_engine.engine_core.shutdown()


def _params(constraint: Any, seed: int, max_tokens: int = 80, **kw: Any) -> Any:
    from vllm import SamplingParams

    extra = None if constraint is None else {"constrained": constraint}
    return SamplingParams(max_tokens=max_tokens, seed=seed, extra_args=extra, **kw)


def _valid(schema: Any, text: str) -> bool:
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def test_mixed_batch_in_one_generate_call(llm: Any) -> None:
    constraints = [{"json_schema": PERSON}, {"json_schema": COLORS}, {"regex": r"[0-9]{2}:[0-9]{2}"},
                   json.dumps({"json_schema": PERSON, "whitespace": "compact"}), None]   # a JSON string, as from the server
    params = [_params(c, seed=i) for i, c in enumerate(constraints * 2)]
    outs = llm.generate(["Data:"] * len(params), params, use_tqdm=False)
    for i, out in enumerate(outs):
        text, kind = out.outputs[0].text, i % len(constraints)
        if kind in (0, 3):
            assert _valid(PERSON, text), text
            assert kind == 0 or not re.search(r"\s", re.sub(r'"(\\.|[^"\\])*"', '""', text)), text  # compact
        elif kind == 1:
            assert _valid(COLORS, text), text
        elif kind == 2:
            assert re.fullmatch(r"[0-9]{2}:[0-9]{2}", text), text
        else:
            assert out.outputs[0].finish_reason == "length"      # free text runs to max_tokens


def test_bad_constraint_is_refused_at_admission(llm: Any) -> None:
    from vllm.exceptions import VLLMValidationError   # what vLLM turns `validate_params`' ValueError into (HTTP 400)

    for constraint, words in [({"json_schema": {"type": "nope"}}, "`type`"), ({"regex": "("}, "regex"),
                              ({"json_schema": PERSON, "bogus": 1}, "bogus"), ({"schema": PERSON}, "exactly one of")]:
        with pytest.raises(VLLMValidationError, match=re.escape(words)):
            llm.generate(["x"], _params(constraint, seed=0), use_tqdm=False)
    assert _valid(PERSON, llm.generate(["y"], _params({"json_schema": PERSON}, seed=1), use_tqdm=False)[0].outputs[0].text)


def test_failure_inside_the_engine_ends_that_request_only(llm: Any) -> None:
    # admitted (the automaton is lazy), then it outgrows max_states=3 in the engine core while decoding
    doomed = {"regex": "[a-z]{0,40}x", "max_states": 3}
    params = [_params({"json_schema": PERSON}, seed=2), _params(doomed, seed=3), _params({"regex": "[ab]{4}"}, seed=4)]
    outs = llm.generate(["z"] * 3, params, use_tqdm=False)
    assert _valid(PERSON, outs[0].outputs[0].text)
    assert re.fullmatch("[ab]{4}", outs[2].outputs[0].text)
    failed = outs[1].outputs[0]
    assert failed.finish_reason == "stop" and not re.fullmatch("[a-z]{0,40}x", failed.text)
    assert _valid(PERSON, llm.generate(["w"], params[0], use_tqdm=False)[0].outputs[0].text)   # the engine goes on


def test_valid_where_xgrammar_is_not(llm: Any) -> None:
    """Same engine, same seeds, the token "no" pushed up by `logit_bias`: vLLM's built-in backend writes
    ``{"answer": "no"}``, which `minLength: 3` forbids; ours never does."""
    from vllm.sampling_params import StructuredOutputsParams

    bias = {llm.get_tokenizer().convert_tokens_to_ids("no"): 20.0}
    n = 8
    ours = llm.generate(["Answer:"] * n, [_params({"json_schema": ANSWER}, seed=i, logit_bias=bias) for i in range(n)],
                        use_tqdm=False)
    builtin = [_params(None, seed=i, logit_bias=bias, structured_outputs=StructuredOutputsParams(json=ANSWER)) for i in range(n)]
    theirs = llm.generate(["Answer:"] * n, builtin, use_tqdm=False)
    assert all(_valid(ANSWER, o.outputs[0].text) for o in ours)
    said_no = [o.outputs[0].text for o in theirs if _answer(o.outputs[0].text) == "no"]
    assert said_no, "vLLM's built-in backend kept minLength next to enum: update this test and the README"


def _answer(text: str) -> Any:
    try:
        return json.loads(text).get("answer")
    except ValueError:
        return None


def test_batched_apply_matches_per_row_masks(llm: Any) -> None:
    """The processor outside the engine loop: one `apply` over mixed rows equals each row's own mask."""
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from constrained.vllm_processor import ConstrainedLogitsProcessor

    proc = ConstrainedLogitsProcessor(llm.llm_engine.vllm_config, torch.device("cpu"), False)
    vocab = proc.vocabulary()
    outputs: list[list[int]] = [[], [], [], []]
    added = [(0, _params({"json_schema": PERSON}, seed=0), None, outputs[0]),
             (1, SamplingParams(max_tokens=5), None, outputs[1]),
             (2, SamplingParams(max_tokens=5, extra_args={"constrained": {"regex": 5}}), None, outputs[2]),  # skipped validation
             (3, _params({"regex": "[0-9]+"}, seed=0), None, outputs[3])]
    proc.update_state(BatchUpdate(batch_size=4, removed=[], added=added, moved=[]))
    person = added[0][1].extra_args["constrained"]
    from constrained.vllm_processor import parse_constraint

    fsm = parse_constraint({"constrained": person}).compile(vocab)
    outputs[0].extend(vocab_ids(vocab, '{"name'))                     # the row has produced some tokens
    logits = torch.randn(4, proc.vocab_size)
    masked = proc.apply(logits.clone())
    guide = fsm.guide()
    for t in outputs[0]:
        assert guide.advance(t)
    assert set(np.flatnonzero(torch.isfinite(masked[0]).numpy())) == set(guide.allowed_token_ids().tolist())
    assert torch.equal(masked[1], logits[1])                            # unconstrained: untouched
    assert np.flatnonzero(torch.isfinite(masked[2]).numpy()).tolist() == list(vocab.eos_token_ids)   # bad: EOS only
    digits = np.flatnonzero(torch.isfinite(masked[3]).numpy())
    assert len(digits) and all(vocab.token_bytes[t].strip(b"\xe2\x96\x81").isdigit() or t in vocab.eos_token_ids for t in digits)
    for row in (0, 3):                                                  # the per-request form vLLM would call
        fn = proc.req_info[row]
        assert torch.equal(fn(logits[row].clone()), masked[row])


def vocab_ids(vocab: Any, text: str) -> list[int]:
    """Token ids spelling `text` one byte-token at a time (every byte has a token in this vocabulary)."""
    table = {b: i for i, b in enumerate(vocab.token_bytes) if b is not None and len(b) == 1}
    return [table[bytes([c])] for c in text.encode()]


def test_model_runner_v2_interface(llm: Any) -> None:
    """vLLM's V2 runner (its CUDA default) loads only V2 processors; ours is both. V2 cannot run on this CPU,
    so its hooks are driven here with the runner's data layout: token buffer, prompt lengths, batch mapping."""
    import copy
    from types import SimpleNamespace

    import torch
    from vllm import SamplingParams
    from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as V2LogitsProcessor

    from constrained.vllm_processor import ConstrainedLogitsProcessor, parse_constraint

    assert issubclass(ConstrainedLogitsProcessor, V2LogitsProcessor)
    states = SimpleNamespace(device=torch.device("cpu"), max_num_reqs=4, vocab_size=32000,
                             all_token_ids=SimpleNamespace(gpu=torch.zeros(4, 64, dtype=torch.int32)),
                             prompt_len=SimpleNamespace(np=np.zeros(4, dtype=np.int32)))
    proc = ConstrainedLogitsProcessor(copy.copy(llm.llm_engine.vllm_config), states)
    person = _params({"json_schema": PERSON}, seed=0)
    assert proc.add_request(2, person) and not proc.add_request(0, SamplingParams(max_tokens=5))
    vocab = proc.vocabulary()
    guide = parse_constraint(person.extra_args).compile(vocab).guide()
    prompt, output = [1, 15043, 29901], vocab_ids(vocab, '{"na')
    for step in range(len(output) + 1):              # the request has produced `step` tokens so far
        seq = prompt + output[:step]
        states.all_token_ids.gpu[2, : len(seq) - 1] = torch.tensor(seq[:-1])   # the newest is not committed yet
        states.prompt_len.np[2] = len(prompt)
        ctx = SimpleNamespace(idx_mapping_np=np.array([0, 2]), seq_lens_upper_bound_np=np.array([9, len(seq)]),
                              input_ids=torch.tensor([5, seq[-1]]))
        logits = torch.randn(2, proc.vocab_size)
        masked = proc.apply(logits.clone(), ctx)
        if step:
            assert guide.advance(output[step - 1])
        assert torch.equal(masked[0], logits[0])
        assert set(np.flatnonzero(torch.isfinite(masked[1]).numpy())) == set(guide.allowed_token_ids().tolist())
    assert proc._slots[2].seen_ids == output


def test_registered_twice_one_copy_works(llm: Any) -> None:
    """The entry point and ``logits_processors=[...]`` both load the class: the second copy stays idle."""
    import copy

    import torch

    from constrained.vllm_processor import ConstrainedLogitsProcessor

    config = copy.copy(llm.llm_engine.vllm_config)
    first = ConstrainedLogitsProcessor(config, torch.device("cpu"), False)
    second = ConstrainedLogitsProcessor(config, torch.device("cpu"), False)
    person = _params({"json_schema": PERSON}, seed=0)
    assert not first.idle and first.new_req_logits_processor(person) is not None
    assert second.idle and second.new_req_logits_processor(person) is None
