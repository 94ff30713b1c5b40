"""Ready per-state masks for the logits processors, as token ids, cached per FSM.

A state's mask is kept as the token ids it allows or the ids it forbids,
whichever are fewer (`mask_ids`): most states allow or forbid a few hundred
ids, so a cache holds every state a generation visits. Additive rows of
0 / -inf (512 KB each for 128k tokens) were evicted from a 32 MB cache and
rebuilt every few steps of a wandering model (160 distinct masks in 64 steps
of 8 rows), and a boolean `masked_fill` costs ~650 us per row on one CPU
thread. Each framework has its form: `MLXIndexMask` (`put_along_axis`) and
`TorchIndexMask` (`index_copy_` / `index_fill_`); all leave the input
logits unchanged. On a GPU, where a call costs its launch rather than its
bytes, torch masks are boolean rows instead (`TorchRowMask`, one
`masked_fill` for a whole batch).

The framework modules are imported inside the functions that need them.

Example:
    >>> import numpy as np
    >>> mask_ids(np.array([0b101], dtype=np.int32), 4)
    (True, array([0, 2]))
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import mlx.core as mx
    import torch

    from constrained.token_fsm import TokenFSM

__all__ = ["MaskCache", "HostIndexMask", "MLXIndexMask", "TorchIndexMask", "TorchRowMask", "apply_torch_masks",
           "apply_torch_masks_", "mask_cache", "mask_ids", "torch_mask_form", "unpack_bits", "MASK_BYTES"]

# Ready masks per FSM and framework, at most this many bytes each.
MASK_BYTES = 32 << 20


class MaskCache:
    """Ready masks of one FSM (in a framework's form), found by state, stored once per distinct mask.

    Many states share one mask: each character of a ``minLength: 500``
    string is its own DFA state, with the same allowed tokens. So states map
    to masks through the mask's packed bits; only distinct masks cost memory
    (an LRU bounded by `max_bytes`), and the state map holds references.
    """

    def __init__(self, max_bytes: int, build: Callable[[np.ndarray, tuple], Any], max_states: int = 1 << 14) -> None:
        self.max_bytes, self.max_states = max_bytes, max_states
        self._build = build                  # (packed bitmask, key) -> the ready mask (with an `nbytes`)
        self.nbytes = 0
        self._by_state: dict[tuple[Any, ...], Any] = {}
        self._by_bits: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> Any:
        """The mask of `key` = (state, *what the mask's form depends on), or None."""
        return self._by_state.get(key)

    def put(self, key: tuple[Any, ...], packed: np.ndarray) -> Any:
        """The mask of `key` whose allowed tokens are the bitmask `packed`, built on first sight."""
        bits_key = (packed.tobytes(), *key[1:])
        with self._lock:
            mask = self._by_bits.get(bits_key)
            if mask is None:
                mask = self._by_bits[bits_key] = self._build(packed, key)
                self.nbytes += mask.nbytes
                # keep at least the new mask, however large the vocabulary; the state map
                # is dropped with any evicted mask (it would keep it alive) and refills from hits
                while self.nbytes > self.max_bytes and len(self._by_bits) > 1:
                    self.nbytes -= self._by_bits.popitem(last=False)[1].nbytes
                    self._by_state.clear()
            else:
                self._by_bits.move_to_end(bits_key)
            if len(self._by_state) >= self.max_states:
                self._by_state.clear()            # rare: a fresh start beats per-entry LRU bookkeeping
            self._by_state[key] = mask
        return mask

    @property
    def num_masks(self) -> int:
        """Distinct masks held."""
        return len(self._by_bits)


_CACHES: "dict[type, weakref.WeakKeyDictionary[Any, MaskCache]]" = {}
_CACHES_LOCK = threading.Lock()


def mask_cache(fsm: TokenFSM, form: type) -> MaskCache:
    """The `MaskCache` of `fsm`'s masks in `form` (`MLXIndexMask`, `TorchIndexMask`), shared by every
    processor of that constraint, made on first use (at most `MASK_BYTES`)."""
    per_fsm = _CACHES.get(form)
    cache = per_fsm.get(fsm) if per_fsm is not None else None
    if cache is None:
        with _CACHES_LOCK:
            per_fsm = _CACHES.setdefault(form, weakref.WeakKeyDictionary())
            cache = per_fsm.setdefault(fsm, MaskCache(MASK_BYTES, form.of))
    return cache


def unpack_bits(packed: Any, vocab_cols: int) -> np.ndarray:
    """Boolean numpy row of `vocab_cols` entries from a packed int32 bitmask (columns past it: False).

    numpy unpacks in one pass over ~V/8 bytes, ~10x faster than the
    equivalent shifts in `mx` on CPU.
    """
    words = np.asarray(packed, dtype=np.int32).reshape(-1)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab_cols].astype(bool)
    if len(bits) < vocab_cols:
        bits = np.concatenate([bits, np.zeros(vocab_cols - len(bits), dtype=bool)])
    return bits


def mask_ids(packed: np.ndarray, cols: int) -> tuple[bool, np.ndarray]:
    """(allow, ids): the ids of `cols` columns the packed bitmask allows, or those it forbids (columns
    past it included), whichever are fewer; `allow` says which."""
    bits = unpack_bits(packed, cols)
    allowed = int(np.count_nonzero(bits))
    allow = allowed <= cols - allowed
    return allow, np.flatnonzero(bits if allow else ~bits)


class MLXIndexMask:
    """One state's mask over logits of `shape` (key: (state, shape)), an int32 `mx.array` of ids
    shaped to index the logits' last axis."""

    __slots__ = ("allow", "ids", "nbytes")

    def __init__(self, allow: bool, ids: mx.array) -> None:
        self.allow, self.ids, self.nbytes = allow, ids, max(int(ids.nbytes), 64)

    @classmethod
    def of(cls, packed: np.ndarray, key: tuple[Any, ...]) -> MLXIndexMask:
        import mlx.core as mx

        shape = key[1]
        allow, ids = mask_ids(packed, shape[-1])
        ids = mx.broadcast_to(mx.array(ids.astype(np.int32)), (*shape[:-1], len(ids)))
        mx.eval(ids)
        return cls(allow, ids)

    def apply(self, logits: mx.array) -> mx.array:
        """New logits: -inf outside the allowed ids (not changing `logits`)."""
        import mlx.core as mx

        if self.allow:
            kept = mx.take_along_axis(logits, self.ids, axis=-1)
            return mx.put_along_axis(mx.full(logits.shape, -mx.inf, logits.dtype), self.ids, kept, axis=-1)
        if not self.ids.size:
            return logits
        return mx.put_along_axis(logits, self.ids, mx.array(-mx.inf, logits.dtype), axis=-1)


class HostIndexMask:
    """One state's mask over `cols` numpy columns (key: (state, cols)): int64 ids allowed or forbidden."""

    __slots__ = ("allow", "ids", "nbytes")

    def __init__(self, allow: bool, ids: np.ndarray) -> None:
        self.allow, self.ids, self.nbytes = allow, ids, max(int(ids.nbytes), 64)

    @classmethod
    def of(cls, packed: np.ndarray, key: tuple[Any, ...]) -> HostIndexMask:
        allow, ids = mask_ids(packed, key[1])
        return cls(allow, ids)


class TorchIndexMask:
    """One state's mask over `cols` score columns (key: (state, cols, device)), an int64 tensor of ids."""

    __slots__ = ("allow", "ids", "nbytes")

    def __init__(self, allow: bool, ids: torch.Tensor) -> None:
        self.allow, self.ids, self.nbytes = allow, ids, max(int(ids.nbytes), 64)

    @classmethod
    def of(cls, packed: np.ndarray, key: tuple[Any, ...]) -> TorchIndexMask:
        import torch

        _state, cols, device = key
        allow, ids = mask_ids(packed, cols)
        return cls(allow, torch.from_numpy(ids).to(device))

    def write(self, out: torch.Tensor, scores: torch.Tensor) -> None:
        """`out` (a row, or rows) = `scores` with this mask applied, along the last dimension."""
        dim = out.dim() - 1
        if self.allow:
            out.fill_(float("-inf"))
            out.index_copy_(dim, self.ids, scores.index_select(dim, self.ids))
        else:
            out.copy_(scores)
            out.index_fill_(dim, self.ids, float("-inf"))

    def apply_(self, scores: torch.Tensor) -> None:
        """Mask `scores` (a row, or rows) in place: only the forbidden ids are written when they are
        the fewer."""
        dim = scores.dim() - 1
        if self.allow:
            kept = scores.index_select(dim, self.ids)
            scores.fill_(float("-inf"))
            scores.index_copy_(dim, self.ids, kept)
        else:
            scores.index_fill_(dim, self.ids, float("-inf"))


class TorchRowMask:
    """One state's mask over `cols` score columns on an accelerator (key: (state, cols, device)): a
    boolean row of the forbidden ids, applied by one `masked_fill`.

    On a GPU each torch call costs its launch on the host (~10 µs of Python and driver), not its
    bytes, so one call over the whole row beats `TorchIndexMask`'s three, and the rows of a batch are
    masked by one call too. A row costs one byte per token (151 KB for Qwen2's vocabulary) of device
    memory, within the cache's `MASK_BYTES`.
    """

    __slots__ = ("forbid", "nbytes")

    def __init__(self, forbid: torch.Tensor) -> None:
        self.forbid, self.nbytes = forbid, int(forbid.nbytes)

    @classmethod
    def of(cls, packed: np.ndarray, key: tuple[Any, ...]) -> TorchRowMask:
        import torch

        _state, cols, device = key
        return cls(torch.from_numpy(~unpack_bits(packed, cols)).to(device))

    def write(self, out: torch.Tensor, scores: torch.Tensor) -> None:
        """`out` = `scores` with this mask applied, along the last dimension."""
        out.copy_(scores)
        out.masked_fill_(self.forbid, float("-inf"))

    def apply_(self, scores: torch.Tensor) -> None:
        """Mask `scores` (a row, or rows) in place."""
        scores.masked_fill_(self.forbid, float("-inf"))


def torch_mask_form(device: torch.device) -> type:
    """The mask form for scores on `device`: index ids on the CPU (touching only the ids a mask
    names), boolean rows elsewhere (one launch)."""
    return TorchIndexMask if device.type == "cpu" else TorchRowMask


def apply_torch_masks_(scores: torch.Tensor, masks: list[TorchIndexMask] | list[TorchRowMask]) -> torch.Tensor:
    """`apply_torch_masks` in place: `scores` itself, masked (rows sharing one mask, or row masks, in
    one call)."""
    import torch

    first = masks[0]
    if all(m is first for m in masks):
        first.apply_(scores)
    elif isinstance(first, TorchRowMask):
        scores.masked_fill_(torch.stack([m.forbid for m in masks]), float("-inf"))
    else:
        for r, mask in enumerate(masks):
            mask.apply_(scores[r])
    return scores


def apply_torch_masks(scores: torch.Tensor, masks: list[TorchIndexMask] | list[TorchRowMask]) -> torch.Tensor:
    """New scores with row r masked by masks[r] (all rows at once when they share one mask, or when they
    are `TorchRowMask`s)."""
    import torch

    first = masks[0]
    if isinstance(first, TorchRowMask):
        forbid = first.forbid if all(m is first for m in masks) else torch.stack([m.forbid for m in masks])
        return scores.masked_fill(forbid, float("-inf"))
    out = torch.empty_like(scores)
    if all(m is first for m in masks):
        first.write(out, scores)
        return out
    for r, mask in enumerate(masks):
        mask.write(out[r], scores[r])
    return out
