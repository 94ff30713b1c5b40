"""The `constrained` command line's inputs and outputs: one-line usage
errors, text and file checks, and batch mode's output, written as each
request finishes and kept when a signal interrupts the run (see `constrained.cli`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

__all__ = ["UsageError", "say", "check_text", "read_utf8", "read_lines", "prompt_of", "Interrupted",
           "signals_interrupt", "BatchOutput", "BadLine"]


class UsageError(Exception):
    """Bad input from the user: reported on one line, exit status 2."""


def say(line: str) -> None:
    if sys.stderr is not None:
        print(line, file=sys.stderr)


def check_text(text: str, where: str) -> None:
    """A prompt must be text: no lone surrogates (bytes that were not UTF-8 on the command line, or `\\udc80`)."""
    for i, ch in enumerate(text):
        if "\ud800" <= ch <= "\udfff":
            what = f"byte {ord(ch) - 0xDC00:#04x}" if ch >= "\udc80" and ord(ch) <= 0xDCFF else f"lone surrogate U+{ord(ch):04X}"
            raise UsageError(f"{where} is not valid text: {what} at character {i}; pass UTF-8 text "
                             "(e.g. convert the file with iconv -t utf-8)")


def read_utf8(path: Path, where: str) -> str:
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise UsageError(f"{where}: {path} is not UTF-8: byte {data[e.start]:#04x} at offset {e.start} (line {line}); "
                         "save it as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None


def read_lines(path: str) -> list[tuple[int, str]]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--input: no such file: {path}")
    lines = [(i, line) for i, line in enumerate(read_utf8(p, "--input").splitlines(), 1) if line.strip()]
    if not lines:
        raise UsageError(f"--input: {path} has no requests")
    return lines


def prompt_of(line: str) -> Any:
    """The "prompt" of a JSONL line, when it has one, for its error row."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    prompt = obj.get("prompt") if isinstance(obj, dict) else None
    if not isinstance(prompt, str):
        return None
    try:
        check_text(prompt, "")
    except UsageError:
        return None                                # not writable as UTF-8: the error says why
    return prompt


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM during a batch; `code` is the exit status (130 or 143)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Turn SIGTERM (and SIGINT) into `Interrupted` while generating, so the rows done are kept."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class BatchOutput:
    """Batch rows written as each request finishes, flushed, to a temporary file
    beside the output; `finish` rewrites it in input order and renames it into
    place. Interrupted, the rows done so far (in completion order) are renamed
    into place and the exit status is 130 (SIGINT) or 143 (SIGTERM)."""

    def __init__(self, path: str | None, items: list[tuple[int | None, Any]]) -> None:
        self.path, self.items, self.rows = path, items, {}
        self.tmp, self.done = None, False
        if path is not None:
            target = Path(path)
            if target.is_dir():
                raise UsageError(f"--output: {path} is a directory")
            try:
                fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent or ".")
            except OSError as e:
                raise UsageError(f"--output: cannot write beside {path}: {e.strerror or e}") from None
            self.tmp, self.file = Path(name), os.fdopen(fd, "w", encoding="utf-8")
        for k, (lineno, item) in enumerate(items):
            if isinstance(item, BadLine):
                self.write(k, None)

    def __enter__(self) -> "BatchOutput":
        return self

    def write(self, k: int, samples: list[Any] | None) -> None:
        lineno, item = self.items[k]
        if samples is None:
            row = {"line": lineno, "prompt": item.prompt, "samples": [], "error": item.error}
        else:
            prompt = item.prompt if isinstance(item.prompt, str) else list(item.prompt)
            row = {"line": lineno, "prompt": prompt, "samples": [s.to_dict() for s in samples]}
        self.rows[k] = text = json.dumps(row, ensure_ascii=False) + "\n"
        if self.tmp is not None:
            self.file.write(text)
            self.file.flush()

    def finish(self) -> None:
        """Every row is in: write them in input order."""
        self.done = True
        if self.tmp is None:
            sys.stdout.write("".join(self.rows[k] for k in sorted(self.rows)))
            return
        self.file.seek(0)
        self.file.truncate()
        self.file.write("".join(self.rows[k] for k in sorted(self.rows)))
        self._close()

    def _close(self) -> None:
        self.file.close()
        os.replace(self.tmp, self.path)
        self.tmp = None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if self.tmp is not None:                   # not finished: keep what is done
            self._close()
        elif self.path is None and not self.done:
            sys.stdout.write("".join(self.rows[k] for k in sorted(self.rows)))
        if isinstance(exc, KeyboardInterrupt):
            where = self.path or "stdout"
            say(f"constrained: interrupted: {len(self.rows)} of {len(self.items)} rows written to {where}")
            raise Interrupted(getattr(exc, "code", 130)) from None
        return False


@dataclass
class BadLine:
    """An --input line that is not a valid request: written as an error row, the other lines go on."""

    prompt: Any
    error: str
