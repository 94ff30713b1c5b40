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

import numpy as np

__all__ = ["sample_masked", "masked_probs"]


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
    z = x.astype(np.float64) / max(temperature, 1e-6)
    top = z.max() if len(z) else -np.inf
    if not np.isfinite(top):
        return np.full(len(z), 1.0 / max(len(z), 1))
    p = np.exp(z - top)
    p /= p.sum()
    if top_p < 1.0:
        p = _top_p(p, top_p)
    return p


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
    if allowed is not None:
        if len(allowed) == 0:
            raise ValueError("no token is allowed here: the constraint reached a dead end")
        if len(allowed) == 1:  # forced: no need to look at the model
            return int(allowed[0])
    if temperature <= 0:
        x = logprobs if allowed is None else logprobs[allowed]
        i = int(np.argmax(x))
    else:
        p = masked_probs(logprobs, allowed, temperature, top_p)
        cdf = np.cumsum(p)
        i = int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(cdf) - 1))
    return i if allowed is None else int(allowed[i])
