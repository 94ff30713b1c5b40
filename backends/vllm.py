"""`AsyncVirtualLM`: the `AsyncLM` contract on a vLLM engine, and constrained generation inside it.

Two ways in:

- the `AsyncLM` API (`next_token_logprobs`, `batch_next_token_logprobs`,
  `sample`, `batch_sample`): each prompt becomes one vLLM request, all of a
  batch submitted at once, so vLLM's scheduler batches them and its prefix
  cache shares their common prefixes. A next-token distribution is a
  one-token request with ``logprobs=-1`` (the whole vocabulary, flat), kept
  in the base class's logprobs cache (the token trie, bounded by bytes);
- `generate_in_engine`, which `constrained.generate(..., backend="vllm")`,
  `constrained.stream` and `constrained serve --backend vllm` use: every
  sample is one vLLM request carrying its constraint in ``extra_args``,
  masked inside the engine by
  `constrained.vllm_processor.ConstrainedLogitsProcessor`, so the whole decode
  loop runs in vLLM. Tokens come back as vLLM makes them when the caller
  follows them (streaming, stop sequences), and a row that ends early is
  aborted in the engine.

The engine is vLLM's `AsyncLLM` (its engine core runs in a child process); its
event loop runs on a thread of its own, so the synchronous API, the base
class's worker thread and any caller's event loop can all submit to it.

Example:
    >>> lm = AsyncVirtualLM.from_name("path/to/model", engine_opts={"max_model_len": 2048})  # doctest: +SKIP
    >>> lm.next_token_logprobs_sync([1, 15043]).shape == (lm.vocab_size,)  # doctest: +SKIP
    True
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.base import AsyncLM, Job
from constrained.errors import BackendUnavailableError
from constrained.generate import engine_seed

try:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    from constrained.vllm_processor import ConstrainedLogitsProcessor
except ImportError as e:  # pragma: no cover - depends on the environment
    raise BackendUnavailableError("vllm", "vllm", str(e)) from e

if TYPE_CHECKING:
    from constrained.decoding import Row

__all__ = ["AsyncVirtualLM", "ENGINE_DEFAULTS"]

# Engine options this backend sets unless the caller does: the full next-token
# distribution needs `max_logprobs=-1`; our processor is registered for constrained requests.
ENGINE_DEFAULTS: dict[str, Any] = {"max_logprobs": -1, "disable_log_stats": True}


class AsyncVirtualLM(AsyncLM):
    """Next-token logprobs, sampling and constrained generation on a vLLM `AsyncLLM`.

    Args:
        engine_args: keyword arguments of vLLM's `AsyncEngineArgs` (``model``
            included); `ENGINE_DEFAULTS` fill what they leave out, and
            `ConstrainedLogitsProcessor` is added to ``logits_processors``
            unless vLLM loads it through this package's entry point.
        **opts: `AsyncLM` options: batch_size (default 256 prompts per engine
            submission), timeout, cache_size (bytes of cached logprobs). vLLM
            caches prefixes itself, so the base class's KV trie is off.

    Example:
        >>> lm = AsyncVirtualLM({"model": "path/to/model", "dtype": "float32"})  # doctest: +SKIP
        >>> rows = lm.batch_sample_sync([[1, 15043]], max_tokens=8, eos_token_ids=lm.eos_token_ids)  # doctest: +SKIP
    """

    backend_name = "vllm"

    def __init__(self, engine_args: dict[str, Any], **opts: Any) -> None:
        if "model" not in engine_args:
            raise ValueError("engine_args must name the model: {'model': 'path/to/model', ...}")
        opts.pop("prefix_caching", None)
        opts.setdefault("batch_size", 256)    # vLLM schedules the rows itself: hand it many at once
        args = {**ENGINE_DEFAULTS, **engine_args}
        procs = list(args.get("logits_processors") or [])
        if not _entry_point_installed() and not any(p is ConstrainedLogitsProcessor or str(p) == _FQCN for p in procs):
            procs.append(ConstrainedLogitsProcessor)
        args["logits_processors"] = procs
        self.engine_args = args
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._ids = itertools.count()
        self.live_rows = 0                    # rows of `generate_in_engine` now in the engine
        super().__init__(self._start_engine, prefix_caching=False, **opts)

    @classmethod
    def from_name(cls, name: str, *, engine_opts: dict[str, Any] | None = None, allow_download: bool = False,
                  **opts: Any) -> AsyncVirtualLM:
        """Start an engine on the model directory `name`.

        Args:
            name: a local model directory; a hub repo id only if `allow_download`.
            engine_opts: `AsyncEngineArgs` options (``dtype``, ``max_model_len``,
                ``tensor_parallel_size``, ``enforce_eager``, ...).
            allow_download: let vLLM fetch `name` from the Hugging Face hub.
            **opts: `AsyncLM` options (batch_size, timeout, cache_size).

        Raises:
            FileNotFoundError: `name` is not a directory and downloads are off.
        """
        if not allow_download and not Path(name).is_dir():
            raise FileNotFoundError(f"no model directory at {name!r} (pass allow_download=True to fetch a hub repo)")
        return cls({"model": str(name), **(engine_opts or {})}, **opts)

    # ------------------------------------------------------------------ engine and its loop

    def _start_engine(self) -> tuple[Any, Any]:
        """Worker thread: start the loop thread, build the `AsyncLLM` on it; return it and its tokenizer."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="constrained-vllm-loop", daemon=True)
        thread.start()
        self._loop, self._loop_thread = loop, thread

        async def make() -> AsyncLLM:   # built on its loop: its output handler task lives there
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**self.engine_args))

        engine = asyncio.run_coroutine_threadsafe(make(), loop).result()
        return engine, engine.get_tokenizer()

    def _setup(self, model: Any, tokenizer: Any) -> tuple[int, list[int], Any]:
        # EOS as vLLM stops on it, and as the processor in the engine reads it: the tokenizer's and the generation config's
        from constrained.vllm_processor import eos_token_ids

        config = model.model_config
        return int(config.get_vocab_size()), eos_token_ids(config, tokenizer), tokenizer

    @property
    def max_model_len(self) -> int:
        """The engine's context length: prompt plus output tokens of one request (vLLM's ``max_model_len``)."""
        self.ensure_loaded()
        return int(self.model.model_config.max_model_len)

    def _on_loop(self, coro: Coroutine[Any, Any, Any]) -> Future[Any]:
        """Run `coro` on the engine's loop; a concurrent future of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _final(self, prompt: Sequence[int], params: SamplingParams) -> Any:
        """Engine loop: the finished `CompletionOutput` of one request."""
        out = None
        async for out in self.model.generate(TokensPrompt(prompt_token_ids=list(prompt)), params,
                                             f"constrained-{next(self._ids)}"):
            pass
        return out.outputs[0]

    def close(self) -> None:
        """Finish queued work, shut the engine down and stop its loop."""
        if self._closed:
            return
        super().close()
        if self._load_future.exception() is None and self.model is not None:
            self.model.shutdown()
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join(timeout=10)
        # dropped now, while the interpreter is whole: vLLM's `__del__` shuts it down again, which fails
        # (a noisy "Exception ignored") if it runs at interpreter exit
        self.model = None

    # ------------------------------------------------------------------ AsyncLM hooks

    def _forward(self, jobs: list[Job]) -> list[tuple[np.ndarray, Any]]:
        """Worker thread: one one-token request per prompt, all in flight together."""
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1, flat_logprobs=True, detokenize=False,
                                output_kind=RequestOutputKind.FINAL_ONLY)

        async def run() -> list[Any]:
            return await asyncio.gather(*(self._final(j.tokens, params) for j in jobs))

        outs = self._on_loop(run()).result()
        return [(self._dense(out.logprobs), None) for out in outs]

    def _dense(self, flat: Any) -> np.ndarray:
        """The first position of vLLM's `FlatLogprobs` as a float32 row of `vocab_size` (unlisted: -inf)."""
        end = flat.end_indices[0]
        row = np.full(self._vocab_size, -np.inf, dtype=np.float32)
        row[np.asarray(flat.token_ids[:end], dtype=np.int64)] = np.asarray(flat.logprobs[:end], dtype=np.float32)
        return row

    def _submit_sample(self, prompts: Sequence[Sequence[int]], max_tokens: int, eos: Sequence[int],
                       temperature: float, seed: int | None) -> Future[list[list[int]]]:
        rows = [tuple(int(t) for t in p) for p in prompts]
        stop = sorted({int(t) for t in eos})

        async def run() -> list[list[int]]:
            if max_tokens <= 0:
                return [[] for _ in rows]
            outs = await asyncio.gather(*(self._final(p, self._params(max_tokens, temperature, 1.0, stop, engine_seed(seed, i)))
                                          for i, p in enumerate(rows)))
            return [_strip_eos(list(o.token_ids), stop) for o in outs]

        if not self._load_future.done():      # still loading: wait for the engine on the worker thread
            return self._submit(lambda: self._on_loop(run()).result())
        self.ensure_loaded()
        return self._on_loop(run())

    # ------------------------------------------------------------------ constrained generation

    async def generate_in_engine(self, rows: Sequence[Row], constraints: Sequence[dict[str, Any] | None],
                                 seeds: Sequence[int | None], on_done: Callable[[Row], None] | None = None,
                                 on_token: Callable[[Row], Any] | None = None) -> None:
        """Run each row as one vLLM request, masked in the engine by its constraint; fill in the rows.

        Args:
            rows: the rows (prompt, guide, EOS ids, max_tokens, temperature, top_p).
            constraints: each row's ``extra_args["constrained"]`` entry (None: free text).
            seeds: each row's vLLM seed (None: unseeded).
            on_done: called once per row as it finishes.
            on_token: called after each token a row receives, as the engine produces
                them (streaming, stop sequences); a row it gives a status (a stop
                sequence seen) is aborted in the engine at once. Without it, each
                row's tokens arrive once, when it ends.

        Each token is replayed through the row's guide as it arrives, so a
        result is "complete" only when our automaton accepts it; a token the
        constraint forbids (the processor not loaded in this engine) makes
        the row an "error". Cancelling the call aborts its requests in vLLM.
        """
        self.ensure_loaded()

        async def one(row: Row, constraint: dict[str, Any] | None, seed: int | None) -> None:
            if row.status is None:
                kind = RequestOutputKind.FINAL_ONLY if on_token is None else RequestOutputKind.DELTA
                params = self._params(row.max_tokens, row.temperature, row.top_p, sorted(row.eos), seed, constraint,
                                      kind)
                self.live_rows += 1
                self.stats["engine_requests"] += 1
                try:
                    await self._follow(row, params, on_token)
                except asyncio.CancelledError:
                    if row.status is None:
                        row.fail("cancelled")
                    raise
                except Exception as e:  # noqa: BLE001 - one failed request ends its row only
                    row.fail(f"backend error: {type(e).__name__}: {e}")
                finally:
                    self.live_rows -= 1
            if on_done is not None:
                on_done(row)

        await asyncio.gather(*(one(r, c, s) for r, c, s in zip(rows, constraints, seeds)))

    async def _follow(self, row: Row, params: SamplingParams, on_token: Callable[[Row], Any] | None) -> None:
        """Caller's loop: submit `row` to the engine and take its outputs as they come; stop early once the row
        has a status (a stop sequence, a forbidden token), which aborts the engine request."""
        caller = asyncio.get_running_loop()
        outputs: asyncio.Queue[Any] = asyncio.Queue()

        def hand_over(item: Any) -> None:           # engine loop -> caller's loop
            with contextlib.suppress(RuntimeError):  # the caller's loop has closed: nobody is reading
                caller.call_soon_threadsafe(outputs.put_nowait, item)

        async def pump() -> None:                   # engine loop
            try:
                async for out in self.model.generate(TokensPrompt(prompt_token_ids=list(row.prompt)), params,
                                                     f"constrained-{next(self._ids)}"):
                    hand_over(out.outputs[0])
            finally:
                hand_over(None)

        engine = self._on_loop(pump())
        try:
            while (out := await outputs.get()) is not None:
                finished = out.finish_reason is not None
                tokens = list(out.token_ids)
                ended = finished and bool(tokens) and tokens[-1] in row.eos
                for tok in tokens[:-1] if ended else tokens:
                    if not _take(row, tok):
                        return
                    if on_token is not None:
                        on_token(row)
                    if row.status is not None:      # ended here: the engine request is aborted below
                        return
                if finished:
                    _end(row, ended, out.finish_reason)
                    return
            await asyncio.wrap_future(engine)       # the engine's exception, if it ended without a final output
            row.fail("the engine ended the request without a final output")
        finally:
            if not engine.done():
                engine.cancel()                     # cancels `pump` on the engine loop: vLLM aborts the request

    @staticmethod
    def _params(max_tokens: int, temperature: float, top_p: float, stop: list[int], seed: int | None,
                constraint: dict[str, Any] | None = None,
                kind: RequestOutputKind = RequestOutputKind.FINAL_ONLY) -> SamplingParams:
        """Sampling parameters of one row: it stops on exactly `stop` (EOS ids), not on the tokenizer's EOS."""
        return SamplingParams(
            max_tokens=max_tokens, temperature=temperature, top_p=top_p, seed=seed, ignore_eos=True,
            stop_token_ids=stop, detokenize=False, output_kind=kind,
            extra_args=None if constraint is None else {"constrained": constraint},
        )  # fmt: skip


_FQCN = "constrained.vllm_processor:ConstrainedLogitsProcessor"


def _entry_point_installed() -> bool:
    """Whether vLLM will load our processor by itself (this package installed with its entry point)."""
    from importlib.metadata import entry_points

    return any(ep.value == _FQCN for ep in entry_points(group="vllm.logits_processors"))


def _strip_eos(tokens: list[int], eos: Sequence[int]) -> list[int]:
    return tokens[:-1] if tokens and tokens[-1] in eos else tokens


def _take(row: Row, tok: int) -> bool:
    """Append one engine-sampled token to `row`, replaying it through the guide; False (the row failed) if the
    constraint forbids it. A step the budget restricted in the engine is counted as steered here too."""
    guide, budget = row.guide, row.budget
    if guide is not None:
        k = len(row.tokens)
        if budget is not None and budget.restrict(guide.state, row.max_tokens - k) is not None:
            row.steered += 1           # the processor restricted this step the same way
        if not guide.advance(tok):
            row.fail(f"the engine sampled token {tok}, which the constraint forbids, at position {k}: "
                     "is ConstrainedLogitsProcessor loaded in this engine?")
            return False
    row.tokens.append(int(tok))
    return True


def _end(row: Row, ended: bool, finish_reason: str | None) -> None:
    """`row`'s status once the engine finished it (`ended`: by an EOS id), checked against its guide."""
    guide = row.guide
    if guide is None:
        row.status = "complete" if ended else "max_tokens"
    elif guide.is_accepting() and (ended or guide.is_finished() or len(row.tokens) >= row.max_tokens):
        row.status = "complete"
    elif finish_reason == "length" or len(row.tokens) >= row.max_tokens:
        row.status = "max_tokens"
    else:
        row.fail(f"the engine ended the sample early ({finish_reason}) with incomplete output: "
                 "see the engine log for the constraint's error")
