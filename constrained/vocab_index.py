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

from constrained.lead_gap import GapStarts, gap_starts
from constrained.slices import (UTF8_SLICES, Slice, build_byteset_slice, build_slice, derive_utf8_slice,
                               nodes_by_byte, pack_bits, utf8_table)
from constrained.vocab_trie import VocabTrie
from constrained.work import WORK

if TYPE_CHECKING:
    from constrained.vocab import Vocabulary
    from grammars.json_values import WhitespacePolicy

__all__ = ["VocabIndex"]

_CACHE_SIZE = 4
# Byte-set slices kept per vocabulary (each ~0.6 MB on a 128k vocabulary).
_BYTESET_SLICES = 48
# UTF-8 slices minus a few more ASCII bytes kept per vocabulary (each ~0.8 MB on a 128k vocabulary).
_UTF8_SLICES = 16
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
        longest_token: the most bytes a usable token has.
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
        slices, self._slice_states = [], []
        for name, excluded in UTF8_SLICES.items():
            table = utf8_table(excluded)
            inside, count = self.trie.node_states(table.astype(np.int32))
            slices.append(build_slice(name, table, self.trie, self.usable, self.n_words, (inside, count)))
            # kept (3 bytes a node) to derive slices that exclude more ASCII bytes (`utf8_slice`)
            self._slice_states.append((inside.astype(np.int8), count))
        self.slices: tuple[Slice, ...] = tuple(slices)
        self._slice_masks = [sum(1 << b for b in range(0x80) if sl.table[0, b] >= 0) for sl in slices]
        self._nodes_by_byte = nodes_by_byte(self.trie)
        self._byteset_slices: "OrderedDict[int, Slice]" = OrderedDict()
        self._utf8_slices: "OrderedDict[int, Slice]" = OrderedDict()
        self.trie.token_paths                   # built now, so that no schema's first byte-set slice pays for it
        self._slice_lock = threading.Lock()
        for chars in COMMON_BYTESETS:
            self.byteset_slice(sum(1 << c for c in chars))
        self.first_bytes = frozenset(self.trie.byte[: self.trie.n_roots].tolist())
        # each token's first byte (0 for unusable ones), to exclude tokens by how they start
        self.first_byte = np.array([b[0] if b else 0 for b in self.token_bytes], dtype=np.uint8)
        self._gap_starts: dict = {}              # per whitespace policy, see `gap_starts`
        self._quote_tokens: tuple[VocabTrie, np.ndarray] | None = None   # see `quote_tokens`
        # the most bytes a usable token reads (see `constrained.twins`)
        self.longest_token = max((len(self.token_bytes[i]) for i in usable_ids), default=0)

    def quote_tokens(self) -> tuple[VocabTrie, np.ndarray]:
        """The usable tokens holding a `"` byte, as a trie, and their packed mask (made on first
        use): the tokens that may close a JSON key, walked for each state that shares its
        other tokens' mask with another (`constrained.key_twins`)."""
        got = self._quote_tokens
        if got is None:
            ids = [i for i in np.flatnonzero(self.usable).tolist() if 0x22 in self.token_bytes[i]]
            mask = np.zeros(self.size, dtype=bool)
            mask[ids] = True
            got = self._quote_tokens = (VocabTrie.build(self.token_bytes, ids), pack_bits(mask, self.n_words))
        return got

    @property
    def nbytes(self) -> int:
        slices = list(self.slices) + list(self._byteset_slices.values()) + list(self._utf8_slices.values())
        paths = sum(a.nbytes for a in self.trie.ascii_paths + self.trie.token_paths[1:])
        states = sum(a.nbytes for pair in self._slice_states for a in pair) + self._nodes_by_byte[0].nbytes
        return (self.trie.nbytes + paths + states + sum(s.nbytes for s in slices) + self.usable.nbytes
                + self.eos_bitmask.nbytes)

    def cached_byteset_slice(self, mask: int) -> Slice | None:
        """`byteset_slice(mask)` if it is built already, else None."""
        return self._cached(self._byteset_slices, mask)

    def byteset_slice(self, mask: int) -> Slice:
        """The slice of strings over the bytes of `mask` (built on first use, then cached)."""
        hit = self._cached(self._byteset_slices, mask)
        if hit is not None:
            return hit
        sl = build_byteset_slice(mask, self.trie, self.usable, self.n_words)
        return self._store(self._byteset_slices, mask, sl, _BYTESET_SLICES)

    def cached_utf8_slice(self, mask: int) -> Slice | None:
        """`utf8_slice(mask)` if it is built already, else None."""
        return self._cached(self._utf8_slices, mask)

    def utf8_slice(self, mask: int) -> Slice | None:
        """The slice of UTF-8 strings whose ASCII characters are the bytes of `mask` (built on
        first use, ~1 ms, then cached); None unless a `slices` entry excludes none of `mask`'s
        bytes (it is derived from one).

        Example: a search pattern `[0-9]` inside a JSON string loops on every character but
        the digits (and the quote, backslash, controls) until it meets one.
        """
        hit = self._cached(self._utf8_slices, mask)
        if hit is not None:
            return hit
        if mask >> 128:
            raise ValueError(f"UTF-8 slices exclude ASCII bytes only, got mask {mask:#x}")
        excluded = bytes(b for b in range(0x80) if not mask >> b & 1)
        for base, states, base_mask in zip(self.slices, self._slice_states, self._slice_masks):
            if not mask & ~base_mask:
                sl = derive_utf8_slice(base, states, excluded, self.trie, self._nodes_by_byte, self.n_words)
                return self._store(self._utf8_slices, mask, sl, _UTF8_SLICES)
        return None

    def _cached(self, cache: "OrderedDict[int, Slice]", mask: int) -> Slice | None:
        with self._slice_lock:
            hit = cache.get(mask)
            if hit is not None:
                cache.move_to_end(mask)
            return hit

    def _store(self, cache: "OrderedDict[int, Slice]", mask: int, sl: Slice, limit: int) -> Slice:
        with self._slice_lock:
            cache[mask] = sl
            while len(cache) > limit:               # least recently used first
                cache.popitem(last=False)
        return sl

    def gap_starts(self, policy: "WhitespacePolicy") -> GapStarts:
        """Where a JSON document's first mask walks from under whitespace `policy` (`lead_gap`), memoized."""
        got = self._gap_starts.get(policy)
        if got is None:
            got = self._gap_starts[policy] = gap_starts(self.trie, policy)
        return got

    @classmethod
    def for_vocab(cls, vocab: "Vocabulary") -> "VocabIndex":
        """The cached index of `vocab` (built on first use)."""
        key = str(vocab.fingerprint)
        with cls._lock:
            hit = cls._cache.get(key)
            if hit is not None:
                cls._cache.move_to_end(key)
                return hit
        with WORK:                              # (no huge pages for its temporaries: see `constrained.work`)
            index = cls(vocab)
        with cls._lock:
            cls._cache[key] = index
            while len(cls._cache) > _CACHE_SIZE:
                cls._cache.popitem(last=False)
        return index
