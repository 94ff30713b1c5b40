"""What a generation request asks for and what each of its samples gives back.

`GenerationRequest` is one prompt with its constraint (a JSON schema, a
regex or none) and sampling settings, checked when it is made; `Generation`
is one sample's result. `constrained.generate` runs requests; the server
(`constrained.serve`) and the streaming API build the same objects.

Example:
    >>> GenerationRequest("Digits:", regex="[0-9]+", n=2).n
    2
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

__all__ = ["Generation", "GenerationRequest", "Status"]

Status = Literal["complete", "stop", "max_tokens", "error"]


@dataclass
class Generation:
    """One sample.

    Attributes:
        text: the generated text (what the constraint saw, byte for byte).
        token_ids: generated token ids, EOS excluded.
        value: the parsed result when status is "complete": the JSON value
            (a pydantic instance when the schema was a pydantic class), or
            the text for a regex / unconstrained request; None otherwise.
        status: "complete" (ended by EOS, or nothing but EOS could follow; or
            cut at a stop sequence where the text before it is itself a
            complete match), "stop" (cut at a stop sequence before the
            document was complete: the text is NOT a valid result),
            "max_tokens" (cut off: NOT a valid result either), or "error".
        error: what went wrong, for status "error".
        compile_ms: time spent compiling the request's constraint.
        forced_tokens: how many of `token_ids` were appended without sampling.
        steered: how many sampled tokens the budget restricted so that the
            sample ends complete within `max_tokens` (see `budget_aware`).
        prompt_tokens: how many tokens the prompt took.
        stop_sequence: the stop sequence that ended the text (cut just before
            it), or None.

    Example:
        >>> Generation(text="7", token_ids=[22], value=7).to_dict()["value"]
        7
        >>> Generation(text="7", token_ids=[22], prompt_tokens=5).usage
        {'prompt_tokens': 5, 'completion_tokens': 1, 'total_tokens': 6}
    """

    text: str
    token_ids: list[int]
    value: Any = None
    status: Status = "complete"
    error: str | None = None
    compile_ms: float = 0.0
    forced_tokens: int = 0
    steered: int = 0
    prompt_tokens: int = 0
    stop_sequence: str | None = None

    @property
    def ok(self) -> bool:
        """True when the output is complete and valid."""
        return self.status == "complete"

    @property
    def usage(self) -> dict[str, int]:
        """Token counts as OpenAI reports them (every generated token counts, EOS not)."""
        completion = len(self.token_ids)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                "total_tokens": self.prompt_tokens + completion}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict (pydantic values dumped in JSON mode)."""
        value = self.value
        if hasattr(value, "model_dump"):
            value = value.model_dump(mode="json")
        return {
            "text": self.text, "value": value, "status": self.status, "error": self.error,
            "token_ids": list(self.token_ids), "compile_ms": round(self.compile_ms, 3), "steered": self.steered,
        }


@dataclass
class GenerationRequest:
    """One prompt with its own constraint and sampling settings.

    Attributes:
        prompt: text (the chat template is applied when `chat`) or token ids.
        schema: JSON schema (dict, JSON string or pydantic class); exclusive with `regex`.
        regex: a pattern the whole output must match.
        max_tokens: most generated tokens per sample (EOS not counted).
        temperature: 0 = greedy; otherwise logits are divided by it.
        top_p: nucleus sampling mass in (0, 1].
        seed: sample ``j`` draws from ``numpy.random.default_rng([seed, j])``.
        n: samples for this prompt.
        chat: wrap the text prompt in the tokenizer's chat template.
        options: compile options (``strict``, ``whitespace``, ... for schemas).
        budget_aware: near `max_tokens`, allow only tokens that keep a complete
            output within it, so constrained samples end "complete" rather
            than cut off (`Generation.steered` counts the steered tokens); a
            `max_tokens` below the constraint's shortest output is refused.
        stop: strings that end the text: when one appears, the sample ends
            there and its text is cut just before it (OpenAI's semantics). With
            a schema or regex, the cut text is checked against the constraint:
            status "complete" (with its value) if it is still a complete match,
            else "stop" with ``value=None``. A stop sequence the constraint's
            output cannot contain changes nothing.

    Example:
        >>> GenerationRequest("Digits:", regex="[0-9]+", n=2).n
        2
    """

    prompt: str | Sequence[int]
    schema: Any = None
    regex: str | None = None
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    n: int = 1
    chat: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    budget_aware: bool = True
    stop: str | Sequence[str] = ()

    def check(self) -> None:
        """Raise ValueError (quoting the bad value) for settings out of range."""
        for name in ("max_tokens", "n"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"`{name}` must be a positive integer, got {v!r}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t >= 0 or t == float("inf"):
            raise ValueError(f"`temperature` must be a finite number >= 0, got {t!r}")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p <= 1:
            raise ValueError(f"`top_p` must be in (0, 1], got {p!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0):
            raise ValueError(f"`seed` must be a non-negative integer or None, got {self.seed!r}")
        if self.schema is not None and self.regex is not None:
            raise ValueError("give either `schema` or `regex`, not both")
        if not isinstance(self.budget_aware, bool):
            raise ValueError(f"`budget_aware` must be True or False, got {self.budget_aware!r}")
        stops = self.stop_sequences()
        if any(not isinstance(x, str) or not x for x in stops):
            raise ValueError(f"`stop` must be a non-empty string or a list of them, got {self.stop!r}")

    def stop_sequences(self) -> tuple[str, ...]:
        """`stop` as a tuple (a single string is one stop sequence)."""
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
