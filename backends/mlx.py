"""`MLXLM`: the `AsyncLM` contract on mlx-lm models, with batched prefill and a prefix KV trie.

A batch of prompts runs as one mlx-lm batch: each row's cached KV (the
concatenated segments of its longest cached prefix) becomes a `KVCache`, the
rows are merged into a left-padded `BatchKVCache` by mlx-lm's
`PromptProcessingBatch`, which prefills the uncached suffixes (right-padded,
then rolled so every row ends at the same column), and a final one-token step
gives each row's next-token logits. Each row's new KV is then sliced out as
ONE contiguous segment (or a full copy, when its chain got long) and stored in
the trie.

A stored segment can also be cut in two (`_cut_kv`: its first positions and
the rest, along the sequence axis) when a later prompt shares only part of
it, so a system prompt is prefilled once however its questions arrive: in a
plain `KVCache` the keys and values of a prefix are exactly the first columns
of a longer sequence's.

Only models whose caches are plain `KVCache`s can be sliced, trimmed and cut
this way. Others (sliding windows / `RotatingKVCache`, `QuantizedKVCache`,
`ArraysCache` state-space layers, ...) are detected at load time: prefix
caching is turned off with a warning and every prompt runs from scratch,
still batched.

The decode loop (`constrained.live`) keeps its rows in one mlx-lm
`BatchKVCache`: rows join it (`_live_join`, `BatchKVCache.extend`), feed it
their new tokens (`_live_feed`: a forced run's head right-padded and rolled
into place as mlx-lm prefills, then every row's last token) and leave it
(`_live_keep`, `BatchKVCache.filter`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backends.base import Job, Prompt
from backends.model import ModelLM
from constrained.device_sampling import mlx_draw
from constrained.errors import BackendUnavailableError

try:
    import mlx.core as mx
    from mlx_lm.generate import PromptProcessingBatch
    from mlx_lm.models.cache import KVCache, make_prompt_cache
    from mlx_lm.tokenizer_utils import TokenizerWrapper
except ImportError as e:  # pragma: no cover - depends on the environment
    raise BackendUnavailableError("mlx", "mlx", str(e)) from e

__all__ = ["MLXKV", "MLXLM"]


@dataclass
class MLXKV:
    """One KV segment: per-layer keys and values of shape ``(1, kv_heads, length, head_dim)``."""

    keys: list[Any]
    values: list[Any]
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = sum(int(k.nbytes) + int(v.nbytes) for k, v in zip(self.keys, self.values))


class MLXLM(ModelLM):
    """Batched, prefix-cached next-token logprobs for any mlx-lm model.

    Args:
        model: an mlx-lm model (``mlx_lm.load(path)[0]``).
        tokenizer: its tokenizer (mlx-lm `TokenizerWrapper` or a HF tokenizer).
        prefill_step_size: most prompt tokens per model call while prefilling.
        **opts: `AsyncLM` options: batch_size, timeout, cache_size (bytes), max_segments.

    Example:
        >>> lm = MLXLM.from_name("path/to/mlx-model", batch_size=8)  # doctest: +SKIP
        >>> lp = lm.next_token_logprobs_sync(lm.tokenizer.encode("Hello"))  # doctest: +SKIP
        >>> lp.shape == (lm.vocab_size,)  # doctest: +SKIP
        True
    """

    backend_name = "mlx"

    @staticmethod
    def _load_pretrained(name: str, allow_download: bool) -> tuple[Any, Any]:
        import mlx_lm

        return mlx_lm.load(name)

    @property
    def peak_memory_bytes(self) -> int:
        """MLX's peak memory since start (or the last `reset_peak_memory`)."""
        return int(mx.get_peak_memory())

    def reset_peak_memory(self) -> None:
        mx.reset_peak_memory()

    def _setup(self, model: Any, tokenizer: Any) -> tuple[int, list[int], Any]:
        if isinstance(tokenizer, TokenizerWrapper):  # expose the HF tokenizer it wraps
            hf_tokenizer, eos = tokenizer._tokenizer, list(tokenizer.eos_token_ids)
        else:
            hf_tokenizer = tokenizer
            eos = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
        caches = make_prompt_cache(model)
        # exact type: subclasses (RotatingKVCache, QuantizedKVCache, ...) keep KV that is not one row per position
        plain = bool(caches) and all(type(c) is KVCache for c in caches)
        if not plain:
            kinds = sorted({type(c).__name__ for c in caches})
            warnings.warn(f"MLXLM: prefix caching disabled, the model's caches ({', '.join(kinds)}) cannot be sliced", stacklevel=2)
            self.prefix_caching = False
        self.splits_kv = plain
        self.live_decoding = plain  # live batches are mlx-lm `BatchKVCache`s, extended and filtered
        # on a GPU (Apple silicon) the draw joins the step's lazy graph and only ids come back; on the
        # CPU the host draw touches only the allowed logits (`constrained.device_sampling`)
        self.device_sampling = mx.default_device().type != mx.cpu
        vocab_size = int(model(mx.array([[0]])).shape[-1])  # output width, may exceed len(tokenizer)
        return vocab_size, sorted(int(t) for t in eos), hf_tokenizer

    # ------------------------------------------------------------------ batched forward

    def _forward(self, jobs: list[Job]) -> list[tuple[np.ndarray, Any]]:
        batch = PromptProcessingBatch(
            self.model, list(range(len(jobs))), [self._cache_for(j.chain) for j in jobs], prefill_step_size=self.prefill_step_size
        )
        suffixes = [j.tokens[j.start :] for j in jobs]
        if any(len(s) > 1 for s in suffixes):  # prefill all but the last token, right-padded
            batch.prompt([list(s[:-1]) for s in suffixes])
        logprobs = self._step(mx.array([[s[-1]] for s in suffixes]), batch.prompt_cache)
        handles = [self._slice_kv(batch.prompt_cache, i, j) for i, j in enumerate(jobs)]
        mx.eval(logprobs, [h.keys + h.values for h in handles if h is not None])
        self.stats["padded_tokens"] += len(jobs) * max(len(s) for s in suffixes)
        lp = np.array(logprobs, dtype=np.float32)
        return [(lp[i], h) for i, h in enumerate(handles)]

    def _step(self, tokens: Any, cache: list[Any]) -> Any:
        logits = self.model(tokens, cache=cache)[:, -1, :].astype(mx.float32)
        return logits - mx.logsumexp(logits, axis=-1, keepdims=True)

    def _cache_for(self, chain: list[Any]) -> list[Any]:
        """A fresh per-row cache holding the concatenated `chain` (one concat per layer)."""
        cache = make_prompt_cache(self.model)
        if chain:
            for layer, c in enumerate(cache):
                keys = [seg.handle.keys[layer] for seg in chain]
                values = [seg.handle.values[layer] for seg in chain]
                k = keys[0] if len(keys) == 1 else mx.concatenate(keys, axis=2)
                v = values[0] if len(values) == 1 else mx.concatenate(values, axis=2)
                c.state = (k, v, k.shape[2])
        return cache

    def _slice_kv(self, cache: list[Any], row: int, job: Job) -> MLXKV | None:
        """Row `row`'s KV for positions ``[store_from, len(tokens))`` as contiguous copies."""
        if job.store_from is None:
            return None
        keys, values = [], []
        for c in cache:
            k, v = c.keys_and_values()
            end = c.size()  # every row ends at this column after prefill
            begin = end - len(job.tokens) + job.store_from
            # contiguous() copies, so the segment does not pin the whole batch buffer
            keys.append(mx.contiguous(k[row : row + 1, :, begin:end]))
            values.append(mx.contiguous(v[row : row + 1, :, begin:end]))
        return MLXKV(keys, values)

    def _cut_kv(self, handle: MLXKV, n: int) -> tuple[MLXKV, MLXKV]:
        """A stored segment's first `n` positions and the rest, as two segments (sliced along the sequence axis)."""
        head = MLXKV([mx.contiguous(k[:, :, :n]) for k in handle.keys], [mx.contiguous(v[:, :, :n]) for v in handle.values])
        tail = MLXKV([mx.contiguous(k[:, :, n:]) for k in handle.keys], [mx.contiguous(v[:, :, n:]) for v in handle.values])
        mx.eval(head.keys, head.values, tail.keys, tail.values)  # now: no lazy graph keeps the whole segment alive
        return head, tail

    # ------------------------------------------------------------------ live decoding

    def _live_start(self, prompts: list[Prompt], max_tokens: int) -> tuple[Any, np.ndarray]:
        """A batch cache holding every prompt, and each prompt's next-token logprobs.

        The prompts run through the trie (shared prompts prefill once); their
        stored chains are then merged into one left-padded `BatchKVCache`.
        """
        if self.prefix_caching:
            first = self._run_prompts(prompts)
            chains = [self.trie.kv_chain(p) for p in prompts]
            if all(c and c[-1].end == len(p) for c, p in zip(chains, prompts)):
                concat: dict[Prompt, list[Any]] = {}  # identical prompts concatenate their chain once
                for p, c in zip(prompts, chains):
                    if p not in concat:
                        concat[p] = self._cache_for(c)
                caches = [concat[p] for p in prompts]
                batch = PromptProcessingBatch(self.model, list(range(len(prompts))), caches)
                return batch.prompt_cache, np.stack(first)
        # No reusable KV (caching off, or evicted): prefill the prompts here, batched.
        batch = PromptProcessingBatch(self.model, list(range(len(prompts))), [make_prompt_cache(self.model) for _ in prompts])
        if any(len(p) > 1 for p in prompts):
            batch.prompt([list(p[:-1]) for p in prompts])
        first = self._step(mx.array([[p[-1]] for p in prompts]), batch.prompt_cache)
        self.stats["model_tokens"] += sum(len(p) for p in prompts)
        self.stats["forward_calls"] += 1
        return batch.prompt_cache, np.array(first, dtype=np.float32)

    def _live_step(self, live: Any, tokens: list[int]) -> mx.array:
        """Every row's next-token logits, not yet evaluated (the draw evaluates them)."""
        self._count_step(len(tokens))
        return self.model(mx.array([[t] for t in tokens]), cache=live)[:, -1, :].astype(mx.float32)

    def _host_logits(self, part: Any) -> np.ndarray:
        return np.array(part, dtype=np.float32)

    def _live_draw(self, parts: list[Any], rows: Any, picks: Any) -> list[int]:
        """In `mx` ops when `device_sampling` is set (`constrained.device_sampling`), evaluated with the
        step's forward pass; the joined rows' logprobs (from the trie, on the host) join as arrays."""
        lazy = [p for p in parts if isinstance(p, mx.array)]
        if not self.device_sampling:
            mx.eval(lazy)  # the step's cache too, when every row is forced and no logits are read
            return super()._live_draw(parts, rows, picks)
        logits = mx.concatenate([p if isinstance(p, mx.array) else mx.array(np.asarray(p)) for p in parts])
        ids = mlx_draw(logits[mx.array(list(rows))], picks)
        mx.eval(lazy)  # (already done unless every row was forced)
        return ids

    def _live_keep(self, live: Any, rows: list[int]) -> Any:
        for c in live:
            c.filter(mx.array(rows, dtype=mx.int32))
        return live

    def _live_feed(self, live: Any, feeds: list[Prompt]) -> mx.array:
        """Feed each row its new tokens: all but the last right-padded and rolled into place (as mlx-lm
        prefills a batch), then every row's last token in one step."""
        heads = [list(f[:-1]) for f in feeds]
        width = max(len(h) for h in heads)
        if width:
            padding = [width - len(h) for h in heads]
            if max(padding):
                for c in live:
                    c.prepare(right_padding=padding)
            self.model(mx.array([h + [0] * (width - len(h)) for h in heads]), cache=live)
            if max(padding):
                for c in live:
                    c.finalize()  # rolls each row right by its padding, which becomes left padding
            self.stats["model_tokens"] += sum(map(len, heads))
            self.stats["padded_tokens"] += len(heads) * width
            self.stats["forward_calls"] += 1
        return self._live_step(live, [f[-1] for f in feeds])

    def _live_slice(self, live: Any, row: int, start: int, end: int) -> MLXKV:
        """Row `row`'s KV for positions ``[start, end)``: its columns after its left padding."""
        pad = int(live[0].left_padding[row].item())
        keys = [mx.contiguous(c.keys[row : row + 1, :, pad + start : pad + end]) for c in live]
        values = [mx.contiguous(c.values[row : row + 1, :, pad + start : pad + end]) for c in live]
        mx.eval(keys, values)
        return MLXKV(keys, values)

    def _live_join(self, live: Any, prompts: list[Prompt]) -> tuple[Any, np.ndarray]:
        """New rows through `_live_start` (the trie prefills them), appended to `live` by mlx-lm's
        `BatchKVCache.extend` (right-aligned: the shorter side gains left padding)."""
        new, logprobs = self._live_start(prompts, 0)
        if live is None:
            return new, logprobs
        for a, b in zip(live, new):
            a.extend(b)
        return live, logprobs
