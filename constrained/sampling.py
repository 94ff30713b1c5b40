"""Sampling one token from next-token log-probabilities, optionally restricted to allowed ids.

Constrained sampling draws from the model's distribution *renormalized* over
the allowed ids: ``p(i) = exp(lp_i / T) / sum_{j allowed} exp(lp_j / T)``,
then top-p keeps the smallest set of those whose mass reaches `top_p`. Only
the allowed entries are touched, so a state allowing 3 tokens costs 3 exps,
not one per vocabulary row.

Example:
    >>> import numpy as np
    >>> lp = np.log(np.array([0.5, 0.3, 0.2], dtype=np.float32))
    >>> sample_masked(lp, np.array([1, 2]), 0.0, 1.0, np.random.default_rng(0))
    1
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from constrained.token_fsm import TokenFSM

__all__ = ["Pick", "sample_masked", "masked_probs", "draw"]


@dataclass(frozen=True, slots=True)
class Pick:
    """How to draw one row's next token, fixed before the model call: what a backend needs to sample
    on its device, so that only the token id comes back.

    Attributes:
        ids: sorted allowed ids (None: every id).
        fsm, state: where the ids come from when they are a state's whole mask (`ids` is then
            `fsm.allowed_token_ids(state)`), so a backend can use its cached device mask of that
            state; fsm is None for budget-steered ids, which are few.
        temperature: 0 picks the most likely allowed id.
        top_p: nucleus mass in (0, 1].
        u: the row's uniform draw in [0, 1) (0 when none is needed).
        steered: the ids are the budget's restriction (`Completions.steer`).
    """

    ids: np.ndarray | None
    fsm: TokenFSM | None
    state: int
    temperature: float
    top_p: float
    u: float
    steered: bool = False

    @property
    def forced(self) -> int | None:
        """The one allowed id, when there is only one (no model output needed)."""
        return int(self.ids[0]) if self.ids is not None and len(self.ids) == 1 else None

    def draw(self, logits: Any) -> int:
        """The token this pick takes from one row of logits or logprobs (a numpy row), on the host.

        A state that allows most of the vocabulary (inside a string) is drawn
        over the whole row with its few forbidden ids at -inf, rather than
        gathering ~100k allowed entries (the same token: forbidden entries add
        zeros to the cumulative sums); greedy first tries the row's argmax.
        """
        ids = self.ids
        if self.fsm is not None and ids is not None and 2 * len(ids) > len(logits) and len(ids) > 1:
            if self.temperature <= 0:
                best = int(np.argmax(logits))
                bits = self.fsm.bitmask(self.state)
                if best < len(bits) * 32 and (int(bits[best >> 5]) >> (best & 31)) & 1:
                    return best     # the first maximum overall is allowed: it is the first allowed maximum
            forbid = self._forbidden(len(logits))
            if forbid is not None:
                x = np.array(logits, dtype=np.float32)
                x[forbid] = -np.inf
                if np.isfinite(x.max()):  # (every allowed id at -inf: the subset's uniform fallback below)
                    return draw(x, None, self.temperature, self.top_p, self.u)
        return draw(logits, ids, self.temperature, self.top_p, self.u)

    def _forbidden(self, cols: int) -> np.ndarray | None:
        """The state's forbidden ids among `cols` (cached per state), or None if its mask lists allowed ones."""
        from constrained.index_masks import HostIndexMask, mask_cache

        cache = mask_cache(self.fsm, HostIndexMask)
        key = (self.fsm.mask_key(self.state), cols)
        mask = cache.get(key)
        if mask is None:
            mask = cache.put(key, self.fsm.bitmask(self.state))
        return None if mask.allow else mask.ids

    @staticmethod
    def needs_u(ids: np.ndarray | None, temperature: float) -> bool:
        """Whether drawing from `ids` consumes a uniform (not greedy, not a single id)."""
        return temperature > 0 and (ids is None or len(ids) > 1)


def masked_probs(logprobs: np.ndarray, allowed: np.ndarray | None, temperature: float, top_p: float) -> np.ndarray:
    """The sampling distribution over `allowed` (or every id when None), as float64 summing to 1.

    If the model gives every allowed id zero probability (all ``-inf``), the
    distribution falls back to uniform over `allowed`: the constraint must
    still be met, and no allowed id is better than another then.

    Example:
        >>> lp = np.log(np.array([0.5, 0.3, 0.2]))
        >>> masked_probs(lp, np.array([1, 2]), 1.0, 1.0).round(2).tolist()
        [0.6, 0.4]
        >>> masked_probs(lp, None, 1.0, 0.7).round(3).tolist()  # 0.5 + 0.3 reaches 0.7
        [0.625, 0.375, 0.0]
    """
    x = logprobs if allowed is None else logprobs[allowed]
    w = _weights(x, temperature)
    if w is None:
        return np.full(len(x), 1.0 / max(len(x), 1))
    p = w.astype(np.float64)
    p /= p.sum()
    if top_p < 1.0:
        p = _top_p(p, top_p)
    return p


def _weights(x: np.ndarray, temperature: float) -> np.ndarray | None:
    """``exp((x - max) / T)`` in float32 (numpy's float64 exp is ~10x slower: 1.3 ms over 128k ids
    here), or None when every entry is -inf."""
    z = np.asarray(x, dtype=np.float32) / np.float32(max(temperature, 1e-6))
    top = z.max() if len(z) else -np.inf
    if not np.isfinite(top):
        return None
    return np.exp(z - top)


def _inverse_cdf(w: np.ndarray, u: float, block: int = 256) -> int:
    """The first index whose cumulative weight exceeds ``u`` times the total (searchsorted, side right),
    summed in float64 in two levels, blocks then the chosen block's entries: a fraction of one
    cumulative sum over 128k entries, and as exact."""
    n = len(w)
    if n <= 16 * block:
        cdf = np.cumsum(w, dtype=np.float64)
        return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), n - 1))
    full = n - n % block
    sums = w[:full].reshape(-1, block).sum(axis=1, dtype=np.float64)
    if full < n:
        sums = np.append(sums, w[full:].sum(dtype=np.float64))
    sums = np.cumsum(sums)
    target = u * sums[-1]
    b = int(min(np.searchsorted(sums, target, side="right"), len(sums) - 1))
    seg = w[b * block : (b + 1) * block]
    cdf = np.cumsum(seg, dtype=np.float64) + (sums[b - 1] if b else 0.0)
    k = int(np.searchsorted(cdf, target, side="right"))
    if k >= len(seg) or seg[k] == 0:   # rounding past the block's last positive entry
        k = int(np.flatnonzero(seg)[-1])
    return b * block + k


def _top_p(p: np.ndarray, top_p: float) -> np.ndarray:
    """Keep the most likely entries until their mass reaches `top_p`; renormalize."""
    order = np.argsort(-p, kind="stable")
    mass = np.cumsum(p[order])
    keep = int(np.searchsorted(mass, top_p, side="left")) + 1  # the entry that crosses top_p stays
    out = np.zeros_like(p)
    kept = order[:keep]
    out[kept] = p[kept]
    return out / out.sum()


def sample_masked(
    logprobs: np.ndarray,
    allowed: np.ndarray | None,
    temperature: float,
    top_p: float,
    rng: np.random.Generator,
) -> int:
    """Draw a token id from `logprobs` restricted to the sorted ids `allowed` (None = all ids).

    Args:
        logprobs: next-token log-probabilities, one per vocabulary row.
        allowed: int array of allowed ids (e.g. `Guide.allowed_token_ids()`), or None.
        temperature: 0 picks the most likely allowed id; otherwise logits are divided by it.
        top_p: nucleus sampling mass in (0, 1]; 1 disables it.
        rng: the sample's own generator (one uniform draw per call, none when forced).

    Returns:
        The sampled token id.

    Raises:
        ValueError: `allowed` is empty (the constraint reached a dead end).

    Example:
        >>> sample_masked(np.zeros(4), np.array([3]), 1.0, 1.0, np.random.default_rng(0))
        3
    """
    if allowed is not None and len(allowed) == 0:
        raise ValueError("no token is allowed here: the constraint reached a dead end")
    return draw(logprobs, allowed, temperature, top_p, rng.random() if Pick.needs_u(allowed, temperature) else 0.0)


def draw(logits: np.ndarray, allowed: np.ndarray | None, temperature: float, top_p: float, u: float) -> int:
    """`sample_masked` with its uniform draw `u` given: inverse-CDF sampling over the allowed ids in id
    order, which a backend's device sampler reproduces (`constrained.device_sampling`).

    `logits` may be logprobs or raw logits: the distribution does not change
    when a row is shifted by a constant.

    Example:
        >>> draw(np.log(np.array([0.5, 0.3, 0.2])), None, 1.0, 1.0, 0.6)  # cdf 0.5, 0.8, 1.0
        1
    """
    if allowed is not None and len(allowed) == 1:  # forced: no need to look at the model
        return int(allowed[0])
    if temperature <= 0:
        x = logits if allowed is None else logits[allowed]
        i = int(np.argmax(x))
    elif top_p < 1.0:
        i = _inverse_cdf(masked_probs(logits, allowed, temperature, top_p), u)
    else:
        x = logits if allowed is None else logits[allowed]
        w = _weights(x, temperature)
        i = min(int(u * len(x)), len(x) - 1) if w is None else _inverse_cdf(w, u)  # None: uniform
    return i if allowed is None else int(allowed[i])
