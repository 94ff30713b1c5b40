"""`ConstrainedLogitsProcessor`: our JSON-schema / regex constraints inside a vLLM engine.

A request asks for a constraint through its sampling parameters:

    SamplingParams(max_tokens=200, extra_args={"constrained": {"json_schema": schema}})
    SamplingParams(extra_args={"constrained": {"regex": r"\\d{3}-\\d{4}", "ascii": True}})

Keys next to ``json_schema`` / ``regex`` are compile options (``whitespace``,
``strict``, ``max_states``, ``ascii``, ...) plus ``budget_aware`` (default
True). The OpenAI server's ``vllm_xargs`` only carries strings, numbers and
lists, so there the whole value is a JSON string:
``extra_body={"vllm_xargs": {"constrained": json.dumps({"json_schema": schema})}}``.

How the constraint reaches the engine: vLLM runs logits processors in its
engine-core process, not where the request was made, so the request carries
the constraint's text and the processor compiles it there, through the same
FSM cache as everywhere else (keyed by the constraint, its options and the
vocabulary). Each distinct constraint is compiled once per engine process, and
every later request with it reuses the FSM and every mask it has built.

Per step, `apply` brings each constrained row's guide up to its output ids
(one table lookup per new token), copies the rows' packed masks into one
int32 buffer, and masks the logits with one tensor operation on their device.
Rows with other constraints and rows with none share the batch.

Failures stay with their request: `validate_params` (run by vLLM when the
request is admitted) rejects a bad schema, regex or option with a message
naming it (HTTP 400 from the server); a failure inside the engine (the
vocabulary cannot spell the constraint, a state budget is exceeded while
decoding) is logged and ends that request with EOS, and the engine goes on.

Register it with ``LLM(..., logits_processors=[ConstrainedLogitsProcessor])``,
``--logits-processors constrained.vllm_processor:ConstrainedLogitsProcessor``,
or by installing this package: its ``vllm.logits_processors`` entry point
loads it into every engine (requests without ``"constrained"`` cost one dict
lookup when they join the batch).

Example:
    >>> from vllm import LLM, SamplingParams  # doctest: +SKIP
    >>> llm = LLM("path/to/model", logits_processors=[ConstrainedLogitsProcessor])  # doctest: +SKIP
    >>> params = SamplingParams(max_tokens=64, extra_args={"constrained": {"regex": "(yes|no)"}})  # doctest: +SKIP
    >>> llm.generate(["Answer:"], params)[0].outputs[0].text in ("yes", "no")  # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from constrained.errors import BackendUnavailableError

try:
    import torch
    from vllm.sampling_params import SamplingParams
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor
except ImportError as e:  # pragma: no cover - depends on the environment
    raise BackendUnavailableError("vllm", "vllm", str(e)) from e

if TYPE_CHECKING:
    from constrained.budget import Completions
    from constrained.token_fsm import TokenFSM
    from constrained.vocab import Vocabulary

__all__ = ["XARGS_KEY", "ConstrainedLogitsProcessor", "ConstraintSpec", "parse_constraint"]

try:  # vLLM's Model Runner V2 interface (0.32); absent from older versions
    from vllm.v1.worker.gpu.sample.logits_processor.interface import LogitsProcessor as _V2LogitsProcessor

    _BASES: tuple[type, ...] = (AdapterLogitsProcessor, _V2LogitsProcessor)
except ImportError:  # pragma: no cover - depends on the vLLM version
    _BASES = (AdapterLogitsProcessor,)

# The processor instance serving each engine config (see `ConstrainedLogitsProcessor.idle`).
_LIVE: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()

XARGS_KEY = "constrained"

logger = logging.getLogger("constrained.vllm")

# Frontend checks remembered (constraint key -> error message or None), so a repeated schema costs a lookup.
_CHECKED: OrderedDict[str, str | None] = OrderedDict()
_CHECKED_SIZE = 256
_CHECKED_LOCK = threading.Lock()


@dataclass(frozen=True)
class ConstraintSpec:
    """A request's constraint as sent to the engine.

    Attributes:
        kind: "json_schema" or "regex".
        source: the schema (a dict or bool) or the pattern.
        options: compile options (``whitespace``, ``max_states``, ``ascii``, ...).
        budget_aware: steer the last tokens so the output ends complete within `max_tokens`.

    Example:
        >>> parse_constraint({"constrained": {"regex": "[ab]+", "ascii": True}}).options
        {'ascii': True}
    """

    kind: str
    source: Any
    options: dict[str, Any] = field(default_factory=dict)
    budget_aware: bool = True

    @property
    def key(self) -> str:
        """Canonical text of the constraint and its options (what the caches are keyed by)."""
        return json.dumps([self.kind, self.source, self.options], sort_keys=True, separators=(",", ":"))

    def to_xargs(self) -> dict[str, Any]:
        """The ``extra_args`` entry that asks for this constraint."""
        return {XARGS_KEY: {self.kind: self.source, **self.options, "budget_aware": self.budget_aware}}

    def compile(self, vocab: Vocabulary) -> TokenFSM:
        """The (cached) token FSM of this constraint over `vocab`."""
        from constrained.compile import compile_json_schema, compile_regex

        if self.kind == "regex":
            return compile_regex(self.source, vocab, **self.options)
        return compile_json_schema(self.source, vocab, **self.options)


def parse_constraint(extra_args: Mapping[str, Any] | None) -> ConstraintSpec | None:
    """Read the constraint of a request's ``extra_args`` (None when it asks for none).

    Raises:
        ValueError: the entry is malformed (quoted in the message).

    Example:
        >>> parse_constraint({"constrained": '{"json_schema": {"type": "integer"}}'}).source
        {'type': 'integer'}
        >>> parse_constraint({"other": 1}) is None
        True
    """
    if not extra_args or XARGS_KEY not in extra_args:
        return None
    raw = extra_args[XARGS_KEY]
    if isinstance(raw, str):   # the OpenAI server's vllm_xargs carry no nested objects: a JSON string
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ValueError(f"extra_args[{XARGS_KEY!r}] is not valid JSON ({e.msg}): {raw[:80]!r}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"extra_args[{XARGS_KEY!r}] must be an object with 'json_schema' or 'regex', got {raw!r:.80}")
    kinds = [k for k in ("json_schema", "regex") if k in raw]
    if len(kinds) != 1:
        raise ValueError(f"extra_args[{XARGS_KEY!r}] needs exactly one of 'json_schema' and 'regex', got keys {sorted(raw)}")
    kind = kinds[0]
    options = {k: v for k, v in raw.items() if k not in (kind, "budget_aware")}
    budget_aware = raw.get("budget_aware", True)
    if not isinstance(budget_aware, bool):
        raise ValueError(f"'budget_aware' must be true or false, got {budget_aware!r}")
    source = raw[kind]
    if kind == "regex" and not isinstance(source, str):
        raise ValueError(f"'regex' must be a string, got {source!r:.80}")
    if kind == "json_schema" and isinstance(source, str):
        try:
            source = json.loads(source)
        except json.JSONDecodeError as e:
            raise ValueError(f"'json_schema' is not valid JSON ({e.msg}): {source[:80]!r}") from None
    if kind == "json_schema" and not isinstance(source, (dict, bool)):
        raise ValueError(f"'json_schema' must be a JSON object, got {source!r:.80}")
    return ConstraintSpec(kind, source, options, budget_aware)


def check_constraint(spec: ConstraintSpec) -> None:
    """Build `spec`'s automaton without a vocabulary, so a bad constraint fails before it reaches the engine.

    Raises:
        ValueError: the schema or regex is invalid, unsupported, matches
            nothing, or an option is unknown or out of range.
    """
    key = spec.key
    with _CHECKED_LOCK:
        known = key in _CHECKED
        error = _CHECKED.get(key)
    if not known:
        error = _check_uncached(spec)
        with _CHECKED_LOCK:
            _CHECKED[key] = error
            while len(_CHECKED) > _CHECKED_SIZE:
                _CHECKED.popitem(last=False)
    if error is not None:
        raise ValueError(error)


def _check_uncached(spec: ConstraintSpec) -> str | None:
    from constrained.compile import MAX_STATES
    from grammars.dfa import LazyDFA
    from grammars.json_schema import json_schema_grammar
    from grammars.regex import regex_grammar

    options = dict(spec.options)
    max_states = options.pop("max_states", MAX_STATES)
    try:
        if not isinstance(max_states, int) or isinstance(max_states, bool) or max_states < 1:
            raise ValueError(f"'max_states' must be a positive integer, got {max_states!r}")
        build = regex_grammar if spec.kind == "regex" else json_schema_grammar
        grammar = build(spec.source, **options)
        dfa = LazyDFA(grammar, max_states=max_states, max_depth=int(grammar.info.get("max_depth", 64)))
        if dfa.is_empty:
            return f"the {spec.kind} matches no text at all, so no output can satisfy it"
    except TypeError as e:        # an unknown option name
        return f"bad constraint option: {e}"
    except (ValueError, RecursionError) as e:   # ConstraintError is a ValueError
        return f"{type(e).__name__}: {e}"
    return None


class _RequestMask:
    """One request's constraint state: a guide that follows the request's output ids.

    `fill` writes the next token's packed mask; ``__call__`` is vLLM's
    per-request form ``(output_ids, logits_row) -> logits_row``, used only
    where `ConstrainedLogitsProcessor.apply` is bypassed.
    """

    def __init__(self, fsm: TokenFSM | None, eos: Sequence[int], max_tokens: int | None,
                 budget: Completions | None, words: int, error: str | None = None) -> None:
        self.fsm = fsm
        self.guide = fsm.guide() if fsm is not None else None
        self.consumed = 0
        self.seen_ids: list[int] = []      # the output ids the guide has read (V2 rebuilds the output from them)
        self.max_tokens = max_tokens
        self.budget = budget
        self.error = error
        self.words = words
        self._eos_only = np.zeros(words, dtype=np.int32)
        for t in eos:
            if 0 <= t < 32 * words:
                self._eos_only.view(np.uint32)[t >> 5] |= np.uint32(1 << (t & 31))

    def fill(self, output_ids: Sequence[int], row: np.ndarray) -> None:
        """Write the mask of the token after `output_ids` into `row` (int32, `words` long)."""
        if self.error is None:
            try:
                self._sync(output_ids)
                mask = self._mask(len(output_ids))
                if mask is not None:
                    row[:] = mask
                    return
            except Exception as e:  # noqa: BLE001 - a constraint that breaks mid-way ends its request, not the engine
                self.fail(f"{type(e).__name__}: {e}")
        row[:] = self._eos_only

    def fail(self, error: str) -> None:
        self.error = error
        logger.error("constrained: request ends with EOS: %s", error)

    def _sync(self, output_ids: Sequence[int]) -> None:
        if len(output_ids) < self.consumed:   # the request restarted (preempted): replay from scratch
            self.guide, self.consumed, self.seen_ids = self.fsm.guide(), 0, []
        for tok in output_ids[self.consumed:]:
            if not self.guide.advance(int(tok)):
                raise ValueError(f"token {int(tok)} at output position {self.consumed} breaks the constraint")
            self.seen_ids.append(int(tok))
            self.consumed += 1

    def _mask(self, produced: int) -> np.ndarray | None:
        """The guide's mask, or the budget's steered one near `max_tokens`; None once finished (EOS only)."""
        guide = self.guide
        if guide.is_finished():
            return None
        if self.budget is not None and self.max_tokens is not None:
            steer = self.budget.steer(guide.state, self.max_tokens - produced)
            if steer is not None:
                from constrained.slices import ids_bitmask

                return ids_bitmask(steer, self.words)
        return guide.fsm.bitmask(guide.state)

    def __call__(self, output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        row = np.empty(self.words, dtype=np.int32)
        self.fill(output_ids, row)
        allowed = _unpack(torch.from_numpy(row).to(logits.device).unsqueeze(0), logits.shape[-1])[0]
        return logits.masked_fill(~allowed, float("-inf"))


def _unpack(packed: torch.Tensor, cols: int) -> torch.Tensor:
    """Boolean ``(rows, cols)`` from packed int32 ``(rows, words)`` masks, on their device (columns past them: False)."""
    shifts = torch.arange(32, dtype=torch.int32, device=packed.device)
    bits = ((packed.unsqueeze(-1) >> shifts) & 1).reshape(packed.shape[0], -1).bool()
    if bits.shape[1] < cols:
        bits = torch.nn.functional.pad(bits, (0, cols - bits.shape[1]), value=False)
    return bits[:, :cols]


class ConstrainedLogitsProcessor(*_BASES):  # type: ignore[misc]
    """vLLM logits processor for ``extra_args={"constrained": {...}}`` requests (see the module docstring).

    vLLM 0.32 has two model runners with two processor interfaces, and checks
    that every processor it loads (entry-point plugins included) subclasses
    its runner's: V1 (the CPU engine, and CUDA without Triton) calls
    ``(vllm_config, device, is_pin_memory)``, `update_state` and
    ``apply(logits)``; V2 (the CUDA default) calls ``(vllm_config, req_states)``,
    `add_request` and ``apply(logits, ctx)``. This class is both, so
    installing the package never stops an engine from starting.

    Args:
        vllm_config: the engine's config (the model's tokenizer and vocabulary size come from it).
        device: where the logits live (V1), or the runner's `LogitsProcRequestState` (V2).
        is_pin_memory: pin the host buffer that carries masks to the device (V1).

    Example:
        >>> LLM("path/to/model", logits_processors=[ConstrainedLogitsProcessor])  # doctest: +SKIP
    """

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool | None = None) -> None:
        if is_pin_memory is None:           # V2: (vllm_config, req_states)
            self.req_info = {}
            self.req_states = device
            device, is_pin_memory = device.device, device.device.type == "cuda"
        else:
            AdapterLogitsProcessor.__init__(self, vllm_config, device, is_pin_memory)
            self.req_states = None
        self.model_config = vllm_config.model_config
        self.device = device
        self.is_pin_memory = bool(is_pin_memory) and device.type != "cpu"
        self.vocab_size = int(self.model_config.get_vocab_size())
        self.words = (self.vocab_size + 31) // 32
        self._vocab: Vocabulary | None = None
        self._host = torch.zeros((0, self.words), dtype=torch.int32)
        self._slots: dict[int, _RequestMask] = {}         # V2: request slot -> its mask state
        # Registered twice (the entry point and logits_processors=[...]): the second copy stays idle.
        key = id(vllm_config)
        self.idle = _LIVE.get(key) is not None
        if not self.idle:
            _LIVE[key] = self

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        """Reject a malformed, invalid or unsupported constraint when the request is admitted."""
        spec = parse_constraint(sampling_params.extra_args)
        if spec is not None:
            check_constraint(spec)

    def is_argmax_invariant(self) -> bool:
        return False   # masking changes the argmax: it must run before greedy sampling too

    def vocabulary(self) -> Vocabulary:
        """The model's `Vocabulary`, built from vLLM's tokenizer on the first constrained request."""
        if self._vocab is None:
            from vllm.tokenizers.registry import cached_tokenizer_from_config

            from constrained.vocab import Vocabulary

            tokenizer = cached_tokenizer_from_config(self.model_config)
            eos = {int(t) for t in _as_list(self.model_config.try_get_generation_config().get("eos_token_id"))}
            if getattr(tokenizer, "eos_token_id", None) is not None:
                eos.add(int(tokenizer.eos_token_id))
            self._vocab = Vocabulary.from_tokenizer(tokenizer, eos_token_ids=sorted(eos) or None, size=self.vocab_size)
        return self._vocab

    def new_req_logits_processor(self, params: SamplingParams) -> _RequestMask | None:
        if self.idle:
            return None
        try:
            spec = parse_constraint(params.extra_args)
        except ValueError as e:      # validate_params let it through (a caller that skipped it): EOS only
            return self._failed(str(e), params)
        if spec is None:
            return None
        try:
            vocab = self.vocabulary()
            fsm = spec.compile(vocab)
            budget = None
            if spec.budget_aware and params.max_tokens is not None:
                from constrained.budget import completions

                budget = completions(fsm)
            return _RequestMask(fsm, vocab.eos_token_ids, params.max_tokens, budget, self.words)
        except Exception as e:  # noqa: BLE001 - one bad request must not stop the engine
            return self._failed(f"{type(e).__name__}: {e}", params)

    def _failed(self, error: str, params: SamplingParams) -> _RequestMask:
        eos = self._vocab.eos_token_ids if self._vocab is not None else sorted(params.all_stop_token_ids)
        mask = _RequestMask(None, eos, None, None, self.words)
        mask.fail(error)
        return mask

    def apply(self, logits: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        """Mask every constrained row at once: masks into one host buffer, one copy, one `masked_fill`."""
        if ctx is not None:
            return self._apply_v2(logits, ctx)
        rows = list(self.req_info.items())     # every entry is a `_RequestMask` bound to its output ids
        if not rows:
            return logits
        host = self._buffer(len(rows))
        for k, (_, fn) in enumerate(rows):
            fn.func.fill(fn.args[0], host[k])
        return self._mask(logits, [i for i, _ in rows], non_blocking=self.is_pin_memory)

    def _mask(self, logits: torch.Tensor, rows: list[int], non_blocking: bool) -> torch.Tensor:
        """-inf where the host buffer's first ``len(rows)`` masks forbid, in logits rows `rows`."""
        packed = self._host[: len(rows)].to(logits.device, non_blocking=non_blocking)
        index = torch.tensor(rows, device=logits.device)
        allowed = _unpack(packed, logits.shape[-1])
        logits[index] = logits[index].masked_fill(~allowed, float("-inf"))
        return logits

    def _buffer(self, rows: int) -> np.ndarray:
        """A numpy view of at least `rows` rows of the (pinned) host buffer."""
        if self._host.shape[0] < rows:
            self._host = torch.zeros((max(rows, 2 * self._host.shape[0]), self.words), dtype=torch.int32,
                                     pin_memory=self.is_pin_memory)
        return self._host.numpy()

    # ------------------------------------------------------------------ Model Runner V2

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        """V2: (re)initialize slot `req_idx`; True when this request is constrained."""
        mask = self.new_req_logits_processor(sampling_params)
        if mask is None:
            self._slots.pop(req_idx, None)
            return False
        self._slots[req_idx] = mask
        return True

    def _apply_v2(self, logits: torch.Tensor, ctx: Any) -> torch.Tensor:
        """V2: rows are batch positions, ``ctx.idx_mapping_np`` their slots; each row's output so far is read
        from the runner's token buffer (earlier tokens) and ``ctx.input_ids`` (the newest), one copy per step."""
        slots = ctx.idx_mapping_np.tolist()
        rows = [(r, self._slots[s]) for r, s in enumerate(slots) if s in self._slots]
        if not rows:
            return logits
        if logits.shape[0] != len(slots):       # speculative decoding: several rows per request
            for _, mask in rows:
                if mask.error is None:
                    mask.fail("speculative decoding is not supported with constrained requests")
        try:
            outputs = self._v2_outputs(rows, slots, ctx) if logits.shape[0] == len(slots) else None
        except Exception as e:  # noqa: BLE001 - never take the engine down
            outputs = None
            for _, mask in rows:
                mask.fail(f"reading the V2 runner's tokens failed: {type(e).__name__}: {e}")
        host = self._buffer(len(rows))
        for k, (r, mask) in enumerate(rows):
            mask.fill(outputs[k] if outputs is not None else [], host[k])
        return self._mask(logits, [r for r, _ in rows], non_blocking=False)

    def _v2_outputs(self, rows: list[tuple[int, _RequestMask]], slots: list[int], ctx: Any) -> list[list[int]]:
        """Each row's output ids: tokens its guide has seen stay in Python; new ones come from the device."""
        states = self.req_states
        prompt_len = states.prompt_len.np
        want_slot, want_pos, spans = [], [], []
        for r, mask in rows:
            slot = slots[r]
            seen = int(ctx.seq_lens_upper_bound_np[r]) - int(prompt_len[slot])   # output tokens before this one
            have = min(mask.consumed, max(seen, 0))
            start = len(want_pos)
            for p in range(have, max(seen - 1, have)):                       # older new tokens: the token buffer
                want_slot.append(slot)
                want_pos.append(int(prompt_len[slot]) + p)
            spans.append((start, len(want_pos), seen > have, have))
        newest = ctx.input_ids[[r for r, _ in rows]]                           # the token fed this step
        older = states.all_token_ids.gpu[want_slot, want_pos] if want_pos else newest[:0]
        flat = torch.cat([older.to(newest.dtype), newest]).tolist()             # the one device-to-host copy
        out = []
        for k, ((_, mask), (a, b, has_newest, have)) in enumerate(zip(rows, spans)):
            known = mask.seen_ids[:have]
            out.append(known + flat[a:b] + ([flat[len(want_pos) + k]] if has_newest else []))
        return out


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple, set)) else [value]
