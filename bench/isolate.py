"""Run one benchmark case in a forked worker with a time limit and a memory limit.

The parent forks after the expensive per-vocabulary setup, so a worker
starts in milliseconds with every tokenizer already loaded. The worker caps
its address space (`RLIMIT_AS`: what it has mapped at fork + `mem_limit`)
and streams messages back, so a case that times out or dies still reports
what it finished. One pathological schema costs at most `time_limit` seconds.

Example:
    >>> def work(send, n):
    ...     send({"event": "value", "n": n * 2})
    >>> out = run_isolated(work, (21,), time_limit=10, mem_limit=1 << 30)
    >>> out.status, out.messages[0]["n"]
    ('ok', 42)
"""

from __future__ import annotations

import faulthandler
import gc
import multiprocessing
import os
import resource
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Outcome", "run_isolated", "Worker"]

# Words in a dying worker's stderr that mean it ran out of memory (Rust and C++ allocators abort).
_OOM_MARKERS = ("memory allocation of", "bad_alloc", "MemoryError", "Cannot allocate memory", "out of memory")


@dataclass
class Outcome:
    """What a worker reported.

    Attributes:
        status: "ok", "timeout", "oom" or "crash".
        messages: every message the worker sent, in order (also when it failed).
        detail: why it failed (exception, signal, stderr tail); empty when ok.
        wall_s: seconds from fork to the end.
    """

    status: str
    messages: list[dict] = field(default_factory=list)
    detail: str = ""
    wall_s: float = 0.0


def run_isolated(target: Callable[..., None], args: tuple, *, time_limit: float, mem_limit: int) -> Outcome:
    """Run ``target(send, *args)`` in a forked process; `send(dict)` streams results back.

    Args:
        target: the work; it calls ``send`` with picklable dicts.
        args: extra arguments (inherited through fork, never pickled).
        time_limit: seconds before the worker is killed ("timeout").
        mem_limit: bytes of address space the worker may add to what it inherited ("oom").
    """
    ctx = multiprocessing.get_context("fork")
    # What the parent built (tokenizers, vocabulary indexes) is moved out of the
    # cyclic GC's reach, as preforking servers do: otherwise a collection in the
    # worker walks every inherited object and copies each page it touches.
    gc.collect()
    gc.freeze()
    reader, writer = ctx.Pipe(duplex=False)
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = ctx.Process(target=_child, args=(writer, target, args, mem_limit, err.fileno()), daemon=True)
        proc.start()
        writer.close()
        messages, finished, timed_out = _collect(reader, proc, t0 + time_limit)
        if proc.is_alive():
            proc.kill()
        proc.join()
        wall = time.perf_counter() - t0
        err.seek(0)
        stderr_tail = err.read()[-2000:].decode("utf-8", "replace").strip()
    reader.close()
    if finished:
        return Outcome("ok", messages, "", wall)
    if timed_out:
        return Outcome("timeout", messages, f"killed after {time_limit:g}s", wall)
    return _failure(messages, proc.exitcode, stderr_tail, wall)


class Worker:
    """A long-lived forked worker that runs items one at a time, each with its own time limit.

    ``setup()`` runs once in the worker; then ``handle(send, item)`` per item,
    which returns True to ask for a fresh worker afterwards (e.g. after its
    memory grew too much). An item that times out or kills the worker gets
    that failure as its `Outcome`; the next item starts a fresh worker. Several
    workers can take turns (one per engine), each keeping its warm state.

    Example:
        >>> def double(send, n):
        ...     send({"event": "value", "n": n * 2})
        >>> w = Worker(lambda: None, double, time_limit=10, mem_limit=1 << 30)
        >>> [w.run(n).messages[0]["n"] for n in (1, 2)]
        [2, 4]
        >>> w.close()
    """

    def __init__(self, setup: Callable[[], None], handle: Callable[..., bool | None], *,
                 time_limit: float, mem_limit: int) -> None:
        self.setup, self.handle = setup, handle
        self.time_limit, self.mem_limit = time_limit, mem_limit
        self._proc: Any = None
        self._conn: Any = None
        self._err: Any = None
        self.started = 0                           # workers started so far (fresh after failures)

    def run(self, item: Any) -> Outcome:
        """Run one item in the worker (started first if there is none)."""
        if self._proc is None or not self._proc.is_alive():
            self._start()
        t0 = time.perf_counter()
        try:
            self._conn.send(item)
        except (BrokenPipeError, OSError):
            return self._failed([], t0)
        messages: list[dict] = []
        deadline = t0 + self.time_limit
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                self._stop(kill=True)
                return Outcome("timeout", messages, f"killed after {self.time_limit:g}s", time.perf_counter() - t0)
            if self._conn.poll(min(left, 0.25)):
                try:
                    msg = self._conn.recv()
                except (EOFError, OSError):
                    return self._failed(messages, t0)
                event = msg.get("event")
                if event == "item_done":
                    if msg.get("recycle"):
                        self._stop(kill=False)
                    return Outcome("ok", messages, "", time.perf_counter() - t0)
                if event == "worker_error":
                    self._stop(kill=True)
                    return Outcome(msg["kind"], messages, msg["detail"], time.perf_counter() - t0)
                messages.append(msg)
            elif not self._proc.is_alive() and not self._conn.poll(0):
                return self._failed(messages, t0)

    def close(self) -> None:
        """Stop the worker (it finishes nothing: call between items)."""
        self._stop(kill=False)

    def _start(self) -> None:
        ctx = multiprocessing.get_context("fork")
        gc.collect()
        gc.freeze()                                 # see run_isolated
        parent, child = ctx.Pipe(duplex=True)
        self._err = tempfile.TemporaryFile()
        self._proc = ctx.Process(target=_serve, args=(child, self.setup, self.handle, self.mem_limit,
                                                      self._err.fileno()), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        self.started += 1
        # an item's time limit starts once the worker is set up (its inherited memory copied:
        # a second or more under a large parent); one that dies meanwhile fails its first item
        if parent.poll(_SETUP_LIMIT_S):
            try:
                parent.recv()
            except (EOFError, OSError):
                pass

    def _failed(self, messages: list[dict], t0: float) -> Outcome:
        """The worker died inside an item: say how (exit code, stderr)."""
        self._proc.join(5)
        self._err.seek(0)
        stderr_tail = self._err.read()[-2000:].decode("utf-8", "replace").strip()
        exitcode = self._proc.exitcode
        self._stop(kill=True)
        return _failure(messages, exitcode, stderr_tail, time.perf_counter() - t0)

    def _stop(self, kill: bool) -> None:
        if self._proc is None:
            return
        if not kill:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join()
        self._conn.close()
        self._err.close()
        self._proc = self._conn = self._err = None


def _serve(conn: Any, setup: Callable[[], None], handle: Callable[..., bool | None], mem_limit: int,
           err_fd: int) -> None:
    """A `Worker`'s process: setup, then one item per message until None."""
    os.dup2(err_fd, 2)
    faulthandler.enable(sys.stderr)
    _own_inherited_memory()
    _limit_memory(mem_limit)
    setup()
    conn.send({"event": "ready"})
    while True:
        item = conn.recv()
        if item is None:
            return
        try:
            recycle = handle(conn.send, item)
        except MemoryError:
            conn.send({"event": "worker_error", "kind": "oom", "detail": "MemoryError"})
            return
        except BaseException as e:  # noqa: BLE001 - a failing item is a result, not a harness error
            detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            kind = "oom" if any(m in detail for m in _OOM_MARKERS) else "crash"
            conn.send({"event": "worker_error", "kind": kind, "detail": detail[-500:]})
            return
        conn.send({"event": "item_done", "recycle": bool(recycle)})
        if recycle:
            return


def _collect(reader: Any, proc: Any, deadline: float) -> tuple[list[dict], bool, bool]:
    messages: list[dict] = []
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return messages, False, True
        if reader.poll(min(left, 0.25)):
            try:
                msg = reader.recv()
            except (EOFError, OSError):
                return messages, False, False           # the worker died (pipe closed)
            if msg.get("event") == "done":
                return messages, True, False
            messages.append(msg)
        elif not proc.is_alive() and not reader.poll(0):
            return messages, False, False


def _failure(messages: list[dict], exitcode: int | None, stderr_tail: str, wall: float) -> Outcome:
    errors = [m for m in messages if m.get("event") == "worker_error"]
    if errors:
        return Outcome(errors[-1]["kind"], messages, errors[-1]["detail"], wall)
    why = f"exit code {exitcode}"
    if exitcode is not None and exitcode < 0:
        why = f"killed by {signal.Signals(-exitcode).name}"
    oom = any(m in stderr_tail for m in _OOM_MARKERS) or exitcode == -signal.SIGKILL
    return Outcome("oom" if oom else "crash", messages, f"{why}; stderr: {stderr_tail[-300:]}", wall)


def _child(writer: Any, target: Callable[..., None], args: tuple, mem_limit: int, err_fd: int) -> None:
    os.dup2(err_fd, 2)                         # keep native crash messages for the parent
    faulthandler.enable(sys.stderr)            # and Python's stack on a fatal signal (not the parent's stderr)
    _limit_memory(mem_limit)
    send = writer.send
    try:
        target(send, *args)
        send({"event": "done"})
    except MemoryError:
        send({"event": "worker_error", "kind": "oom", "detail": "MemoryError"})
    except BaseException as e:  # noqa: BLE001 - any failure of the case is a result, not a harness error
        detail = "".join(traceback.format_exception_only(type(e), e)).strip()
        kind = "oom" if any(m in detail for m in _OOM_MARKERS) else "crash"
        send({"event": "worker_error", "kind": kind, "detail": detail[-500:]})
    finally:
        writer.close()


_SETUP_LIMIT_S = 300.0                    # a worker's setup, before its first item's time limit starts
# madvise(2) advice (Linux 5.14+): fault in every page of a range now, writable (copying it if shared).
_MADV_POPULATE_WRITE = 23
_OWN_AT_MOST = 64 << 20


def _own_inherited_memory() -> None:
    """Copy now, outside any timer, the pages of the malloc heap (and of anonymous mappings up
    to `_OWN_AT_MOST`: allocator arenas, not large arrays) that the worker inherited
    copy-on-write from the parent (Linux; elsewhere nothing).

    The parent's setup leaves hundreds of MB of freed heap (tokenizers loaded, each engine's
    per-vocabulary tables built; a 411 MB heap with ours and llguidance set up). A worker's
    allocations reuse those free chunks, and the first write to each of their pages is a page
    fault and a copy: in forked workers that compiled a schema after each 0.3 s wait, 55-62
    faults per compile for ours (1 in the same loop in one process) and 0-3 for llguidance,
    which allocates less; ours 1.06-1.11x llguidance's TTFM at the median there, against 0.98x
    with this done first (the four-engine run's ratio did not move: bench/README). A
    server process that loaded everything itself pays no such faults, and every engine's worker
    gets the same treatment. It costs each worker's start ~0.3 s and the heap's size in memory.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        with open("/proc/self/maps") as f:
            lines = f.read().splitlines()
    except (OSError, AttributeError):
        return                                     # no /proc (macOS), no libc madvise
    for line in lines:
        fields = line.split()
        name = fields[5] if len(fields) > 5 else ""
        if fields[1] != "rw-p" or name not in ("", "[heap]"):
            continue
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if name == "[heap]" or hi - lo <= _OWN_AT_MOST:
            madvise(lo, hi - lo, _MADV_POPULATE_WRITE)   # fails harmlessly (EINVAL) before Linux 5.14


def _limit_memory(extra: int) -> None:
    """Cap the address space at what is mapped now plus `extra` bytes (Linux; elsewhere best effort)."""
    try:
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = mapped + extra if hard == resource.RLIM_INFINITY else min(mapped + extra, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):
        pass  # no /proc (macOS) or the limit cannot be set there: the time limit still holds
