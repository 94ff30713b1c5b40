"""`ConstraintSpec`: a constraint as a request carries it to an engine-side processor (vLLM's).

A request names its constraint in ``extra_args``:

    {"constrained": {"json_schema": {...}}}                 # or {"regex": "..."}
    {"constrained": {"regex": "[0-9]+", "ascii": true}}     # keys beside it: compile options
    {"constrained": '{"json_schema": {...}}'}               # the same as a JSON string

Keys next to ``json_schema`` / ``regex`` are compile options, plus
``budget_aware`` (default true). Everything here is plain JSON, since the
constraint crosses processes; `parse_constraint` reads and checks the entry,
and `check_constraint` builds its automaton without a vocabulary, so that a
bad constraint is refused before it reaches the engine. Nothing here imports
a framework.

Example:
    >>> spec = parse_constraint({"constrained": {"regex": "(yes|no)"}})
    >>> spec.kind, spec.budget_aware, spec.to_xargs()
    ('regex', True, {'constrained': {'regex': '(yes|no)', 'budget_aware': True}})
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from constrained.token_fsm import TokenFSM
    from constrained.vocab import Vocabulary

__all__ = ["XARGS_KEY", "ConstraintSpec", "check_constraint", "parse_constraint"]

XARGS_KEY = "constrained"

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
        # the source is not sorted: a schema's `properties` order is its members' layout
        return json.dumps([self.kind, self.source, dict(sorted(self.options.items()))], separators=(",", ":"))

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
