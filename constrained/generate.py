"""Constrained generation end to end: `generate`, `agenerate`, `generate_batch`.

A request (prompt + JSON schema or regex + sampling settings) is compiled
into a `TokenFSM` over the model's `Vocabulary`; each of its `n` samples
becomes a row of the batched decode loop (`constrained.decoding`). All rows
of all requests decode together, so one model call per step serves every
sample of every prompt, and the backend's token trie shares prompt prefills
between samples and between requests.

Results are `Generation`s. A truncated output is never reported as valid:
status "max_tokens" comes with ``value=None``, and so does status "stop", a
text that a stop sequence cut before its document was complete.

Example:
    >>> gens = generate("path/to/model", "A person:", schema={"type": "integer"}, n=2, seed=0)  # doctest: +SKIP
    >>> [g.status for g in gens], isinstance(gens[0].value, int)  # doctest: +SKIP
    (['complete', 'complete'], True)
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from constrained.decoding import DecodeLoop, Row
from constrained.requests import Generation, GenerationRequest, Status  # noqa: F401 - re-exported: the API's types

if TYPE_CHECKING:
    from backends.base import AsyncLM
    from constrained.budget import Completions
    from constrained.text_stream import TextStream
    from constrained.token_fsm import TokenFSM
    from constrained.vocab import Vocabulary

__all__ = [
    "Generation",
    "GenerationRequest",
    "agenerate",
    "agenerate_batch",
    "generate",
    "generate_batch",
    "model_vocabulary",
    "resolve_model",
]

T = TypeVar("T")


# ---------------------------------------------------------------------------- public API


def generate(
    model: AsyncLM | str | os.PathLike[str],
    prompt: str | Sequence[int],
    *,
    schema: Any = None,
    regex: str | None = None,
    max_tokens: int = 256,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
    n: int = 1,
    chat: bool = False,
    budget_aware: bool = True,
    stop: str | Sequence[str] = (),
    backend: str = "mlx",
    **compile_options: Any,
) -> list[Generation]:
    """Generate `n` samples for `prompt`, each matching `schema` or `regex` (or free text).

    Args:
        model: an `AsyncLM`, or a local model directory loaded (once, then
            cached) with `backends.base.load_model_by_name(model, backend)`.
        prompt: text or token ids.
        schema, regex: the constraint (at most one; neither = unconstrained).
        max_tokens, temperature, top_p, seed, n, chat, budget_aware, stop: see `GenerationRequest`.
        backend: "mlx", "hf" or "vllm", when `model` is a path.
        **compile_options: passed to the schema / regex compiler.

    Returns:
        `n` `Generation`s.

    Raises:
        ConstraintError: the schema or regex is invalid or unsupported.
        ValueError: a setting is out of range, or the prompt is unusable.

    Example:
        >>> [g.text for g in generate(lm, "Pick:", regex="(yes|no)", n=2, seed=1)]  # doctest: +SKIP
        ['no', 'yes']
    """
    coro = agenerate(model, prompt, schema=schema, regex=regex, max_tokens=max_tokens, temperature=temperature,
                     top_p=top_p, seed=seed, n=n, chat=chat, budget_aware=budget_aware, stop=stop,
                     backend=backend, **compile_options)
    return _run_sync(coro)


async def agenerate(
    model: AsyncLM | str | os.PathLike[str],
    prompt: str | Sequence[int],
    *,
    schema: Any = None,
    regex: str | None = None,
    max_tokens: int = 256,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
    n: int = 1,
    chat: bool = False,
    budget_aware: bool = True,
    stop: str | Sequence[str] = (),
    backend: str = "mlx",
    **compile_options: Any,
) -> list[Generation]:
    """Async `generate`: concurrent calls share the backend (and its cache).

    Example:
        >>> gens = await agenerate(lm, "Age:", schema={"type": "integer"})  # doctest: +SKIP
    """
    lm = await asyncio.to_thread(resolve_model, model, backend)
    request = GenerationRequest(prompt, schema, regex, max_tokens, temperature, top_p, seed, n, chat, compile_options,
                                budget_aware, stop)
    job = _prepare(lm, request)
    if job.exception is not None:
        raise job.exception
    await _decode(lm, [job], on_token=job.on_token if job.texts else None)
    return job.results()


def generate_batch(
    model: AsyncLM | str | os.PathLike[str],
    requests: Sequence[GenerationRequest],
    *,
    backend: str = "mlx",
    progress: bool = False,
    on_result: Callable[[int, list[Generation]], None] | None = None,
) -> list[list[Generation]]:
    """Run many requests, each with its own constraint, decoding all their samples together.

    A request that fails (bad schema, unusable prompt, backend error) gets
    status "error" results with the message; the others are unaffected.

    Args:
        model: an `AsyncLM` or a model directory (see `generate`).
        requests: the requests.
        backend: "mlx", "hf" or "vllm", when `model` is a path.
        progress: show a tqdm progress bar (on stderr) over all samples.
        on_result: called as ``on_result(i, generations)`` as soon as every
            sample of ``requests[i]`` is done (in completion order), so that a
            caller can keep results that an interruption would otherwise lose.

    Returns:
        One list of `request.n` `Generation`s per request, in order.

    Example:
        >>> reqs = [GenerationRequest("A:", regex="[ab]"), GenerationRequest("B:", schema={"type": "null"})]  # doctest: +SKIP
        >>> [[g.text for g in r] for r in generate_batch(lm, reqs)]  # doctest: +SKIP
        [['a'], ['null']]
    """
    return _run_sync(agenerate_batch(model, requests, backend=backend, progress=progress, on_result=on_result))


async def agenerate_batch(
    model: AsyncLM | str | os.PathLike[str],
    requests: Sequence[GenerationRequest],
    *,
    backend: str = "mlx",
    progress: bool = False,
    on_result: Callable[[int, list[Generation]], None] | None = None,
) -> list[list[Generation]]:
    """Async `generate_batch`."""
    lm = await asyncio.to_thread(resolve_model, model, backend)
    jobs = [_prepare(lm, r) for r in requests]
    rows = [row for job in jobs for row in job.rows]
    bar = _progress_bar(len(rows)) if progress else None
    owner = {id(row): i for i, job in enumerate(jobs) for row in job.rows}
    left = [len(job.rows) for job in jobs]
    if on_result is not None:
        for i, job in enumerate(jobs):
            if not job.rows:                      # failed before decoding: its error results are ready
                on_result(i, job.results())

    def done(row: Row) -> None:
        if bar is not None:
            bar.update(1)
        i = owner[id(row)]
        left[i] -= 1
        if not left[i] and on_result is not None:
            on_result(i, jobs[i].results())

    def on_token(row: Row) -> None:
        jobs[owner[id(row)]].on_token(row)

    try:
        await _decode(lm, jobs, on_done=done, on_token=on_token if any(job.texts for job in jobs) else None)
    finally:
        if bar is not None:
            bar.close()
    return [job.results() for job in jobs]


# ---------------------------------------------------------------------------- models and vocabularies

_models: dict[tuple[str, str], AsyncLM] = {}
_models_lock = threading.Lock()
_vocabs: weakref.WeakKeyDictionary[Any, Vocabulary] = weakref.WeakKeyDictionary()


def resolve_model(model: AsyncLM | str | os.PathLike[str], backend: str = "mlx") -> AsyncLM:
    """`model` itself if it is an `AsyncLM`, else the (cached) backend loaded from that directory.

    Raises:
        FileNotFoundError: no such model directory.
        BackendUnavailableError: the backend's framework is not installed.

    Example:
        >>> lm = resolve_model("path/to/model", "hf")  # doctest: +SKIP
    """
    from backends.base import AsyncLM, load_model_by_name

    if isinstance(model, AsyncLM):
        model.ensure_loaded()
        return model
    key = (os.fspath(model), backend)
    with _models_lock:
        lm = _models.get(key)
        if lm is None:
            lm = load_model_by_name(key[0], backend=backend)
            lm.ensure_loaded()  # raise the load failure here, not at the first step
            _models[key] = lm
    return lm


def model_vocabulary(lm: AsyncLM) -> Vocabulary:
    """The `Vocabulary` of `lm` (built once per backend object), sized to its logits.

    Example:
        >>> model_vocabulary(lm).size == lm.vocab_size  # doctest: +SKIP
        True
    """
    vocab = _vocabs.get(lm)
    if vocab is None:
        from constrained.vocab import Vocabulary

        eos = lm.eos_token_ids or None
        vocab = _vocabs[lm] = Vocabulary.from_tokenizer(lm.tokenizer, eos_token_ids=eos, size=lm.vocab_size)
    return vocab


# ---------------------------------------------------------------------------- requests -> rows -> results


@dataclass
class _Job:
    """A request after compilation: its rows, or the exception that stopped it.

    `texts` holds each row's `TextStream` when its text is watched as it
    grows (stop sequences, streaming; see `watch`); otherwise the text is
    decoded once at the end.
    """

    request: GenerationRequest
    vocab: Vocabulary | None
    rows: list[Row]
    compile_ms: float = 0.0
    exception: Exception | None = None
    prompt_tokens: int = 0
    texts: dict[Row, TextStream] = field(default_factory=dict)

    def watch(self) -> None:
        """Follow every row's text as tokens arrive (`on_token`), so deltas and stop sequences can be seen."""
        from constrained.text_stream import TextStream

        for row in self.rows:
            self.texts.setdefault(row, TextStream(self.vocab, self.request.stop_sequences()))

    def on_token(self, row: Row) -> str:
        """After `row` appended tokens: its newly released text; ends the row at a stop sequence.

        A stop sequence wins over an end found in the same step (EOS, `max_tokens`): the text is
        cut before it either way, so the row's status becomes "stop" and `result` decides it.
        """
        stream = self.texts.get(row)
        if stream is None:
            return ""
        delta = stream.feed(row.tokens)
        if stream.stopped is not None and row.status != "error":
            row.status = "stop"
        return delta

    def results(self) -> list[Generation]:
        if self.exception is not None:
            msg = f"{type(self.exception).__name__}: {self.exception}"
            return [Generation("", [], status="error", error=msg) for _ in range(self.request.n)]
        return [self.result(row) for row in self.rows]

    def result(self, row: Row) -> Generation:
        """The `Generation` of a finished row."""
        stream = self.texts.get(row)
        if stream is not None:
            stream.finish()
            text = stream.text
        else:
            text = self.vocab.decode(row.tokens).decode("utf-8", errors="replace") if self.vocab else ""
        status = row.status or "error"
        if stream is not None and stream.stopped is not None and status != "error":
            # cut at a stop sequence: "complete" only if the text before it is itself a complete match
            complete = row.guide is None or row.guide.fsm.matches(text.encode("utf-8"))
            status = "complete" if complete else "stop"
        gen = Generation(text, list(row.tokens), None, status, row.error, self.compile_ms, row.forced,
                         row.steered, self.prompt_tokens, None if stream is None else stream.stopped)
        if gen.status == "complete":
            try:
                gen.value = _parse(self.request, text)
            except Exception as e:  # e.g. a pydantic validator the schema could not express
                gen.status, gen.error = "error", f"output does not parse: {type(e).__name__}: {e}"
        return gen


def _prepare(lm: AsyncLM, request: GenerationRequest) -> _Job:
    """Validate and compile `request`; build one row per sample. Never raises."""
    job = _Job(request, None, [])
    try:
        request.check()
        job.vocab = vocab = model_vocabulary(lm)
        prompt = _prompt_ids(lm, request)
        job.prompt_tokens = len(prompt)
        _check_context(lm, len(prompt), request.max_tokens)
        started = time.perf_counter()
        fsm = _compile(request, vocab)
        job.compile_ms = (time.perf_counter() - started) * 1000
        budget = _budget(request, fsm)
    except Exception as e:  # reported per request; `agenerate` re-raises it
        job.exception = e
        return job
    eos = frozenset(vocab.eos_token_ids)
    for j in range(request.n):
        rng = np.random.default_rng(None if request.seed is None else [int(request.seed), j])
        guide = None if fsm is None else fsm.guide()
        job.rows.append(Row(prompt, guide, eos, int(request.max_tokens), float(request.temperature),
                            float(request.top_p), rng, budget=budget))
    if request.stop_sequences():
        job.watch()
    return job


async def _decode(lm: AsyncLM, jobs: Sequence[_Job], on_done: Callable[[Row], None] | None = None,
                  on_token: Callable[[Row], Any] | None = None, loop: DecodeLoop | None = None) -> None:
    """Run every job's rows: in `loop` (shared with other callers; else a private decode loop), or, on a
    backend that decodes in its engine (vLLM), one engine request per row, masked there by the same
    constraint. Either way `on_token` sees each row's tokens as they arrive, and a row that it ends (a stop
    sequence) leaves at once."""
    rows = [row for job in jobs for row in job.rows]
    run_in_engine = getattr(lm, "generate_in_engine", None)
    if run_in_engine is None:
        await (loop or DecodeLoop(lm)).run(rows, on_done=on_done, on_token=on_token)
        return
    constraints = [_engine_constraint(job.request) for job in jobs for _ in job.rows]
    seeds = [engine_seed(job.request.seed, j) for job in jobs for j in range(len(job.rows))]
    await run_in_engine(rows, constraints, seeds, on_done=on_done, on_token=on_token)


def engine_seed(seed: int | None, row: int) -> int | None:
    """The engine seed of sample `row` of a request seeded `seed` (None: unseeded).

    Example:
        >>> engine_seed(0, 1) == engine_seed(0, 1) != engine_seed(0, 2)
        True
    """
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), int(row)]).generate_state(1)[0] & 0x7FFFFFFF)


def _engine_constraint(request: GenerationRequest) -> dict[str, Any] | None:
    """The request's constraint as an engine-side processor reads it (JSON values only: it crosses processes)."""
    from constrained.compile import _as_schema_dict
    from constrained.constraint_spec import XARGS_KEY, ConstraintSpec

    if request.regex is not None:
        spec = ConstraintSpec("regex", request.regex, dict(request.options), request.budget_aware)
    elif request.schema is not None:
        spec = ConstraintSpec("json_schema", _as_schema_dict(request.schema), dict(request.options), request.budget_aware)
    else:
        return None
    return spec.to_xargs()[XARGS_KEY]


def _budget(request: GenerationRequest, fsm: TokenFSM | None) -> Completions | None:
    """The shortest completions that steer `request`'s rows; ValueError if `max_tokens` cannot hold one."""
    from constrained.budget import completions

    if fsm is None or not request.budget_aware:
        return None
    budget = completions(fsm)
    need = budget.tokens_needed(fsm.initial)
    if need is not None and need > request.max_tokens and budget.is_shortest(fsm.initial):
        shortest = budget.shortest(fsm.initial).decode("utf-8", errors="replace")
        raise ValueError(f"max_tokens={request.max_tokens} is below the shortest complete output of this "
                         f"constraint, {need} tokens as this vocabulary spells it ({shortest!r}); raise "
                         "max_tokens (or set budget_aware=False to accept a cut-off sample)")
    return budget


def _compile(request: GenerationRequest, vocab: Vocabulary) -> TokenFSM | None:
    from constrained.compile import compile_json_schema, compile_regex

    if request.regex is not None:
        return compile_regex(request.regex, vocab, **request.options)
    if request.schema is not None:
        return compile_json_schema(request.schema, vocab, **request.options)
    if request.options:
        raise ValueError(f"compile options {sorted(request.options)} given without a schema or regex")
    return None


def _prompt_ids(lm: AsyncLM, request: GenerationRequest) -> tuple[int, ...]:
    prompt = request.prompt
    if isinstance(prompt, str):
        tok = lm.tokenizer
        if request.chat:
            if not getattr(tok, "chat_template", None):
                raise ValueError("chat=True, but the tokenizer has no chat template")
            text = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
            ids = tok.encode(text, add_special_tokens=False)
        else:
            ids = tok.encode(prompt)
    else:
        if request.chat:
            raise ValueError("chat=True needs a text prompt, got token ids")
        ids = list(prompt)
    if not ids:
        raise ValueError("the prompt encodes to no tokens; give a non-empty prompt")
    bad = [t for t in ids if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < lm.vocab_size]
    if bad:
        raise ValueError(f"prompt token ids must be integers in [0, {lm.vocab_size}), got {bad[:5]}")
    return tuple(int(t) for t in ids)


def _check_context(lm: AsyncLM, prompt_tokens: int, max_tokens: int) -> None:
    """ValueError when the prompt and `max_tokens` overflow a backend's fixed context (vLLM's `max_model_len`),
    so the request is refused up front instead of failing, or being cut short, in the engine."""
    limit = getattr(lm, "max_model_len", None)
    if limit is not None and prompt_tokens + max_tokens > limit:
        raise ValueError(f"the prompt's {prompt_tokens} tokens plus max_tokens={max_tokens} exceed the model's "
                         f"context of {limit} tokens (max_model_len); shorten the prompt or lower max_tokens")


def _parse(request: GenerationRequest, text: str) -> Any:
    schema = request.schema
    if schema is None or (request.options.get("or_text") and not text.lstrip(" \t\n\r").startswith("{")):
        return text                                # `or_text`: a reply that is not the document
    if isinstance(schema, type) and hasattr(schema, "model_validate_json"):
        return schema.model_validate_json(text)
    return json.loads(text)


# ---------------------------------------------------------------------------- helpers


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to completion, also from code already inside an event loop (notebooks)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _progress_bar(total: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # progress is a nicety, not a dependency
        return None
    return tqdm(total=total, unit="sample", desc="generating", dynamic_ncols=True)
