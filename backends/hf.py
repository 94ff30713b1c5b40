"""`HFLM`: the `AsyncLM` contract on Hugging Face transformers models (torch, CPU, float32).

One batch is laid out in columns as ``[cached prefix | suffix head | last token]``:

- cached prefixes are left-padded to the longest one (``P`` columns) and
  loaded into a `DynamicCache`;
- suffix heads (all uncached tokens but the last) are right-padded to the
  longest head and prefilled through the decoder in `prefill_step_size` chunks;
- every row's last token shares the final column, so one step yields all
  next-token logits.

A 2-D attention mask zeroes the padding wherever it falls, and explicit
`position_ids` give each token its true position, so rows never see each
other's padding. Each row's KV (its real columns, concatenated once) is then
stored as one segment in the trie.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from backends.base import AsyncLM, Job
from constrained.errors import BackendUnavailableError

try:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
except ImportError as e:  # pragma: no cover - depends on the environment
    raise BackendUnavailableError("hf", "hf", str(e)) from e

__all__ = ["HFLM", "TorchKV"]


@dataclass
class TorchKV:
    """One KV segment: per-layer keys and values of shape ``(kv_heads, length, head_dim)``."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        self.nbytes = sum(k.nbytes + v.nbytes for k, v in zip(self.keys, self.values))


class HFLM(AsyncLM):
    """Batched, prefix-cached next-token logprobs for a transformers causal LM.

    Args:
        model: a ``transformers`` causal LM (put in eval mode, float32, CPU here).
        tokenizer: its Hugging Face tokenizer.
        prefill_step_size: most prompt tokens per model call while prefilling.
        **opts: `AsyncLM` options: batch_size, timeout, cache_size (bytes), max_segments.

    Example:
        >>> lm = HFLM.from_name("path/to/model")  # doctest: +SKIP
        >>> lm.next_token_logprobs_sync([1, 2, 3]).dtype  # doctest: +SKIP
        dtype('float32')
    """

    backend_name = "hf"

    def __init__(self, model: Any = None, tokenizer: Any = None, *, prefill_step_size: int = 2048, loader: Any = None, **opts: Any) -> None:
        if prefill_step_size < 1:
            raise ValueError(f"`prefill_step_size` must be a positive integer, got {prefill_step_size!r}")
        self.prefill_step_size = prefill_step_size
        if loader is None:
            if model is None or tokenizer is None:
                raise ValueError("HFLM needs `model` and `tokenizer`, or use HFLM.from_name(path)")
            loader = lambda: (model, tokenizer)  # noqa: E731
        super().__init__(loader, **opts)

    @classmethod
    def from_name(cls, name: str, *, allow_download: bool = False, **opts: Any) -> HFLM:
        """Load with ``from_pretrained`` (float32) on the worker thread; no hub access unless `allow_download`."""

        def loader() -> tuple[Any, Any]:
            if not allow_download and not Path(name).is_dir():
                raise FileNotFoundError(f"no model directory at {name!r} (pass allow_download=True to fetch a hub repo)")
            local = not allow_download
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32, local_files_only=local)
            return model, AutoTokenizer.from_pretrained(name, local_files_only=local)

        return cls(loader=loader, **opts)

    def _setup(self, model: Any, tokenizer: Any) -> tuple[int, list[int], Any]:
        model.eval()
        eos = model.generation_config.eos_token_id if model.generation_config is not None else None
        if eos is None:
            eos = tokenizer.eos_token_id
        eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        vocab_size = int(model.get_output_embeddings().weight.shape[0])
        return vocab_size, sorted(int(t) for t in eos_ids), tokenizer

    # ------------------------------------------------------------------ batched forward

    @torch.inference_mode()
    def _forward(self, jobs: list[Job]) -> list[tuple[np.ndarray, Any]]:
        starts = [j.start for j in jobs]
        heads = [list(j.tokens[j.start : -1]) for j in jobs]
        P, H = max(starts), max(len(h) for h in heads)
        cache = self._past(jobs, P)
        mask = torch.zeros(len(jobs), P + H + 1, dtype=torch.long)
        for i, (s, h) in enumerate(zip(starts, heads)):
            mask[i, P - s : P + len(h)] = 1
        mask[:, -1] = 1
        ids = torch.tensor([h + [0] * (H - len(h)) for h in heads], dtype=torch.long).reshape(len(jobs), H)
        pos = torch.tensor(starts).unsqueeze(1) + torch.arange(H).unsqueeze(0)
        decoder = self.model.get_decoder()
        for c0 in range(0, H, self.prefill_step_size):
            c1 = min(H, c0 + self.prefill_step_size)
            decoder(input_ids=ids[:, c0:c1], attention_mask=mask[:, : P + c1], position_ids=pos[:, c0:c1], past_key_values=cache, use_cache=True)
        last = torch.tensor([[j.tokens[-1]] for j in jobs])
        last_pos = torch.tensor([[len(j.tokens) - 1] for j in jobs])
        out = self.model(input_ids=last, attention_mask=mask, position_ids=last_pos, past_key_values=cache, use_cache=True)
        logprobs = torch.log_softmax(out.logits[:, -1, :].float(), dim=-1).numpy()
        self.stats["padded_tokens"] += len(jobs) * (H + 1)
        handles = [self._slice_kv(cache, i, j, P, len(h), P + H) for i, (j, h) in enumerate(zip(jobs, heads))]
        return [(logprobs[i].copy(), handles[i]) for i in range(len(jobs))]

    def _past(self, jobs: list[Job], P: int) -> Any:
        """A DynamicCache with every row's cached chain, left-padded to `P` columns."""
        cache = DynamicCache(config=self.model.config)
        if P == 0:
            return cache
        ref = next(j.chain[0].handle for j in jobs if j.chain)
        for layer in range(len(ref.keys)):
            k0, v0 = ref.keys[layer], ref.values[layer]
            keys = k0.new_zeros((len(jobs), k0.shape[0], P, k0.shape[2]))
            values = v0.new_zeros((len(jobs), v0.shape[0], P, v0.shape[2]))
            for i, job in enumerate(jobs):
                if job.chain:
                    keys[i, :, P - job.start :] = torch.cat([s.handle.keys[layer] for s in job.chain], dim=1)
                    values[i, :, P - job.start :] = torch.cat([s.handle.values[layer] for s in job.chain], dim=1)
            cache.update(keys, values, layer)
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
