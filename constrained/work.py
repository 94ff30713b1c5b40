"""The engine's own work in this process: when it runs, and what memory it asks for meanwhile.

`WORK` is entered around every compile (`constrained.compile`), every state's
first masks (`TokenFSM.masks`) and every vocabulary index build. Two things
hang on it:

- the compile cache frees evicted FSMs only while no work runs and the last
  ended long ago (`EngineWork.idle_for`);
- while work runs, numpy does not advise the kernel to back its large arrays
  with transparent huge pages (`madvise(MADV_HUGEPAGE)`, numpy's default for
  arrays of 4 MB and more). Under the common THP setting `defrag=madvise`,
  each first touch of such a page compacts memory on the spot. On a
  long-running machine that took 4-5 ms per 2 MB page: one mask that grew a
  DFA table of 10 MB took 31 ms, of which 24 ms in the kernel, and the
  advised regions stay advised after the array is freed (so later,
  unrelated allocations there pay again). Our tables are read a row at a
  time, where huge pages gain little, so bounded latency wins. numpy's
  setting is restored when the last work ends; an array other threads
  allocate meanwhile is only not advised.

Example:
    >>> work = EngineWork()
    >>> with work:
    ...     work.idle_for() == 0.0
    True
"""

from __future__ import annotations

import threading
import time
from typing import Callable

__all__ = ["EngineWork", "WORK"]


def _hugepage_switch() -> Callable[[bool], bool] | None:
    """numpy's switch for its huge-page advice (sets it, returns the old value), if it has one."""
    try:
        from numpy._core import multiarray                    # numpy >= 2
    except ImportError:                                       # pragma: no cover - numpy 1.x
        from numpy.core import multiarray
    return getattr(multiarray, "_set_madvise_hugepage", None)


class EngineWork:
    """Whether this process is computing something new (a state's masks, a compile, a
    vocabulary index), and when it last did.

    Marked at the start as well as the end: marked only at the end, a mask or
    compile longer than the idle time let the freeing of evicted FSMs run
    beside it, and every GIL-free kernel call in it then waited for the
    freeing thread to let go of the GIL (one 7 ms mask took 45-56 ms in a
    benchmark worker).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._last = 0.0
        self._switch = _hugepage_switch()
        self._advice = True                    # numpy's huge-page advice before the work began

    def __enter__(self) -> None:
        with self._lock:
            if not self._running and self._switch is not None:
                self._advice = self._switch(False)
            self._running += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._running -= 1
            if not self._running and self._switch is not None:
                self._switch(self._advice)
            self._last = time.perf_counter()

    def idle_for(self) -> float:
        """Seconds since the last work ended; 0.0 while some runs."""
        return 0.0 if self._running else time.perf_counter() - self._last


WORK = EngineWork()
