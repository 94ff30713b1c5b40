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

import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from constrained.errors import IncompatibleVocabularyError
from constrained.index_masks import (MLXIndexMask, apply_torch_masks, apply_torch_masks_, mask_cache, torch_mask_form,
                                     unpack_bits)

if TYPE_CHECKING:  # pragma: no cover
    import mlx.core as mx
    import torch

    from constrained.guide import Guide
    from constrained.token_fsm import TokenFSM
    from constrained.vocab import Vocabulary

__all__ = [
    "ConstraintCursor",
    "MLXLogitsProcessor",
    "apply_mlx_bitmask",
    "apply_torch_bitmask",
    "hf_logits_processor",
    "mlx_processor",
    "vocabulary_for",
]


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

    def reset(self) -> None:
        """Forget the sequence: the next `sync` starts a new generation (a new prompt)."""
        self.guide = self.fsm.guide()
        self.prompt_len, self.consumed, self.failed = None, 0, False

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
            self.take(token)

    def take(self, token: int) -> None:
        """Read the next id of the sequence. A forbidden one (e.g. sampled where everything was
        masked) never raises: the row is marked failed and masked to EOS from then on."""
        if not self.failed and not self.guide.advance(int(token)):
            self.failed = True
        self.consumed += 1

    def mask_state(self) -> int:
        """The FSM state whose mask applies next: the guide's, or -1 (EOS only) once failed/finished."""
        if self.failed or self.guide.is_finished():
            return -1
        return self.fsm.mask_key(self.guide.state)

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


_VOCABS: "OrderedDict[int, tuple[Any, Vocabulary]]" = OrderedDict()
_VOCABS_LOCK = threading.Lock()


def vocabulary_for(tokenizer: Any) -> Vocabulary:
    """The `Vocabulary` of `tokenizer` (or `tokenizer` itself if it is one), built once per tokenizer object.

    Building a 128k-token vocabulary takes a noticeable fraction of a second,
    so processors made one per request must not rebuild it. The cache holds
    the last few tokenizers (keyed by identity; the entry keeps the object
    alive so its id cannot be reused).

    Example:
        >>> v = vocabulary_for(tokenizer)  # doctest: +SKIP
        >>> v is vocabulary_for(tokenizer)  # doctest: +SKIP
        True
    """
    from constrained.vocab import Vocabulary

    if isinstance(tokenizer, Vocabulary):
        return tokenizer
    with _VOCABS_LOCK:
        hit = _VOCABS.get(id(tokenizer))
        if hit is not None and hit[0] is tokenizer:
            _VOCABS.move_to_end(id(tokenizer))
            return hit[1]
    vocab = Vocabulary.from_tokenizer(tokenizer)
    with _VOCABS_LOCK:
        _VOCABS[id(tokenizer)] = (tokenizer, vocab)
        while len(_VOCABS) > 8:
            _VOCABS.popitem(last=False)
    return vocab


def _fsm_for(constraint: Any, tokenizer_or_vocab: Any, regex: bool, options: dict[str, Any]) -> TokenFSM:
    from constrained.compile import compile_json_schema, compile_regex
    from constrained.token_fsm import TokenFSM

    if isinstance(constraint, TokenFSM):
        return constraint
    vocab = vocabulary_for(tokenizer_or_vocab)
    if regex:
        return compile_regex(constraint, vocab, **options)
    return compile_json_schema(constraint, vocab, **options)


# ---------------------------------------------------------------------------
# mlx-lm


class MLXLogitsProcessor:
    """An mlx-lm logits processor: `proc(tokens, logits) -> logits`.

    `tokens` is the 1-D array of prompt + generated ids and `logits` has shape
    `(1, V)`. A warm step is one dict lookup and one `put_along_axis`: the
    state's mask is its allowed or its forbidden token ids, whichever are
    fewer (`index_masks.MLXIndexMask`), a ready `mx.array` built once per FSM state and
    shared by all processors of that constraint. Plain `mx` ops, so every
    device runs them; on CPU as fast as adding a ready 0 / -inf row (~100 us
    for 128k float32 logits on a loaded machine, both), and a few hundred
    bytes per state instead of 512 KB: a wandering model visited 160 distinct
    masks in 64 steps of 8 rows, which additive rows' 32 MB cache evicted and
    rebuilt every few steps.

    The one unavoidable sync is reading the newest token id: the next mask
    depends on it. Use one processor per sequence (per BatchGenerator row);
    `reset()` to reuse.

    Example:
        >>> proc = MLXLogitsProcessor(fsm)  # doctest: +SKIP
        >>> masked = proc(mx.array([1, 2, 3]), logits)  # doctest: +SKIP
    """

    def __init__(self, fsm: TokenFSM) -> None:
        self.cursor = ConstraintCursor(fsm)
        self.vocab_size = fsm.vocab.size
        self.words = (fsm.vocab.size + 31) // 32
        self._masks = mask_cache(fsm, MLXIndexMask)

    @property
    def guide(self) -> Guide:
        return self.cursor.guide

    def reset(self) -> None:
        """Start over for a new prompt."""
        self.cursor.reset()

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if logits.shape[-1] < self.vocab_size:
            raise IncompatibleVocabularyError.width(self.vocab_size, logits.shape[-1])
        cursor = self.cursor
        cursor.sync(tokens.size, lambda start: tokens[start:].tolist())
        key = (cursor.mask_state(), logits.shape)
        mask = self._masks.get(key)
        if mask is None:
            mask = self._masks.put(key, cursor.bitmask(self.words))
        return mask.apply(logits)


def apply_mlx_bitmask(logits: mx.array, packed: mx.array) -> mx.array:
    """Set logits to -inf where the packed int32 bitmask has a 0 bit.

    Columns beyond the bitmask (a model with more rows than the vocabulary)
    are masked too.

    Example:
        >>> apply_mlx_bitmask(mx.zeros((1, 3)), mx.array([0b101], dtype=mx.int32)).tolist()  # doctest: +SKIP
        [[0.0, -inf, 0.0]]
    """
    import mlx.core as mx

    allowed = mx.array(unpack_bits(packed, logits.shape[-1]))
    return mx.where(allowed, logits, mx.array(-mx.inf, dtype=logits.dtype))


def mlx_processor(constraint: Any, tokenizer: Any, *, regex: bool = False, **compile_options: Any) -> MLXLogitsProcessor:
    """Build an mlx-lm logits processor for a JSON schema (default) or a regex.

    Args:
        constraint: a JSON schema (dict, JSON string, pydantic class), a regex
            pattern when `regex=True`, or an already compiled `TokenFSM`.
        tokenizer: the mlx-lm `TokenizerWrapper`, a HF tokenizer or a `Vocabulary`.
        regex: treat `constraint` as a regex pattern.
        **compile_options: passed to the compiler (``whitespace=``, ``strict=``, ...).

    Example:
        >>> proc = mlx_processor(r"[0-9]{3}", tokenizer, regex=True)  # doctest: +SKIP
        >>> mlx_lm.generate(model, tokenizer, "Digits:", logits_processors=[proc])  # doctest: +SKIP
    """
    return MLXLogitsProcessor(_fsm_for(constraint, tokenizer, regex, compile_options))


# ---------------------------------------------------------------------------
# Hugging Face transformers


def hf_logits_processor(constraints: Sequence[Any] | Any, tokenizer: Any, *, regex: bool = False, inplace: bool = False,
                        **compile_options: Any) -> Any:
    """A `transformers.LogitsProcessor` whose batch rows each follow their own constraint.

    Args:
        constraints: one constraint for every row, or a list with one per
            prompt (schemas, patterns with `regex=True`, or compiled
            `TokenFSM`s). When generation expands each prompt into ``k`` rows
            (``num_return_sequences=k`` or beams), rows ``i*k .. i*k+k-1``
            follow ``constraints[i]``, matching transformers' layout.
        tokenizer: the HF tokenizer or a `Vocabulary`.
        regex: treat string constraints as regex patterns.
        inplace: mask the scores transformers passes in place and return them, as llguidance's and
            xgrammar's processors do: inside strings only the few forbidden ids are written, not a
            masked copy of the whole row (600 KB for 151k tokens). transformers keeps that tensor as
            the step's raw logits, so with ``output_logits=True`` they come back masked; the default
            (False) leaves them as the model gave them.
        **compile_options: passed to the compiler.

    Raises:
        ValueError: at the first call, when the batch size is not a multiple
            of the number of constraints.

    Example:
        >>> proc = hf_logits_processor([schema_a, schema_b], tok)                    # doctest: +SKIP
        >>> model.generate(**inputs, logits_processor=LogitsProcessorList([proc]))  # doctest: +SKIP
    """
    from transformers import LogitsProcessor

    items = list(constraints) if isinstance(constraints, (list, tuple)) else [constraints]
    if not items:
        raise ValueError("hf_logits_processor needs at least one constraint, got []")
    fsms = [_fsm_for(c, tokenizer, regex, compile_options) for c in items]

    class HFConstraintProcessor(LogitsProcessor):
        """Masks each row to its constraint's allowed tokens (EOS only once done).

        A step reads each row's new ids (one `tolist` of the last column in the
        usual one-token step), looks up the row's ready mask (on the CPU `TorchIndexMask`:
        the allowed or the forbidden token ids, whichever are fewer; on an accelerator
        `TorchRowMask`, a boolean row applied by one call; built once per FSM state
        and device and shared by every processor of that constraint:
        `index_masks.mask_cache`) and writes the masked scores; rows in one state are
        masked together. Index masks are small (most states allow
        or forbid a few hundred ids), so the cache holds every state a
        generation visits; additive rows of 0 / -inf (512 KB each for 128k
        tokens) were evicted and rebuilt at every few steps of a wandering
        model, and `masked_fill` with a boolean row costs ~650 us on one CPU
        thread. The scores are not changed in place (transformers may keep
        them as the raw logits).
        """

        def __init__(self) -> None:
            self.cursors: list[ConstraintCursor] = []
            self.words = (fsms[0].vocab.size + 31) // 32
            self._caches: list[Any] = []             # each row's `mask_cache`, for `_device`
            self._device: Any = None

        def _setup(self, rows: int, device: Any) -> None:
            if len(self.cursors) != rows:
                self.cursors = [ConstraintCursor(f) for f in _expand(fsms, rows)]
            form = torch_mask_form(device)
            self._caches = [mask_cache(c.fsm, form) for c in self.cursors]
            self._device = device

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            rows, length = input_ids.shape
            cols = scores.shape[-1]
            if cols < fsms[0].vocab.size:
                raise IncompatibleVocabularyError.width(fsms[0].vocab.size, cols)
            device = scores.device
            if len(self.cursors) != rows or device != self._device:
                self._setup(rows, device)
            last: list[int] | None = None          # the newest id of every row: one transfer for all
            masks = []
            for r, (cursor, cache) in enumerate(zip(self.cursors, self._caches)):
                if cursor.prompt_len is not None and cursor.prompt_len + cursor.consumed == length - 1:
                    if last is None:
                        last = input_ids[:, -1].tolist()
                    cursor.take(last[r])            # the usual step: one new token
                else:
                    cursor.sync(length, lambda start, r=r: input_ids[r, start:].tolist())
                key = (cursor.mask_state(), cols, device)
                mask = cache.get(key)
                if mask is None:
                    mask = cache.put(key, cursor.bitmask(self.words))
                masks.append(mask)
            return apply_torch_masks_(scores, masks) if inplace else apply_torch_masks(scores, masks)

    return HFConstraintProcessor()


def _expand(fsms: list[Any], rows: int) -> list[Any]:
    """One FSM per batch row: each constraint repeated for its prompt's consecutive rows."""
    if rows % len(fsms):
        raise ValueError(f"got {len(fsms)} constraints for a batch of {rows} rows; rows must be a multiple of them")
    k = rows // len(fsms)
    return [fsms[r // k] for r in range(rows)]


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
