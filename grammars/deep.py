"""Run a compile that may recurse deeply: deep `$ref` chains, schemas nested hundreds of levels.

The schema compiler and the NFA builder recurse along the schema's nesting
(a few Python frames per level), so a schema nested ~150 levels deep passes
Python's default recursion limit of 1000. Rewriting every walk as an explicit
stack would cost the common case; instead `deep_call` runs the function as is
and, only if it raises `RecursionError`, runs it once more in a thread with a
large stack (`STACK_BYTES`, reserved, not committed) and a recursion limit of
`DEEP_LIMIT`. A schema deeper than even that gets a `StateBudgetError`, never a
`RecursionError` or a crashed interpreter.

Example:
    >>> def depth(n):
    ...     return 0 if n == 0 else 1 + depth(n - 1)
    >>> deep_call(depth, 5000)
    5000
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Callable, TypeVar

from grammars.errors import StateBudgetError

__all__ = ["deep_call", "DEEP_LIMIT", "STACK_BYTES"]

T = TypeVar("T")

# C code recursing along the input counts towards the limit too (json's encoder and decoder,
# a level of nesting each), with frames larger than Python's: at 200,000 a 100,000-deep
# schema overflowed this stack and crashed the process. 50,000 leaves room for both, and
# for the compiler's ~10 frames per level at its 2,000 levels (`json_schema.MAX_NESTING`).
DEEP_LIMIT = 50_000
STACK_BYTES = 1 << 30                 # ~20 KB per frame at the limit
_lock = threading.Lock()
_active = 0                           # deep calls running; the last one out restores the limit
_saved_limit = 0


def deep_call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, retried on a deep stack if it overflows the recursion limit (see the module doc).

    Raises:
        StateBudgetError: it recursed past `DEEP_LIMIT` frames even there.
    """
    try:
        return fn(*args, **kwargs)
    except RecursionError:
        pass
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = e

    _enter()
    try:
        with _lock:
            old = threading.stack_size(STACK_BYTES)
            try:
                worker = threading.Thread(target=target, name="constrained-deep-compile", daemon=True)
            finally:
                threading.stack_size(old)
        worker.start()
        worker.join()
    finally:
        _leave()
    error = box.get("error")
    if isinstance(error, RecursionError):
        raise StateBudgetError(DEEP_LIMIT, "the schema's nesting", unit="levels of recursion", option=None) from None
    if error is not None:
        raise error
    return box["value"]


def _enter() -> None:
    global _active, _saved_limit
    with _lock:
        if _active == 0:
            _saved_limit = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_saved_limit, DEEP_LIMIT))
        _active += 1


def _leave() -> None:
    global _active
    with _lock:
        _active -= 1
        if _active == 0:
            sys.setrecursionlimit(_saved_limit)
