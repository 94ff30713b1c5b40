"""Tiny random-init llama / qwen2 checkpoints with real tokenizers, for tests and benchmarks.

`tiny_model_dir` writes a Hugging Face style directory (``config.json``,
``model.safetensors``, tokenizer files, a README saying the weights are random)
that BOTH ``mlx_lm.load(dir)`` and ``transformers.AutoModelForCausalLM`` /
``AutoTokenizer.from_pretrained(dir)`` load, so MLX and torch run the very same
weights. Directories are built once and cached (atomic rename), keyed by a hash
of every input that shapes them.

`tiny_model_pair` is the in-memory path: a torch model and an
``mlx_lm.models.<arch>.Model`` with the torch weights copied in, no disk.

Vocabularies: the real llama.cpp vocabularies from
`constrained.gguf_tokenizers` ("llama-spm", "llama-bpe", "qwen2", "gpt-2",
"phi-3"), plus "byte-bpe", a small byte-level BPE trained here from a fixed
corpus (no download; handy when the vocab cache is cold).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from constrained.errors import BackendUnavailableError

__all__ = ["ARCH_VOCABS", "QWEN2_0_5B_CONFIG", "QWEN2_0_5B_VOCAB_ROWS", "TINY_CONFIG", "VLLM_TINY_CONFIG", "tiny_config", "tiny_model_dir", "tiny_model_pair", "default_cache_dir"]

# Bump when the directory layout or the weights recipe changes: old caches are then ignored.
_RECIPE_VERSION = 3

# Architecture -> vocabularies that make sense for it (the first is the default).
ARCH_VOCABS: dict[str, tuple[str, ...]] = {
    "llama": ("llama-spm", "llama-bpe", "byte-bpe"),
    # Not "byte-bpe": transformers' AutoTokenizer forces Qwen2Tokenizer for model_type
    # qwen2, which replaces the pre-tokenizer and adds <|endoftext|>.
    "qwen2": ("qwen2",),
}

# Shapes shared by both architectures: small enough that a forward pass is ~ms on CPU.
TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    # Larger than HF's 0.02 so next-token distributions are peaked rather than
    # nearly uniform, which makes sampling and differential tests more telling.
    "initializer_range": 0.25,
    "tie_word_embeddings": True,  # halves the files for 150k-token vocabularies
}

# Overrides of TINY_CONFIG giving Qwen2-0.5B's shapes (494M parameters, 1.98 GB in float32): a model whose
# forward pass costs what a real one does, for benchmarks of per-token overhead (`python -m bench decode --realistic`).
QWEN2_0_5B_CONFIG: dict[str, Any] = {
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "initializer_range": 0.02,
}
QWEN2_0_5B_VOCAB_ROWS = 151936

# Overrides of TINY_CONFIG for vLLM, whose CPU attention kernel needs head_dim >= 32:
# hidden 128 over 4 heads (tiny_model_dir(..., config=VLLM_TINY_CONFIG)).
VLLM_TINY_CONFIG: dict[str, Any] = {"hidden_size": 128, "intermediate_size": 256}

# A fixed corpus for the built-in "byte-bpe" vocabulary (JSON-ish, code-ish, prose).
_BYTE_BPE_CORPUS = [
    '{"name": "Ada Lovelace", "age": 36, "languages": ["en", "fr"], "active": true, "score": null}',
    '[{"id": 1, "tags": []}, {"id": 2, "tags": ["a", "b"]}, {"id": -3.5e10, "ok": false}]',
    "The quick brown fox jumps over the lazy dog. 0123456789 + - * / = < > ( ) [ ] { }",
    "def main(argv):\n    return {'key': value for key, value in items if key != None}\n",
    "Über café naïve — 東京 𝄞 emoji 🙂 tabs\tand\nnewlines\r\n",
]


def default_cache_dir() -> Path:
    """Where tiny models are cached: ``$CONSTRAINED_CACHE/models`` or ``~/.cache/constrained/models``.

    Example:
        >>> default_cache_dir().name
        'models'
    """
    root = os.environ.get("CONSTRAINED_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "constrained"
    return base / "models"


def tiny_config(arch: str, vocab_size: int, **overrides: Any) -> Any:
    """A transformers config for a tiny `arch` model (float32).

    Example:
        >>> tiny_config("llama", 300).hidden_size
        64
    """
    transformers = _import_transformers()
    classes = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}
    if arch not in classes:
        raise ValueError(f"unknown tiny architecture {arch!r}; expected one of {sorted(classes)}")
    params = {**TINY_CONFIG, **overrides}
    rope_theta = params.pop("rope_theta")
    cfg = classes[arch](vocab_size=vocab_size, rope_parameters={"rope_type": "default", "rope_theta": rope_theta}, **params)
    cfg.dtype = "float32"
    return cfg


def tiny_model_dir(
    arch: str = "llama",
    vocab: str = "llama-spm",
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
    pad_vocab_to: int | None = None,
    config: dict[str, Any] | None = None,
) -> Path:
    """Build (once) and return a directory holding a tiny random-init `arch` model with the `vocab` tokenizer.

    Args:
        arch: "llama" or "qwen2".
        vocab: a vocabulary name (see `ARCH_VOCABS`).
        cache_dir: parent directory; defaults to `default_cache_dir()`.
        seed: torch seed for the random weights.
        pad_vocab_to: make the embedding matrix this many rows (>= the
            tokenizer's size), as real checkpoints often do; ``None`` = exact.
        config: overrides of `TINY_CONFIG` (e.g. more layers for benchmarks).

    Returns:
        The directory, loadable by ``mlx_lm.load`` and by transformers.

    Example:
        >>> d = tiny_model_dir("qwen2", "byte-bpe")  # doctest: +SKIP
        >>> (d / "config.json").exists()  # doctest: +SKIP
        True
    """
    if arch not in ARCH_VOCABS:
        raise ValueError(f"unknown tiny architecture {arch!r}; expected one of {sorted(ARCH_VOCABS)}")
    if vocab not in ARCH_VOCABS[arch]:
        raise ValueError(f"vocabulary {vocab!r} does not pair with arch {arch!r}; expected one of {ARCH_VOCABS[arch]}")
    shape = {**TINY_CONFIG, **(config or {})}
    key = json.dumps([_RECIPE_VERSION, arch, vocab, seed, pad_vocab_to, shape], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    parent = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = parent / f"{arch}-{vocab}-{digest}"
    if (final / "model.safetensors").exists():
        return final
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=parent))
    try:
        _build_dir(tmp, arch, vocab, seed, pad_vocab_to, shape)
        try:
            os.rename(tmp, final)  # atomic: readers see a complete dir or none
        except OSError:
            if not (final / "model.safetensors").exists():  # not a concurrent winner: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def tiny_model_pair(arch: str = "llama", vocab_size: int = 300, *, seed: int = 0) -> tuple[Any, Any]:
    """Return ``(torch_model, mlx_model)`` sharing the same random weights, built in memory.

    Example:
        >>> hf, mlx_model = tiny_model_pair("qwen2", 300)  # doctest: +SKIP
    """
    torch_model = _random_torch_model(tiny_config(arch, vocab_size), seed)
    return torch_model, torch_to_mlx(torch_model)


def torch_to_mlx(torch_model: Any) -> Any:
    """Build the matching ``mlx_lm.models.<model_type>.Model`` and copy `torch_model`'s weights into it.

    Example:
        >>> mlx_model = torch_to_mlx(tiny_model_pair()[0])  # doctest: +SKIP
    """
    try:
        import importlib

        import mlx.core as mx
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BackendUnavailableError("mlx", "mlx", str(e)) from e
    cfg = _mlx_config_dict(torch_model.config)
    module = importlib.import_module(f"mlx_lm.models.{cfg['model_type']}")
    model = module.Model(module.ModelArgs.from_dict(cfg))
    weights = {k: mx.array(v.detach().float().numpy()) for k, v in torch_model.state_dict().items()}
    model.load_weights(list(model.sanitize(weights).items()), strict=True)
    mx.eval(model.parameters())
    return model


# --------------------------------------------------------------------------- helpers


def _import_transformers() -> Any:
    try:
        import transformers
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise BackendUnavailableError("hf", "hf", str(e)) from e
    return transformers


def _random_torch_model(cfg: Any, seed: int) -> Any:
    transformers = _import_transformers()
    import torch

    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return model.eval()


def _mlx_config_dict(cfg: Any) -> dict[str, Any]:
    """The config as mlx-lm reads it: transformers 5 nests rope_theta in rope_parameters."""
    d = cfg.to_dict()
    rope = d.get("rope_parameters") or {}
    if "rope_theta" in rope:
        d["rope_theta"] = rope["rope_theta"]
    return d


def _build_dir(out: Path, arch: str, vocab: str, seed: int, pad_vocab_to: int | None, shape: dict[str, Any]) -> None:
    tokenizer = _save_tokenizer(vocab, out)
    n_tokens = len(tokenizer)
    if pad_vocab_to is not None and pad_vocab_to < n_tokens:
        raise ValueError(f"pad_vocab_to must be >= the tokenizer size {n_tokens}, got {pad_vocab_to}")
    cfg = tiny_config(arch, pad_vocab_to or n_tokens, **shape)
    cfg.bos_token_id = tokenizer.bos_token_id
    cfg.eos_token_id = tokenizer.eos_token_id
    model = _random_torch_model(cfg, seed)
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out, safe_serialization=True)
    # mlx-lm reads a top-level rope_theta; transformers 5 accepts it as the legacy spelling.
    config_path = out / "config.json"
    config = json.loads(config_path.read_text())
    config["rope_theta"] = shape["rope_theta"]
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
    _write_readme(out, arch, vocab, seed, n_tokens, cfg.vocab_size, shape)


def _save_tokenizer(vocab: str, out: Path) -> Any:
    """Write the tokenizer files into `out` and return the loaded tokenizer."""
    transformers = _import_transformers()
    if vocab == "byte-bpe":
        transformers.PreTrainedTokenizerFast(
            tokenizer_object=_train_byte_bpe(), bos_token="<s>", eos_token="</s>", unk_token=None
        ).save_pretrained(out)
    else:
        from constrained.gguf_tokenizers import save_hf_tokenizer

        save_hf_tokenizer(vocab, out)
    # A model_type in config.json can make AutoTokenizer pick a slow/other class;
    # naming the generic fast class pins it to exactly the tokenizer.json we wrote.
    cfg_path = out / "tokenizer_config.json"
    tok_cfg = json.loads(cfg_path.read_text()) if cfg_path.exists() else {}
    tok_cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(tok_cfg, indent=2, sort_keys=True))
    return transformers.PreTrainedTokenizerFast.from_pretrained(out)


def _train_byte_bpe() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_BYTE_BPE_CORPUS * 4, trainer)
    return tok


def _write_readme(out: Path, arch: str, vocab: str, seed: int, n_tokens: int, vocab_size: int, shape: dict[str, Any]) -> None:
    out.joinpath("README.md").write_text(
        f"# Tiny random {arch} model ({vocab} vocabulary)\n\n"
        "**The weights are random** (torch seed "
        f"{seed}). This model knows nothing; it exists so tests and benchmarks can run\n"
        "the same weights through mlx-lm and transformers.\n\n"
        f"- architecture: {arch}, float32, {json.dumps(shape)}\n"
        f"- tokenizer: {vocab} ({n_tokens} tokens); embedding rows: {vocab_size}\n"
        "- built by `backends.tiny.tiny_model_dir`\n"
    )
