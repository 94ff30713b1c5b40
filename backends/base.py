"""`AsyncLM`: the genlm-backend contract, with auto-batching and a shared prefix trie.

A backend answers one question, "what are the next-token log-probabilities
after these token ids?", for many prompts at once. This base class owns
everything that is not framework-specific:

- the async batcher: ``await next_token_logprobs(ids)`` queues the request;
  the queue is flushed when it holds ``batch_size`` prompts or ``timeout``
  seconds after the first one arrived. Identical concurrent prompts share one
  future, and each caller gets its own awaitable;
- one dedicated worker thread that runs every model call, so the asyncio loop
  never blocks and frameworks (MLX) see a single thread;
- the `TokenTrie` of logprobs and KV segments, and the batch planner
  (`backends.planning`, mixed in): prompts
  that share an uncached prefix get that prefix computed once, in an earlier
  round, and then only their own suffixes run; a prefix whose KV lies inside
  a stored segment (a system prompt sent again with a new question) is cut
  out of it (`_cut_kv`) where the backend's KV allows, instead of computed;
- sampling (`sample`, `batch_sample`) on top of the above, in the decode loop
  that `constrained.generate` runs (`constrained.decoding`).
- the decode loop's live KV batch (`backends.live_batch`, mixed in), where a
  backend sets `live_decoding`.

Subclasses implement `_load` (return model and tokenizer, on the worker
thread) and `_forward` (run a batch of `Job` rows), and `_cut_kv` (setting
`splits_kv` in `_setup`) when their KV segments can be cut exactly.
Log-probabilities are returned as numpy float32 arrays of length
`vocab_size`, the model's output width, which may exceed the tokenizer's
size for padded checkpoints.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from backends.live_batch import LiveDecoding
from backends.planning import Job, PrefixPlanning, Prompt
from constrained.token_trie import TokenTrie

__all__ = ["AsyncLM", "Job", "load_model_by_name"]

_LOAD_LOCK = threading.Lock()


class AsyncLM(LiveDecoding, PrefixPlanning):
    """Base class for batched, prefix-cached next-token log-probability backends.

    Args:
        batch_size: flush the async queue at this many distinct prompts; also
            the most rows one model call runs.
        timeout: seconds to wait for more requests before flushing.
        cache_size: byte budget of the prefix trie (logprobs + KV); None = unbounded.
        max_segments: a stored KV chain never grows past this many segments;
            the row that would exceed it stores one full segment instead.
        prefix_caching: reuse cached KV across requests (False: every prompt
            runs from its first token; logprobs are still cached).

    Example:
        >>> from backends.mock import MockLM  # doctest: +SKIP
        >>> lm = MockLM.from_name("path/to/tokenizer")  # doctest: +SKIP
        >>> lm.next_token_logprobs_sync([1, 2, 3]).shape == (lm.vocab_size,)  # doctest: +SKIP
        True
    """

    backend_name = "base"

    def __init__(
        self,
        loader: Callable[[], tuple[Any, Any]],
        *,
        batch_size: int = 16,
        timeout: float = 0.02,
        cache_size: int | None = 1 << 30,
        max_segments: int = 8,
        prefix_caching: bool = True,
    ) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}")
        if timeout < 0:
            raise ValueError(f"`timeout` must be >= 0 seconds, got {timeout!r}")
        if max_segments < 1:
            raise ValueError(f"`max_segments` must be >= 1, got {max_segments!r}")
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_segments = max_segments
        self.trie = TokenTrie(cache_size)
        self.stats: Counter[str] = Counter()
        self.prefix_caching = prefix_caching
        self.splits_kv = False  # set by `_setup` where a prefix's KV is exactly the first positions of a longer one's
        # set by `_setup` where `_live_join` / `_live_feed` work: the decode loop then keeps rows' KV alive
        # between steps instead of sending whole sequences through the trie (False: the per-step trie path)
        self.live_decoding = False
        # on a live batch, draw tokens on the model's device (`constrained.device_sampling`: only ids come
        # back) instead of on the host from the logits; set by `_setup` where the device is not the CPU
        self.device_sampling = False
        self.model: Any = None
        self._tokenizer: Any = None
        self._vocab_size = 0
        self._eos: list[int] = []
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"constrained-{self.backend_name}")
        self._worker_ident: int | None = None
        # one batching queue per event loop: a future is created, resolved and awaited on its own loop
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopQueue] = weakref.WeakKeyDictionary()
        self._loops_lock = threading.Lock()
        self._closed = False
        self._load_future = self._executor.submit(self._load_on_worker, loader)

    # ------------------------------------------------------------------ subclass API

    def _forward(self, jobs: list[Job]) -> list[tuple[np.ndarray, Any]]:
        """Run `jobs` as one batch; return ``(logprobs, kv_handle_or_None)`` per job."""
        raise NotImplementedError

    def _setup(self, model: Any, tokenizer: Any) -> tuple[int, list[int], Any]:
        """Inspect the loaded model; return ``(vocab_size, eos_token_ids, hf_tokenizer)``."""
        raise NotImplementedError

    def _cut_kv(self, handle: Any, n: int) -> tuple[Any, Any]:
        """Cut a KV segment after its first `n` positions: ``(head, tail)`` (only where `splits_kv`)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ loading

    def _load_on_worker(self, loader: Callable[[], tuple[Any, Any]]) -> None:
        self._worker_ident = threading.get_ident()
        # One load at a time per process: transformers' from_pretrained patches
        # global state (meta-device init, weight tying), so two backends loading
        # at once on their own workers can each get the other's half-built model.
        with _LOAD_LOCK:
            model, tokenizer = loader()
            self._vocab_size, self._eos, self._tokenizer = self._setup(model, tokenizer)
        self.model = model

    def ensure_loaded(self) -> None:
        """Block until the model is loaded; re-raise the load failure if it failed."""
        self._load_future.result()

    @property
    def tokenizer(self) -> Any:
        """The Hugging Face tokenizer."""
        self.ensure_loaded()
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        """Length of every returned logprobs array (the model's output width)."""
        self.ensure_loaded()
        return self._vocab_size

    @property
    def eos_token_ids(self) -> list[int]:
        """End-of-sequence token ids from the tokenizer / generation config."""
        self.ensure_loaded()
        return list(self._eos)

    @classmethod
    def from_name(cls, name: str, **opts: Any) -> AsyncLM:
        """Load a model by local path (or hub id with ``allow_download=True``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ async API

    async def next_token_logprobs(self, token_ids: Sequence[int]) -> np.ndarray:
        """Next-token logprobs after `token_ids`, batched with concurrent calls on the same event loop.

        Safe from any thread and any loop: each loop has its own queue, and a
        batch's results come back to the loop that asked, through
        `call_soon_threadsafe`.
        """
        key = tuple(int(t) for t in token_ids)
        loop = asyncio.get_running_loop()
        q = self._loops.get(loop)
        if q is None:
            with self._loops_lock:
                q = self._loops.setdefault(loop, _LoopQueue())
        fut = q.pending.get(key)
        if fut is not None:
            self.stats["merged_requests"] += 1
        else:
            fut = q.pending[key] = loop.create_future()
            q.queue.append(key)
            if len(q.queue) >= self.batch_size:
                self._flush(q, loop)
            elif q.timer is None:
                q.timer = loop.call_later(self.timeout, self._flush, q, loop)
        # shield: one cancelled caller must not cancel the future others share
        return await asyncio.shield(fut)

    async def batch_next_token_logprobs(self, token_ids_list: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Logprobs for many prompts, run together (bypasses the queue)."""
        return await asyncio.wrap_future(self._submit(self._run_prompts, _prompts(token_ids_list)))

    async def sample(
        self,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        eos_token_ids: Sequence[int],
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[int]:
        """Sample up to `max_tokens` tokens after the prompt; stops before an EOS token (not included)."""
        rows = await self.batch_sample([prompt_token_ids], max_tokens, eos_token_ids, temperature, seed)
        return rows[0]

    async def batch_sample(
        self,
        prompt_token_ids_list: Sequence[Sequence[int]],
        max_tokens: int,
        eos_token_ids: Sequence[int],
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[list[int]]:
        """Sample one continuation per prompt; row ``i`` uses the seed ``(seed, i)``.

        The rows run unconstrained in the decode loop that `constrained.generate`
        uses (`constrained.decoding.DecodeLoop`): on the backend's live KV batch
        where it keeps one, prompts prefilled once through the trie.

        Raises:
            RuntimeError: a row failed (a backend error); its message names the cause.
        """
        from constrained.decoding import Row, decode

        prompts = _prompts(prompt_token_ids_list)
        if max_tokens <= 0 or not prompts:
            return [[] for _ in prompts]
        eos = frozenset(int(t) for t in eos_token_ids)
        rows = [Row(prompt=p, guide=None, eos=eos, max_tokens=max_tokens, temperature=temperature, top_p=1.0,
                    rng=np.random.default_rng(None if seed is None else [seed, i])) for i, p in enumerate(prompts)]
        await decode(self, rows)
        for i, row in enumerate(rows):
            if row.status == "error":
                raise RuntimeError(f"sampling prompt {i} failed: {row.error}")
        return [row.tokens for row in rows]

    def _flush(self, q: _LoopQueue, loop: asyncio.AbstractEventLoop) -> None:
        """Send `q`'s prompts to the worker (called on `loop`, which owns `q` and its futures)."""
        if q.timer is not None:
            q.timer.cancel()
            q.timer = None
        keys, q.queue = q.queue, []
        futs = [q.pending.pop(k) for k in keys]
        if not keys:
            return
        # Group by length so rows in one model call need little padding.
        order = sorted(range(len(keys)), key=lambda i: len(keys[i]))
        cfut = self._submit(self._run_prompts_or_errors, [keys[i] for i in order])
        cfut.add_done_callback(lambda f: loop.call_soon_threadsafe(_resolve, [futs[i] for i in order], f))

    def reset_async_queries(self) -> None:
        """Forget queued async requests (their futures are cancelled, each on its own loop)."""
        with self._loops_lock:
            queues = list(self._loops.items())
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, q in queues:
            if loop is current:
                q.reset()
            elif not loop.is_closed():
                loop.call_soon_threadsafe(q.reset)

    # ------------------------------------------------------------------ sync API

    def next_token_logprobs_sync(self, token_ids: Sequence[int]) -> np.ndarray:
        """Blocking `next_token_logprobs`."""
        return self.batch_next_token_logprobs_sync([token_ids])[0]

    def batch_next_token_logprobs_sync(self, token_ids_list: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """Blocking `batch_next_token_logprobs`."""
        return self._submit(self._run_prompts, _prompts(token_ids_list)).result()

    def batch_sample_sync(
        self,
        prompt_token_ids_list: Sequence[Sequence[int]],
        max_tokens: int,
        eos_token_ids: Sequence[int],
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[list[int]]:
        """Blocking `batch_sample` (from a thread running an event loop too: it then runs on another thread)."""
        return _run_sync(self.batch_sample(prompt_token_ids_list, max_tokens, eos_token_ids, temperature, seed))

    def cache_kv(self, prompt_token_ids: Sequence[int]) -> None:
        """Run `prompt_token_ids` now so later prompts extending it reuse its KV."""
        self.next_token_logprobs_sync(prompt_token_ids)

    def clear_cache(self) -> None:
        """Drop all cached logprobs, KV and FSM states."""
        self._submit(self.trie.clear).result()

    def clear_kv_cache(self) -> None:
        """Drop cached KV, keep cached logprobs."""
        self._submit(self.trie.clear_kv).result()

    def close(self) -> None:
        """Flush queued requests, finish every submitted job, stop the worker thread."""
        if self._closed:
            return
        with self._loops_lock:
            queues = list(self._loops.items())
        for loop, q in queues:                    # results still reach their loops (call_soon_threadsafe)
            if q.queue and not loop.is_closed():
                self._flush(q, loop)
        self._closed = True
        self._executor.shutdown(wait=True)

    def __enter__(self) -> AsyncLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        if threading.get_ident() == self._worker_ident:  # re-entrant call from the worker itself
            fut: Future[Any] = Future()
            fut.set_result(fn(*args))
            return fut
        return self._executor.submit(fn, *args)


class _LoopQueue:
    """The async batcher's state for one event loop (touched only from that loop's thread)."""

    __slots__ = ("queue", "pending", "timer")

    def __init__(self) -> None:
        self.queue: list[Prompt] = []
        self.pending: dict[Prompt, asyncio.Future[np.ndarray]] = {}
        self.timer: asyncio.TimerHandle | None = None

    def reset(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for fut in self.pending.values():
            if not fut.done():
                fut.cancel()
        self.queue, self.pending = [], {}


def _resolve(futs: list[asyncio.Future[np.ndarray]], cfut: Future[list[np.ndarray]]) -> None:
    err = cfut.exception()
    for i, fut in enumerate(futs):
        if fut.done():
            continue
        res = err if err is not None else cfut.result()[i]
        if isinstance(res, BaseException):
            fut.set_exception(res)
        else:
            fut.set_result(res)


def _run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run `coro` to completion from synchronous code; on another thread where this one runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _prompts(token_ids_list: Sequence[Sequence[int]]) -> list[Prompt]:
    return [tuple(int(t) for t in p) for p in token_ids_list]


def load_model_by_name(name: str, backend: str = "mlx", llm_opts: dict[str, Any] | None = None) -> AsyncLM:
    """Load `name` (a local model directory) with the given backend.

    Args:
        name: model directory (hub ids only with ``llm_opts={"allow_download": True}``).
        backend: "mlx", "hf", "vllm" or "mock".
        llm_opts: keyword options for the backend (batch_size, timeout, cache_size, ...; for
            "vllm" also ``engine_opts``, a dict of vLLM engine arguments).

    Raises:
        BackendUnavailableError: the backend's framework is not installed.
        ValueError: unknown backend name.

    Example:
        >>> lm = load_model_by_name("path/to/model", backend="hf")  # doctest: +SKIP
    """
    opts = dict(llm_opts or {})
    if backend == "mlx":
        from backends.mlx import MLXLM as cls  # raises BackendUnavailableError without mlx
    elif backend == "hf":
        from backends.hf import HFLM as cls  # type: ignore[assignment]
    elif backend == "vllm":
        from backends.vllm import AsyncVirtualLM as cls  # type: ignore[assignment]
    elif backend == "mock":
        from backends.mock import MockLM as cls  # type: ignore[assignment]
    else:
        raise ValueError(f"unknown backend {backend!r}; expected 'mlx', 'hf', 'vllm' or 'mock'")
    return cls.from_name(name, **opts)

