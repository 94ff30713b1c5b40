"""Tiny random models: both loaders read the same directory, MLX and torch agree on logits."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
mx = pytest.importorskip("mlx.core")
mlx_lm = pytest.importorskip("mlx_lm")

import torch  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from backends.tiny import tiny_model_dir, tiny_model_pair  # noqa: E402


def _have_gguf_vocabs() -> bool:
    try:
        import constrained.gguf_tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


needs_vocab = pytest.mark.skipif(not _have_gguf_vocabs(), reason="constrained.gguf_tokenizers not merged yet")

PAIRS = [
    pytest.param("llama", "byte-bpe", id="llama-byte-bpe"),
    pytest.param("llama", "llama-spm", id="llama-spm", marks=needs_vocab),
    pytest.param("llama", "llama-bpe", id="llama-bpe", marks=needs_vocab),
    pytest.param("qwen2", "qwen2", id="qwen2-qwen2", marks=needs_vocab),
]

TEXTS = ['{"name": "Ada", "age": 36}', "hello world", " café — 東京 🙂\n\tx", ""]


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _mlx_logits(model, ids: list[list[int]]) -> np.ndarray:
    return np.array(model(mx.array(ids)))


def _torch_logits(model, ids: list[list[int]]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.numpy()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_in_memory_pair_logits_agree(arch: str) -> None:
    hf, mlx_model = tiny_model_pair(arch, 300, seed=3)
    ids = np.random.default_rng(0).integers(0, 300, size=(2, 40)).tolist()
    a, b = _mlx_logits(mlx_model, ids), _torch_logits(hf, ids)
    assert a.shape == b.shape == (2, 40, 300)
    assert a.std() > 0.5  # peaked enough to be a meaningful comparison
    assert np.abs(_log_softmax(a) - _log_softmax(b)).max() < 5e-5


def test_different_seeds_give_different_weights() -> None:
    a, _ = tiny_model_pair("llama", 50, seed=0)
    b, _ = tiny_model_pair("llama", 50, seed=1)
    assert not torch.equal(a.lm_head.weight, b.lm_head.weight)


@pytest.mark.parametrize(("arch", "vocab"), PAIRS)
def test_dir_loads_in_both_frameworks(arch: str, vocab: str) -> None:
    d = tiny_model_dir(arch, vocab)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["model_type"] == arch and cfg["dtype"] == "float32"
    assert "random" in (d / "README.md").read_text()
    mlx_model, mlx_tok = mlx_lm.load(str(d))
    hf_model = AutoModelForCausalLM.from_pretrained(d)
    hf_tok = AutoTokenizer.from_pretrained(d)
    assert hf_model.dtype == torch.float32
    assert len(hf_tok) == cfg["vocab_size"]
    raw = Tokenizer.from_file(str(d / "tokenizer.json"))
    for text in TEXTS:
        ids = hf_tok.encode(text, add_special_tokens=False)
        assert ids == mlx_tok.encode(text, add_special_tokens=False) == raw.encode(text, add_special_tokens=False).ids
    ids = [hf_tok.encode(TEXTS[0], add_special_tokens=True)]
    assert np.abs(_log_softmax(_mlx_logits(mlx_model, ids)) - _log_softmax(_torch_logits(hf_model, ids))).max() < 5e-5


def test_padded_vocab_dir(tmp_path) -> None:
    base = tiny_model_dir("llama", "byte-bpe", cache_dir=tmp_path)
    n_tokens = len(AutoTokenizer.from_pretrained(base))
    d = tiny_model_dir("llama", "byte-bpe", cache_dir=tmp_path, pad_vocab_to=n_tokens + 37)
    assert d != base
    assert json.loads((d / "config.json").read_text())["vocab_size"] == n_tokens + 37
    mlx_model, _ = mlx_lm.load(str(d))
    hf_model = AutoModelForCausalLM.from_pretrained(d)
    ids = [[5, 6, 7, n_tokens - 1]]
    a, b = _mlx_logits(mlx_model, ids), _torch_logits(hf_model, ids)
    assert a.shape[-1] == n_tokens + 37
    assert np.abs(_log_softmax(a) - _log_softmax(b)).max() < 5e-5


def test_dir_is_cached_and_keyed(tmp_path) -> None:
    d1 = tiny_model_dir("llama", "byte-bpe", cache_dir=tmp_path)
    stamp = (d1 / "model.safetensors").stat().st_mtime_ns
    assert tiny_model_dir("llama", "byte-bpe", cache_dir=tmp_path) == d1
    assert (d1 / "model.safetensors").stat().st_mtime_ns == stamp
    d2 = tiny_model_dir("llama", "byte-bpe", cache_dir=tmp_path, seed=1)
    assert d2 != d1
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp dirs left


@pytest.mark.parametrize(
    ("arch", "vocab", "match"),
    [("gpt9", "byte-bpe", "unknown tiny architecture 'gpt9'"), ("qwen2", "llama-spm", "does not pair")],
)
def test_bad_arguments_raise(arch: str, vocab: str, match: str, tmp_path) -> None:
    with pytest.raises(ValueError, match=match):
        tiny_model_dir(arch, vocab, cache_dir=tmp_path)
