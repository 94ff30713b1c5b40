"""The mlx-lm and transformers logits processors, on tiny real-tokenizer models.

Plain framework loops drive them: ``mlx_lm.stream_generate`` and
``BatchGenerator.insert`` with one processor list per row, and
``transformers``' ``model.generate`` with per-prompt constraints and several
return sequences. Outputs are checked with `jsonschema` / ``re.fullmatch`` on
the exact bytes the tokens spell.
"""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np
import pytest

from constrained.processors import (
    ConstraintCursor,
    apply_mlx_bitmask,
    apply_torch_bitmask,
    hf_logits_processor,
    mlx_processor,
    vocabulary_for,
)
from constrained.errors import IncompatibleVocabularyError
from constrained.vocab import Vocabulary
from tests.tiny_lms import hf_model, hf_tokenizer, mlx_model

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}
ENUM = {"enum": ["red", "green", "blue"]}
PHONE = r"[0-9]{3}-[0-9]{4}"


def _text(vocab: Vocabulary, ids: list[int]) -> str:
    ids = [t for t in ids if t not in vocab.eos_token_ids]
    return vocab.decode(ids).decode("utf-8")


def _check_json(text: str, schema: dict) -> None:
    jsonschema.validate(json.loads(text), schema)


# ----------------------------------------------------------------------------- unit: masks and cursor


def _packed(flags: np.ndarray) -> np.ndarray:
    padded = np.zeros((len(flags) + 31) // 32 * 32, dtype=np.uint8)
    padded[: len(flags)] = flags
    return np.packbits(padded, bitorder="little").view(np.int32)


def test_apply_mlx_bitmask_matches_numpy_and_masks_extra_columns() -> None:
    import mlx.core as mx

    rng = np.random.default_rng(0)
    flags = rng.random(70) < 0.4
    logits = rng.normal(size=(1, 80)).astype(np.float32)  # 10 rows past the vocabulary
    out = np.array(apply_mlx_bitmask(mx.array(logits), mx.array(_packed(flags))))
    expected = np.where(np.concatenate([flags, np.zeros(10, bool)]), logits, -np.inf)
    np.testing.assert_array_equal(out, expected)


def test_apply_torch_bitmask_matches_numpy_per_row() -> None:
    import torch

    rng = np.random.default_rng(1)
    flags = rng.random((3, 70)) < 0.5
    scores = rng.normal(size=(3, 70)).astype(np.float32)
    packed = torch.from_numpy(np.stack([_packed(f) for f in flags]))
    out = apply_torch_bitmask(torch.from_numpy(scores), packed).numpy()
    np.testing.assert_array_equal(out, np.where(flags, scores, -np.inf))


def test_cursor_reads_only_new_tokens_restarts_and_fails_soft() -> None:
    from constrained.compile import compile_regex

    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"ab", None], eos_token_ids=[3])
    cursor = ConstraintCursor(compile_regex("ab?a", vocab))
    seq = [9, 9, 9]  # the prompt: never fed to the guide
    cursor.sync(len(seq), lambda s: seq[s:])
    assert cursor.guide.allowed_token_ids().tolist() == [0, 2]
    seq += [2]
    cursor.sync(len(seq), lambda s: seq[s:])
    assert cursor.guide.allowed_token_ids().tolist() == [0] and cursor.consumed == 1
    seq += [1]  # forbidden after "ab": the row fails and is masked to EOS, no exception
    cursor.sync(len(seq), lambda s: seq[s:])
    assert cursor.failed
    words = cursor.bitmask(1)
    assert int(words[0]) == 1 << 3
    cursor.sync(2, lambda s: [7, 7][s:])  # shorter than before: a new generation
    assert not cursor.failed and cursor.prompt_len == 2 and cursor.guide.num_tokens == 0


def test_vocabulary_for_is_cached_per_tokenizer() -> None:
    tok = hf_tokenizer("llama-spm")
    assert vocabulary_for(tok) is vocabulary_for(tok)


# ----------------------------------------------------------------------------- unit: the mlx processor's masks

LETTERS = r"[a-z]{40}"


class _RecordingTokens:
    """An `mx.array` of ids that records which slices the processor reads."""

    def __init__(self, ids: list[int]) -> None:
        import mlx.core as mx

        self.array, self.size, self.starts = mx.array(ids), len(ids), []

    def __getitem__(self, key: slice) -> object:
        self.starts.append(key.start)
        return self.array[key]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_mlx_processor_equals_bitmask_and_keeps_dtype(dtype: str) -> None:
    import mlx.core as mx

    tok = hf_tokenizer("llama-bpe")
    vocab = vocabulary_for(tok)
    proc = mlx_processor(LETTERS, tok, regex=True)
    rng = np.random.default_rng(0)
    logits = mx.array(rng.normal(size=(1, vocab.size + 7)).astype(np.float32)).astype(getattr(mx, dtype))
    ids = tok.encode("thequickbrownfoxjumpsoverthelazydog", add_special_tokens=False)
    seq, guide = [5, 6, 7], proc.cursor.fsm.guide()
    for t in [None, *ids]:
        if t is not None:
            seq.append(t)
            assert guide.advance(t)
        out = proc(mx.array(seq), logits)
        assert out.dtype == logits.dtype and out.shape == logits.shape
        allowed = np.zeros(logits.shape[-1], bool)
        allowed[guide.allowed_token_ids()] = True   # the 7 rows past the vocabulary stay masked
        want = np.where(allowed, np.array(logits.astype(mx.float32))[0], -np.inf)
        np.testing.assert_array_equal(np.array(out.astype(mx.float32))[0], want)


def test_mlx_processor_reads_only_new_tokens_and_shares_equal_masks() -> None:
    import mlx.core as mx

    from constrained.index_masks import MLXIndexMask, mask_cache

    tok = hf_tokenizer("llama-bpe")
    vocab = vocabulary_for(tok)
    proc = mlx_processor("[a-z]{50}", tok, regex=True)           # a pattern no other test uses: a fresh cache
    logits = mx.zeros((vocab.size,))                           # 1-D logits keep their shape
    prompt = list(range(100, 400))                              # a long prompt, never read
    ids = [tok.convert_tokens_to_ids(c) for c in "abcdefghijklmnopqrstuvwxyzabcdefghijklmn"]  # one letter each
    seq, starts = list(prompt), []
    for t in [None, *ids]:
        seq += [] if t is None else [t]
        tokens = _RecordingTokens(seq)
        assert proc(tokens, logits).shape == (vocab.size,)
        starts += tokens.starts
    assert starts == list(range(len(prompt), len(seq)))         # each step slices off just the new id
    states = {proc.cursor.fsm.guide().state}
    guide = proc.cursor.fsm.guide()
    for t in ids:
        guide.advance(t)
        states.add(guide.state)
    # 41 counting states, but far from the end they allow the same tokens: one mask for all of those
    assert len(states) == len(ids) + 1 and mask_cache(proc.cursor.fsm, MLXIndexMask).num_masks < len(states)
    assert proc.guide.is_finished() or proc.guide.num_tokens == len(ids)


def test_mlx_mask_cache_evicts_by_bytes_and_stays_correct() -> None:
    import mlx.core as mx

    from constrained.index_masks import MaskCache, MLXIndexMask

    tok = hf_tokenizer("llama-spm")
    vocab = vocabulary_for(tok)
    proc = mlx_processor(PHONE, tok, regex=True)
    proc._masks = MaskCache(max_bytes=1, build=MLXIndexMask.of)   # room for one mask only
    logits = mx.array(np.random.default_rng(3).normal(size=(1, vocab.size)).astype(np.float32))
    ids = [vocab.token_bytes.index(c.encode()) for c in "555-1234"]  # one character per token
    seq, guide = [1], proc.cursor.fsm.guide()
    for t in [None, *ids, None]:
        if t is not None:
            seq.append(t)
            assert guide.advance(t)
        elif len(seq) > 1:                                      # finished: EOS only
            seq.append(vocab.eos_token_ids[0])
            guide.advance(vocab.eos_token_ids[0])
        out = np.array(proc(mx.array(seq), logits))[0]
        allowed = np.zeros(vocab.size, bool)
        allowed[guide.allowed_token_ids()] = True
        np.testing.assert_array_equal(out, np.where(allowed, np.array(logits)[0], -np.inf))
        assert proc._masks.num_masks == 1


# ----------------------------------------------------------------------------- mlx-lm


@pytest.mark.parametrize("vocab_name", ["llama-spm", "qwen2"])
def test_mlx_stream_generate_with_schema_processor(vocab_name: str) -> None:
    import mlx_lm
    from mlx_lm.sample_utils import make_sampler

    model, tok = mlx_model(vocab_name), hf_tokenizer(vocab_name)
    vocab = vocabulary_for(tok)
    outputs = []
    for seed in range(3):
        import mlx.core as mx

        mx.random.seed(seed)
        proc = mlx_processor(SCHEMA, tok, whitespace="compact")
        steps = list(mlx_lm.stream_generate(model, tok, "Answer:", max_tokens=40, sampler=make_sampler(temp=1.0),
                                            logits_processors=[proc]))
        assert steps[-1].finish_reason == "stop"  # the bounded schema always completes
        outputs.append(_text(vocab, [s.token for s in steps]))
    for text in outputs:
        _check_json(text, SCHEMA)


def test_mlx_generate_plain_call_returns_valid_json() -> None:
    import mlx_lm

    model, tok = mlx_model("llama-spm"), hf_tokenizer("llama-spm")
    text = mlx_lm.generate(model, tok, "Color:", max_tokens=20, logits_processors=[mlx_processor(ENUM, tok)])
    assert json.loads(text) in ENUM["enum"]


def test_mlx_batch_generator_per_row_processors() -> None:
    from mlx_lm.generate import BatchGenerator
    from mlx_lm.sample_utils import make_sampler

    model, tok = mlx_model("llama-bpe"), hf_tokenizer("llama-bpe")
    vocab = vocabulary_for(tok)
    procs = [mlx_processor(SCHEMA, tok, whitespace="compact"), mlx_processor(PHONE, tok, regex=True),
             mlx_processor(ENUM, tok), mlx_processor(PHONE, tok, regex=True)]
    prompts = [tok.encode(p) for p in ["A record:", "Phone number please:", "Color", "Another phone:"]]
    gen = BatchGenerator(model, max_tokens=40, sampler=make_sampler(temp=1.0),
                         stop_tokens=[[e] for e in vocab.eos_token_ids])
    uids = gen.insert(prompts, logits_processors=[[p] for p in procs])
    tokens: dict[int, list[int]] = {u: [] for u in uids}
    reasons: dict[int, str] = {}
    while len(reasons) < len(uids):
        for r in gen.next_generated():
            tokens[r.uid].append(r.token)
            if r.finish_reason is not None:
                reasons[r.uid] = r.finish_reason
    gen.close()
    texts = [_text(vocab, tokens[u]) for u in uids]
    assert [reasons[u] for u in uids] == ["stop"] * 4
    _check_json(texts[0], SCHEMA)
    assert re.fullmatch(PHONE, texts[1]) and re.fullmatch(PHONE, texts[3])
    assert json.loads(texts[2]) in ENUM["enum"]


# ----------------------------------------------------------------------------- transformers


def test_hf_generate_per_prompt_constraints_with_return_sequences() -> None:
    import torch
    from transformers import LogitsProcessorList

    model, tok = hf_model("llama-spm"), hf_tokenizer("llama-spm")
    vocab = vocabulary_for(tok)
    eos = vocab.eos_token_ids[0]
    prompts = ["Give a record:", "Phone?"]
    ids = [tok.encode(p) for p in prompts]
    width = max(map(len, ids))  # left padding, as decoder-only generation wants
    input_ids = torch.tensor([[eos] * (width - len(x)) + x for x in ids])
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    phone_schema = {"type": "string", "pattern": f"^{PHONE}$"}
    procs = [hf_logits_processor([SCHEMA, phone_schema], tok, whitespace="compact")]
    torch.manual_seed(0)
    out = model.generate(input_ids=input_ids, attention_mask=mask, do_sample=True, max_new_tokens=40,
                         num_return_sequences=2, logits_processor=LogitsProcessorList(procs),
                         pad_token_id=eos, eos_token_id=eos)
    rows = out[:, width:].tolist()
    assert len(rows) == 4
    for r, row in enumerate(rows):
        assert eos in row, f"row {r} did not finish: {row}"
        text = _text(vocab, row[: row.index(eos)])
        if r < 2:
            _check_json(text, SCHEMA)
        else:
            assert re.fullmatch(PHONE, json.loads(text))


def test_hf_processor_rejects_mismatched_batch() -> None:
    import torch

    tok = hf_tokenizer("llama-spm")
    proc = hf_logits_processor([ENUM, ENUM, ENUM], tok)
    with pytest.raises(ValueError, match="3 constraints for a batch of 4 rows"):
        proc(torch.zeros((4, 2), dtype=torch.long), torch.zeros((4, 32000)))


def test_processors_refuse_logits_narrower_than_their_vocabulary(hf_tok) -> None:
    """A gpt-2 constraint (50,257 tokens) on a llama model's logits (32,000) is an error naming both, not a cut."""
    import mlx.core as mx
    import torch

    gpt2 = hf_tok("gpt-2")
    proc = mlx_processor(ENUM, gpt2)
    with pytest.raises(IncompatibleVocabularyError, match="vocabulary of 50257 tokens, but the logits have 32000 columns"):
        proc(mx.array([1, 2]), mx.zeros((1, 32000)))
    assert proc(mx.array([1, 2]), mx.zeros((1, 50304))).shape == (1, 50304)   # padded rows are fine
    hf = hf_logits_processor(ENUM, gpt2)
    with pytest.raises(IncompatibleVocabularyError, match="50257 tokens, but the logits have 32000 columns"):
        hf(torch.zeros((1, 2), dtype=torch.long), torch.zeros((1, 32000)))


def test_hf_processor_equals_guides_per_row_with_shared_and_evicted_masks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each row's scores are its own guide's mask, whether rows share a state (one broadcast mask), differ,
    advance by several ids at once, fail, or find their mask evicted; padded columns past the vocabulary stay -inf."""
    import torch

    import constrained.index_masks as index_masks

    tok = hf_tokenizer("llama-spm")
    vocab = vocabulary_for(tok)
    one = lambda text: [vocab.token_bytes.index(c.encode()) for c in text]   # noqa: E731 - a token per character
    # rows 0 and 1 spell the same number (one shared mask), row 2 another, row 3 goes wrong at its 2nd id
    texts = ["555-1234", "555-1234", "123-4567", "5x5-1234"]
    seqs = [one(t) + [vocab.eos_token_ids[0]] for t in texts]
    prompt = [1, 42, 7]
    cols = vocab.size + 64
    scores = torch.from_numpy(np.random.default_rng(0).normal(size=(len(texts), cols)).astype(np.float32))
    for evict in (False, True):
        if evict:   # room for one mask only: every step rebuilds what it needs, results the same
            monkeypatch.setattr(index_masks, "_CACHES", {})
            monkeypatch.setattr(index_masks, "MASK_BYTES", 1)
        proc = hf_logits_processor(PHONE, tok, regex=True)
        shared = 0
        for k in (0, 1, 2, 4, 5, 6, 7, 8, 9):          # 2 -> 4: two new ids in one call
            input_ids = torch.tensor([prompt + s[:k] for s in seqs])
            out = proc(input_ids, scores.clone()).numpy()
            for r, seq in enumerate(seqs):
                guide = proc.cursors[r].fsm.guide()
                ok = all(guide.advance(t) for t in seq[:k])
                allowed = np.zeros(cols, bool)
                if ok and not guide.is_finished():
                    allowed[guide.allowed_token_ids()] = True
                else:
                    allowed[vocab.eos_token_ids] = True
                np.testing.assert_array_equal(out[r], np.where(allowed, scores[r].numpy(), -np.inf))
            shared += np.array_equal(np.isinf(out[0]), np.isinf(out[3]))
        assert shared < 9                               # rows 0 and 3 did differ
        assert proc.cursors[3].failed and not proc.cursors[0].failed
