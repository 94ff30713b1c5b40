"""Byte classes: bytes that no mask tells apart move alike, so a DFA row needs one entry per class.

Example:
    >>> byte_classes({0b110}).tolist()[:4]
    [0, 1, 1, 0]
"""

from __future__ import annotations

import numpy as np

__all__ = ["byte_classes"]


def byte_classes(masks: set[int]) -> np.ndarray:
    """int32[256]: class id per byte; bytes in the same class are in exactly the
    same masks. Ids follow the lexicographic order of the bytes' membership
    columns (masks sorted), which is what `np.unique(..., axis=0)` gives and
    what `LazyDFA` used; this is ~20x faster than that.

    Example:
        >>> byte_classes({0b110}).tolist()[:4]
        [0, 1, 1, 0]
    """
    if not masks:
        return np.zeros(256, dtype=np.int32)
    ordered = sorted(masks)
    k = len(ordered)
    raw = np.frombuffer(b"".join(m.to_bytes(32, "little") for m in ordered), np.uint8)
    bits = np.unpackbits(raw.reshape(k, 32), axis=1, bitorder="little")  # (masks, 256)
    # Pack each byte's membership column along the mask axis (contiguous, fast),
    # zero-padded to whole 64-bit words: big-endian words keep lexicographic order.
    cols = np.zeros((-(-k // 64) * 8, 256), np.uint8)
    cols[: (k + 7) // 8] = np.packbits(bits, axis=0)
    words = np.ascontiguousarray(cols.T).view(">u8")  # (256, words)
    order = np.lexsort(words.T[::-1])  # last key is primary: the first word
    ranked = words[order]
    new = np.empty(256, np.int32)
    new[0] = 0
    new[1:] = (ranked[1:] != ranked[:-1]).any(axis=1)
    classes = np.empty(256, np.int32)
    classes[order] = np.cumsum(new, dtype=np.int32)
    return classes
