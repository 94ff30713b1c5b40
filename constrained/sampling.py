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
        """The token this pick takes from one row of logits or logprobs (a numpy row), on the host."""
        return draw(logits, self.ids, self.temperature, self.top_p, self.u)

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
    else:
        p = masked_probs(logits, allowed, temperature, top_p)
        cdf = np.cumsum(p)
        i = int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(cdf) - 1))
    return i if allowed is None else int(allowed[i])
