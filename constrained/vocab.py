"""`Vocabulary`: what each token id spells, as bytes.

Constraints are byte-level automata, so the token FSM needs, for every row of
the model's logits, the exact bytes that token appends to the text. Tokenizers
store tokens in one of a few encodings, detected from the tokenizer's decoder
(never from its name):

- byte-level BPE (GPT-2, Llama-3, Qwen2): each character stands for one byte
  through GPT-2's byte<->unicode map (``Ġ`` is a space);
- SentencePiece (Llama-2, Phi-3, Mistral): ``▁`` is a space and ``<0xNN>`` is
  the raw byte NN (byte fallback);
- literal: no decoder, the token string is its own UTF-8 text.

Added and special tokens (BOS, EOS, chat markers) map to ``None``: they are
never part of constrained text. So do logit rows past the tokenizer's end
(models often pad their embedding matrix to a multiple of 64 or 128).

Example:
    >>> v = Vocabulary.from_token_bytes([b"a", b"b", b"ab", None], eos_token_ids=[3])
    >>> v.decode([2, 0, 3])
    b'aba'
    >>> v.check_spells(b"ab")
    >>> v.check_spells(b"abc", "the regex 'abc'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    constrained.errors.IncompatibleVocabularyError: no token ... can spell the byte(s) 0x63 ('c') needed by the regex 'abc'
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import Any, Iterable, Sequence

import numpy as np

from constrained.errors import IncompatibleVocabularyError
from constrained.token_bytes import read_tokenizer

__all__ = ["Vocabulary"]

class Vocabulary:
    """The bytes every token id spells, plus the EOS ids, for one model.

    Attributes:
        token_bytes: ``token_bytes[i]`` is what token ``i`` appends to the
            text, or ``None`` if it never appears in constrained text
            (special/added tokens, padding rows). ``len == size``.
        eos_token_ids: ids that end generation (several are allowed).
        size: the number of logit rows of the model (may exceed the tokenizer).
        special_token_ids: the tokenizer's added and special token ids.

    Example:
        >>> v = Vocabulary.from_token_bytes([b"{", b"}", b'"', None], eos_token_ids=[3], size=6)
        >>> v.size, v.token_bytes[4], v.eos_token_ids
        (6, None, (3,))
    """

    def __init__(
        self,
        token_bytes: Sequence[bytes | None],
        eos_token_ids: Iterable[int],
        size: int,
        special_token_ids: Iterable[int] = (),
    ) -> None:
        # Internal constructor: callers use from_tokenizer / from_token_bytes, which validate.
        self.token_bytes: tuple[bytes | None, ...] = tuple(token_bytes)
        self.eos_token_ids: tuple[int, ...] = tuple(sorted(set(eos_token_ids)))
        self.size: int = size
        self.special_token_ids: frozenset[int] = frozenset(special_token_ids)

    # ----------------------------------------------------------------- builders

    @classmethod
    def from_token_bytes(
        cls,
        token_bytes: Sequence[bytes | None],
        eos_token_ids: Iterable[int],
        *,
        size: int | None = None,
        special_token_ids: Iterable[int] | None = None,
    ) -> Vocabulary:
        """Build from an explicit id -> bytes table (tests, custom tokenizers).

        Args:
            token_bytes: bytes for each id, ``None`` for tokens never in constrained text.
            eos_token_ids: at least one id that ends generation.
            size: number of logit rows; rows past ``len(token_bytes)`` become ``None``.
            special_token_ids: defaults to the ids whose bytes are ``None``.

        Example:
            >>> Vocabulary.from_token_bytes([b"x", None], [1], size=4).token_bytes
            (b'x', None, None, None)
        """
        table = list(token_bytes)
        for i, b in enumerate(table):
            if b is not None and not isinstance(b, bytes):
                raise TypeError(f"token_bytes[{i}] must be bytes or None, got {type(b).__name__} {b!r}")
        if special_token_ids is None:
            special_token_ids = [i for i, b in enumerate(table) if b is None]
        return cls._checked(table, eos_token_ids, size, special_token_ids)

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: Any,
        *,
        eos_token_ids: Iterable[int] | None = None,
        size: int | None = None,
    ) -> Vocabulary:
        """Build from a tokenizer of any common kind.

        Accepts a `tokenizers.Tokenizer`, a transformers fast tokenizer, a
        transformers slow SentencePiece or byte-level tokenizer, or an mlx-lm
        ``TokenizerWrapper`` (whose ``eos_token_ids`` may hold several ids).

        Args:
            tokenizer: the tokenizer.
            eos_token_ids: overrides the tokenizer's EOS id(s). Required for a
                raw `tokenizers.Tokenizer`, which has no notion of EOS.
            size: the model's number of logit rows, when larger than the tokenizer.

        Raises:
            TypeError: the tokenizer kind is not recognised.
            ValueError: no EOS id is known, or the token encoding is unsupported.

        Example:
            >>> from constrained.gguf_tokenizers import hf_tokenizer  # doctest: +SKIP
            >>> v = Vocabulary.from_tokenizer(hf_tokenizer("qwen2"), size=152064)  # doctest: +SKIP
            >>> v.token_bytes[9707], v.eos_token_ids, v.token_bytes[151643]  # doctest: +SKIP
            (b'Hello', (151643,), None)
        """
        table, found_eos, special = read_tokenizer(tokenizer)
        eos = found_eos if eos_token_ids is None else eos_token_ids
        if not eos and eos_token_ids is None:
            raise ValueError(
                f"no EOS token id found on {type(tokenizer).__name__}; pass eos_token_ids=[...] explicitly"
            )
        return cls._checked(table, eos, size, special)

    @classmethod
    def _checked(
        cls,
        table: list[bytes | None],
        eos_token_ids: Iterable[int],
        size: int | None,
        special: Iterable[int],
    ) -> Vocabulary:
        """Validate sizes and ids, pad or trim `table` to `size`, and drop empty tokens."""
        if size is None:
            size = len(table)
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        kept = [i for i in range(size, len(table)) if table[i] is not None]
        if kept:
            first = kept[0]
            raise ValueError(f"size={size} leaves token {first} ({table[first]!r}) without a logit row")
        table = table[:size] + [None] * (size - len(table))
        # A token spelling b"" could be emitted forever without advancing the text.
        table = [None if b == b"" else b for b in table]
        eos = list(eos_token_ids)
        if not eos:
            raise ValueError("eos_token_ids is empty: a constrained generation could never end "
                             "(the mask after a complete match would allow no token); pass at least one id")
        bad = [e for e in eos if not isinstance(e, (int, np.integer)) or not 0 <= e < size]
        if bad:
            raise ValueError(f"EOS token id {bad[0]!r} is outside the vocabulary of size {size}")
        return cls(table, (int(e) for e in eos), size, (int(i) for i in special if 0 <= i < size))

    # ------------------------------------------------------------------ queries

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes spelled by `ids`; special tokens and padding rows spell nothing.

        Example:
            >>> Vocabulary.from_token_bytes([b"Hi", b"!", None], [2]).decode([0, 1, 2])
            b'Hi!'
        """
        table = self.token_bytes
        out = []
        for i in ids:
            if not 0 <= i < self.size:
                raise ValueError(f"token id {i!r} is outside the vocabulary of size {self.size}")
            out.append(table[i] or b"")
        return b"".join(out)

    def check_spells(self, byte_values: Iterable[int], what: str = "") -> None:
        """Raise unless every byte in `byte_values` occurs in some token.

        A byte that no token contains cannot appear in generated text, so a
        constraint that requires it can never be satisfied.

        Args:
            byte_values: byte values (a `bytes` object works).
            what: names the constraint in the error message.

        Raises:
            IncompatibleVocabularyError: naming the bytes no token contains.

        Example:
            >>> Vocabulary.from_token_bytes([b"0", b"1", None], [2]).check_spells(b"0110")
        """
        missing = sorted({int(b) for b in byte_values if not self._covered_bytes[int(b)]})
        if missing:
            raise IncompatibleVocabularyError(missing, what)

    @cached_property
    def _covered_bytes(self) -> np.ndarray:
        """``covered[b]`` is True when some token contains byte b."""
        covered = np.zeros(256, dtype=bool)
        joined = b"".join(b for b in self.token_bytes if b is not None)
        covered[np.frombuffer(joined, dtype=np.uint8)] = True
        return covered

    @cached_property
    def fingerprint(self) -> str:
        """A stable hash of (token bytes, EOS ids, size), to key caches of compiled constraints.

        Example:
            >>> a = Vocabulary.from_token_bytes([b"a", None], [1])
            >>> a.fingerprint == Vocabulary.from_token_bytes([b"a", None], [1]).fingerprint
            True
            >>> a.fingerprint == Vocabulary.from_token_bytes([b"a", None], [1], size=3).fingerprint
            False
        """
        lengths = np.array([-1 if b is None else len(b) for b in self.token_bytes], dtype="<i8")
        digest = hashlib.sha256(b"constrained.Vocabulary/1\0")
        digest.update(json.dumps({"size": self.size, "eos": list(self.eos_token_ids)}).encode())
        digest.update(lengths.tobytes())
        digest.update(b"".join(b for b in self.token_bytes if b is not None))
        return digest.hexdigest()[:32]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self.fingerprint == other.fingerprint and self.special_token_ids == other.special_token_ids

    def __hash__(self) -> int:
        return hash(self.fingerprint)

    def __repr__(self) -> str:
        return f"Vocabulary(size={self.size}, eos_token_ids={self.eos_token_ids}, fingerprint={self.fingerprint!r})"
