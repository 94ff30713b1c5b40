"""Masked sampling on the model's device: only the drawn token ids come back to the host.

The decode loop fixes, before each model call, how every row draws its next
token (`constrained.sampling.Pick`: the allowed ids or the FSM state they
come from, temperature, top-p and the row's uniform draw `u`). A backend
that samples on its device applies each row's mask there, from the state's
cached index mask (`constrained.index_masks`: built once per FSM state and
shared by every row and request of that constraint), and draws by the same
inverse-CDF rule as the host (`constrained.sampling.draw`): softmax of the
masked logits over the temperature (weights in float32), top-p kept by
mass, then the first id whose cumulative probability exceeds ``u`` times
the total (summed in float64 by torch on CPU and CUDA, as on the host; in
float32 by MLX, in two levels). So a row draws the same token on either
side but where ``u`` falls within rounding of a boundary between two ids
(the frameworks' float32 `exp` differ by an ulp), and its seed reproduces
it.

Where it pays:
- on a GPU (CUDA, Apple silicon), the host sampler would copy every row's
  full-vocabulary logits out of the device each step (512 KB per row for
  128k tokens) and wait for them; here one small id tensor comes back;
- MLX evaluates the draw in the same lazy graph as the forward pass, so one
  evaluation per step runs both;
- on a CPU the host sampler is cheaper: the logits are already in host
  memory (no copy), and it touches only the allowed entries (3 for a JSON
  state between members) where this touches the whole vocabulary.

The framework modules are imported inside the functions.

Example:
    >>> import torch  # doctest: +SKIP
    >>> torch_draw(torch.zeros(1, 4), [Pick(np.array([1, 3]), None, 0, 0.0, 1.0, 0.0)])  # doctest: +SKIP
    [1]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from constrained.index_masks import MLXIndexMask, TorchIndexMask, TorchRowMask, mask_cache, torch_mask_form

if TYPE_CHECKING:  # pragma: no cover
    import mlx.core as mx
    import torch

    from constrained.sampling import Pick

__all__ = ["torch_draw", "mlx_draw"]

# Logits below this (a model's -inf) are raised to it before masking, so a row whose model rules
# out every allowed id still has a finite maximum: its allowed ids tie and the draw is uniform over
# them (greedy: the first), as on the host; the masked ids stay at -inf. Divided by the least
# temperature it stays finite in float32.
_FLOOR = -1e20
_MIN_TEMPERATURE = 1e-6


def _temperature(pick: Pick) -> float:
    """What a row's logits are divided by: 1 for greedy rows, else at least `_MIN_TEMPERATURE` (the host's)."""
    return 1.0 if pick.temperature <= 0 else max(pick.temperature, _MIN_TEMPERATURE)


def torch_draw(logits: torch.Tensor, picks: Sequence[Pick]) -> list[int]:
    """The token of every row of `logits` (rows × vocabulary, any device) drawn by ``picks[row]``.

    One synchronization: the ids, as a list. Rows whose pick allows one id
    take it without looking at the logits.
    """
    import torch

    out: list[int | None] = [p.forced for p in picks]
    todo = [r for r, f in enumerate(out) if f is None]
    if not todo:
        return out  # type: ignore[return-value]
    device, cols = logits.device, logits.shape[-1]
    exact = torch.float64 if device.type in ("cpu", "cuda") else torch.float32   # (MPS has no float64)
    x = logits[todo] if len(todo) < logits.shape[0] else logits
    masked = torch.empty(x.shape, dtype=torch.float32, device=device)
    x = x.float().clamp(min=_FLOOR)   # (see _FLOOR: every row keeps a finite maximum)
    for j, r in enumerate(todo):
        mask = _torch_mask(picks[r], cols, device)
        if mask is None:
            masked[j].copy_(x[j])
        else:
            mask.write(masked[j], x[j])
    # (flags known on the host are read there: each `bool()` of a device tensor waits for the device)
    all_greedy = all(picks[r].temperature <= 0 for r in todo)
    temps = torch.tensor([_temperature(picks[r]) for r in todo], dtype=torch.float32, device=device)
    z = masked / temps.unsqueeze(1)
    top = z.max(dim=1, keepdim=True).values
    ids = z.argmax(dim=1)  # greedy rows (the first of equal maxima, as numpy's argmax)
    if not all_greedy:
        p = torch.exp(z - top).to(exact)   # float32 weights, as the host's; sums in float64
        p = p / p.sum(dim=1, keepdim=True)
        top_p = torch.tensor([picks[r].top_p for r in todo], dtype=exact, device=device)
        if any(picks[r].top_p < 1 for r in todo):
            p = _torch_top_p(p, top_p)
        cdf = torch.cumsum(p, dim=1)
        u = torch.tensor([picks[r].u for r in todo], dtype=exact, device=device)
        drawn = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1), right=True).squeeze(1)
        # u * total rounds up to the total only for u within an ulp of 1: take the last id drawn from
        last = cols - 1 - torch.flip(p > 0, dims=[1]).to(torch.int8).argmax(dim=1)
        greedy = torch.tensor([picks[r].temperature <= 0 for r in todo], device=device)
        ids = torch.where(greedy, ids, torch.minimum(drawn, last))
    for j, tok in zip(todo, ids.tolist()):
        out[j] = tok
    return out  # type: ignore[return-value]


def _torch_mask(pick: Pick, cols: int, device: Any) -> TorchIndexMask | TorchRowMask | None:
    """The pick's mask on `device`: its state's cached one (`torch_mask_form`), or index ids made from
    steered ids."""
    import torch

    if pick.ids is None:
        return None
    if pick.fsm is None:
        return TorchIndexMask(True, torch.from_numpy(pick.ids.astype(np.int64)).to(device))
    cache = mask_cache(pick.fsm, torch_mask_form(device))
    key = (pick.fsm.mask_key(pick.state), cols, device)
    mask = cache.get(key)
    return mask if mask is not None else cache.put(key, pick.fsm.bitmask(pick.state))


def _torch_top_p(p: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Each row's most likely entries until their mass reaches its top_p (the crossing one kept);
    rows with top_p 1 unchanged. Ties keep id order, as the host's stable sort."""
    import torch

    sp, order = torch.sort(p, dim=1, descending=True, stable=True)
    mass = torch.cumsum(sp, dim=1)
    keep_n = (mass < top_p.unsqueeze(1)).sum(dim=1) + 1
    keep_sorted = torch.arange(p.shape[1], device=p.device).unsqueeze(0) < keep_n.unsqueeze(1)
    keep = torch.zeros_like(keep_sorted).scatter_(1, order, keep_sorted)
    keep |= (top_p >= 1).unsqueeze(1)
    kept = p * keep
    return kept / kept.sum(dim=1, keepdim=True)


def mlx_draw(logits: mx.array, picks: Sequence[Pick]) -> list[int]:
    """`torch_draw` in `mx` ops (float32), in one evaluation with whatever `logits` still has to compute
    (the forward pass, when it is lazy)."""
    import mlx.core as mx

    out: list[int | None] = [p.forced for p in picks]
    todo = [r for r, f in enumerate(out) if f is None]
    if not todo:
        return out  # type: ignore[return-value]
    cols = logits.shape[-1]
    x = logits[mx.array(todo)] if len(todo) < logits.shape[0] else logits
    x = x.astype(mx.float32)
    x = mx.maximum(x.astype(mx.float32), _FLOOR)   # (see _FLOOR)
    masks = [_mlx_mask(picks[r], cols) for r in todo]
    z = mx.stack([x[j] if m is None else m.apply(x[j]) for j, m in enumerate(masks)])
    greedy = [picks[r].temperature <= 0 for r in todo]
    z = z / mx.array([_temperature(picks[r]) for r in todo], dtype=mx.float32)[:, None]
    top = mx.max(z, axis=1, keepdims=True)
    ids = mx.argmax(z, axis=1)
    if not all(greedy):
        p = mx.exp(z - top)
        p = p / mx.sum(p, axis=1, keepdims=True)
        top_p = mx.array([picks[r].top_p for r in todo], dtype=mx.float32)
        if min(picks[r].top_p for r in todo) < 1:
            order = mx.argsort(-p, axis=1)
            sp = mx.take_along_axis(p, order, axis=1)
            keep_n = mx.sum(mx.cumsum(sp, axis=1) < top_p[:, None], axis=1) + 1
            keep_sorted = mx.arange(cols)[None, :] < keep_n[:, None]
            keep = mx.put_along_axis(mx.zeros(p.shape, dtype=mx.bool_), order, keep_sorted, axis=1)
            kept = mx.where(keep | (top_p[:, None] >= 1), p, 0.0)
            p = kept / mx.sum(kept, axis=1, keepdims=True)
        u = mx.array([picks[r].u for r in todo], dtype=mx.float32)
        ids = mx.where(mx.array(greedy), ids, _mlx_inverse_cdf(p, u))
    for j, tok in zip(todo, ids.tolist()):
        out[j] = int(tok)
    return out  # type: ignore[return-value]


def _mlx_inverse_cdf(p: mx.array, u: mx.array, block: int = 256) -> mx.array:
    """Per row, the first id whose cumulative probability exceeds ``u`` times the row's total, in two
    levels: blocks of `block` ids by their sums, then the ids of the chosen block. A float32 running sum
    over 128k ids drifts by ~1e-4, more than most ids' probabilities; over ~500 block sums and then
    256 ids it stays near 1e-7, so the draw is the host's (float64) but at boundaries."""
    import mlx.core as mx

    rows, cols = p.shape
    blocks = -(-cols // block)
    tiles = mx.pad(p, [(0, 0), (0, blocks * block - cols)]).reshape(rows, blocks, block)
    sums = mx.cumsum(mx.sum(tiles, axis=2), axis=1)
    target = u * sums[:, -1]
    b = mx.minimum(mx.sum(sums <= target[:, None], axis=1), blocks - 1)          # searchsorted, right
    before = mx.where(b > 0, mx.take_along_axis(sums, mx.maximum(b - 1, 0)[:, None], axis=1)[:, 0], 0.0)
    inner = mx.take_along_axis(tiles, b[:, None, None], axis=1)[:, 0, :]
    k = mx.sum(mx.cumsum(inner, axis=1) <= (target - before)[:, None], axis=1)
    last = block - 1 - mx.argmax((inner > 0)[:, ::-1], axis=1)                  # rounding past the end
    return b * block + mx.minimum(k, last)


def _mlx_mask(pick: Pick, cols: int) -> MLXIndexMask | None:
    """The pick's mask over one row of `cols` logits: its state's cached one, or made from steered ids."""
    import mlx.core as mx

    if pick.ids is None:
        return None
    if pick.fsm is None:
        return MLXIndexMask(True, mx.array(pick.ids.astype(np.int32)))
    cache = mask_cache(pick.fsm, MLXIndexMask)
    key = (pick.fsm.mask_key(pick.state), (cols,))
    mask = cache.get(key)
    return mask if mask is not None else cache.put(key, pick.fsm.bitmask(pick.state))
