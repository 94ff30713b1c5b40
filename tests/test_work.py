"""`constrained.work`: the engine's work marks, and numpy's huge-page advice while they run."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pytest

from constrained.work import EngineWork, _hugepage_switch


@contextmanager
def work_in_another_thread(work: EngineWork) -> Iterator[None]:
    """Inside: another thread is inside `work` (a long mask or compile); it ends on leaving."""
    inside, release = threading.Event(), threading.Event()

    def long_work() -> None:
        with work:
            inside.set()
            release.wait(10)

    t = threading.Thread(target=long_work)
    t.start()
    assert inside.wait(10)
    try:
        yield
    finally:
        release.set()
        t.join(10)


@pytest.fixture
def switch():
    flip = _hugepage_switch()
    if flip is None:                                  # pragma: no cover - a numpy without the switch
        pytest.skip("this numpy has no huge-page switch")
    before = flip(True)
    yield flip
    flip(before)


def test_numpy_advises_no_huge_pages_while_work_runs_and_as_before_after(switch) -> None:
    work = EngineWork()
    with work:
        assert switch(False) is False                 # off inside (reading it sets it, to the same)
        with work:                                    # nested: the inner end does not restore it
            np.full(1 << 21, -1, np.int32)            # 8 MB: numpy would advise huge pages for it
        assert switch(False) is False
    assert switch(True) is True                       # numpy's own setting again


def test_the_advice_comes_back_only_when_the_last_of_several_threads_ends(switch) -> None:
    work = EngineWork()
    with work_in_another_thread(work):
        with work:
            pass                                      # ends while the other thread still works
        assert switch(False) is False
    assert switch(True) is True


def test_a_numpy_setting_of_no_advice_is_kept(switch) -> None:
    switch(False)                                     # the user turned it off (NUMPY_MADVISE_HUGEPAGE=0)
    with EngineWork():
        pass
    assert switch(False) is False
