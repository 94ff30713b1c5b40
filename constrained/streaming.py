"""Streaming: text deltas as tokens are accepted, then the final `Generation`.

`stream` (a plain generator) and `astream` (an async one) yield each new
piece of text as the decode loop accepts tokens, and end with the sample's
`Generation`, whose status is the same as `generate`'s ("complete", "stop",
"max_tokens" or "error") and whose text is the deltas joined. With stop
sequences, text that may be the start of one is held back until the next
tokens tell, so no character of a stop sequence is ever yielded.

Underneath, `RequestStream` reads one compiled request as `StreamEvent`s
(sample index, text delta, the `Generation` when that sample ends). The
events come from callbacks of the one decode loop (`constrained.decoding`),
through an asyncio queue: there is no second loop. Leaving the iteration
early cancels the request's rows; the other rows of the loop go on.

Example:
    >>> for piece in stream(lm, "Pick:", regex="(yes|no)", seed=1):  # doctest: +SKIP
    ...     print(piece if isinstance(piece, str) else piece.status)
    no
    complete
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from constrained.decoding import DecodeLoop, Row
from constrained.generate import Generation, GenerationRequest, _decode, _Job, _prepare, resolve_model

if TYPE_CHECKING:
    from backends.base import AsyncLM

__all__ = ["RequestStream", "StreamEvent", "astream", "stream"]


@dataclass(frozen=True)
class StreamEvent:
    """New text of sample `index` of a request, or (with `generation`) that sample's end.

    Example:
        >>> StreamEvent(0, "{").generation is None
        True
    """

    index: int
    text: str
    generation: Generation | None = None


class RequestStream:
    """One request, compiled and ready to decode, read as events or as results.

    `prepare` compiles (it never raises: see `error`), so a server can
    compile off its event loop and answer a bad constraint before any model
    time is spent.

    Example:
        >>> rs = RequestStream.prepare(lm, GenerationRequest("Hi", regex="[a-z]{3}", n=2))  # doctest: +SKIP
        >>> [ev.index async for ev in rs.events() if ev.generation]  # doctest: +SKIP
        [1, 0]
    """

    def __init__(self, lm: AsyncLM, job: _Job) -> None:
        self.lm = lm
        self._job = job

    @classmethod
    def prepare(cls, lm: AsyncLM, request: GenerationRequest) -> RequestStream:
        """Check and compile `request` for `lm`; a failure is kept in `error`."""
        return cls(lm, _prepare(lm, request))

    @property
    def error(self) -> Exception | None:
        """What stopped the request before decoding (bad setting, bad constraint), or None."""
        return self._job.exception

    @property
    def request(self) -> GenerationRequest:
        return self._job.request

    @property
    def prompt_tokens(self) -> int:
        return self._job.prompt_tokens

    async def results(self, loop: DecodeLoop | None = None) -> list[Generation]:
        """Decode every sample (in `loop`, shared with other requests, else a private one; an engine
        backend such as vLLM runs them in its own engine instead)."""
        job = self._job
        if job.exception is not None:
            raise job.exception
        await _decode(self.lm, [job], on_token=job.on_token if job.texts else None, loop=loop)
        return job.results()

    async def events(self, loop: DecodeLoop | None = None) -> AsyncIterator[StreamEvent]:
        """Decode every sample, yielding text deltas as tokens are accepted and each sample's end.

        Closing the iterator early (or cancelling its task) cancels the rows.
        """
        job = self._job
        if job.exception is not None:
            raise job.exception
        job.watch()
        index = {row: i for i, row in enumerate(job.rows)}
        events: asyncio.Queue[StreamEvent | None] = asyncio.Queue()

        def on_token(row: Row) -> None:
            delta = job.on_token(row)
            if delta:
                events.put_nowait(StreamEvent(index[row], delta))

        def on_done(row: Row) -> None:
            tail = job.texts[row].finish()        # text held back for a stop sequence, a partial character
            events.put_nowait(StreamEvent(index[row], tail, job.result(row)))

        task = asyncio.ensure_future(_decode(self.lm, [job], on_done=on_done, on_token=on_token, loop=loop))
        task.add_done_callback(lambda _: events.put_nowait(None))
        try:
            while (event := await events.get()) is not None:
                yield event
            await task                                # its exception, if it failed
        finally:
            if not task.done():                       # the reader left early: free the rows
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def astream(
    model: AsyncLM | str | os.PathLike[str],
    prompt: str | Sequence[int],
    *,
    schema: Any = None,
    regex: str | None = None,
    max_tokens: int = 256,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
    chat: bool = False,
    budget_aware: bool = True,
    stop: str | Sequence[str] = (),
    backend: str = "mlx",
    **compile_options: Any,
) -> AsyncIterator[str | Generation]:
    """Async `stream`: one sample, yielded as text deltas, then its `Generation`.

    Example:
        >>> async for piece in astream(lm, "Age:", schema={"type": "integer"}):  # doctest: +SKIP
        ...     pass
        >>> piece.status  # doctest: +SKIP
        'complete'
    """
    lm = await asyncio.to_thread(resolve_model, model, backend)
    request = GenerationRequest(prompt, schema, regex, max_tokens, temperature, top_p, seed, 1, chat, compile_options,
                                budget_aware, stop)
    events = RequestStream.prepare(lm, request).events()
    try:
        async for event in events:
            if event.text:
                yield event.text
            if event.generation is not None:
                yield event.generation
    finally:
        await events.aclose()


def stream(
    model: AsyncLM | str | os.PathLike[str],
    prompt: str | Sequence[int],
    *,
    schema: Any = None,
    regex: str | None = None,
    max_tokens: int = 256,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
    chat: bool = False,
    budget_aware: bool = True,
    stop: str | Sequence[str] = (),
    backend: str = "mlx",
    **compile_options: Any,
) -> Iterator[str | Generation]:
    """Generate one sample, yielding its text in pieces as tokens are accepted, then its `Generation`.

    The arguments are `generate`'s (with one sample). The pieces joined are
    `Generation.text`. The decoding runs on a helper thread with its own
    event loop; leaving the loop early (``break``) cancels it.

    Raises:
        ConstraintError, ValueError: as `generate`, on the first `next()`.

    Example:
        >>> *pieces, gen = stream(lm, "Pick:", regex="(yes|no)", seed=1)  # doctest: +SKIP
        >>> "".join(pieces) == gen.text  # doctest: +SKIP
        True
    """
    options = dict(schema=schema, regex=regex, max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                   seed=seed, chat=chat, budget_aware=budget_aware, stop=stop, backend=backend, **compile_options)
    pump = _Pump(astream(model, prompt, **options))
    try:
        yield from pump
    finally:
        pump.close()


class _Pump:
    """Runs an async iterator on a helper thread; its items come back through a thread-safe queue."""

    def __init__(self, agen: AsyncIterator[Any]) -> None:
        self._agen = agen
        self._items: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._main, name="constrained-stream", daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[Any]:
        while True:
            kind, value = self._items.get()
            if kind == "error":
                raise value
            if kind == "end":
                return
            yield value

    def close(self) -> None:
        """Cancel the iteration if it is still running, and wait for the thread."""
        self._started.wait()
        if self._loop is not None and self._task is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nothing to cancel
                self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join()

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        self._started.set()
        try:
            async for item in self._agen:
                self._items.put(("item", item))
        except asyncio.CancelledError:
            pass
        except BaseException as e:  # noqa: BLE001 - handed to the reading thread, which raises it
            self._items.put(("error", e))
            return
        finally:
            with contextlib.suppress(BaseException):
                await self._agen.aclose()
        self._items.put(("end", None))
