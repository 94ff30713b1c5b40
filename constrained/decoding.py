"""The batched decode loop: many sequences, each with its own guide, one model call per step.

Every sequence (a *row*: one sample of one request) holds its token ids, a
`Guide` (None when unconstrained), its sampling settings and its own seeded
RNG. A step sends the full token sequence of every live row to the backend's
`batch_next_token_logprobs` in ONE call. The backend finds each row's longest
cached prefix in its token trie, so only the new tokens run through the model:
one per row after a sampled token, several after forced tokens, none for the
second of two identical rows (the `n` samples of a prompt share its prefill).

Forced tokens (`Guide.forced_tokens()`, e.g. the ``"name": "`` between two
fields) are appended without sampling; the next model call runs them all at
once as that row's suffix.

Near its `max_tokens`, a constrained row is steered (`constrained.budget`):
only tokens that keep a complete output within the budget are allowed, so
it ends "complete" instead of cut off; `Row.steered` counts those steps.

Rows finish independently ("complete" on EOS or when only EOS can follow,
"max_tokens", or "error"); a backend failure is retried row by row, so it only
marks the row(s) that caused it, and an exception in a row's own work (its
constraint outgrowing `max_states`, say) ends that row alone with its message.

Why FSM states are not stored in the trie (`TokenTrie.set_state`): a row's
guide moves by one memoized table lookup per token (`TokenFSM.next_state`),
and every per-state mask is computed once and shared by all rows through the
`TokenFSM`, so a trie lookup would cost more than it saves. The trie also
belongs to the backend's worker thread, while guides live on the event loop.

Example:
    >>> rows = [Row(prompt=(1, 2), guide=None, eos=frozenset({0}), max_tokens=4,
    ...             temperature=1.0, top_p=1.0, rng=np.random.default_rng(0))]  # doctest: +SKIP
    >>> asyncio.run(decode(lm, rows))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from constrained.sampling import sample_masked

if TYPE_CHECKING:
    from backends.base import AsyncLM
    from constrained.budget import Completions
    from constrained.guide import Guide

__all__ = ["Row", "decode"]


@dataclass(eq=False)
class Row:
    """One sequence being decoded.

    Attributes:
        prompt: prompt token ids.
        guide: the constraint cursor, or None for free generation.
        eos: ids that end the sequence.
        max_tokens: most generated tokens (EOS not counted).
        tokens: generated ids so far (EOS excluded).
        status: None while running, then "complete", "max_tokens" or "error".
        error: what went wrong, for status "error".
        forced: how many of `tokens` were forced rather than sampled.
        budget: shortest completions of the guide's FSM, to end complete
            within `max_tokens` (None: never steered).
        steered: how many sampled tokens the budget restricted.
    """

    prompt: tuple[int, ...]
    guide: Guide | None
    eos: frozenset[int]
    max_tokens: int
    temperature: float
    top_p: float
    rng: np.random.Generator
    tokens: list[int] = field(default_factory=list)
    status: str | None = None
    error: str | None = None
    forced: int = 0
    budget: Completions | None = None
    steered: int = 0

    def sequence(self) -> tuple[int, ...]:
        """Prompt plus generated ids: what the next model call must see."""
        return self.prompt + tuple(self.tokens)

    def start(self) -> None:
        """Before the first model call: take the forced prefix, finish if nothing can follow."""
        self._after_token()

    def step(self, logprobs: np.ndarray) -> None:
        """Sample the next token from `logprobs`, then append any forced tokens."""
        allowed = None if self.guide is None else self.guide.allowed_token_ids()
        budget, left = self.budget, self.max_tokens - len(self.tokens)
        steer = None if budget is None else budget.steer(self.guide.state, left)
        try:
            tok = sample_masked(logprobs, allowed if steer is None else steer, self.temperature, self.top_p, self.rng)
            if steer is None and budget is not None and tok not in self.eos and not budget.fits(self.guide.state, tok, left):
                # the token would leave too few tokens to complete: draw again among those that do not
                steer = budget.steer(self.guide.state, left, force=True)
                if steer is not None:
                    tok = sample_masked(logprobs, steer, self.temperature, self.top_p, self.rng)
        except ValueError as e:
            self.fail(str(e))
            return
        self.steered += steer is not None
        if tok in self.eos:
            self.status = "complete"
            return
        if self.guide is not None and not self.guide.advance(tok):  # cannot happen: tok was allowed
            self.fail(f"internal error: sampled token {tok} was rejected by the guide")
            return
        self.tokens.append(tok)
        self._after_token()

    def _after_token(self) -> None:
        guide = self.guide
        if guide is not None:
            while not guide.is_finished() and len(self.tokens) < self.max_tokens:
                forced = guide.forced_tokens()[: self.max_tokens - len(self.tokens)]
                if not forced:
                    break
                for tok in forced:
                    guide.advance(tok)
                self.tokens.extend(forced)
                self.forced += len(forced)
            if guide.is_finished():  # only EOS may follow: no need to ask the model
                self.status = "complete" if guide.is_accepting() else None
                if self.status is None:
                    self.fail("internal error: the constraint reached a dead end")
                return
        if len(self.tokens) >= self.max_tokens:
            # EOS is not counted in max_tokens: a complete text at the limit ends complete
            self.status = "complete" if guide is not None and guide.is_accepting() else "max_tokens"

    def fail(self, message: str) -> None:
        self.status, self.error = "error", message


async def decode(lm: AsyncLM, rows: Sequence[Row], on_done: Callable[[Row], None] | None = None) -> None:
    """Run every row to completion, one batched backend call per step.

    Args:
        lm: the backend.
        rows: rows to run; those already finished are skipped.
        on_done: called once per row as it finishes (progress bars).
    """
    active = []
    for row in rows:
        if row.status is None:
            _guarded(row, row.start)
        if row.status is None:
            active.append(row)
        elif on_done is not None:
            on_done(row)
    while active:
        results = await _logprobs(lm, [row.sequence() for row in active])
        still = []
        for row, lp in zip(active, results):
            if isinstance(lp, BaseException):
                row.fail(f"backend error: {type(lp).__name__}: {lp}")
            else:
                _guarded(row, row.step, lp)
            if row.status is None:
                still.append(row)
            elif on_done is not None:
                on_done(row)
        active = still


def _guarded(row: Row, work: Callable[..., None], *args: Any) -> None:
    """`work(*args)`; an exception fails `row` only (status "error", with the exception's message)."""
    try:
        work(*args)
    except Exception as e:  # noqa: BLE001 - one row's failure must not end the others
        row.fail(f"{type(e).__name__}: {e}")


async def _logprobs(lm: AsyncLM, seqs: list[tuple[int, ...]]) -> list[Any]:
    """Logprobs for every sequence; on failure, retry one by one so only the failing rows get the error."""
    try:
        return list(await lm.batch_next_token_logprobs(seqs))
    except Exception as e:
        if len(seqs) == 1:
            return [e]
    out: list[Any] = []
    for seq in seqs:
        try:
            out.append((await lm.batch_next_token_logprobs([seq]))[0])
        except Exception as e:  # one bad row must not take down the batch
            out.append(e)
    return out
