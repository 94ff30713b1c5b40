"""`Vocabulary` spells exactly what the real tokenizers encode."""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from constrained.errors import IncompatibleVocabularyError
from constrained.gguf_tokenizers import VOCABS, sentencepiece_model, test_vectors
from constrained.vocab import Vocabulary

SPM = {"llama-spm", "phi-3"}  # SentencePiece: encoding prepends one "▁" (the dummy prefix)
EMOJI = ["🦙", "😶‍🌫️", "✅", "🚀", "👩🏽‍💻", "🇫🇷"]
JSONISH = list('{}[]":,\\/ -+.eE0123456789') + ["true", "null", '\\"', "\\u00e9"]
WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000"]

texts = st.lists(
    st.one_of(
        st.sampled_from(JSONISH + WHITESPACE + EMOJI),
        st.characters(exclude_categories=("Cs",)),  # any scalar value (surrogates cannot be UTF-8)
        st.text(alphabet=st.characters(exclude_categories=("Cs",), max_codepoint=0x2FF), max_size=8),
    ),
    max_size=24,
).map("".join)


def spelled(vocab: Vocabulary, ids: list[int]) -> bytes:
    pieces = [vocab.token_bytes[i] for i in ids]
    assert None not in pieces, f"plain text encoded to a token with no bytes: {ids}"
    return b"".join(pieces)  # type: ignore[arg-type]


def expected_bytes(name: str, text: str) -> bytes:
    # SentencePiece spells the dummy prefix as a real leading space (HF's decoder strips it again).
    return (b" " if name in SPM and text else b"") + text.encode("utf-8")


@pytest.mark.parametrize("name", VOCABS)
def test_token_bytes_spell_every_test_vector(name: str, vocabulary: Callable[[str], Vocabulary]) -> None:
    vocab = vocabulary(name)
    assert [text for text, ids in test_vectors(name) if spelled(vocab, ids) != expected_bytes(name, text)] == []


@pytest.mark.parametrize("name", VOCABS)
def test_token_bytes_spell_random_text(name: str, tokenizer: Any, vocabulary: Callable[[str], Vocabulary]) -> None:
    tok, vocab = tokenizer(name), vocabulary(name)
    specials = [t.content for t in tok.get_added_tokens_decoder().values()]

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(text=texts)
    def check(text: str) -> None:
        assume(not any(s in text for s in specials))
        # SentencePiece reads a literal "▁" (U+2581) as a space, so such text does not round-trip.
        assume(name not in SPM or "▁" not in text)
        ids = tok.encode(text, add_special_tokens=False).ids
        assert spelled(vocab, ids) == expected_bytes(name, text)
        assert vocab.decode(ids) == expected_bytes(name, text)

    check()


@pytest.mark.parametrize("name", VOCABS)
def test_special_and_added_tokens_are_none(name: str, hf_tok: Any, vocabulary: Callable[[str], Vocabulary]) -> None:
    tok, vocab = hf_tok(name), vocabulary(name)
    added = set(tok.backend_tokenizer.get_added_tokens_decoder())
    assert added and added <= vocab.special_token_ids
    assert {tok.bos_token_id, tok.eos_token_id} <= vocab.special_token_ids
    assert all(vocab.token_bytes[i] is None for i in vocab.special_token_ids)
    assert vocab.eos_token_ids == (tok.eos_token_id,)
    assert vocab.size == len(vocab.token_bytes) == len(tok)
    vocab.check_spells(range(256))  # byte-level and byte-fallback vocabularies spell every byte


def test_known_tokens(vocabulary: Callable[[str], Vocabulary]) -> None:
    table = {
        "gpt-2": {995: b" world", 198: b"\n", 50256: None},
        "llama-bpe": {1917: b" world", 128009: None},
        "llama-spm": {3186: b" world", 13: b"\n", 3: b"\x00", 29871: b" ", 1: None},
        "qwen2": {1879: b" world", 151645: None, 151935: None},
        "phi-3": {3186: b" world", 32007: None, 2: None},  # phi-3's "</s>" is a user-defined added token
    }
    for name, expected in table.items():
        vocab = vocabulary(name)
        assert {i: vocab.token_bytes[i] for i in expected} == expected, name


def test_several_eos_ids(hf_tok: Any) -> None:
    tok = hf_tok("llama-bpe")
    eot, end = tok.convert_tokens_to_ids(["<|eot_id|>", "<|end_of_text|>"])
    vocab = Vocabulary.from_tokenizer(tok, eos_token_ids=[eot, end, eot])
    assert vocab.eos_token_ids == tuple(sorted({eot, end}))


def test_empty_eos_is_refused(hf_tok: Any) -> None:
    """Without EOS the mask after a complete match would be empty (an all -inf row): refused up front."""
    with pytest.raises(ValueError, match="eos_token_ids is empty: a constrained generation could never end"):
        Vocabulary.from_tokenizer(hf_tok("llama-bpe"), eos_token_ids=[])
    with pytest.raises(ValueError, match="eos_token_ids is empty"):
        Vocabulary.from_token_bytes([b"a", b"b"], eos_token_ids=[])


def test_mlx_tokenizer_wrapper_with_several_eos(hf_tok: Any, vocabulary: Callable[[str], Vocabulary]) -> None:
    tokenizer_utils = pytest.importorskip("mlx_lm.tokenizer_utils")
    tok = hf_tok("llama-bpe")
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    wrapper = tokenizer_utils.TokenizerWrapper(tok, eos_token_ids=[eot])
    vocab = Vocabulary.from_tokenizer(wrapper)
    assert vocab.eos_token_ids == tuple(sorted({eot, tok.eos_token_id}))  # the wrapper adds the tokenizer's own
    assert vocab.token_bytes == vocabulary("llama-bpe").token_bytes


def test_raw_tokenizer_needs_explicit_eos(tokenizer: Any, vocabulary: Callable[[str], Vocabulary]) -> None:
    with pytest.raises(ValueError, match="pass eos_token_ids"):
        Vocabulary.from_tokenizer(tokenizer("qwen2"))
    vocab = Vocabulary.from_tokenizer(tokenizer("qwen2"), eos_token_ids=[151645])
    assert vocab.eos_token_ids == (151645,)
    assert vocab.token_bytes == vocabulary("qwen2").token_bytes


def test_size_beyond_tokenizer_pads_with_none(vocabulary: Callable[[str], Vocabulary], hf_tok: Any) -> None:
    base = vocabulary("qwen2")
    padded = Vocabulary.from_tokenizer(hf_tok("qwen2"), size=152064)  # Qwen2-7B's logit rows
    assert padded.size == len(padded.token_bytes) == 152064
    assert padded.token_bytes[: base.size] == base.token_bytes
    assert set(padded.token_bytes[base.size :]) == {None}
    assert padded.fingerprint != base.fingerprint
    assert padded.decode([9707, 152000]) == b"Hello"


def test_size_may_drop_only_tokens_without_bytes(hf_tok: Any) -> None:
    # Qwen2's GGUF ends in 290 [PAD] added tokens; dropping them is fine, dropping text tokens is not.
    assert Vocabulary.from_tokenizer(hf_tok("qwen2"), size=151646).size == 151646
    with pytest.raises(ValueError, match=r"size=151642 leaves token 151642 \(b'\\xe2\\xbd\\x97'\) without a logit row"):
        Vocabulary.from_tokenizer(hf_tok("qwen2"), size=151642)


def test_check_spells_names_missing_bytes(vocabulary: Callable[[str], Vocabulary]) -> None:
    full = vocabulary("gpt-2")
    # The same vocabulary with every token containing "{" or 0xFF removed.
    table = [None if b is None or b"{" in b or b"\xff" in b else b for b in full.token_bytes]
    vocab = Vocabulary.from_token_bytes(table, full.eos_token_ids)
    vocab.check_spells(b'"key": [1, 2]')
    with pytest.raises(IncompatibleVocabularyError) as info:
        vocab.check_spells(b'{"a": "\xff"}', "the JSON schema at $")
    assert info.value.missing == [0x7B, 0xFF]
    assert "0x7b ('{'), 0xff needed by the JSON schema at $" in str(info.value)


def test_from_token_bytes_validates() -> None:
    with pytest.raises(TypeError, match=r"token_bytes\[1\] must be bytes or None, got str 'b'"):
        Vocabulary.from_token_bytes([b"a", "b"], [0])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="EOS token id 5 is outside the vocabulary of size 2"):
        Vocabulary.from_token_bytes([b"a", None], [5])
    with pytest.raises(ValueError, match="size must be a positive integer, got 0"):
        Vocabulary.from_token_bytes([], [0], size=0)
    with pytest.raises(ValueError, match="token id 7 is outside"):
        Vocabulary.from_token_bytes([b"a", None], [1]).decode([7])
    assert Vocabulary.from_token_bytes([b"", b"a", None], [2]).token_bytes[0] is None  # an empty token can't advance


def test_fingerprint_is_stable_and_discriminating(vocabulary: Callable[[str], Vocabulary]) -> None:
    small = Vocabulary.from_token_bytes([b"a", b"bc", None], [2])
    assert small.fingerprint == "2e042a795231977820e44784914cd464"  # pinned: caches on disk key on it
    assert Vocabulary.from_token_bytes([b"a", b"b", b"c", None], [3]).fingerprint != small.fingerprint
    assert Vocabulary.from_token_bytes([b"a", b"bc", None], [1]).fingerprint != small.fingerprint
    prints = {vocabulary(name).fingerprint for name in VOCABS}
    assert len(prints) == len(VOCABS)


def test_rejects_objects_that_are_not_tokenizers() -> None:
    with pytest.raises(TypeError, match="cannot read a vocabulary from dict"):
        Vocabulary.from_tokenizer({"a": 0})


def test_literal_and_unsupported_decoders() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"{": 0, "}": 1, "é": 2, "[UNK]": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.add_special_tokens(["<eos>"])
    vocab = Vocabulary.from_tokenizer(tok, eos_token_ids=[4])  # no decoder: tokens are their own text
    assert vocab.token_bytes == (b"{", b"}", "é".encode(), b"[UNK]", None)
    tok.decoder = decoders.WordPiece()
    with pytest.raises(ValueError, match=r"unsupported tokenizer decoder \['WordPiece'\]"):
        Vocabulary.from_tokenizer(tok, eos_token_ids=[4])


def test_slow_sentencepiece_tokenizer_matches_fast(tmp_path: Any, vocabulary: Callable[[str], Vocabulary]) -> None:
    pytest.importorskip("sentencepiece")
    pytest.importorskip("google.protobuf")
    backend = pytest.importorskip("transformers.tokenization_utils_sentencepiece", reason="needs transformers>=5")

    (tmp_path / "tokenizer.model").write_bytes(sentencepiece_model("llama-spm"))
    model_file = str(tmp_path / "tokenizer.model")
    slow = backend.SentencePieceBackend(vocab_file=model_file, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    assert not hasattr(slow, "backend_tokenizer") and slow.sp_model is not None  # really the slow path
    vocab = Vocabulary.from_tokenizer(slow)
    assert vocab == vocabulary("llama-spm")
    assert vocab.special_token_ids == {0, 1, 2}


def test_slow_byte_level_tokenizer_matches_fast(
    tmp_path: Any, tokenizer: Any, vocabulary: Callable[[str], Vocabulary]
) -> None:
    # transformers 5 made GPT2Tokenizer fast-only; ClvpTokenizer is a remaining slow GPT-2-style BPE.
    from transformers.models.clvp.tokenization_clvp import ClvpTokenizer

    # vocab.json + merges.txt, the slow tokenizer's files, from our tokenizer.json.
    model = json.loads(tokenizer("gpt-2").to_str())["model"]
    (tmp_path / "vocab.json").write_text(json.dumps(model["vocab"]))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in model["merges"]) + "\n")
    eot = "<|endoftext|>"
    files = str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt")
    slow = ClvpTokenizer(*files, unk_token=eot, bos_token=eot, eos_token=eot, pad_token=eot)
    assert not hasattr(slow, "backend_tokenizer")  # really the slow path
    assert Vocabulary.from_tokenizer(slow) == vocabulary("gpt-2")
