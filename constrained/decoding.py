"""The batched decode loop: many sequences, each with its own guide, one model call per step.

Every sequence (a *row*: one sample of one request) holds its token ids, a
`Guide` (None when unconstrained), its sampling settings and its own seeded
RNG. A step asks the backend for every running row's next-token logprobs in
ONE call, in one of two ways:

- on a backend with `live_decoding` (`HFLM`, `MLXLM`), the rows sit in one
  KV batch that stays alive in the backend (`constrained.live.LiveBatch`): a
  row joins it once, its sequence prefilled through the token trie (the `n`
  samples of a prompt share one prefill), then each step feeds it only the
  tokens it appended, and it leaves when it finishes, its KV stored back in
  the trie. A step costs one token per row, with no trie lookup and no KV
  copied. The rows' draws are fixed before the call (`Row.plan`: a `Pick`
  of mask, settings and the row's uniform) and made in the backend, on the
  model's device where it samples there, so only token ids come back;
- otherwise (`MockLM`), the full token sequence of every row goes to
  `batch_next_token_logprobs`; the backend finds each row's longest cached
  prefix in its trie, so only the new tokens run through the model.

Forced tokens (`Guide.forced_tokens()`, e.g. the ``"name": "`` between two
fields) are appended without sampling; the next model call runs them all at
once, beside the other rows' single tokens.

Near its `max_tokens`, a constrained row is steered (`constrained.budget`):
only tokens that keep a complete output within the budget are allowed, so
it ends "complete" instead of cut off; `Row.steered` counts those steps.

Rows finish independently ("complete" on EOS or when only EOS can follow,
"max_tokens", or "error"); a backend failure is retried row by row, so it only
marks the row(s) that caused it, and an exception in a row's own work (its
constraint outgrowing `max_states`, say) ends that row alone with its message.

Why FSM states are not stored in the trie (`TokenTrie.set_state`): a row's
guide moves by one memoized lookup per token (`TokenFSM.next_state`: 0.31 us
per token on the llama-bpe vocabulary), and every per-state mask is computed
once and shared by all rows through the `TokenFSM`, so a trie lookup would
cost more than it saves (`get_state` of a 200-token prompt's continuation:
7.6 us, a walk from the root). A row that continues another's prefix (the
`n` samples of a prompt, a server's next turn) replays its prefix through
the guide instead: 0.31 us per token, and no bytes of the trie's budget. The
trie also belongs to the backend's worker thread, while guides live on the
event loop.

Example:
    >>> rows = [Row(prompt=(1, 2), guide=None, eos=frozenset({0}), max_tokens=4,
    ...             temperature=1.0, top_p=1.0, rng=np.random.default_rng(0))]  # doctest: +SKIP
    >>> asyncio.run(decode(lm, rows))  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from constrained.live import LiveBatch
from constrained.sampling import Pick

if TYPE_CHECKING:
    from backends.base import AsyncLM
    from constrained.budget import Completions
    from constrained.guide import Guide

__all__ = ["DecodeLoop", "Row", "decode"]


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

    def plan(self) -> Pick | None:
        """How the next token is drawn (its mask, settings and uniform draw), fixed before the model call;
        None when no token is allowed (the constraint reached a dead end: the row has failed)."""
        guide, budget = self.guide, self.budget
        steer = None if budget is None else budget.steer(guide.state, self.max_tokens - len(self.tokens))
        if steer is not None:
            ids, fsm = steer, None
        elif guide is not None:
            ids, fsm = guide.allowed_token_ids(), guide.fsm
        else:
            ids, fsm = None, None
        return self._pick(ids, fsm, steered=steer is not None)

    def _pick(self, ids: np.ndarray | None, fsm: Any, steered: bool) -> Pick | None:
        if ids is not None and len(ids) == 0:
            self.fail("no token is allowed here: the constraint reached a dead end")
            return None
        u = self.rng.random() if Pick.needs_u(ids, self.temperature) else 0.0
        state = -1 if self.guide is None else self.guide.state
        return Pick(ids, fsm, state, self.temperature, self.top_p, u, steered)

    def step(self, logprobs: np.ndarray, pick: Pick | None = None) -> None:
        """Draw the next token from `logprobs` (one row, on the host) by `pick` (default: `plan()`),
        then append it and any forced tokens."""
        pick = self.plan() if pick is None else pick
        if pick is None:
            return
        again = self.take(pick.draw(logprobs), pick)
        if again is not None:
            self.take(again.draw(logprobs), again)

    def take(self, tok: int, pick: Pick) -> Pick | None:
        """Append `tok`, drawn by `pick`, then any forced tokens. Returns the pick to draw again by,
        from the same logits, when the budget refuses `tok` (it would leave too few tokens to complete);
        the token is then not taken."""
        budget, left = self.budget, self.max_tokens - len(self.tokens)
        if not pick.steered and budget is not None and tok not in self.eos and not budget.fits(self.guide.state, tok, left):
            steer = budget.steer(self.guide.state, left, force=True)
            if steer is not None:
                return self._pick(steer, None, steered=True)
        self.steered += pick.steered
        if tok in self.eos:
            self.status = "complete"
            return None
        if self.guide is not None and not self.guide.advance(tok):  # cannot happen: tok was allowed
            self.fail(f"internal error: sampled token {tok} was rejected by the guide")
            return None
        self.tokens.append(tok)
        self._after_token()
        return None

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


async def decode(
    lm: AsyncLM,
    rows: Sequence[Row],
    on_done: Callable[[Row], None] | None = None,
    on_token: Callable[[Row], None] | None = None,
) -> None:
    """Run every row to completion, one batched backend call per step.

    Args:
        lm: the backend.
        rows: rows to run; those already finished are skipped.
        on_done: called once per row as it finishes (progress bars).
        on_token: called after a row appended tokens (sampled or forced), to stream them.
    """
    await DecodeLoop(lm).run(rows, on_done=on_done, on_token=on_token)


@dataclass(eq=False)
class _Group:
    """The rows of one `DecodeLoop.run` call, with its callbacks and the future it awaits."""

    done: asyncio.Future[None]
    left: int
    on_done: Callable[[Row], None] | None
    on_token: Callable[[Row], None] | None


class DecodeLoop:
    """The decode loop, open to rows that join while it runs (continuous batching).

    Each step runs every live row, whoever added it, in ONE backend call
    (on its live KV batch where the backend keeps one). Rows added by `run`
    join at the next step and leave as they finish, so concurrent callers
    (a server's requests) share model
    calls and the backend's prefix trie. `decode` runs a private loop; a
    server keeps one per model. A loop belongs to the event loop it first ran on.

    Cancelling a `run` call cancels its rows (status "error", "cancelled"):
    they leave at the next step boundary, and the other rows go on untouched.

    Example:
        >>> loop = DecodeLoop(lm)  # doctest: +SKIP
        >>> await asyncio.gather(loop.run(rows_a), loop.run(rows_b))  # doctest: +SKIP
    """

    def __init__(self, lm: AsyncLM) -> None:
        self.lm = lm
        self.steps = 0                          # backend calls made so far
        self._active: list[Row] = []            # rows in the current step
        self._joining: list[Row] = []           # rows waiting for the next step
        self._groups: dict[Row, _Group] = {}
        self._driver: asyncio.Task[None] | None = None
        self._kv: LiveBatch | None = None      # the rows' live KV batch, on backends that keep one
        self.live_stats = {"joined": 0, "fallbacks": 0}  # live batch: rows that joined, steps that fell back

    @property
    def rows(self) -> int:
        """Rows now decoding or waiting to join."""
        return len(self._active) + len(self._joining)

    async def run(
        self,
        rows: Sequence[Row],
        on_done: Callable[[Row], None] | None = None,
        on_token: Callable[[Row], None] | None = None,
    ) -> None:
        """Decode `rows` to completion inside this loop (see `decode` for the callbacks)."""
        group = _Group(asyncio.get_running_loop().create_future(), 0, on_done, on_token)
        for row in rows:
            if row.status is None:
                _guarded(row, row.start)
                if row.tokens and on_token is not None:   # the forced prefix
                    _guarded(row, on_token, row)
            if row.status is None:
                group.left += 1
                self._groups[row] = group
                self._joining.append(row)
            elif on_done is not None:
                on_done(row)
        if not group.left:
            return
        if self._driver is None:
            self._driver = asyncio.ensure_future(self._drive())
        try:
            await group.done
        except asyncio.CancelledError:          # the caller went away: its rows leave at the next step
            for row in rows:
                if self._groups.get(row) is group and row.status is None:
                    row.fail("cancelled")
            raise

    async def _drive(self) -> None:
        """Step every live row until none is left (runs as one task while there is work)."""
        if getattr(self.lm, "live_decoding", False):
            self._kv = LiveBatch(self.lm, lambda seqs: _logprobs(self.lm, seqs))
        try:
            while True:
                self._active = [r for r in self._active + self._joining if self._live(r)]
                self._joining = []
                if not self._active:
                    break
                if self._kv is not None:
                    await self._live_step(self._active)
                else:
                    batch = self._active
                    results = await _logprobs(self.lm, [row.sequence() for row in batch])
                    self.steps += 1
                    for row, lp in zip(batch, results):
                        if row.status is None:          # not cancelled while the step ran
                            self._advance(row, lp)
                for row in self._active:
                    self._live(row)
        finally:                                    # also when the task itself is cancelled
            for row in self._active + self._joining:
                if row.status is None:
                    row.fail("cancelled: the decode loop stopped")
                # A stopped loop (Ctrl-C, shutdown) finished none of these rows: their callers are
                # cancelled, not told the rows ended (a batch run keeps only rows that did end).
                group = self._groups.pop(row, None)
                if group is not None and not group.done.done():
                    group.done.cancel()
            self._active, self._joining, self._driver = [], [], None
            if self._kv is not None:
                self.live_stats["joined"] += self._kv.joined
                self.live_stats["fallbacks"] += self._kv.fallbacks
                self._kv.close()
                self._kv = None

    def _advance(self, row: Row, lp: Any, pick: Pick | None = None) -> None:
        before = len(row.tokens)
        if isinstance(lp, BaseException):
            row.fail(f"backend error: {type(lp).__name__}: {lp}")
        else:
            _guarded(row, row.step, lp, pick)
        self._streamed(row, before)

    def _streamed(self, row: Row, before: int) -> None:
        on_token = self._groups[row].on_token
        if on_token is not None and len(row.tokens) > before:
            _guarded(row, on_token, row)

    async def _live_step(self, batch: list[Row]) -> None:
        """One step on the live batch: every row's token drawn in the backend by the pick it made before."""
        t0 = time.perf_counter_ns()
        picks: dict[Row, Pick | None] = {}
        for row in batch:
            _guarded(row, lambda row=row: picks.__setitem__(row, row.plan()))
        batch = [row for row in batch if row.status is None]
        if not batch:
            return
        t1 = time.perf_counter_ns()
        results = await self._kv.draw(batch, [picks[row] for row in batch])  # type: ignore[union-attr]
        self.steps += 1
        t2 = time.perf_counter_ns()
        before = {row: len(row.tokens) for row in batch}
        again: list[tuple[Row, Pick]] = []
        for row, res in zip(batch, results):
            if row.status is not None:              # cancelled while the step ran
                continue
            if isinstance(res, (BaseException, np.ndarray)):  # a failed live step: the per-step path's answer
                self._advance(row, res, picks[row])
                continue
            redo = None
            try:
                redo = row.take(res, picks[row])
            except Exception as e:  # noqa: BLE001 - one row's failure must not end the others
                row.fail(f"{type(e).__name__}: {e}")
            if redo is not None:
                again.append((row, redo))
        if again:
            for (row, redo), res in zip(again, await self._kv.redraw(again)):  # type: ignore[union-attr]
                if isinstance(res, BaseException):
                    row.fail(f"backend error: {type(res).__name__}: {res}")
                elif row.status is None:
                    _guarded(row, row.take, res, redo)
        # the loop's own host work per step (planning draws, taking tokens: guides, budgets), for benchmarks
        self.lm.stats["decode_host_ns"] += t1 - t0 + time.perf_counter_ns() - t2
        self.lm.stats["decode_steps"] += 1
        for row in batch:
            if row in self._groups:
                self._streamed(row, before[row])

    def _live(self, row: Row) -> bool:
        """True while `row` runs; once it has finished, report it to its group (once) and drop it."""
        if row.status is None:
            return True
        group = self._groups.pop(row, None)
        if group is None:
            return False
        group.left -= 1
        if group.done.done():                       # cancelled, or its callback failed
            return False
        try:
            if group.on_done is not None:
                group.on_done(row)
        except Exception as e:                      # the caller's own code: it gets the exception, as
            group.done.set_exception(e)             # from a plain loop, and its other rows stop
            for other, g in self._groups.items():
                if g is group and other.status is None:
                    other.fail("cancelled: a callback of its request failed")
            return False
        if not group.left:
            group.done.set_result(None)
        return False


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
