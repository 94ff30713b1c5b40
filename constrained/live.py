"""`LiveBatch`: the decode loop's rows kept as one live KV batch in the backend.

On a backend with `live_decoding` (`HFLM`, `MLXLM`), the rows of a
`DecodeLoop` do not send their whole token sequence every step. They sit in
one batch KV cache that lives in the backend between steps, and each step
feeds every row only the tokens it appended since: one after a sampled
token, several after forced ones (all of them in the same model call, see
the backends' `_live_feed`). Rows that finish leave the batch (`_live_keep`);
rows that start (or come back, below) join it: their whole sequence goes
through the backend's trie, which prefills what it does not hold (the `n`
samples of a prompt share one prefill) and their KV is appended to the
batch (`_live_join`). Rows that leave, and those still in the batch when the
loop stops, hand the KV they hold back to the trie (`_live_store`), so a
prompt that extends one (a server's next turn, a row rejoining) runs only
its new tokens.

Each step also draws the rows' next tokens in the backend: every row's
`Pick` (mask, settings, uniform draw, fixed before the call) goes with the
step, and only the ids come back (`AsyncLM._live_draw`: on the model's
device where the backend samples there, `constrained.device_sampling`). A
row whose token the budget refuses draws again from the same step's logits
(`redraw`), which the batch keeps until the next step.

A failed step (the backend raised) drops the live state: that step's
logprobs come from the per-step trie path, retried row by row so that only
the failing rows get the error, and the other rows rejoin at the next step,
from the KV that retry stored in the trie.

Example:
    >>> live = LiveBatch(lm)  # doctest: +SKIP
    >>> tokens = await live.draw(rows, [row.plan() for row in rows])  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backends.base import AsyncLM
    from constrained.decoding import Row
    from constrained.sampling import Pick

__all__ = ["LiveBatch", "MAX_FEED"]

# A row that appended more tokens than this since the last step (a forced run) leaves the batch and
# rejoins through the trie instead of feeding them; None: feed any number (for measuring both ways).
MAX_FEED: int | None = None


class LiveBatch:
    """The rows in a backend's live KV batch, in its order, and how many tokens of each it holds.

    Args:
        lm: a backend with `live_decoding` set.
        fallback: the per-step trie path, ``fallback(sequences) -> logprobs or exception per row``.
    """

    def __init__(self, lm: AsyncLM, fallback: Callable[[list[tuple[int, ...]]], Awaitable[list[Any]]]) -> None:
        self.lm = lm
        self.fallback = fallback
        self.state: Any = None          # the backend's live state (touched only on its worker thread)
        self.rows: list[Row] = []       # the rows of `state`, in its order
        self.fed: dict[Row, int] = {}   # tokens of each row that `state` holds (prompt included)
        self.joined = 0                 # rows that entered (or re-entered) the batch
        self.fallbacks = 0              # steps that fell back to the trie path
        self.last: list[Any] = []       # the last step's logits, in the backend (for `redraw`)

    async def draw(self, batch: Sequence[Row], picks: Sequence[Pick]) -> list[Any]:
        """Every row's next token, drawn by its pick in the backend (on the model's device where it
        samples there): an int per row, or, after a failed step, the row's logprobs (a numpy row, to
        draw from on the host) or the exception."""
        wanted = dict(zip(batch, picks))
        keep, kept, feeds = [], [], []
        for i, row in enumerate(self.rows):
            new = _appended(row, self.fed[row])
            # (a row with nothing new cannot happen; it would rejoin)
            if row in wanted and new and (MAX_FEED is None or len(new) <= MAX_FEED):
                keep.append(i)
                kept.append(row)
                feeds.append(new)
        held = set(kept)
        joins = [row for row in batch if row not in held]
        # rows leaving hand their KV to the trie (a finished row's next turn, a row rejoining)
        store = [(i, row.sequence()[: self.fed[row]]) for i, row in enumerate(self.rows) if row not in held]
        state, self.state, self.last = self.state, None, []
        rows = kept + joins
        try:
            state, ids, self.last = await self.lm.live_advance(
                state, None if len(keep) == len(self.rows) else keep, feeds, [row.sequence() for row in joins],
                store, [wanted[row] for row in rows])
        except Exception:  # noqa: BLE001 - the state may be half-updated: drop it, find the failing rows
            self.lm.live_close(state)
            state = None                          # (drops the half-updated KV now)
            self.rows, self.fed = [], {}
            self.fallbacks += 1
            return await self.fallback([row.sequence() for row in batch])
        self.state, self.rows = state, rows
        self.fed = {row: len(row.prompt) + len(row.tokens) for row in self.rows}
        self.joined += len(joins)
        by_row = dict(zip(self.rows, ids))
        return [by_row[row] for row in batch]

    async def redraw(self, again: Sequence[tuple[Row, Pick]]) -> list[Any]:
        """Draw again from the last step's logits, for rows whose first token the budget refused: an int
        per row, or the exception."""
        index = {row: i for i, row in enumerate(self.rows)}
        try:
            return await self.lm.live_redraw(self.last, [index[row] for row, _ in again], [p for _, p in again])
        except Exception as e:  # noqa: BLE001 - only these rows fail
            return [e] * len(again)

    def close(self) -> None:
        """Free the live state on the backend's worker thread, its rows' KV stored in the trie first."""
        store = [(i, row.sequence()[: self.fed[row]]) for i, row in enumerate(self.rows)]
        state, self.state, self.rows, self.fed, self.last = self.state, None, [], {}, []
        if state is not None:
            self.lm.live_close(state, store)


def _appended(row: Row, fed: int) -> tuple[int, ...]:
    """The tokens `row` appended after its first `fed` (prompt included)."""
    return tuple(row.tokens[fed - len(row.prompt) :])
