"""Per-vocabulary precomputation shared by every constraint compiled for it.

Building the trie of a 128k-token vocabulary and its slices takes a fraction
of a second; it depends only on the vocabulary, so it is done once and cached
by the vocabulary's fingerprint.

Example:
    >>> from types import SimpleNamespace
    >>> v = SimpleNamespace(token_bytes=(b"a", b"b", None), eos_token_ids=(2,), size=3, fingerprint="ab")
    >>> index = VocabIndex.for_vocab(v)
    >>> index.trie.n_tokens, index.eos_ids.tolist(), index.n_words
    (2, [2], 1)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from constrained.slices import UTF8_SLICES, Slice, build_byteset_slice, build_slice, pack_bits, utf8_table
from constrained.vocab_trie import VocabTrie

if TYPE_CHECKING:
    from constrained.vocab import Vocabulary

__all__ = ["VocabIndex"]

_CACHE_SIZE = 4
# Byte-set slices kept per vocabulary (each ~0.6 MB on a 128k vocabulary).
_BYTESET_SLICES = 48
_DIGITS = b"0123456789"
_LOWER = bytes(range(ord("a"), ord("z") + 1))
_UPPER = bytes(range(ord("A"), ord("Z") + 1))
# Byte sets that JSON numbers, formats and common patterns loop on: built with
# the index (~1-3 ms each) so that no schema's first mask pays for them.
COMMON_BYTESETS: tuple[bytes, ...] = (
    _DIGITS, _DIGITS[1:], _LOWER, _UPPER, _LOWER + _UPPER, _DIGITS + _LOWER + _UPPER,
    _DIGITS + _UPPER + b"_" + _LOWER, _DIGITS + b"ABCDEFabcdef", _DIGITS + _UPPER,
)


class VocabIndex:
    """Trie, slices and EOS facts of one vocabulary.

    Attributes:
        size: number of token ids (model logit rows).
        n_words: int32 words of a packed bitmask, ceil(size / 32).
        eos_ids: sorted int32 EOS ids.
        eos_bitmask: packed mask of the EOS ids.
        usable: bool[size], tokens that may appear inside constrained text
            (has bytes, not empty, not EOS).
        trie: trie of the usable tokens.
        slices: precomputed slices, largest language first.
    """

    _cache: "OrderedDict[str, VocabIndex]" = OrderedDict()
    _lock = threading.Lock()

    def __init__(self, vocab: "Vocabulary") -> None:
        self.token_bytes = tuple(vocab.token_bytes)
        self.size = int(vocab.size)
        self.n_words = (self.size + 31) // 32
        eos = sorted({int(i) for i in vocab.eos_token_ids if 0 <= int(i) < self.size})
        self.eos_ids = np.array(eos, dtype=np.int32)
        self.eos_set = frozenset(eos)
        is_eos = np.zeros(self.size, dtype=bool)
        is_eos[self.eos_ids] = True
        self.eos_bitmask = pack_bits(is_eos, self.n_words)
        self.usable = np.fromiter((bool(b) for b in self.token_bytes), dtype=bool, count=self.size) & ~is_eos
        usable_ids = np.flatnonzero(self.usable).tolist()
        self.trie = VocabTrie.build(self.token_bytes, usable_ids)
        self.slices: tuple[Slice, ...] = tuple(
            build_slice(name, utf8_table(excluded), self.trie, self.usable, self.n_words)
            for name, excluded in UTF8_SLICES.items()
        )
        self._byteset_slices: "OrderedDict[int, Slice]" = OrderedDict()
        self.trie.token_paths                   # built now, so that no schema's first byte-set slice pays for it
        self._slice_lock = threading.Lock()
        for chars in COMMON_BYTESETS:
            self.byteset_slice(sum(1 << c for c in chars))
        self.first_bytes = frozenset(self.trie.byte[: self.trie.n_roots].tolist())
        # each token's first byte (0 for unusable ones), to exclude tokens by how they start
        self.first_byte = np.array([b[0] if b else 0 for b in self.token_bytes], dtype=np.uint8)

    @property
    def nbytes(self) -> int:
        slices = list(self.slices) + list(self._byteset_slices.values())
        paths = sum(a.nbytes for a in self.trie.ascii_paths + self.trie.token_paths[1:])
        return (self.trie.nbytes + paths + sum(s.nbytes for s in slices) + self.usable.nbytes
                + self.eos_bitmask.nbytes)

    def cached_byteset_slice(self, mask: int) -> Slice | None:
        """`byteset_slice(mask)` if it is built already, else None."""
        with self._slice_lock:
            hit = self._byteset_slices.get(mask)
            if hit is not None:
                self._byteset_slices.move_to_end(mask)
            return hit

    def byteset_slice(self, mask: int) -> Slice:
        """The slice of strings over the bytes of `mask` (built on first use, then cached)."""
        with self._slice_lock:
            hit = self._byteset_slices.get(mask)
            if hit is not None:
                self._byteset_slices.move_to_end(mask)
                return hit
        sl = build_byteset_slice(mask, self.trie, self.usable, self.n_words)
        with self._slice_lock:
            self._byteset_slices[mask] = sl
            while len(self._byteset_slices) > _BYTESET_SLICES:
                self._byteset_slices.popitem(last=False)
        return sl

    @classmethod
    def for_vocab(cls, vocab: "Vocabulary") -> "VocabIndex":
        """The cached index of `vocab` (built on first use)."""
        key = str(vocab.fingerprint)
        with cls._lock:
            hit = cls._cache.get(key)
            if hit is not None:
                cls._cache.move_to_end(key)
                return hit
        index = cls(vocab)
        with cls._lock:
            cls._cache[key] = index
            while len(cls._cache) > _CACHE_SIZE:
                cls._cache.popitem(last=False)
        return index
