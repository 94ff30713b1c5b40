"""The rebuilt tokenizers reproduce llama.cpp's own test vectors exactly."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest

from constrained import vocab_files
from constrained.gguf_tokenizers import (
    VOCABS,
    VocabDownloadError,
    save_hf_tokenizer,
    sentencepiece_model,
    test_vectors,
    vocab_dir,
)

# (bos, eos, adds BOS) as llama.cpp reads them from each GGUF.
SPECIALS = {
    "gpt-2": ("<|endoftext|>", "<|endoftext|>", False),
    "llama-bpe": ("<|begin_of_text|>", "<|end_of_text|>", True),
    "llama-spm": ("<s>", "</s>", True),
    "qwen2": ("<|endoftext|>", "<|endoftext|>", False),
    "phi-3": ("<s>", "<|endoftext|>", True),
}


def mismatches(encode: Any, name: str) -> list[tuple[str, list[int], list[int]]]:
    """Vectors of `name` where ``encode(text)`` differs from llama.cpp's ids."""
    return [(text, got, ids) for text, ids in test_vectors(name) if (got := list(encode(text))) != ids]


@pytest.mark.parametrize("name", VOCABS)
def test_all_vectors_reproduce(name: str, tokenizer: Any) -> None:
    tok = tokenizer(name)
    vectors = test_vectors(name)
    assert len(vectors) == 46
    assert sum(len(ids) for _, ids in vectors) > 300  # the parse kept the ids, not just the texts
    assert mismatches(lambda text: tok.encode(text, add_special_tokens=False).ids, name) == []


@pytest.mark.parametrize("name", VOCABS)
def test_decode_round_trips_vector_texts(name: str, tokenizer: Any) -> None:
    # Lossless for all five: SPM's dummy-prefix "▁" is removed again by the Strip decoder.
    tok = tokenizer(name)
    bad = [text for text, ids in test_vectors(name) if tok.decode(ids, skip_special_tokens=False) != text]
    assert bad == []


@pytest.mark.parametrize("name", VOCABS)
def test_hf_tokenizer_matches_vectors_and_specials(name: str, hf_tok: Any) -> None:
    tok = hf_tok(name)
    bos, eos, adds_bos = SPECIALS[name]
    assert (tok.bos_token, tok.eos_token) == (bos, eos)
    assert tok.convert_ids_to_tokens(tok.eos_token_id) == eos
    assert mismatches(lambda text: tok.encode(text, add_special_tokens=False), name) == []
    assert (tok("Hello").input_ids[0] == tok.bos_token_id) == adds_bos


@pytest.mark.parametrize("name", ["llama-spm", "phi-3"])
def test_hf_tokenizer_unk_and_pad(name: str, hf_tok: Any) -> None:
    tok = hf_tok(name)
    assert tok.unk_token == "<unk>" and tok.unk_token_id == 0
    assert tok.pad_token == (None if name == "llama-spm" else "<|endoftext|>")


@pytest.mark.parametrize("name", VOCABS)
def test_saved_folder_loads_with_autotokenizer(name: str, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    folder = save_hf_tokenizer(name, tmp_path / name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and "model_type" not in config
    assert json.loads((folder / "special_tokens_map.json").read_text())["eos_token"] == SPECIALS[name][1]
    tok = AutoTokenizer.from_pretrained(folder)
    assert type(tok).__name__ in {"PreTrainedTokenizerFast", "TokenizersBackend"}  # not a model-specific class
    assert mismatches(lambda text: tok.encode(text, add_special_tokens=False), name) == []


@pytest.mark.parametrize("name", ["llama-bpe", "phi-3"])
def test_saved_folder_loads_with_mlx_lm(name: str, tmp_path: Path) -> None:
    tokenizer_utils = pytest.importorskip("mlx_lm.tokenizer_utils")
    wrapper = tokenizer_utils.load(save_hf_tokenizer(name, tmp_path / name))
    streaming = {"llama-bpe": "BPEStreamingDetokenizer", "phi-3": "SPMStreamingDetokenizer"}[name]
    assert type(wrapper.detokenizer).__name__ == streaming  # mlx-lm recognised our decoder
    assert wrapper.eos_token_ids == {wrapper.convert_tokens_to_ids(SPECIALS[name][1])}
    assert mismatches(lambda text: wrapper.encode(text, add_special_tokens=False), name) == []


@pytest.mark.parametrize("name", ["llama-spm", "phi-3"])
def test_real_sentencepiece_agrees(name: str) -> None:
    """Differential check of our SPM rebuild: real SentencePiece on the same pieces gives the same ids."""
    spm = pytest.importorskip("sentencepiece")
    pytest.importorskip("google.protobuf")
    sp = spm.SentencePieceProcessor(model_proto=sentencepiece_model(name))
    assert mismatches(sp.encode, name) == []


# ------------------------------------------------------------------ download and cache logic


def fake_sdist(directory: Path) -> Path:
    """A tiny stand-in for the llama-cpp-python sdist with one vocab and unrelated files."""
    path = directory / f"llama_cpp_python-{vocab_files.LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    prefix = f"llama_cpp_python-{vocab_files.LLAMA_CPP_PYTHON_VERSION}"
    members = {
        f"{prefix}/vendor/llama.cpp/models/ggml-vocab-tiny.gguf": b"GGUF",
        f"{prefix}/vendor/llama.cpp/models/ggml-vocab-tiny.gguf.inp": b"hi\n__ggml_vocab_test__\n",
        f"{prefix}/vendor/llama.cpp/models/ggml-vocab-tiny.gguf.out": b" 1 2\n",
        f"{prefix}/vendor/llama.cpp/models/README.md": b"not a vocab",
        f"{prefix}/setup.py": b"",
    }
    with tarfile.open(path, "w:gz") as tar:
        for member, data in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_first_use_downloads_once_extracts_only_vocab_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_pip(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        dest = Path(cmd[cmd.index("-d") + 1])
        dest.mkdir(parents=True, exist_ok=True)
        fake_sdist(dest)
        return subprocess.CompletedProcess(cmd, 0, "Saved", "")

    monkeypatch.setenv("CONSTRAINED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(vocab_files.subprocess, "run", fake_pip)
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(vocab_dir())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and calls[0][1:4] == ["-m", "pip", "download"]
    assert "llama-cpp-python==0.3.16" in calls[0] and ":all:" in calls[0]
    folder = tmp_path / "cache" / "llamacpp-vocab-0.3.16"
    assert results == [folder] * 4
    assert sorted(p.name for p in folder.iterdir()) == [
        "ggml-vocab-tiny.gguf", "ggml-vocab-tiny.gguf.inp", "ggml-vocab-tiny.gguf.out",
    ]  # fmt: skip
    assert not list((tmp_path / "cache").glob(".download-*"))  # the tarball and staging folder are gone
    assert test_vectors("tiny") == [("hi", [1, 2])]


def test_download_failure_raises_with_pip_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_pip(cmd: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: Could not find a version (from versions: none)")

    monkeypatch.setenv("CONSTRAINED_CACHE", str(tmp_path))
    monkeypatch.setattr(vocab_files.subprocess, "run", failing_pip)
    with pytest.raises(VocabDownloadError, match="could not be reached") as info:
        vocab_dir()
    assert "Could not find a version" in str(info.value)
    assert not (tmp_path / "llamacpp-vocab-0.3.16").exists()  # nothing half-written is left to be trusted


def test_unknown_vocab_name_is_rejected_before_any_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from constrained.gguf_tokenizers import load_tokenizer

    monkeypatch.setenv("CONSTRAINED_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match="unknown vocab 'llama-4'"):
        load_tokenizer("llama-4")
    assert list(tmp_path.iterdir()) == []
