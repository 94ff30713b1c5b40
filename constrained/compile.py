"""`compile_regex` / `compile_json_schema`: constraint + vocabulary -> `TokenFSM`.

Compiling is cheap by design (the DFA and the token masks are lazy); the
result is still cached, keyed by (constraint, options, vocabulary fingerprint),
so that repeated requests with the same schema share one FSM *and* its
already-visited states.

Example:
    >>> from types import SimpleNamespace
    >>> v = SimpleNamespace(token_bytes=(b"1", b"2", b"12", None), eos_token_ids=(3,), size=4, fingerprint="compile-doc")
    >>> fsm = compile_regex(r"[12]+", v)
    >>> fsm is compile_regex(r"[12]+", v)
    True
    >>> fsm.guide().allowed_token_ids().tolist()
    [0, 1, 2]
"""

from __future__ import annotations

import json
import marshal
import queue
import sys
import threading
import time
import warnings
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterator

from constrained.dfa_jit import native_dfa_class, product_dfa_class
from constrained.errors import EmptyConstraintError, InvalidSchemaError
from constrained.token_fsm import TokenFSM
from constrained.work import WORK
from grammars.deep import deep_call
from grammars.dfa import LazyDFA
from grammars.json_schema import json_schema_grammar
from grammars.json_string_sets import use_dfa_class
from grammars.nfa import gc_paused
from grammars.regex import regex_grammar

if TYPE_CHECKING:
    from constrained.vocab import Vocabulary

__all__ = ["compile_regex", "compile_json_schema", "compile_grammar", "clear_cache"]

# The cache keeps at most this many FSMs, holding at most this many bytes between them
# (their memoized per-state masks and DFA tables, see `_held`).
_CACHE_SIZE = 128
CACHE_BYTES = 512 << 20
# Budgets of every compiled constraint (keyword arguments of compile_*, `--max-states` in the CLI).
MAX_STATES = 100_000
_cache: "OrderedDict[Hashable, TokenFSM]" = OrderedDict()
_lock = threading.Lock()
# Cached FSMs grow while they are used (states visited, masks memoized). What they
# hold is measured when one is added, and all of them are measured again after
# `_RECOUNT` compiles and whenever the sum of the last measures passes the budget;
# so growth since the last count may exceed `CACHE_BYTES` for a while (at most
# `_RECOUNT_INLINE` compiles). Measuring 128 FSMs on every compile cost 45 us in a
# quiet process and 140-270 us in a server whose masks keep the CPU caches cold, a
# quarter of the median compile. Done inline every `_RECOUNT` compiles, it still cost
# that compile 0.4 ms at the median after an idle wait (123 cold FSMs; 5.9 ms at worst),
# and the benchmark's schemas at every 16th compile were 1.22-1.33x llguidance's TTFM
# against about 1.0 for the rest: so the count is the reaper's, done while the engine
# is idle (`_ask_recount`), and inline only once the sum passes the budget or
# `_RECOUNT_INLINE` compiles came without an idle moment.
_RECOUNT = 16
_RECOUNT_INLINE = 4 * _RECOUNT
_sizes: dict[Hashable, int] = {}          # per cached key, its FSM's size when last measured
_held = {"bytes": 0, "since": 0, "asked": 0}   # their sum; compiles since the last count; a count asked
# Evicted FSMs are freed on the `_reaper` thread, off the compiling caller's path,
# while the engine is idle. Freeing a used FSM (its memoized masks, DFA tables and
# lazy syntax: thousands of small objects, cold in the CPU caches) took 260 us at
# the median in a server-like worker, p90 1 ms, and holds the GIL. Done at once,
# on the reaper or in `_cached`, it landed inside the next compile (whose kernels
# release the GIL), a sixth of a median compile; done in slices while masks were
# being computed, it slowed them by a tenth. So the reaper frees in slices of
# `_REAP_SLICE_S`, only while no compile or new mask runs and none has for
# `_IDLE_S` (`token_fsm.WORK`), unless `_REAP_BACKLOG` evictions wait: then at once,
# so that memory stays bounded under a steady stream of new schemas. While the
# engine works, the reaper wakes once per `_IDLE_S` (5 ms, the interpreter's
# switch interval; waking every 1 ms cost the benchmark's masks 3-4%). Between
# slices it sleeps `_REAP_PAUSE_S`, which lets go of the GIL: a thread that wants
# it back (a kernel returning, a request arriving) gets it then, instead of after
# the 5 ms switch interval. Evictions are handed over `_REAP_BATCH` at a time (or
# sooner when they hold `_REAP_BATCH_BYTES`): each handing over wakes the reaper,
# which had nothing left to do, inside the compile that evicted. On one core that
# woke it at once and switched threads twice (and once more for the GIL); in the
# benchmark's worker, whose cache is full after 128 schemas, `_drop` was 10-13%
# of the median compile (py-spy), evicting one FSM per compile.
_reap: "queue.SimpleQueue[list[TokenFSM]]" = queue.SimpleQueue()
_REAP_SLICE_S = 20e-6
_IDLE_S = 5e-3
_REAP_PAUSE_S = 50e-6
_REAP_BACKLOG = 16
_REAP_BATCH = 8
_REAP_BATCH_BYTES = 32 << 20
# The cache key's schema text, where `marshal` cannot give it (see `_schema_key`): compact, not
# sorted (members are laid out in the order `properties` declares them). One encoder for every
# compile: `json.dumps` with options builds a new one each call.
_KEY_TEXT = json.JSONEncoder(separators=(",", ":"))
_evicted: list[TokenFSM] = []             # evicted, not handed to the reaper yet (`_drop`)
_evicted_bytes = [0]                      # what they held when last measured
_reaper: threading.Thread | None = None


def compile_regex(pattern: str, vocab: "Vocabulary", *, max_states: int = MAX_STATES, **options: Any) -> TokenFSM:
    """Token FSM for texts fully matching `pattern` (options go to `regex_grammar`).

    `max_states` bounds the byte DFA's states (they are built lazily, as
    generation reaches them); past it `StateBudgetError` is raised.

    Raises:
        RegexSyntaxError, UnsupportedRegexError: bad pattern.
        IncompatibleVocabularyError: no token can start a match.
    """
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str, got {type(pattern).__name__}: {pattern!r}")
    key = ("regex", pattern, _options_key(options), max_states, vocab.fingerprint)
    return _cached(key, lambda: compile_grammar(regex_grammar(pattern, **options), vocab, max_states=max_states))


def compile_json_schema(schema: Any, vocab: "Vocabulary", *, max_states: int = MAX_STATES,
                        **options: Any) -> TokenFSM:
    """Token FSM for JSON documents valid under `schema`.

    Args:
        schema: a dict, a JSON string, or a pydantic model class.
        vocab: the model's `Vocabulary`.
        max_states: budget of byte-DFA states (built lazily, as generation reaches them).
        **options: passed to `json_schema_grammar` (e.g. whitespace policy).

    Keywords ignored (unknown, vendor `x-`) or not enforced (`allow_approximate`)
    are listed in the result's `report` (`SchemaNote`s). Those that may change
    which documents are valid are warned once per compile (`SchemaNote.warns`:
    a likely typo of an asserting keyword, such as `maxLenght`, or a keyword not
    enforced); vendor keywords, other unknown ones and a `format` the engine
    does not know (an annotation, not checked, as the spec allows) are not.

    Raises:
        InvalidSchemaError, UnsupportedSchemaError: bad or unsupported schema.
        IncompatibleVocabularyError: no token can start a document.
    """
    schema = _as_schema_dict(schema)
    key = ("json", _schema_key(schema), _options_key(options), max_states, vocab.fingerprint)
    built: list[TokenFSM] = []

    def build() -> TokenFSM:
        _native_products()
        grammar = json_schema_grammar(schema, **options)
        fsm = compile_grammar(grammar, vocab, max_states=max_states)
        fsm.report = grammar.info.get("report", ())
        built.append(fsm)
        return fsm

    fsm = _cached(key, build)
    for note in fsm.report if built else ():    # once per compile, at the caller's line
        if note.warns:                          # the others change no document's validity
            warnings.warn(note, stacklevel=2)
    return fsm


def _native_products() -> None:
    """Once: the string-set products of schemas (`not` of a `pattern`, `patternProperties` keys, a
    pattern with length bounds) run on the compiled DFA where its kernels load (registered at the
    first compile, since loading them is not import's work)."""
    if not _products_native:
        cls = product_dfa_class()
        if cls is not None:
            use_dfa_class(cls)
        _products_native.append(cls)


_products_native: list = []


def compile_grammar(grammar, vocab: "Vocabulary", *, max_states: int = MAX_STATES) -> TokenFSM:
    """Token FSM of a `grammars.ast.Grammar` (not cached)."""
    if not isinstance(max_states, int) or isinstance(max_states, bool) or max_states < 1:
        raise ValueError(f"max_states must be a positive int, got {max_states!r}")
    dfa_class = native_dfa_class() or LazyDFA
    # recursive grammars (JSON schema) say how deep their rule calls may nest
    max_depth = grammar.info.get("max_depth", 64)
    dfa = dfa_class(grammar, max_states=max_states, max_depth=int(max_depth))
    if dfa.is_empty:       # not the vocabulary's fault: say so before any token is looked at
        raise EmptyConstraintError(grammar.info.get("kind", "constraint"), grammar.info.get("empty_at"))
    return TokenFSM(dfa, vocab, leading_gap=grammar.info.get("leading_gap"))


def clear_cache() -> None:
    """Forget every cached FSM."""
    with _lock:
        _cache.clear()
        _sizes.clear()
        _held["bytes"] = _held["since"] = _held["asked"] = 0
        _evicted.clear()
        _evicted_bytes[0] = 0


def _cached(key: Hashable, build: Callable[[], TokenFSM]) -> TokenFSM:
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    # Outside the lock: compiles may run in parallel. The cyclic GC is paused: a
    # compile's thousands of short-lived grammar objects would otherwise be
    # promoted to the oldest generation and trigger its full scans (25-100 ms
    # each with a model loaded), several times over a few dozen schemas.
    with WORK, gc_paused():
        fsm = deep_call(build)             # deep schemas: see `grammars.deep`
    evicted = []
    with _lock:
        if key in _cache:                  # a parallel compile of the same key came first
            fsm = _cache[key]
            _cache.move_to_end(key)
            return fsm
        _cache[key] = fsm
        _sizes[key] = size = fsm.held_bytes
        _held["bytes"] += size
        _held["since"] += 1
        while len(_cache) > _CACHE_SIZE:
            evicted.append(_evict_oldest())
        ask = False
        if _held["bytes"] > CACHE_BYTES or _held["since"] >= _RECOUNT_INLINE:
            evicted += _recount()
        elif _held["since"] >= _RECOUNT and not _held["asked"]:
            _held["asked"], ask = 1, True
    if evicted:
        _drop(evicted)
    if ask:
        _ask_recount()
    return fsm


def _recount() -> list[TokenFSM]:
    """Measure every cached FSM again; evict the oldest while they hold more than `CACHE_BYTES`
    (the newest stays, whatever its size). Called with `_lock` held; returns the evicted."""
    for k, f in _cache.items():
        _sizes[k] = f.held_bytes
    _held["bytes"], _held["since"], _held["asked"] = sum(_sizes.values()), 0, 0
    evicted = []
    while _held["bytes"] > CACHE_BYTES and len(_cache) > 1:
        evicted.append(_evict_oldest())
    return evicted


def _ask_recount() -> None:
    """Have the reaper `_recount` once the engine is idle (see `_RECOUNT`)."""
    _start_reaper()
    _reap.put(None)


def _evict_oldest() -> TokenFSM:
    key, fsm = _cache.popitem(last=False)
    size = _sizes.pop(key)
    _held["bytes"] -= size
    _evicted_bytes[0] += size
    return fsm


def _drop(fsms: list[TokenFSM]) -> None:
    """Free `fsms` on the reaper thread (started on first use), off the compiling caller's path,
    once `_REAP_BATCH` evicted FSMs (or `_REAP_BATCH_BYTES`) wait: see `_REAP_BATCH`."""
    with _lock:
        _evicted.extend(fsms)
        if len(_evicted) < _REAP_BATCH and _evicted_bytes[0] < _REAP_BATCH_BYTES:
            return
        batch = _evicted[:]
        _evicted.clear()
        _evicted_bytes[0] = 0
    _start_reaper()
    _reap.put(batch)


def _start_reaper() -> None:
    global _reaper
    with _lock:
        if _reaper is None or not _reaper.is_alive():
            _reaper = threading.Thread(target=_reap_forever, name="constrained-cache-reaper", daemon=True)
            _reaper.start()


def _backlogged() -> bool:
    """Whether `_REAP_BACKLOG` evicted FSMs or more wait for the reaper (in batches of `_REAP_BATCH`;
    a recount asked is no batch)."""
    return (_reap.qsize() - _held["asked"]) * _REAP_BATCH >= _REAP_BACKLOG


def _reap_forever() -> None:
    while True:
        fsms = _reap.get()
        if fsms is None:                    # `_ask_recount`: measure the cache once nothing runs
            _wait_idle()
            with _lock:
                evicted = _recount() if _held["asked"] else []
            if evicted:
                _drop(evicted)
            continue
        while fsms:
            fsm = fsms.pop()
            if sys.getrefcount(fsm) == 2:   # this name and the call's argument: nobody else holds it
                _wait_idle()
                end = time.perf_counter() + _REAP_SLICE_S
                for _ in _dismantle(fsm):
                    if time.perf_counter() > end:
                        # let go of the GIL between slices, backlogged too: a thread that wants it (a
                        # kernel returning in a mask) would otherwise wait the 5 ms switch interval,
                        # after each of its kernels (masks of 15-29 ms instead of 3)
                        time.sleep(0 if _backlogged() else _REAP_PAUSE_S)
                        _wait_idle()
                        end = time.perf_counter() + _REAP_SLICE_S
            del fsm                         # held elsewhere (a generation still using it): freed there


def _wait_idle() -> None:
    """Return once nothing was compiled or computed for `_IDLE_S`, or at once if evictions pile up."""
    while not _backlogged():
        quiet = WORK.idle_for()
        if quiet >= _IDLE_S:
            return
        time.sleep(_IDLE_S - quiet)


def _dismantle(root: object) -> Iterator[None]:
    """Empty `root` and what only it holds, one attribute or item at a time (yielding after each).

    Objects whose only reference is the one taken out of `root` (or out of
    what was taken out of it, and so on) are emptied the same way: their
    attribute dicts, dicts and lists. Anything referenced from elsewhere (the
    shared vocabulary index, a kernel) is only let go of, never emptied.
    """
    stack: list[Any] = [root]
    del root
    while stack:
        obj = stack.pop()
        items = obj if type(obj) in (dict, list) else getattr(obj, "__dict__", None)
        del obj
        while type(items) in (dict, list) and items:
            value = items.popitem()[1] if type(items) is dict else items.pop()
            if sys.getrefcount(value) == 2 and (type(value) in (dict, list) or hasattr(value, "__dict__")):
                stack.append(value)        # 2: this name and the call's argument, so it was only in `items`
            del value
            yield


def _schema_key(schema: Any) -> bytes | str:
    """What identifies `schema` in the cache: its `marshal` bytes (version 2: no back-references,
    so equal schemas give equal bytes whatever objects they share), in member order like the
    schema's text. A third of the time of encoding it as JSON (13 against 36 us at the dev
    corpus' median, after an idle wait), and it tells 1 from 1.0 and True from 1 as the text
    does. A schema `marshal` refuses (nested past its depth, objects other than JSON's) is
    keyed by its JSON text, which raises for what JSON cannot hold."""
    try:
        return marshal.dumps(schema, 2)
    except ValueError:
        return deep_call(_KEY_TEXT.encode, schema)


def _options_key(options: dict[str, Any]) -> Hashable:
    """What identifies `options` in the cache: their sorted items, each value with its type (so
    that ``1`` and ``True`` differ, as in JSON); their JSON text where a value is not hashable.
    The items, not the text: `json.dumps` with `sort_keys` makes an encoder per call, 16 us of
    an ``any_order=True`` compile after other work (8 us the items)."""
    if not options:
        return ()
    try:
        key = tuple(sorted((name, type(value), value) for name, value in options.items()))
        hash(key)
        return key
    except TypeError:
        return json.dumps(options, sort_keys=True, default=repr)


def _as_schema_dict(schema: Any) -> Any:
    if isinstance(schema, (str, bytes)):
        try:
            return deep_call(json.loads, schema)     # deep texts: see `grammars.deep`
        except json.JSONDecodeError as e:
            raise InvalidSchemaError(f"schema is not valid JSON ({e.msg})", "$", str(schema)[:80]) from None
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        return schema.model_json_schema()        # pydantic v2 model class
    if isinstance(schema, (dict, bool)):
        return schema
    raise InvalidSchemaError("schema must be a dict, a JSON string or a pydantic model class", "$",
                             type(schema).__name__)
