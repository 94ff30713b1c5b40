"""The torch mask forms of `constrained.index_masks` mask alike: index ids (the CPU's form) and boolean
rows (an accelerator's, `TorchRowMask`), on real FSM states of a JSON schema over a real vocabulary."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from constrained.compile import compile_json_schema  # noqa: E402
from constrained.index_masks import (TorchIndexMask, TorchRowMask, apply_torch_masks,  # noqa: E402
                                     apply_torch_masks_, mask_cache, torch_mask_form)

pytestmark = pytest.mark.hf

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}, "required": ["name"]}


@pytest.fixture(scope="module")
def fsm(vocabulary):
    return compile_json_schema(SCHEMA, vocabulary("llama-bpe"))


def _states(fsm) -> list[int]:
    """The start (few ids allowed), inside a string (most allowed), after the string (few)."""
    g, states = fsm.guide(), []
    for text in ['{"name": "', "ab", '"']:
        for b in text.encode():                                 # one single-byte token at a time
            states.append(g.state)
            g.advance(fsm.vocab.token_bytes.index(bytes([b])))
    return sorted(set(states))


def test_row_masks_mask_as_index_masks(fsm) -> None:
    states = _states(fsm)
    cols = fsm.vocab.size + 7                                   # a model's padded rows: always masked
    rng = np.random.default_rng(0)
    scores = torch.from_numpy(rng.standard_normal((len(states), cols)).astype(np.float32))
    forms = {}
    for form in (TorchIndexMask, TorchRowMask):
        cache = mask_cache(fsm, form)
        masks = [cache.get((s, cols, scores.device)) or cache.put((s, cols, scores.device), fsm.bitmask(s))
                 for s in states]
        batch = apply_torch_masks(scores, masks)
        one = apply_torch_masks(scores[:1], masks[:1])
        rows = torch.empty_like(scores)
        for r, m in enumerate(masks):
            m.write(rows[r], scores[r])
        assert torch.equal(batch, rows) and torch.equal(one, batch[:1])
        for picked in (masks, masks[:1] * len(masks)):          # distinct masks, and one shared by all rows
            inplace = scores.clone()
            assert apply_torch_masks_(inplace, picked) is inplace
            assert torch.equal(inplace, apply_torch_masks(scores, picked))
        forms[form] = batch
    assert torch.equal(forms[TorchIndexMask], forms[TorchRowMask])
    for r, s in enumerate(states):                              # and they are the FSM's masks
        allowed = set(fsm.allowed_token_ids(s).tolist())
        kept = set(torch.isfinite(forms[TorchRowMask][r]).nonzero().squeeze(1).tolist())
        assert kept == allowed and 0 < len(allowed) < cols
    assert len({len(fsm.allowed_token_ids(s)) > cols // 2 for s in states}) == 2   # both kinds of state
    assert torch.isfinite(scores).all()                         # the input is left as it was


def test_the_form_follows_the_device() -> None:
    assert torch_mask_form(torch.device("cpu")) is TorchIndexMask
    assert torch_mask_form(torch.device("cuda", 0)) is TorchRowMask
    assert torch_mask_form(torch.device("mps")) is TorchRowMask


def test_the_hf_processor_masks_in_place_only_when_asked(fsm) -> None:
    from constrained.processors import hf_logits_processor

    cols = fsm.vocab.size
    ids = torch.tensor([[1, 2], [1, 2]])
    scores = torch.from_numpy(np.random.default_rng(1).standard_normal((2, cols)).astype(np.float32))
    copy = hf_logits_processor(fsm, fsm.vocab)(ids, scores)
    assert copy is not scores and torch.isfinite(scores).all()   # the default leaves the input as it was
    inplace = scores.clone()
    out = hf_logits_processor(fsm, fsm.vocab, inplace=True)(ids, inplace)
    assert out is inplace and torch.equal(out, copy)
    assert set(torch.isfinite(out[0]).nonzero().squeeze(1).tolist()) == set(fsm.allowed_token_ids(fsm.initial).tolist())
