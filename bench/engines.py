"""One adapter per constrained-decoding engine, all over the same tokenizer.

Each `Engine` has three phases, timed separately by the `masks` suite:

- `setup(tokenizer)`: per-vocabulary work (our `VocabIndex`, llguidance's
  `LLTokenizer`, xgrammar's `TokenizerInfo`, outlines-core's `Vocabulary`),
  done once in the parent process before any case runs;
- `compile(schema)`: per-schema work (raises on an unsupported schema); a
  `bench.regex_corpus.Regex` instead of a schema is a full-match regex;
- `matcher(compiled)`: a fresh cursor with `fill(buf)` (the full packed int32
  mask, xgrammar's layout: bit i of word i // 32) and `accept(token) -> bool`.

Every engine uses its own default JSON settings (whitespace, property order,
additionalProperties), except xgrammar's compile threads: `max_threads=1`
so that every engine is measured on one core.

Example:
    >>> sorted(ENGINES)
    ['llguidance', 'ours', 'outlines-core', 'xgrammar']
"""

from __future__ import annotations

import importlib.util
import json
import warnings
from typing import Any, Callable

import numpy as np

from bench.regex_corpus import Regex

__all__ = ["Engine", "ENGINES", "available", "PEER_PACKAGES"]

# Import name of each peer (pip names: llguidance, xgrammar, outlines-core).
PEER_PACKAGES = {"llguidance": "llguidance", "xgrammar": "xgrammar", "outlines-core": "outlines_core"}


class Unsupported(Exception):
    """The engine refused the schema at compile time (its own error message attached)."""


class Engine:
    """Base adapter: subclasses fill in the three phases."""

    name = "?"
    settings = ""

    def setup(self, tokenizer: Any, vocab: Any) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def prepare_child(self) -> None:
        """Untimed per-process preparation (runs in each forked case worker)."""

    def compile(self, schema: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def matcher(self, compiled: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def held_bytes(self, compiled: Any) -> int | None:
        """Bytes the compiled schema holds by the engine's own count, where it has one."""
        return None

    def accepted_in_any_order(self, schema: Any, texts: list[bytes]) -> list[bool] | None:
        """Whether each of `texts` (documents this engine rejected) is accepted when object members
        may come in any order; None where the engine has no such mode. Untimed: it tells the valid
        instances rejected only for their members' order from the others."""
        return None

    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(self.name)
        except PackageNotFoundError:
            return "?"


class Ours(Engine):
    """`constrained.compile_json_schema` + `Guide` (lazy masks, memoized per DFA state)."""

    name = "ours"

    def __init__(self, any_order: bool = False) -> None:
        self.any_order = any_order          # `python -m bench masks --any-order`: members in any order
        self.settings = ("compile_json_schema defaults: whitespace='default', additionalProperties per spec"
                         + (", any_order=True" if any_order else ""))

    def setup(self, tokenizer: Any, vocab: Any) -> None:
        from constrained.compile import clear_cache, compile_json_schema
        from constrained.vocab_index import VocabIndex

        self.vocab = vocab
        VocabIndex.for_vocab(vocab)           # trie + slices: per vocabulary, shared by every schema
        # Warm the per-vocabulary lazy tables (string slices) as a server would have them,
        # then forget the compiled FSM so each case compiles from scratch.
        g = compile_json_schema({"type": "object", "properties": {"s": {"type": "string"}}}, vocab).guide()
        g.allowed_token_ids()
        clear_cache()

    def compile(self, schema: Any) -> Any:
        from constrained.compile import compile_json_schema, compile_regex
        from grammars.errors import ConstraintError

        try:
            if isinstance(schema, Regex):
                return compile_regex(schema, self.vocab)
            return compile_json_schema(schema, self.vocab, **({"any_order": True} if self.any_order else {}))
        except ConstraintError as e:
            raise Unsupported(f"{type(e).__name__}: {e}") from None

    def held_bytes(self, compiled: Any) -> int | None:
        return int(compiled.nbytes + compiled.dfa.nbytes)   # per-state masks + DFA tables (not the shared index)

    def matcher(self, compiled: Any) -> Any:
        guide = compiled.guide()
        return _Matcher(guide.fill_bitmask, guide.advance)

    def accepted_in_any_order(self, schema: Any, texts: list[bytes]) -> list[bool] | None:
        from constrained.compile import compile_json_schema
        from grammars.errors import ConstraintError

        if self.any_order or isinstance(schema, Regex):
            return None
        try:
            with warnings.catch_warnings():       # its notes were the timed compile's to give
                warnings.simplefilter("ignore")
                fsm = compile_json_schema(schema, self.vocab, any_order=True)
        except ConstraintError:
            return None
        return [fsm.matches(t) for t in texts]

    def version(self) -> str:
        import constrained

        return constrained.__version__


class LLGuidance(Engine):
    """llguidance `LLMatcher` over `llguidance.hf.from_tokenizer` (masks computed on the fly)."""

    name = "llguidance"
    settings = "grammar_from_json_schema defaults (flexible whitespace)"

    def setup(self, tokenizer: Any, vocab: Any) -> None:
        import llguidance.hf

        self.tok = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab.size)

    def compile(self, schema: Any) -> Any:
        import llguidance

        if isinstance(schema, Regex):
            grammar = llguidance.LLMatcher.grammar_from_regex(schema)
        else:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        m = llguidance.LLMatcher(self.tok, grammar)
        if m.is_error():
            raise Unsupported(m.get_error())
        return m

    def matcher(self, compiled: Any) -> Any:
        import llguidance.numpy as lnp

        m = compiled.deep_copy()

        def fill(buf: np.ndarray) -> None:
            lnp.fill_next_token_bitmask(m, buf[None, :], 0)

        return _Matcher(fill, lambda t: m.consume_token(t) and not m.is_error())


class XGrammar(Engine):
    """xgrammar `GrammarCompiler.compile_json_schema` + `GrammarMatcher` (precomputed mask cache)."""

    name = "xgrammar"
    settings = "compile_json_schema defaults (any_whitespace=True, strict_mode=True); max_threads=1"

    def setup(self, tokenizer: Any, vocab: Any) -> None:
        import xgrammar as xgr

        self.info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab.size)

    def prepare_child(self) -> None:
        import xgrammar as xgr

        # Created per worker: its thread pool must not cross a fork.
        self.compiler = xgr.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)

    def compile(self, schema: Any) -> Any:
        try:
            if isinstance(schema, Regex):
                return self.compiler.compile_regex(str(schema))
            return self.compiler.compile_json_schema(json.dumps(schema))
        except (RuntimeError, ValueError, TypeError) as e:
            raise Unsupported(f"{type(e).__name__}: {e}") from None

    def matcher(self, compiled: Any) -> Any:
        import xgrammar as xgr

        m = xgr.GrammarMatcher(compiled)
        torch_buf = xgr.allocate_token_bitmask(1, self.info.vocab_size)
        view = torch_buf.numpy()[0]           # shares memory with the torch tensor

        def fill(buf: np.ndarray) -> None:
            m.fill_next_token_bitmask(torch_buf, 0)
            buf[: len(view)] = view

        return _Matcher(fill, m.accept_token)


class OutlinesCore(Engine):
    """outlines-core `Index` (eager, over the regex of the schema) + `Guide`."""

    name = "outlines-core"
    settings = "build_regex_from_schema defaults (whitespace_pattern None = '[ ]?')"

    def setup(self, tokenizer: Any, vocab: Any) -> None:
        import outlines_core

        self.eos = int(tokenizer.eos_token_id)
        table: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):   # the same token bytes we decode, so the same vocabulary
            if b and i not in vocab.eos_token_ids:
                table.setdefault(b, []).append(i)
        self.vocab = outlines_core.Vocabulary(self.eos, table)

    def compile(self, schema: Any) -> Any:
        import outlines_core
        from outlines_core.json_schema import build_regex_from_schema

        try:
            regex = str(schema) if isinstance(schema, Regex) else build_regex_from_schema(json.dumps(schema))
            return outlines_core.Index(regex, self.vocab)
        except (ValueError, TypeError, RuntimeError) as e:
            raise Unsupported(f"{type(e).__name__}: {e}") from None

    def matcher(self, compiled: Any) -> Any:
        import outlines_core

        g = outlines_core.Guide(compiled)

        def fill(buf: np.ndarray) -> None:
            g.write_mask_into(buf.ctypes.data, buf.size, 4)

        def accept(t: int) -> bool:
            try:
                g.advance(t, return_tokens=False)
                return True
            except ValueError:
                return False

        return _Matcher(fill, accept)

    def version(self) -> str:
        from importlib.metadata import version

        return version("outlines-core")


class _Matcher:
    __slots__ = ("fill", "accept")

    def __init__(self, fill: Callable[[np.ndarray], None], accept: Callable[[int], bool]) -> None:
        self.fill = fill
        self.accept = accept


ENGINES: dict[str, Callable[[], Engine]] = {
    "ours": Ours, "llguidance": LLGuidance, "xgrammar": XGrammar, "outlines-core": OutlinesCore,
}


def available(name: str) -> bool:
    """True when engine `name` can be imported here (ours always can)."""
    return name == "ours" or importlib.util.find_spec(PEER_PACKAGES[name]) is not None
