"""Real tokenizers rebuilt offline from llama.cpp's vocab-only GGUF files.

Each ``ggml-vocab-<name>.gguf`` (see `constrained.vocab_files`) holds a real
model's tokens, merges or scores, token types and special ids. We turn it into
a Hugging Face `tokenizers.Tokenizer` that reproduces llama.cpp's own
tokenization, checked against llama.cpp's test vectors:

- byte-level BPE (``tokenizer.ggml.model == "gpt2"``): llama.cpp's
  pre-tokenizer regexes for the ``pre`` type, the GPT-2 byte<->unicode map,
  and the GGUF merges;
- SentencePiece BPE (``"llama"``): ``▁`` for spaces with a dummy prefix,
  ``<0xNN>`` byte fallback, and merges ranked by the merged piece's score,
  which is how SentencePiece picks the next merge.

Control, user-defined, unknown and unused tokens become added tokens, so they
are matched whole and never produced by the merges.

The built tokenizer is saved once as a Hugging Face tokenizer folder
(``tokenizer.json`` + ``tokenizer_config.json`` + ``special_tokens_map.json``)
under ``<cache>/tokenizers-v1/<name>/``; later loads read that (fast) instead of
the GGUF (slow: ``gguf.GGUFReader`` takes seconds on a 150k vocabulary).

Example:
    >>> tok = load_tokenizer("gpt-2")  # doctest: +SKIP
    >>> tok.encode("Hello world", add_special_tokens=False).ids  # doctest: +SKIP
    [15496, 995]
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from constrained.vocab_files import VocabDownloadError, _file_lock, cache_root, gguf_path, test_vectors, vocab_dir

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "VOCABS",
    "VocabDownloadError",
    "vocab_dir",
    "test_vectors",
    "load_tokenizer",
    "tokenizer_from_gguf",
    "hf_tokenizer",
    "save_hf_tokenizer",
    "sentencepiece_model",
    "read_gguf_vocab",
]

#: Vocabularies whose rebuilt tokenizer reproduces every llama.cpp test vector.
VOCABS: tuple[str, ...] = ("gpt-2", "llama-bpe", "llama-spm", "qwen2", "phi-3")

# Bump when the builder changes, so stale cached tokenizer.json files are not reused.
_BUILD_VERSION = "v1"

# llama.cpp token types (llama-vocab.h): only NORMAL and BYTE pieces come out of the merges.
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6

# Pre-tokenizer regexes, copied from llama.cpp's llm_tokenizer_bpe (src/llama-vocab.cpp).
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")
_PRE_REGEXES: dict[str, tuple[str, ...]] = {
    "default": _DEFAULT,
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion"), (_GPT2,)),
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"), (_LLAMA3,)),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "stablelm2"), (_QWEN2,)),
    **dict.fromkeys(("starcoder", "refact", "command-r", "smollm", "codeshell"), (r"\p{N}", _GPT2)),
}
# llama.cpp's "ignore_merges": a pre-token that is itself in the vocab is emitted whole.
_IGNORE_MERGES = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"})


@dataclass(frozen=True)
class GGUFVocab:
    """The tokenizer fields of a vocab-only GGUF file.

    Example:
        >>> v = read_gguf_vocab(gguf_path("llama-spm"))  # doctest: +SKIP
        >>> v.model, v.tokens[1], v.bos_token_id  # doctest: +SKIP
        ('llama', '<s>', 1)
    """

    model: str
    pre: str
    tokens: list[str]
    token_types: list[int]
    scores: list[float] | None
    merges: list[str] | None
    bos_token_id: int | None
    eos_token_id: int | None
    unk_token_id: int | None
    pad_token_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    chat_template: str | None


def read_gguf_vocab(path: str | os.PathLike[str]) -> GGUFVocab:
    """Read the ``tokenizer.*`` fields of a GGUF file with `gguf.GGUFReader`.

    Example:
        >>> read_gguf_vocab(gguf_path("gpt-2")).pre  # doctest: +SKIP
        'gpt-2'
    """
    import gguf

    fields = gguf.GGUFReader(path).fields  # parsing every field is the slow part (seconds for 150k tokens)

    def get(key: str, default: Any = None) -> Any:
        field = fields.get(f"tokenizer.ggml.{key}")
        return default if field is None else field.contents()

    model = get("model")
    is_spm = model == "llama"
    pre = get("pre", "default")
    template = fields.get("tokenizer.chat_template")
    return GGUFVocab(
        model=model,
        pre=pre,
        tokens=get("tokens", []),
        token_types=get("token_type", []),
        scores=get("scores"),
        merges=get("merges"),
        bos_token_id=get("bos_token_id"),
        eos_token_id=get("eos_token_id"),
        unk_token_id=get("unknown_token_id"),
        pad_token_id=get("padding_token_id"),
        # Defaults as llama.cpp's llama_vocab::load picks them when the key is absent.
        add_bos=bool(get("add_bos_token", is_spm or pre in _IGNORE_MERGES)),
        add_eos=bool(get("add_eos_token", False)),
        add_space_prefix=bool(get("add_space_prefix", is_spm)),
        chat_template=None if template is None else template.contents(),
    )


def tokenizer_from_gguf(path: str | os.PathLike[str]) -> Tokenizer:
    """Build a `tokenizers.Tokenizer` equivalent to llama.cpp's for a GGUF vocab.

    Example:
        >>> tok = tokenizer_from_gguf(gguf_path("llama-spm"))  # doctest: +SKIP
        >>> tok.encode("Hello world", add_special_tokens=False).tokens  # doctest: +SKIP
        ['▁Hello', '▁world']
    """
    return _build(read_gguf_vocab(path))


def _build(v: GGUFVocab) -> Tokenizer:
    from tokenizers import AddedToken, processors

    if v.model == "gpt2":
        tok = _byte_level_bpe(v)
    elif v.model == "llama":
        tok = _sentencepiece_bpe(v)
    else:
        raise ValueError(f"unsupported tokenizer.ggml.model {v.model!r}; supported: 'gpt2', 'llama'")
    # Control/unknown/unused tokens are special (skipped when decoding); user-defined ones are plain
    # added tokens, which llama.cpp also matches whole even when not parsing special tokens.
    added = [
        AddedToken(text, special=kind != _USER_DEFINED, normalized=False)
        for text, kind in zip(v.tokens, v.token_types)
        if kind not in (_NORMAL, _BYTE)
    ]
    tok.add_tokens(added)
    template = _bos_eos_template(v)
    if template is not None:
        single, specials = template
        steps = [processors.TemplateProcessing(single=single, pair=f"{single} $B:1", special_tokens=specials)]
        if v.model == "gpt2":
            steps.insert(0, processors.ByteLevel(trim_offsets=False))
        tok.post_processor = processors.Sequence(steps)
    return tok


def _byte_level_bpe(v: GGUFVocab) -> Tokenizer:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    regexes = _PRE_REGEXES.get(v.pre)
    if regexes is None:
        raise ValueError(f"unsupported tokenizer.ggml.pre {v.pre!r}; supported: {', '.join(sorted(_PRE_REGEXES))}")
    merges = []
    for line in v.merges or []:
        cut = line.find(" ", 1)  # llama.cpp splits at the first space after the first character
        merges.append((line[:cut], line[cut + 1 :]))
    vocab = {text: i for i, text in enumerate(v.tokens)}
    tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=v.pre in _IGNORE_MERGES))
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
    # The regexes split the text; ByteLevel then only maps bytes to the GPT-2 alphabet.
    to_alphabet = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence([*splits, to_alphabet])
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece_bpe(v: GGUFVocab) -> Tokenizer:
    from tokenizers import Tokenizer, decoders, models, normalizers

    if v.scores is None:
        raise ValueError("a SentencePiece ('llama') GGUF vocab needs tokenizer.ggml.scores")
    vocab = {text: i for i, text in enumerate(v.tokens)}
    unk = v.tokens[v.unk_token_id] if v.unk_token_id is not None else None
    tok = Tokenizer(models.BPE(vocab, _spm_merges(v, vocab), unk_token=unk, byte_fallback=True, fuse_unk=True))
    steps = [normalizers.Replace(" ", "▁")]
    if v.add_space_prefix:
        steps.insert(0, normalizers.Prepend("▁"))
    tok.normalizer = normalizers.Sequence(steps)
    # The same decoder as HF's Llama tokenizer: mlx-lm recognises it and streams with its SPM detokenizer.
    strip = [decoders.Strip(" ", 1, 0)] if v.add_space_prefix else []
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), *strip])
    return tok


def _spm_merges(v: GGUFVocab, vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Merges that make BPE pick what SentencePiece picks: the highest-scoring merged piece.

    Every split of a normal piece into two vocab pieces is a merge, ranked by
    the merged piece's score (ties by id), as HF's SentencePieceExtractor does.
    """
    scores = v.scores or []
    ranked: list[tuple[float, int, int, int, str, str]] = []
    for piece, i in vocab.items():
        if v.token_types[i] != _NORMAL:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                ranked.append((-scores[i], i, vocab[left], vocab[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _bos_eos_template(v: GGUFVocab) -> tuple[str, list[tuple[str, int]]] | None:
    """The TemplateProcessing that adds BOS/EOS when ``add_special_tokens=True``."""
    parts, specials = ["$A:0"], []
    if v.add_bos and v.bos_token_id is not None:
        parts.insert(0, f"{v.tokens[v.bos_token_id]}:0")
        specials.append((v.tokens[v.bos_token_id], v.bos_token_id))
    if v.add_eos and v.eos_token_id is not None:
        parts.append(f"{v.tokens[v.eos_token_id]}:0")
        specials.append((v.tokens[v.eos_token_id], v.eos_token_id))
    return (" ".join(parts), specials) if specials else None


def _hf_config(v: GGUFVocab) -> tuple[dict[str, Any], dict[str, str]]:
    """``tokenizer_config.json`` and ``special_tokens_map.json`` contents."""

    def text(token_id: int | None) -> str | None:
        return None if token_id is None else v.tokens[token_id]

    specials = {
        key: text(tid)
        for key, tid in (
            ("bos_token", v.bos_token_id),
            ("eos_token", v.eos_token_id),
            ("unk_token", v.unk_token_id),
            ("pad_token", v.pad_token_id),
        )
        if tid is not None
    }
    # Naming PreTrainedTokenizerFast (and no model_type) keeps AutoTokenizer from swapping in
    # a model-specific class that would rebuild the pre-tokenizer or post-processor.
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **specials,
        "add_bos_token": v.add_bos,
        "add_eos_token": v.add_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1 << 30,
    }
    if v.chat_template is not None:
        config["chat_template"] = v.chat_template
    return config, specials


def _cache_dir(name: str) -> Path:
    return cache_root() / f"tokenizers-{_BUILD_VERSION}" / name


def _ensure_built(name: str) -> Path:
    """Build the HF tokenizer folder for `name` once; return it."""
    if name not in VOCABS:
        raise ValueError(f"unknown vocab {name!r}; choose one of {', '.join(VOCABS)}")
    final = _cache_dir(name)
    if (final / "tokenizer.json").is_file():
        return final
    source = gguf_path(name)  # downloads first, under its own lock
    final.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(final.parent / f"{name}.lock"):  # one process builds, the others wait and reuse
        if (final / "tokenizer.json").is_file():
            return final
        v = read_gguf_vocab(source)
        staged = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{name}-"))
        try:
            staged.chmod(0o755)  # mkdtemp makes it private; the cache is shareable like the rest
            _write_hf_folder(v, _build(v), staged)
            os.rename(staged, final)  # atomic: readers see a complete folder or none
        finally:
            shutil.rmtree(staged, ignore_errors=True)
    return final


def _write_hf_folder(v: GGUFVocab, tok: Tokenizer, directory: Path) -> None:
    config, specials = _hf_config(v)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    for filename, content in (("tokenizer_config.json", config), ("special_tokens_map.json", specials)):
        (directory / filename).write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def load_tokenizer(name: str) -> Tokenizer:
    """The `tokenizers.Tokenizer` for vocab `name`, built once and then read from the cache.

    Args:
        name: one of `VOCABS`.

    Raises:
        ValueError: `name` is not in `VOCABS`.
        VocabDownloadError: the vocab files are not cached and could not be downloaded.

    Example:
        >>> load_tokenizer("qwen2").encode("Hello world").ids  # doctest: +SKIP
        [9707, 1879]
    """
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(_ensure_built(name) / "tokenizer.json"))


def save_hf_tokenizer(name: str, directory: str | os.PathLike[str]) -> Path:
    """Write vocab `name` as a Hugging Face tokenizer folder that AutoTokenizer and mlx-lm load.

    Writes ``tokenizer.json``, ``tokenizer_config.json`` (naming
    ``PreTrainedTokenizerFast``, with bos/eos/unk/pad and the chat template
    when the GGUF has one) and ``special_tokens_map.json``.

    Example:
        >>> from transformers import AutoTokenizer  # doctest: +SKIP
        >>> folder = save_hf_tokenizer("llama-bpe", "/tmp/llama3-tok")  # doctest: +SKIP
        >>> AutoTokenizer.from_pretrained(folder).eos_token  # doctest: +SKIP
        '<|end_of_text|>'
    """
    source = _ensure_built(name)
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for filename in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(source / filename, target / filename)
    return target


def hf_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """Vocab `name` as a transformers `PreTrainedTokenizerFast` with bos/eos/unk/pad set.

    Example:
        >>> tok = hf_tokenizer("llama-spm")  # doctest: +SKIP
        >>> tok("Hello").input_ids, tok.eos_token  # doctest: +SKIP
        ([1, 15043], '</s>')
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(_ensure_built(name)), local_files_only=True)


@functools.cache  # reading the GGUF takes about a second; tests ask for the same model repeatedly
def sentencepiece_model(name: str) -> bytes:
    """A serialized SentencePiece BPE ``ModelProto`` for an SPM vocab (``llama-spm``, ``phi-3``).

    Lets the real SentencePiece library (and transformers' slow tokenizers)
    run on the same pieces, scores and types. Needs ``sentencepiece`` and
    ``protobuf``.

    Example:
        >>> import sentencepiece  # doctest: +SKIP
        >>> sp = sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_model("llama-spm"))  # doctest: +SKIP
        >>> sp.encode("Hello world")  # doctest: +SKIP
        [15043, 3186]
    """
    from sentencepiece import sentencepiece_model_pb2 as pb

    v = read_gguf_vocab(gguf_path(name))
    if v.model != "llama" or v.scores is None:
        raise ValueError(f"vocab {name!r} is not a SentencePiece vocab (tokenizer.ggml.model={v.model!r})")
    piece = pb.ModelProto.SentencePiece
    model = pb.ModelProto()
    for i, (text, score, kind) in enumerate(zip(v.tokens, v.scores, v.token_types)):
        # SentencePiece allows exactly one UNKNOWN piece; phi-3's GGUF also marks its [PAD] pieces unknown.
        if kind == _UNKNOWN or i == v.unk_token_id:
            kind = piece.UNKNOWN if i == v.unk_token_id else piece.CONTROL
        model.pieces.add(piece=text, score=score, type=kind)
    trainer = model.trainer_spec
    trainer.model_type, trainer.byte_fallback = pb.TrainerSpec.BPE, True
    trainer.unk_id = -1 if v.unk_token_id is None else v.unk_token_id
    trainer.bos_id = -1 if v.bos_token_id is None else v.bos_token_id
    trainer.eos_id, trainer.pad_id = v.tokens.index("</s>") if "</s>" in v.tokens else -1, -1
    # No NFKC, keep every space: llama.cpp only prepends "▁" and escapes spaces.
    spec = model.normalizer_spec
    spec.name, spec.add_dummy_prefix = "identity", v.add_space_prefix
    spec.remove_extra_whitespaces, spec.escape_whitespaces = False, True
    return model.SerializeToString()
