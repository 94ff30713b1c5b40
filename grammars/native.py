"""Compiled copies of this package's modules, used only while they match their source.

`pip install` (editable or not) compiles the modules named in `MODULES`
(the JSON schema compiler, the grammar AST and the NFA builder) with Cython
when a C compiler is there (`setup.py`): the same Python source, translated
to C, no `.pyx` and no separate code to keep in step. That takes about a
fifth off a median schema's compile (grammar and NFA construction are plain
Python over small objects, the part of a compile that numba cannot take).
Without a compiler, or with ``CONSTRAINED_NATIVE=0`` at build or run time,
the source runs as it is: same results.

A compiled module lives in ``grammars/_compiled/<name>_<hash>/``, where the
hash is that of the source it was compiled from (its ``.py``, and the ``.pxd``
beside it where there is one: `ast.pxd` declares the node classes' C fields, `fragments.pxd` the
NFA builder's columns and tables and its hot methods, `json_schema.pxd` the schema compiler's
tables); at import, a module is
loaded from there only if its current source still hashes the same, and
from its source otherwise. So an edited file never runs stale compiled code
(in an editable install, ``pip install -e .`` again recompiles it).

This module is never compiled itself, and imports only the standard library
(`setup.py` loads it by path, before the package's dependencies exist).

Example:
    >>> compiled_dir("ast", b"x = 1\\n")
    'ast_9e26bf369911'
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["ENV", "MODULES", "PACKAGE_DIR", "checkpoint", "compiled_dir", "compiled_modules", "enabled", "install",
           "loaded", "source_bytes", "sources"]

ENV = "CONSTRAINED_NATIVE"                    # "0": build and load no compiled module
PACKAGE_DIR = Path(__file__).resolve().parent
# The modules compiled: the schema compiler and the NFA builder, where a median compile spends
# its Python time, and the string-set products (`json_string_sets`: `not` of a pattern,
# `patternProperties` groups), where the slowest schemas spend theirs (25 instead of 37 ms on
# maskbench-dev's Snowplow---sp_333), and the regex converter (`regex`, `regex_first`, `ecma`, `charsets`,
# `anchor_marks`: a third off a schema's `pattern`, 167 -> 122 us for a UUID pattern; `re`'s own
# parser stays Python). Compiled code never lets another thread take the GIL on
# its own (only the interpreter's loop does), so each of these calls `checkpoint` wherever
# work can grow with the input; the rest of the package (word tries, Python DFA, minimizer)
# stays Python (compiling the Python DFA too gained nothing measurable; `trie` counts on
# RecursionError, which compiled code never raises).
MODULES = ("ast", "utf8", "fragments", "lazy", "nfa", "nfa_arrays", "nfa_preludes", "json_schema", "json_branches",
           "json_typed", "json_number_keywords", "json_string_keywords", "json_patterns", "json_objects",
           "json_any_order",
           "json_arrays", "json_strings", "json_values", "json_checks", "json_merge", "json_negation",
           "json_disjoint", "json_refs", "json_numbers", "json_length", "json_formats", "json_doubles",
           "json_string_sets", "regex", "regex_first", "ecma", "charsets", "anchor_marks")


def sources(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """The modules that get compiled, by name."""
    return {name: package_dir / f"{name}.py" for name in MODULES}


def checkpoint() -> None:
    """Nothing, in Python: calling it from compiled code lets the interpreter hand the GIL to a
    thread that asked for it (a compile on a server's worker thread must not stall its event loop)."""


def source_bytes(name: str, package_dir: Path = PACKAGE_DIR) -> bytes:
    """What module `name` is compiled from: its ``.py``, then its ``.pxd`` if it has one (OSError if no .py)."""
    text = (package_dir / f"{name}.py").read_bytes()
    pxd = package_dir / f"{name}.pxd"
    return text + pxd.read_bytes() if pxd.is_file() else text


def compiled_dir(name: str, source: bytes) -> str:
    """The folder (under ``_compiled``) of module `name` compiled from `source`."""
    return f"{name}_{hashlib.sha256(source).hexdigest()[:12]}"


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


class _Finder:
    """Finds ``grammars.<name>`` in its fresh compiled copy, if there is one (else the normal import)."""

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001 - importlib's protocol
        package, _, name = fullname.rpartition(".")
        if package != __package__ or name not in MODULES:
            return None
        found = _fresh_binary(name)
        if found is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(found))
        return importlib.util.spec_from_file_location(fullname, found, loader=loader)


def _fresh_binary(name: str) -> Path | None:
    try:
        text = source_bytes(name)
    except OSError:
        return None
    folder = PACKAGE_DIR / "_compiled" / compiled_dir(name, text)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        binary = folder / f"{name}{suffix}"
        if binary.is_file():
            return binary
    return None


_FINDER = _Finder()


def install() -> None:
    """Put the finder first on `sys.meta_path` (once), unless ``CONSTRAINED_NATIVE=0``."""
    if enabled() and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def compiled_modules() -> dict[str, bool]:
    """Per module of the package, whether a compiled copy matching its source is there."""
    return {name: _fresh_binary(name) is not None for name in sources()}


def loaded() -> list[str]:
    """The modules of the package imported so far from a compiled copy."""
    out = []
    for name in sources():
        module = sys.modules.get(f"{__package__}.{name}")
        loader = getattr(module, "__loader__", None)
        if isinstance(loader, importlib.machinery.ExtensionFileLoader):
            out.append(name)
    return out
