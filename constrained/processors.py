"""Logits processors for mlx-lm and Hugging Face generation.

Both processors keep one `Guide` per sequence and derive its state from the
`tokens` argument (prompt + generated ids), never from a call count: mlx-lm
pipelines one step ahead, and `transformers` may call processors on a batch
whose rows finish at different times.

The framework modules (mlx, torch, transformers) are imported inside the
functions that need them, so importing this module costs nothing.

Example:
    >>> proc = mlx_processor({"type": "boolean"}, tokenizer)      # doctest: +SKIP
    >>> mlx_lm.generate(model, tokenizer, prompt, logits_processors=[proc])  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import mlx.core as mx
    import torch

    from constrained.guide import Guide
    from constrained.token_fsm import TokenFSM
    from constrained.vocab import Vocabulary

__all__ = ["ConstraintCursor", "mlx_processor", "MLXLogitsProcessor", "hf_logits_processor"]


class ConstraintCursor:
    """Follows a token sequence with a `Guide`, reading only the new tokens.

    The first call fixes where the prompt ends (everything seen so far); each
    later call advances the guide over the ids it has not consumed yet. So the
    per-step cost does not grow with the prompt length.
    """

    def __init__(self, fsm: TokenFSM) -> None:
        self.fsm = fsm
        self.guide: Guide = fsm.guide()
        self.prompt_len: int | None = None
        self.consumed = 0
        self.failed = False  # a token was appended that the constraint forbids

    def sync(self, length: int, tail: Any) -> None:
        """Bring the guide up to a sequence of `length` ids.

        Args:
            length: total ids (prompt + generated) in the current sequence.
            tail: callable(start) -> list of ids from position `start` on.
        """
        if self.prompt_len is None or length < self.prompt_len + self.consumed:
            # First call, or the caller restarted with a new sequence.
            self.guide = self.fsm.guide()
            self.prompt_len, self.consumed, self.failed = length, 0, False
            return
        start = self.prompt_len + self.consumed
        if length == start:
            return
        for token in tail(start):
            # A forbidden id (e.g. sampled where everything was masked) never
            # raises: the row is marked failed and masked to EOS from then on.
            if not self.failed and not self.guide.advance(int(token)):
                self.failed = True
            self.consumed += 1

    def bitmask(self, words: int) -> np.ndarray:
        """The packed int32 mask for the next token (EOS only once failed/finished)."""
        buf = np.zeros(words, dtype=np.int32)
        if self.failed or self.guide.is_finished():
            _set_bits(buf, self.fsm.vocab.eos_token_ids)
        else:
            self.guide.fill_bitmask(buf)
        return buf


def _set_bits(buf: np.ndarray, ids: Sequence[int]) -> None:
    view = buf.view(np.uint32)
    for i in ids:
        view[i >> 5] |= np.uint32(1 << (i & 31))


def _fsm_for(constraint: Any, tokenizer_or_vocab: Any, regex: bool) -> TokenFSM:
    from constrained.compile import compile_json_schema, compile_regex
    from constrained.vocab import Vocabulary

    if isinstance(tokenizer_or_vocab, Vocabulary):
        vocab = tokenizer_or_vocab
    else:
        vocab = Vocabulary.from_tokenizer(tokenizer_or_vocab)
    if regex:
        return compile_regex(constraint, vocab)
    return compile_json_schema(constraint, vocab)


# ---------------------------------------------------------------------------
# mlx-lm


class MLXLogitsProcessor:
    """An mlx-lm logits processor: `proc(tokens, logits) -> logits`.

    `tokens` is the 1-D array of prompt + generated ids and `logits` has shape
    `(1, V)`. Masked entries become `-inf`; the mask is unpacked from the
    guide's int32 bitmask with plain `mx` ops, so it runs on every MLX device.
    Use one processor per sequence (per BatchGenerator row).
    """

    def __init__(self, fsm: TokenFSM) -> None:
        self.cursor = ConstraintCursor(fsm)
        self.words = (fsm.vocab.size + 31) // 32

    @property
    def guide(self) -> Guide:
        return self.cursor.guide

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        import mlx.core as mx

        self.cursor.sync(tokens.size, lambda start: tokens[start:].tolist())
        packed = mx.array(self.cursor.bitmask(self.words))
        return apply_mlx_bitmask(logits, packed)


def apply_mlx_bitmask(logits: mx.array, packed: mx.array) -> mx.array:
    """Set logits to -inf where the packed int32 bitmask has a 0 bit.

    Columns beyond the bitmask (a model with more rows than the vocabulary)
    are masked too.
    """
    import mlx.core as mx

    vocab_cols = logits.shape[-1]
    shifts = mx.arange(32, dtype=mx.int32)
    bits = mx.right_shift(packed[:, None], shifts[None, :]) & 1
    allowed = bits.reshape(-1)[:vocab_cols].astype(mx.bool_)
    if allowed.shape[0] < vocab_cols:
        pad = mx.zeros((vocab_cols - allowed.shape[0],), dtype=mx.bool_)
        allowed = mx.concatenate([allowed, pad])
    return mx.where(allowed, logits, mx.array(-mx.inf, dtype=logits.dtype))


def mlx_processor(constraint: Any, tokenizer: Any, *, regex: bool = False) -> MLXLogitsProcessor:
    """Build an mlx-lm logits processor for a JSON schema (default) or a regex.

    Args:
        constraint: a JSON schema (dict, JSON string, pydantic class), a regex
            pattern when `regex=True`, or an already compiled `TokenFSM`.
        tokenizer: the mlx-lm `TokenizerWrapper`, a HF tokenizer or a `Vocabulary`.
        regex: treat `constraint` as a regex pattern.

    Example:
        >>> proc = mlx_processor(r"[0-9]{3}", tokenizer, regex=True)  # doctest: +SKIP
        >>> mlx_lm.generate(model, tokenizer, "Digits:", logits_processors=[proc])  # doctest: +SKIP
    """
    from constrained.token_fsm import TokenFSM

    fsm = constraint if isinstance(constraint, TokenFSM) else _fsm_for(constraint, tokenizer, regex)
    return MLXLogitsProcessor(fsm)


# ---------------------------------------------------------------------------
# Hugging Face transformers


def hf_logits_processor(constraints: Sequence[Any] | Any, tokenizer: Any, *, regex: bool = False) -> Any:
    """A `transformers.LogitsProcessor` whose batch rows each follow their own constraint.

    Args:
        constraints: one constraint for every row, or a list with one per row
            (schemas, patterns with `regex=True`, or compiled `TokenFSM`s).
            With `num_return_sequences=k`, give the constraint of each
            expanded row (or a single constraint for all).
        tokenizer: the HF tokenizer or a `Vocabulary`.

    Example:
        >>> proc = hf_logits_processor(schema, tok)                    # doctest: +SKIP
        >>> model.generate(**inputs, logits_processor=LogitsProcessorList([proc]))  # doctest: +SKIP
    """
    import torch
    from transformers import LogitsProcessor

    from constrained.token_fsm import TokenFSM

    def to_fsm(c: Any) -> TokenFSM:
        return c if isinstance(c, TokenFSM) else _fsm_for(c, tokenizer, regex)

    single = not isinstance(constraints, (list, tuple))
    fsms = [to_fsm(constraints)] if single else [to_fsm(c) for c in constraints]

    class _Processor(LogitsProcessor):
        def __init__(self) -> None:
            self.cursors: list[ConstraintCursor] = []

        def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
            rows, length = input_ids.shape
            if len(self.cursors) != rows:
                if not single and len(fsms) != rows:
                    raise ValueError(f"got {len(fsms)} constraints for a batch of {rows} rows")
                self.cursors = [ConstraintCursor(fsms[0] if single else fsms[r]) for r in range(rows)]
            words = (fsms[0].vocab.size + 31) // 32
            packed = np.empty((rows, words), dtype=np.int32)
            for r, cursor in enumerate(self.cursors):
                cursor.sync(length, lambda start, r=r: input_ids[r, start:].tolist())
                packed[r] = cursor.bitmask(words)
            return apply_torch_bitmask(scores, torch.from_numpy(packed))

    return _Processor()


def apply_torch_bitmask(scores: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """Set scores to -inf where the packed int32 bitmask (rows × words) has a 0 bit."""
    import torch

    shifts = torch.arange(32, dtype=torch.int32)
    bits = (packed.unsqueeze(-1) >> shifts) & 1
    allowed = bits.reshape(packed.shape[0], -1).bool()
    cols = scores.shape[-1]
    if allowed.shape[1] < cols:
        allowed = torch.nn.functional.pad(allowed, (0, cols - allowed.shape[1]), value=False)
    return scores.masked_fill(~allowed[:, :cols].to(scores.device), float("-inf"))
