"""Take an object out of the cyclic GC's lists: for the per-state records a compiled
constraint keeps (`TokenFSM`'s `StateMasks`, their `SliceView`s).

A compiled constraint memoizes a record per DFA state it has visited, and the
compile cache keeps up to 128 of them: in the benchmark's worker, after the dev
corpus, 24,000 `StateMasks` and 9,100 `SliceView`s were 83% of the 40,000
objects the cyclic GC tracked, and a full collection walked them all in 19-23 ms,
inside whichever mask or compile allocated last (the largest mask of the run:
23 ms, where the same mask takes 3.6 ms otherwise). Instances of Python classes
are always tracked, even with `__slots__`. These records refer only to arrays,
numbers and to each other (a record to its view, a view to its slice), never back
to anything that refers to them, so no reference cycle can pass through one: they
are freed by reference counting alone and the GC need not walk them.

`untrack` calls CPython's `PyObject_GC_UnTrack` (which does nothing for an
object already untracked); on other interpreters it does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from typing import TypeVar

__all__ = ["untrack"]

T = TypeVar("T")


def _load():
    if sys.implementation.name != "cpython":
        return None
    try:
        fn = ctypes.pythonapi.PyObject_GC_UnTrack
    except AttributeError:
        return None
    fn.argtypes = [ctypes.py_object]
    fn.restype = None
    return fn


_UNTRACK = _load()


def untrack(obj: T) -> T:
    """`obj`, no longer tracked by the cyclic GC. Only for objects through which no reference
    cycle can pass (see the module doc): a cycle through one would never be collected.

    Example:
        >>> import gc
        >>> class Record:
        ...     __slots__ = ("data",)
        >>> r = Record()
        >>> untrack(r) is r, gc.is_tracked(r) == (_UNTRACK is None)
        (True, True)
    """
    if _UNTRACK is not None:
        _UNTRACK(obj)
    return obj
