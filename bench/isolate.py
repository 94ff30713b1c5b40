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

__all__ = ["Outcome", "run_isolated", "run_sequence"]

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


def run_sequence(target: Callable[..., None], items: list, *, time_limit: float, mem_limit: int) -> list[Outcome]:
    """Run ``target(send, todo)`` in one long-lived forked worker over `items`; one `Outcome` per item.

    `todo` is the list of (index, item) pairs still to do. The target sends
    ``{"event": "item_start", "i": k}`` before item k and ``{"event": "item_done", "i": k}``
    after it; every message in between belongs to item k. Each item gets
    `time_limit` seconds from its start. An item that times out or kills the
    worker gets that failure; a fresh worker then goes on with the next item.
    The target may also return early (e.g. after its memory grew too much): a
    fresh worker picks up where it stopped.

    Example:
        >>> def work(send, todo):
        ...     for k, n in todo:
        ...         send({"event": "item_start", "i": k})
        ...         send({"event": "value", "n": n * 2})
        ...         send({"event": "item_done", "i": k})
        >>> [o.messages[0]["n"] for o in run_sequence(work, [1, 2], time_limit=10, mem_limit=1 << 30)]
        [2, 4]
    """
    ctx = multiprocessing.get_context("fork")
    gc.collect()
    gc.freeze()
    outcomes: list[Outcome | None] = [None] * len(items)
    k = 0
    while k < len(items):
        before = k
        todo = list(enumerate(items))[k:]
        reader, writer = ctx.Pipe(duplex=False)
        with tempfile.TemporaryFile() as err:
            proc = ctx.Process(target=_child, args=(writer, target, (todo,), mem_limit, err.fileno()), daemon=True)
            proc.start()
            writer.close()
            k = _collect_sequence(reader, proc, time_limit, outcomes, k)
            if proc.is_alive():
                proc.kill()
            proc.join()
            err.seek(0)
            stderr_tail = err.read()[-2000:].decode("utf-8", "replace").strip()
        reader.close()
        if k < len(items) and outcomes[k] is not None and outcomes[k].status == "?":
            # the worker died inside item k: say how
            failed = outcomes[k]
            outcomes[k] = _failure(failed.messages, proc.exitcode, stderr_tail, failed.wall_s)
            k += 1
        elif k == before and k < len(items) and outcomes[k] is None:
            # died before starting item k (e.g. in its warm-up): charge it there, so the loop moves on
            outcomes[k] = _failure([], proc.exitcode, stderr_tail, 0.0)
            k += 1
    return [o if o is not None else Outcome("crash", [], "not run") for o in outcomes]


def _collect_sequence(reader: Any, proc: Any, time_limit: float, outcomes: list, k: int) -> int:
    """Gather one worker's messages into `outcomes` from item k on; returns the next item to run.

    An item the worker failed inside is left as Outcome("?") for the caller
    (which knows the exit code), or set to "timeout" here.
    """
    messages: list[dict] = []
    started = deadline = None
    while True:
        if started is not None and time.perf_counter() >= deadline:
            outcomes[k] = Outcome("timeout", messages, f"killed after {time_limit:g}s", time.perf_counter() - started)
            return k + 1
        wait = 0.25 if deadline is None else max(0.0, min(deadline - time.perf_counter(), 0.25))
        if reader.poll(wait):
            try:
                msg = reader.recv()
            except (EOFError, OSError):
                break                                       # the worker died (pipe closed)
            event = msg.get("event")
            if event == "item_start":
                k, messages, started = msg["i"], [], time.perf_counter()
                deadline = started + time_limit
            elif event == "item_done":
                outcomes[k] = Outcome("ok", messages, "", time.perf_counter() - started)
                k, started, deadline = k + 1, None, None
            elif event == "done":
                return k
            elif event == "worker_error" and started is not None:
                outcomes[k] = Outcome(msg["kind"], messages, msg["detail"], time.perf_counter() - started)
                return k + 1
            else:
                messages.append(msg)
        elif not proc.is_alive() and not reader.poll(0):
            break
    if started is None:
        return k                                            # it stopped between items: go on from there
    outcomes[k] = Outcome("?", messages, "", time.perf_counter() - started)
    return k


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
