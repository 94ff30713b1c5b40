"""`HFLM`: the `AsyncLM` contract on Hugging Face transformers models (torch; float32 on the CPU, or the
model's own device and dtype: the tensors it feeds the model are made there).

One batch is laid out in columns as ``[cached prefix | suffix head | last token]``:

- cached prefixes are left-padded to the longest one (``P`` columns) and
  copied, segment by segment, into a preallocated KV buffer;
- suffix heads (all uncached tokens but the last) are right-padded to the
  longest head and prefilled through the decoder in `prefill_step_size` chunks;
- every row's last token shares the final column, so one step yields all
  next-token logits.

A 2-D attention mask zeroes the padding wherever it falls, and explicit
`position_ids` give each token its true position, so rows never see each
other's padding. Each row's KV (its real columns, concatenated once) is then
stored as one segment in the trie.

Rows that all extend ONE cached chain (n continuations of a shared prompt,
the common case) run packed instead: one sequence ``[prefix | suffix 0 |
suffix 1 | ...]`` with a 4-D mask, so the prefix's KV is loaded once rather
than copied into every row.

A stored segment can also be cut in two (`_cut_kv`: its first columns and
the rest) when a later prompt shares only part of it, so a system prompt is
prefilled once however its questions arrive: in full-attention
`DynamicLayer`s the keys and values of a prefix are exactly the first
columns of a longer sequence's. Models with other cache layers (sliding
windows, linear attention or other recurrent states, shared KV) are
detected at load time: prefix caching is turned off with a warning, and
every prompt runs from scratch, still batched.

The cache is a `DynamicCache` whose layers are `BufferLayer`s: they write new
keys and values into a buffer reserved up front instead of `torch.cat`-ing
the whole cache on every call, so a decoding step costs its new token, not a
copy of the prompt's KV. The decode loop (`constrained.live`; `batch_sample`
too runs in it) decodes on such a live batch, built from the prompts'
chains in the trie (a shared prompt is prefilled once): rows join it (`_live_join`: the
two batches copied into one buffer, right-aligned), feed it their new
tokens, a forced run beside single tokens in one call (`_live_feed`), and
leave it (`_live_keep`, which also drops columns left as padding only).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backends.base import Job, Prompt
from backends.model import ModelLM
from constrained.device_sampling import torch_draw
from constrained.errors import BackendUnavailableError
from constrained.token_trie import KVSegment

try:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
    from transformers.cache_utils import DynamicLayer
except ImportError as e:  # pragma: no cover - depends on the environment
    raise BackendUnavailableError("hf", "hf", str(e)) from e

__all__ = ["BufferLayer", "HFLM", "TorchKV"]


@dataclass
class TorchKV:
    """One KV segment: per-layer keys and values of shape ``(kv_heads, length, head_dim)``."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = sum(k.nbytes + v.nbytes for k, v in zip(self.keys, self.values))


class BufferLayer(DynamicLayer):
    """A `DynamicLayer` that appends into a reserved buffer (doubling when full) instead of `torch.cat`.

    `keys` / `values` are views of the first `length` columns, so code that
    reads a `DynamicLayer` keeps working.

    Example:
        >>> layer = BufferLayer(capacity=8)
        >>> k = torch.zeros(1, 2, 3, 4)
        >>> layer.update(k, k)[0].shape, layer.update(k[:, :, :1], k[:, :, :1])[0].shape
        (torch.Size([1, 2, 3, 4]), torch.Size([1, 2, 4, 4]))
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = max(1, capacity)
        self.length = 0

    def reserve(self, like_k: torch.Tensor, like_v: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Allocate zeroed buffers of `rows` rows shaped like `like_k` / `like_v` ``(heads, *, dim)``; return them."""
        self.lazy_initialization(like_k, like_v)
        self._k = like_k.new_zeros((rows, like_k.shape[0], self.capacity, like_k.shape[-1]))
        self._v = like_v.new_zeros((rows, like_v.shape[0], self.capacity, like_v.shape[-1]))
        return self._k, self._v

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.reserve(key_states[0], value_states[0], key_states.shape[0])
        end = self.length + key_states.shape[2]
        if end > self._k.shape[2]:  # grow geometrically so appends stay amortized O(1)
            self.capacity = max(end, 2 * self._k.shape[2])
            old_k, old_v = self._k[:, :, : self.length], self._v[:, :, : self.length]
            self.reserve(old_k[0], old_v[0], old_k.shape[0])
            self._k[:, :, : self.length], self._v[:, :, : self.length] = old_k, old_v
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self.set_length(end)
        return self.keys, self.values

    def set_length(self, length: int) -> None:
        """Mark the first `length` columns as filled (after writing them into the buffers)."""
        self.length = length
        self.keys, self.values = self._k[:, :, :length], self._v[:, :, :length]

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._k, self._v = self._k[indices], self._v[indices]
            self.set_length(self.length)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0 and self.is_initialized:
            self.set_length(max(0, self.length + tokens_to_remove))

    def reset(self) -> None:
        self.keys = self.values = None
        self.is_initialized, self.length = False, 0


# Free columns a live batch reserves past its longest row when rows join (the buffers double past it).
_LIVE_RESERVE = 64


@dataclass
class _Live:
    """A batch being decoded: its KV cache, attention mask (1 = real column) and each row's next position."""

    cache: Any
    mask: torch.Tensor
    pos: torch.Tensor


class HFLM(ModelLM):
    """Batched, prefix-cached next-token logprobs for a transformers causal LM.

    Args:
        model: a ``transformers`` causal LM, put in eval mode and used on its own device (float32 on a CPU).
        tokenizer: its Hugging Face tokenizer.
        prefill_step_size: most prompt tokens per model call while prefilling.
        **opts: `AsyncLM` options: batch_size, timeout, cache_size (bytes), max_segments.

    Example:
        >>> lm = HFLM.from_name("path/to/model")  # doctest: +SKIP
        >>> lm.next_token_logprobs_sync([1, 2, 3]).dtype  # doctest: +SKIP
        dtype('float32')
    """

    backend_name = "hf"

    @staticmethod
    def _load_pretrained(name: str, allow_download: bool) -> tuple[Any, Any]:
        local = not allow_download
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32, local_files_only=local)
        return model, AutoTokenizer.from_pretrained(name, local_files_only=local)

    def _setup(self, model: Any, tokenizer: Any) -> tuple[int, list[int], Any]:
        model.eval()
        # Inputs are made on the model's device; there the live loop draws tokens with torch ops and
        # brings back ids only (`constrained.device_sampling`), on the CPU the host draws (cheaper there).
        self.device = model.device
        self.device_sampling = self.device.type != "cpu"
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        if eos is None:
            eos = tokenizer.eos_token_id
        eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        vocab_size = int(model.get_output_embeddings().weight.shape[0])
        # Chains, cuts and packed rows all assume full attention: one key/value column per position,
        # never dropped. Exact type: DynamicSlidingWindowLayer and the quantized layers subclass DynamicLayer.
        layers = DynamicCache(config=model.config).layers
        full_attention = bool(layers) and all(type(layer) is DynamicLayer for layer in layers)
        if not full_attention:
            kinds = sorted({type(layer).__name__ for layer in layers}) or ["none from the config"]
            warnings.warn(f"HFLM: prefix caching disabled, the model's cache layers ({', '.join(kinds)}) cannot be sliced", stacklevel=2)
            self.prefix_caching = False
        self.splits_kv = full_attention
        self.live_decoding = full_attention  # live batches merge and pad `BufferLayer`s
        # Packing also needs a kernel that honours a custom 4-D mask.
        self._can_pack = full_attention and model.config._attn_implementation in ("sdpa", "eager")
        return vocab_size, sorted(int(t) for t in eos_ids), tokenizer

    # ------------------------------------------------------------------ batched forward

    @torch.inference_mode()
    def _forward(self, jobs: list[Job]) -> list[tuple[np.ndarray, Any]]:
        if self._packable(jobs):
            return self._forward_packed(jobs)
        logprobs, live, P, H = self._prefill(jobs, reserve=0)
        heads = [len(j.tokens) - 1 - j.start for j in jobs]
        handles = [self._slice_kv(live.cache, i, j, P, h, P + H) for i, (j, h) in enumerate(zip(jobs, heads))]
        return [(logprobs[i].copy(), handles[i]) for i in range(len(jobs))]

    def _packable(self, jobs: list[Job]) -> bool:
        """Rows extending one shared cached chain, few enough tokens for one call: run them packed."""
        first = jobs[0]
        if not self._can_pack or len(jobs) < 2 or not first.chain:
            return False
        if sum(len(j.tokens) - j.start for j in jobs) > self.prefill_step_size:
            return False
        ids = [id(s.handle) for s in first.chain]
        return all(j.start == first.start and [id(s.handle) for s in j.chain] == ids for j in jobs)

    def _forward_packed(self, jobs: list[Job]) -> list[tuple[np.ndarray, Any]]:
        """Rows sharing a cached prefix as ONE sequence: ``[prefix | row 0's suffix | row 1's suffix | ...]``.

        The prefix's KV is loaded once instead of once per row. A 4-D mask lets
        each suffix token see the prefix and the earlier tokens of its own row
        only, and `position_ids` restart at the prefix length for every row, so
        each row computes exactly what it would alone.
        """
        P = jobs[0].start
        suffixes = [j.tokens[P:] for j in jobs]
        dev = self.device
        row = torch.tensor([i for i, s in enumerate(suffixes) for _ in s], device=dev)
        pos = torch.tensor([P + k for s in suffixes for k in range(len(s))], device=dev)
        ends = torch.cumsum(torch.tensor([len(s) for s in suffixes], device=dev), 0)
        Q = len(row)
        visible = (row[:, None] == row[None, :]) & (pos[:, None] >= pos[None, :])
        mask = torch.zeros(1, 1, Q, P + Q, dtype=self.model.dtype, device=dev)
        mask[0, 0, :, P:].masked_fill_(~visible, torch.finfo(self.model.dtype).min)
        cache = self._past([jobs[0].chain], P, P + Q)
        out = self.model(
            input_ids=torch.tensor([[t for s in suffixes for t in s]], device=dev), attention_mask=mask, position_ids=pos.unsqueeze(0),
            past_key_values=cache, use_cache=True, logits_to_keep=ends - 1,
        )  # fmt: skip
        logprobs = torch.log_softmax(out.logits[0].float(), dim=-1).cpu().numpy()
        self.stats["padded_tokens"] += Q
        self.stats["packed_rows"] += len(jobs)
        result = []
        for i, job in enumerate(jobs):
            handle = None
            if job.store_from is not None:  # this row's columns, after the prefix's when a full copy is asked for
                end = P + int(ends[i])
                cols = torch.arange(end - len(suffixes[i]), end, device=dev)
                if job.store_from == 0:
                    cols = torch.cat([torch.arange(P, device=dev), cols])
                handle = TorchKV([layer.keys[0][:, cols] for layer in cache.layers], [layer.values[0][:, cols] for layer in cache.layers])
            result.append((logprobs[i].copy(), handle))
        return result

    def _prefill(self, jobs: list[Job], reserve: int) -> tuple[np.ndarray, _Live, int, int]:
        """Run `jobs` (cached chains, then heads, then last tokens); keep `reserve` free columns for decoding."""
        starts = [j.start for j in jobs]
        heads = [list(j.tokens[j.start : -1]) for j in jobs]
        P, H = max(starts), max(len(h) for h in heads)
        cache = self._past([j.chain for j in jobs], P, P + H + 1 + reserve)
        mask = torch.zeros(len(jobs), P + H + 1, dtype=torch.long)
        for i, (s, h) in enumerate(zip(starts, heads)):
            mask[i, P - s : P + len(h)] = 1
        mask[:, -1] = 1
        dev = self.device
        mask = mask.to(dev)
        ids = torch.tensor([h + [0] * (H - len(h)) for h in heads], dtype=torch.long, device=dev).reshape(len(jobs), H)
        pos = torch.tensor(starts, device=dev).unsqueeze(1) + torch.arange(H, device=dev).unsqueeze(0)
        decoder = self.model.get_decoder()
        for c0 in range(0, H, self.prefill_step_size):
            c1 = min(H, c0 + self.prefill_step_size)
            decoder(input_ids=ids[:, c0:c1], attention_mask=mask[:, : P + c1], position_ids=pos[:, c0:c1], past_key_values=cache, use_cache=True)
        live = _Live(cache, mask, torch.tensor([len(j.tokens) - 1 for j in jobs], device=dev))
        logprobs = self._step(live, [j.tokens[-1] for j in jobs])
        self.stats["padded_tokens"] += len(jobs) * (H + 1)
        return logprobs, live, P, H

    def _step(self, live: _Live, tokens: list[int]) -> np.ndarray:
        """One token per row at the mask's last column (already added for the prefill's last token)."""
        return torch.log_softmax(self._step_logits(live, tokens).float(), dim=-1).cpu().numpy()

    def _step_logits(self, live: _Live, tokens: list[int]) -> torch.Tensor:
        """`_step`'s raw next-token logits (rows × vocabulary), left on the model's device."""
        ids = torch.tensor(tokens, dtype=torch.long, device=self.device).unsqueeze(1)
        out = self.model(input_ids=ids, attention_mask=live.mask, position_ids=live.pos.unsqueeze(1), past_key_values=live.cache, use_cache=True)
        live.pos = live.pos + 1
        return out.logits[:, -1, :]

    def _new_cache(self, capacity: int) -> Any:
        """A `DynamicCache` whose full-attention layers append into buffers of `capacity` columns."""
        cache = DynamicCache(config=self.model.config)
        cache.layers = [BufferLayer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
        return cache

    def _past(self, chains: list[list[KVSegment]], P: int, capacity: int) -> Any:
        """A cache with every row's chain, left-padded to `P` columns, copied segment by segment (no concat)."""
        cache = self._new_cache(capacity)
        if P == 0:
            return cache
        ref = next(c[0].handle for c in chains if c)
        for layer_idx, layer in enumerate(cache.layers):
            keys, values = layer.reserve(ref.keys[layer_idx], ref.values[layer_idx], len(chains))
            for row, chain in enumerate(chains):
                pad = P - (chain[-1].end if chain else 0)
                for seg in chain:
                    keys[row, :, pad + seg.start : pad + seg.end] = seg.handle.keys[layer_idx]
                    values[row, :, pad + seg.start : pad + seg.end] = seg.handle.values[layer_idx]
            layer.set_length(P)
        return cache

    def _slice_kv(self, cache: Any, row: int, job: Job, P: int, head: int, last_col: int) -> TorchKV | None:
        """Row `row`'s real KV columns (cached + head + last), from `store_from` on, as fresh tensors."""
        if job.store_from is None:
            return None
        lo = P - job.start + job.store_from
        keys, values = [], []
        for layer in cache.layers:
            keys.append(torch.cat([layer.keys[row, :, lo : P + head], layer.keys[row, :, last_col : last_col + 1]], dim=1))
            values.append(torch.cat([layer.values[row, :, lo : P + head], layer.values[row, :, last_col : last_col + 1]], dim=1))
        return TorchKV(keys, values)

    @torch.inference_mode()
    def _cut_kv(self, handle: TorchKV, n: int) -> tuple[TorchKV, TorchKV]:
        """A stored segment's first `n` columns and the rest, as two segments (copies, so each frees its own memory)."""
        head = TorchKV([k[:, :n].clone() for k in handle.keys], [v[:, :n].clone() for v in handle.values])
        tail = TorchKV([k[:, n:].clone() for k in handle.keys], [v[:, n:].clone() for v in handle.values])
        return head, tail

    # ------------------------------------------------------------------ live decoding

    @torch.inference_mode()
    def _live_start(self, prompts: list[Prompt], max_tokens: int) -> tuple[_Live, np.ndarray]:
        """A live batch holding every prompt's KV, and each prompt's next-token logprobs.

        With prefix caching the prompts run through the trie (shared prompts
        prefill once) and their stored chains are copied into one left-padded
        buffer; otherwise they are prefilled here, batched.
        """
        if self.prefix_caching:
            first = self._run_prompts(prompts)
            chains = [self.trie.kv_chain(p) for p in prompts]
            if all(c and c[-1].end == len(p) for c, p in zip(chains, prompts)):
                P = max(len(p) for p in prompts)
                mask = torch.zeros(len(prompts), P, dtype=torch.long)
                for i, p in enumerate(prompts):
                    mask[i, P - len(p) :] = 1
                pos = torch.tensor([len(p) for p in prompts], device=self.device)
                live = _Live(self._past(chains, P, P + max_tokens), mask.to(self.device), pos)
                return live, np.stack(first)
        jobs = [Job(p, [], 0, None) for p in prompts]
        logprobs, live, _, _ = self._prefill(jobs, reserve=max_tokens)
        self.stats["model_tokens"] += sum(len(p) for p in prompts)
        self.stats["forward_calls"] += 1
        return live, logprobs

    @torch.inference_mode()
    def _live_step(self, live: _Live, tokens: list[int]) -> torch.Tensor:
        self._count_step(len(tokens))
        live.mask = torch.cat([live.mask, live.mask.new_ones((live.mask.shape[0], 1))], dim=1)
        return self._step_logits(live, tokens)

    def _live_keep(self, live: _Live, rows: list[int]) -> _Live:
        idx = torch.tensor(rows, dtype=torch.long, device=self.device)
        live.cache.batch_select_indices(idx)
        mask = live.mask[idx]
        # drop the leading columns that are padding in every row left (the rows that needed them are gone)
        first = int(mask.argmax(dim=1).min())
        if first:
            for layer in live.cache.layers:
                layer._k, layer._v = layer._k[:, :, first:], layer._v[:, :, first:]
                layer.set_length(layer.length - first)
            mask = mask[:, first:]
            self.stats["live_columns_dropped"] += first
        return _Live(live.cache, mask, live.pos[idx])

    @torch.inference_mode()
    def _live_slice(self, live: _Live, row: int, start: int, end: int) -> TorchKV:
        """Row `row`'s real columns (the mask's ones, in position order) for positions ``[start, end)``."""
        cols = live.mask[row].nonzero().squeeze(1)[start:end]
        return TorchKV([layer.keys[row][:, cols] for layer in live.cache.layers],
                       [layer.values[row][:, cols] for layer in live.cache.layers])

    @torch.inference_mode()
    def _live_feed(self, live: _Live, feeds: list[Prompt]) -> torch.Tensor:
        """Feed each row its new tokens in ONE call: a block of the longest feed's width, each row's tokens
        at its right end (so every row's last token shares the last column), the columns before them
        masked out like left padding, and `position_ids` that continue each row's own positions."""
        B, L = len(feeds), max(len(f) for f in feeds)
        if L == 1:
            return self._live_step(live, [f[0] for f in feeds])
        ids = torch.zeros(B, L, dtype=torch.long)
        block = torch.zeros(B, L, dtype=torch.long)
        for i, f in enumerate(feeds):
            ids[i, L - len(f) :] = torch.tensor(f, dtype=torch.long)
            block[i, L - len(f) :] = 1
        ids, block = ids.to(self.device), block.to(self.device)
        lens = block.sum(dim=1)
        # row i's first new token sits at column L - lens[i] and takes position pos[i]
        pos = ((live.pos + lens - L).unsqueeze(1) + torch.arange(L, device=self.device).unsqueeze(0)).clamp(min=0)  # padding: masked
        live.mask = torch.cat([live.mask, block], dim=1)
        out = self.model(input_ids=ids, attention_mask=live.mask, position_ids=pos, past_key_values=live.cache,
                         use_cache=True, logits_to_keep=1)  # fmt: skip
        live.pos = live.pos + lens
        self.stats["model_tokens"] += int(lens.sum())
        self.stats["padded_tokens"] += B * L
        self.stats["forward_calls"] += 1
        return out.logits[:, -1, :]

    def _await_forward(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _host_logits(self, part: Any) -> np.ndarray:
        """Logits as numpy: a view of a float32 CPU tensor (no copy), else a float32 copy on the host."""
        if isinstance(part, torch.Tensor):
            if part.device.type != "cpu" or part.dtype != torch.float32:
                part = part.to("cpu", torch.float32)
            return part.numpy()
        return np.asarray(part)

    def _live_draw(self, parts: list[Any], rows: Any, picks: Any) -> list[int]:
        """On the model's device when `device_sampling` is set (`constrained.device_sampling`): the joined
        rows' logprobs (from the trie, on the host) are copied there, and only the ids come back."""
        if not self.device_sampling:
            return super()._live_draw(parts, rows, picks)
        with torch.inference_mode():
            device = self.model.device
            logits = torch.cat([p if isinstance(p, torch.Tensor) else torch.from_numpy(np.asarray(p)).to(device)
                                for p in parts])
            return torch_draw(logits[list(rows)], picks)

    @torch.inference_mode()
    def _live_join(self, live: _Live | None, prompts: list[Prompt]) -> tuple[_Live, np.ndarray]:
        """New rows through `_live_start` (the trie prefills them), then both batches copied into one
        buffer, right-aligned: the shorter one gains left padding (masked) and nothing moves in time."""
        new, logprobs = self._live_start(prompts, _LIVE_RESERVE)
        if live is None:
            return new, logprobs
        Ta, Tb = live.mask.shape[1], new.mask.shape[1]
        T, Ba = max(Ta, Tb), live.mask.shape[0]
        cache = self._new_cache(T + _LIVE_RESERVE)
        for layer, a, b in zip(cache.layers, live.cache.layers, new.cache.layers):
            keys, values = layer.reserve(a.keys[0], a.values[0], Ba + new.mask.shape[0])
            keys[:Ba, :, T - Ta : T], values[:Ba, :, T - Ta : T] = a.keys, a.values
            keys[Ba:, :, T - Tb : T], values[Ba:, :, T - Tb : T] = b.keys, b.values
            layer.set_length(T)
        pad = lambda m: torch.cat([m.new_zeros((m.shape[0], T - m.shape[1])), m], dim=1)  # noqa: E731
        return _Live(cache, torch.cat([pad(live.mask), pad(new.mask)]), torch.cat([live.pos, new.pos])), logprobs
