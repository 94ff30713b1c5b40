"""Arrays for `constrained.dfa_jit.JitDFA`: its kernels' inputs, its tables' growth, its walk's buffers.

Small helpers, each called a dozen times a compile, where numpy's own Python
wrappers and fresh allocations showed in a cold compile's time.

Example:
    >>> grown(filled(2, 7, np.int32), 4, -1).tolist()
    [7, 7, -1, -1]
    >>> raw_masks((1, 1 << 255)).shape
    (2, 32)
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["NO_WORDS", "filled", "grown", "raw_masks", "walk_buffers"]

_local = threading.local()
NO_WORDS = np.zeros(0, np.uint32)          # `JitDFA.walk_tokens` without a packed mask


def walk_buffers(trie, n_start: int) -> list[np.ndarray]:
    """This thread's walk buffers, reused across walks: fresh ones cost page faults
    on every walk (megabytes on a 128k vocabulary), worst in a forked worker."""
    tokens, nodes = trie.n_tokens, trie.n_nodes + n_start + 1
    bufs = getattr(_local, "bufs", None)
    if bufs is None or len(bufs[0]) < tokens or len(bufs[2]) < nodes:
        tokens = max(tokens, len(bufs[0]) if bufs else 0)
        nodes = max(nodes + 64, len(bufs[2]) if bufs else 0)
        bufs = _local.bufs = [np.empty(tokens, np.int32), np.empty(tokens, np.int32)] + [
            np.empty(nodes, np.int32) for _ in range(4)]
    return bufs


# Each byte mask's 32 little-endian bytes, memoized: the masks of schemas repeat (characters,
# JSON's structural bytes, UTF-8 ranges), and converting a few dozen per compile added up.
_MASK_BYTES: dict[int, bytes] = {}


def _mask_bytes(mask: int) -> bytes:
    if len(_MASK_BYTES) >= 1 << 16:
        _MASK_BYTES.clear()
    out = _MASK_BYTES[mask] = mask.to_bytes(32, "little")
    return out


def raw_masks(masks: tuple[int, ...]) -> np.ndarray:
    """The byte masks as the kernels read them: uint8[len(masks), 32], little-endian."""
    known = _MASK_BYTES.get
    return np.frombuffer(b"".join([known(m) or _mask_bytes(m) for m in masks]), np.uint8).reshape(len(masks), 32)


def filled(shape: int | tuple[int, int], fill: Any, dtype: Any) -> np.ndarray:
    """`np.full` without its Python wrapper (half the time; a compile makes a dozen of these)."""
    out = np.empty(shape, dtype=dtype)
    out.fill(fill)
    return out


def grown(a: np.ndarray, size: int, fill: Any) -> np.ndarray:
    out = filled(size, fill, a.dtype)
    out[: len(a)] = a
    return out
