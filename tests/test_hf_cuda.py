"""`HFLM` with its model on a CUDA device: the inputs it feeds the model are made there, the decode
loop draws tokens there (`device_sampling`, on by default off the CPU) and the trie keeps the KV there.

Skipped without a CUDA device (CI has none); run where one is lent. The same
requests decode on the tiny float32 model on the CPU (host draws) and on the
GPU (device draws); both must end complete and valid, and give the same
tokens but where float rounding flips a near-tie.
"""

from __future__ import annotations

import copy
import json
import os
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import jsonschema  # noqa: E402

from backends.hf import HFLM  # noqa: E402
from constrained.generate import GenerationRequest, generate_batch  # noqa: E402
from constrained.processors import hf_logits_processor  # noqa: E402
from tests.tiny_lms import hf_model, hf_tokenizer  # noqa: E402

# (CONSTRAINED_TEST_DEVICE=cpu runs the same checks on the CPU, with device draws forced on)
DEVICE = os.environ.get("CONSTRAINED_TEST_DEVICE", "cuda")
pytestmark = [pytest.mark.hf,
              pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA device")]

VOCAB = "llama-bpe"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "tags": {"type": "array", "items": {"enum": ["a", "bb", "ccc"]}}},
          "required": ["name"]}
DIGITS = "[0-9]{2,12}"
# bounded everywhere, so that greedy decoding of a random model ends without a budget to steer it
BOUNDED = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["name", "unit"], "additionalProperties": False}


def _requests() -> list[GenerationRequest]:
    return [
        GenerationRequest("Fill in:", schema=SCHEMA, max_tokens=48, seed=1, n=3),
        GenerationRequest("Greedy:", schema=SCHEMA, max_tokens=40, temperature=0),
        GenerationRequest("Digits:", regex=DIGITS, max_tokens=14, seed=2, top_p=0.9),
        GenerationRequest("Free:", max_tokens=7, seed=4),
        GenerationRequest("Tight:", schema=SCHEMA, max_tokens=14, seed=9, n=4, temperature=1.5),
    ]


def _check(gens) -> None:
    """Every constrained row ended complete and matches its constraint."""
    for req, rows in zip(_requests(), gens):
        for g in rows:
            if req.schema is not None:
                assert g.status == "complete", (req.prompt, g.status, g.text)
                jsonschema.validate(json.loads(g.text), SCHEMA)
            elif req.regex is not None:
                assert g.status == "complete" and re.fullmatch(DIGITS, g.text), (g.status, g.text)


@pytest.fixture(scope="module")
def lms():
    cpu = HFLM(hf_model(VOCAB), hf_tokenizer(VOCAB))
    gpu = HFLM(copy.deepcopy(hf_model(VOCAB)).to(DEVICE), hf_tokenizer(VOCAB))
    gpu.ensure_loaded()
    default = gpu.device_sampling
    gpu.device_sampling = True      # (the default off the CPU, checked below)
    return cpu, gpu, default


def test_hflm_on_cuda_draws_there_and_decodes_as_on_the_cpu(lms) -> None:
    cpu, gpu, default = lms
    assert gpu.device.type == DEVICE and gpu.live_decoding and default == (DEVICE != "cpu")
    want = generate_batch(cpu, _requests())
    got = generate_batch(gpu, _requests())
    _check(want)
    _check(got)
    pairs = list(zip(sum(want, []), sum(got, [])))
    same = sum(a.token_ids == b.token_ids for a, b in pairs)
    assert same >= len(pairs) - 2, [(a.text, b.text) for a, b in pairs if a.token_ids != b.token_ids]
    assert gpu.stats["live_draw_ns"] > 0


def test_hflm_on_cuda_keeps_the_kv_there_and_reuses_it(lms) -> None:
    _, gpu, _ = lms
    req = [GenerationRequest("A shared prompt, long enough to be worth caching:", schema=SCHEMA, max_tokens=32,
                             seed=5, n=2)]
    first = generate_batch(gpu, req)
    chain = gpu.trie.kv_chain(gpu.tokenizer.encode(req[0].prompt))
    assert chain and all(k.device.type == DEVICE for seg in chain for k in seg.handle.keys)
    before = gpu.stats["model_tokens"]
    again = generate_batch(gpu, req)
    assert [g.token_ids for g in again[0]] == [g.token_ids for g in first[0]]
    # the prompt came from the trie: only generated tokens ran again
    assert gpu.stats["model_tokens"] - before <= sum(len(g.token_ids) + 1 for g in again[0])


def test_hf_generate_with_our_processor_on_cuda() -> None:
    model = copy.deepcopy(hf_model(VOCAB)).to(DEVICE)
    tok = hf_tokenizer(VOCAB)
    ids = torch.tensor([tok.encode("A name as JSON:")] * 2, device=DEVICE)
    proc = hf_logits_processor(BOUNDED, tok)
    from transformers import LogitsProcessorList

    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=96, do_sample=False,
                         logits_processor=LogitsProcessorList([proc]), eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.eos_token_id)
    for row in out[:, ids.shape[1]:].tolist():
        assert tok.eos_token_id in row, tok.decode(row)           # ended, within the tokens given
        text = tok.decode(row[: row.index(tok.eos_token_id)])
        jsonschema.validate(json.loads(text), BOUNDED)
