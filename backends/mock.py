"""`MockLM`: deterministic fake logprobs over a real tokenizer, for testing batching and caching logic.

The "model" is a hash: the logprobs after a prefix come from a numpy RNG
seeded by the prefix's bytes, so they are reproducible across runs, batches
and cache states. Its KV handles are `MockKV` records of the positions they
cover; `_forward` checks that every chain it receives tiles ``[0, start)``
exactly, so cache bugs surface as errors instead of silently wrong numbers.
Its segments can be cut (`splits_kv`), as plain attention KV can.
It is NOT a language model: never use it to judge output quality.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.base import AsyncLM, Job

__all__ = ["MockKV", "MockLM", "mock_logprobs"]


@dataclass(frozen=True)
class MockKV:
    """A fake KV segment: the token positions it covers and a fake size."""

    tokens: tuple[int, ...]
    start: int

    @property
    def nbytes(self) -> int:
        return 8 * len(self.tokens)


def mock_logprobs(tokens: tuple[int, ...], vocab_size: int, *, scale: float = 3.0) -> np.ndarray:
    """The mock's next-token logprobs after `tokens` (float32, sums to 1 in prob space).

    Example:
        >>> lp = mock_logprobs((1, 2), 10)
        >>> lp.shape, bool(abs(np.exp(lp).sum() - 1) < 1e-5)
        ((10,), True)
    """
    digest = hashlib.blake2b(np.asarray(tokens, dtype=np.int64).tobytes(), digest_size=8).digest()
    rng = np.random.default_rng(int.from_bytes(digest, "little"))
    logits = rng.standard_normal(vocab_size) * scale
    logits -= logits.max()
    return (logits - np.log(np.exp(logits).sum())).astype(np.float32)


class MockLM(AsyncLM):
    """Deterministic fake backend over a real tokenizer.

    Args:
        tokenizer: a Hugging Face tokenizer (only used for `vocab_size` / EOS).
        vocab_size: logprobs length; defaults to ``len(tokenizer)``.
        **opts: `AsyncLM` options (batch_size, timeout, cache_size, max_segments).

    Example:
        >>> lm = MockLM(None, vocab_size=50)
        >>> lm.next_token_logprobs_sync([1, 2, 3]).shape
        (50,)
        >>> lm.stats["model_tokens"]
        3
    """

    backend_name = "mock"

    def __init__(self, tokenizer: Any, *, vocab_size: int | None = None, eos_token_ids: list[int] | None = None, **opts: Any) -> None:
        self._mock_vocab = vocab_size
        self._mock_eos = eos_token_ids
        super().__init__(lambda: (None, tokenizer), **opts)

    @classmethod
    def from_name(cls, name: str, **opts: Any) -> MockLM:
        """A mock over the tokenizer saved in directory `name` (no model weights needed)."""
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(name, local_files_only=True), **opts)

    def _setup(self, model: Any, tokenizer: Any) -> tuple[int, list[int], Any]:
        vocab = self._mock_vocab if self._mock_vocab is not None else len(tokenizer)
        eos = self._mock_eos
        if eos is None:
            eos_id = getattr(tokenizer, "eos_token_id", None)
            eos = [] if eos_id is None else [int(eos_id)]
        self.splits_kv = True
        return vocab, list(eos), tokenizer

    def _cut_kv(self, handle: MockKV, n: int) -> tuple[MockKV, MockKV]:
        return MockKV(handle.tokens[:n], handle.start), MockKV(handle.tokens[n:], handle.start + n)

    def _forward(self, jobs: list[Job]) -> list[tuple[np.ndarray, Any]]:
        out = []
        for job in jobs:
            _check_chain(job)
            lp = mock_logprobs(job.tokens, self._vocab_size)
            handle = None
            if job.store_from is not None:
                handle = MockKV(job.tokens[job.store_from :], job.store_from)
            out.append((lp, handle))
        self.stats["padded_tokens"] += len(jobs) * max(len(j.tokens) - j.start for j in jobs)
        return out


def _check_chain(job: Job) -> None:
    """The segments must tile [0, start) and hold exactly the prompt's tokens there."""
    pos = 0
    for seg in job.chain:
        kv: MockKV = seg.handle
        if seg.start != pos or kv.start != pos or job.tokens[pos : seg.end] != kv.tokens:
            raise RuntimeError(f"inconsistent KV chain for {job.tokens[:8]}...: segment {seg.start}-{seg.end} at {pos}")
        pos = seg.end
    if pos != job.start:
        raise RuntimeError(f"KV chain covers {pos} tokens but the job starts at {job.start}")
