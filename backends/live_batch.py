"""The backend side of the decode loop's live KV batch (`constrained.live`): a mixin of `AsyncLM`.

Where a backend sets `live_decoding`, the rows of a `DecodeLoop` stay in one
batch KV cache between steps: rows join it with their whole sequence
(prefilled through the trie, `_live_join`), then feed only the tokens they
appended (`_live_feed`), and leave it (`_live_keep`), handing their KV to
the trie (`_live_store`). Each step ends with every row's next token drawn
by the `Pick` the loop made for it (`_live_draw`: on the host here, on the
model's device where a backend overrides it for `device_sampling`). Every
method here runs on the backend's worker thread (the `async` ones submit
to it); they use `AsyncLM`'s `trie`, `stats`, `prefix_caching`,
`max_segments`, `_closed` and `_submit`.

Example:
    >>> state, ids, logits = await lm.live_advance(None, None, [], [prompt], [], [pick])  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.planning import Prompt

if TYPE_CHECKING:
    from constrained.sampling import Pick

__all__ = ["LiveDecoding"]


class LiveDecoding:
    """The live-batch hooks: backends implement `_live_keep`, `_live_join`, `_live_feed` and
    `_live_slice`; the rest is shared."""

    def _live_keep(self, live: Any, rows: list[int]) -> Any:
        """Keep only `rows` (indices into the current rows) of `live`, in order."""
        raise NotImplementedError

    def _live_join(self, live: Any, prompts: list[Prompt]) -> tuple[Any, Sequence[np.ndarray]]:
        """Append `prompts` as new rows after those of `live` (None: no rows yet); return the merged state
        and the new rows' next-token logprobs."""
        raise NotImplementedError

    def _live_feed(self, live: Any, feeds: list[Prompt]) -> Any:
        """Append ``feeds[i]`` (one or more tokens) to row ``i`` of `live`; return each row's next-token
        logits (or logprobs), rows × vocabulary, in the backend's own array type."""
        raise NotImplementedError

    def _host_logits(self, part: Any) -> np.ndarray:
        """A 2-D numpy view (or copy) of logits `_live_feed` or `_live_join` returned."""
        return np.asarray(part)

    def _live_draw(self, parts: list[Any], rows: Sequence[int], picks: Sequence[Pick]) -> list[int]:
        """Draw the token of row ``rows[k]`` of the stacked `parts` (what `_live_feed` and `_live_join`
        returned) by ``picks[k]``: on the host here (`Pick.draw`), on the device where a backend overrides
        this for `device_sampling`. Rows with one allowed id never look at the logits."""
        host: list[np.ndarray | None] = [None] * len(parts)
        out = []
        for r, pick in zip(rows, picks):
            forced = pick.forced
            if forced is not None:
                out.append(forced)
                continue
            k = 0
            while r >= len(parts[k]):       # (one or two parts: the fed rows, the joined ones)
                r -= len(parts[k])
                k += 1
            if host[k] is None:
                host[k] = self._host_logits(parts[k])
            out.append(pick.draw(host[k][r]))  # type: ignore[index]
        return out

    def _await_forward(self) -> None:
        """Wait until the step's forward pass has run where a backend launches it asynchronously (a GPU),
        so that `live_draw_ns` times the draw, not the model. The draw waits for the logits anyway."""

    def _live_slice(self, live: Any, row: int, start: int, end: int) -> Any:
        """Row `row`'s KV for positions ``[start, end)`` as a trie segment (fresh copies)."""
        raise NotImplementedError

    def _live_store(self, live: Any, rows: list[tuple[int, Prompt]]) -> None:
        """Store in the trie the KV of rows leaving the batch, ``(row, tokens it holds)`` each, so that a
        prompt extending one (a row rejoining, a server's next turn) runs only what is new."""
        if not self.prefix_caching:
            return
        for row, tokens in rows:
            chain = self.trie.longest_kv(tokens)
            start = 0 if len(chain) >= self.max_segments else chain[-1].end if chain else 0
            if start >= len(tokens):
                continue
            try:
                self.trie.put_kv(tokens, self._live_slice(live, row, start, len(tokens)), start)
            except ValueError:  # its base was evicted meanwhile
                self.stats["kv_store_skipped"] += 1
            else:
                self.stats["live_rows_stored"] += 1

    def _live_advance(
        self, live: Any, keep: list[int] | None, feeds: list[Prompt], joins: list[Prompt],
        store: list[tuple[int, Prompt]], picks: list[Pick],
    ) -> tuple[Any, list[int], list[Any]]:
        """Worker thread: one decode step of a live batch.

        Rows in `store` (leaving ones) put their KV in the trie first. Rows
        not in `keep` (None: all) leave, the kept rows take their `feeds`,
        then `joins` enter at the end. Each row of the result (the kept rows,
        then the joined ones) then draws its next token by its entry of
        `picks`. Returns the new state, the drawn ids and the step's logits
        (for `live_redraw`). On an exception the state may be half-updated:
        the caller must drop it.
        """
        if live is not None and store:
            self._live_store(live, list(store))
        if live is not None and keep is not None:
            live = self._live_keep(live, keep) if keep else None
        parts = [self._live_feed(live, feeds)] if feeds else []
        if joins:
            live, new = self._live_join(live, joins)
            parts.append(new)
        self._await_forward()
        t0 = time.perf_counter_ns()
        ids = self._live_draw(parts, range(len(picks)), picks)
        self.stats["live_draw_ns"] += time.perf_counter_ns() - t0   # (with what a lazy framework left to run)
        return live, ids, parts

    async def live_advance(
        self, live: Any, keep: list[int] | None, feeds: list[Prompt], joins: list[Prompt],
        store: list[tuple[int, Prompt]], picks: list[Pick],
    ) -> tuple[Any, list[int], list[Any]]:
        """`_live_advance` on the worker thread."""
        return await asyncio.wrap_future(self._submit(self._live_advance, live, keep, feeds, joins, store, picks))

    async def live_redraw(self, parts: list[Any], rows: list[int], picks: list[Pick]) -> list[int]:
        """Draw again, on the worker thread, from a step's logits (`live_advance`'s third result): row
        ``rows[k]`` by ``picks[k]`` (a row whose first token the budget refused)."""
        return await asyncio.wrap_future(self._submit(self._live_draw, parts, rows, picks))

    def live_close(self, live: Any, store: Sequence[tuple[int, Prompt]] = ()) -> None:
        """Without waiting: store the KV of the `store` rows in the trie, then drop the live state, both
        on the worker thread (queued before any later request, which then finds that KV)."""
        holder = [live]
        del live
        if not self._closed:
            self._submit(self._live_close, holder, list(store))

    def _live_close(self, holder: list[Any], store: list[tuple[int, Prompt]]) -> None:
        try:
            if store:
                self._live_store(holder[0], store)
        except Exception:  # noqa: BLE001 - caching is best effort: the rows already finished
            self.stats["kv_store_failed"] += 1
        holder.clear()                      # the state is freed here, on the worker thread
