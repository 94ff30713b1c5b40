"""Loading the native DFA's numba kernels once per process, and their warm-up.

`load_kernels` gathers the kernels of `constrained.dfa_kernels` and
`constrained.walk_kernels` (with their status codes), installs the NFA's
(`constrained.need_kernel`) on `grammars.nfa.NFA`, and runs each kernel once
(`_warm_up`) so that numba loads it from its on-disk cache now, not in the
middle of some request's compile or first mask. Without numba, or with
``CONSTRAINED_JIT=0``, it gives None and `constrained.dfa_jit` falls back to
the Python DFA.

Example:
    >>> kernels = load_kernels()
    >>> kernels is None or callable(kernels.walk_native)
    True
"""

from __future__ import annotations

import os
import threading
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np

from grammars.nfa import FREE, NFA

__all__ = ["load_kernels"]

_lock = threading.Lock()
_kernels: Any = None
_loaded = False


def load_kernels() -> Any:
    """The kernels of `dfa_kernels` and `walk_kernels` (with their status codes), or None
    (numba missing, or ``CONSTRAINED_JIT=0``)."""
    global _kernels, _loaded
    if _loaded:
        return _kernels
    with _lock:
        if not _loaded:
            if os.environ.get("CONSTRAINED_JIT", "1") != "0":
                try:
                    from constrained import dfa_kernels, need_kernel, walk_kernels
                    _kernels = SimpleNamespace(**{name: getattr(module, name) for module in (dfa_kernels, walk_kernels)
                                                  for name in module.__all__})
                    _kernels.compute_need = need_kernel.compute_need_native
                    _kernels.byte_classes = need_kernel.byte_classes_native
                    _kernels.call_returns = need_kernel.call_returns_native
                    _kernels.classes_and_returns = need_kernel.classes_and_returns_native
                except ImportError:
                    pass
            _loaded = True                              # before the warm-up, which builds a JitDFA
            if _kernels is not None:
                try:
                    NFA.need_kernel = staticmethod(_kernels.compute_need)
                    NFA.need_columns_kernel = staticmethod(need_kernel.need_from_columns)
                    NFA.csr_kernel = staticmethod(need_kernel.csr_from_columns)
                    NFA.finish_kernel = staticmethod(need_kernel.finish_from_columns)
                    _warm_up()
                except Exception as e:  # noqa: BLE001 - a kernel that fails to build must not break compiling
                    warnings.warn(f"constrained: compiled DFA kernels unavailable ({type(e).__name__}: {e}); "
                                  "using the Python DFA", RuntimeWarning, stacklevel=2)
                    _kernels = None
                    NFA.need_kernel = NFA.need_columns_kernel = NFA.csr_kernel = NFA.finish_kernel = None
    return _kernels


def _warm_up() -> None:
    """Load every kernel (from numba's on-disk cache) now, so that no compile or first mask pays for it."""
    from constrained.dfa_jit import JitDFA      # (which imports this module)
    from constrained.vocab_trie import VocabTrie
    from grammars.ast import Grammar, Ref, literal, optional, seq

    # nested parentheses: enough states, stacks and interned sets to grow every table once
    dfa = JitDFA(Grammar({"start": seq(literal(b"("), optional(Ref("start")), literal(b")"))}), max_depth=48)
    dfa.explore()
    JitDFA(Grammar({"start": literal(b"x")}))       # no call edges: `byte_classes` alone
    a = dfa.nfa.arrays                              # a lazy rule's new edges: `call_returns` alone
    _kernels.call_returns(a.call_dst, a.call_op, FREE, a.eps_ptr, a.eps_dst, a.edge_ptr, a.call_ptr, dfa.nfa.is_end)
    for status in (_kernels.GROW_CFG_HT, _kernels.GROW_STACK_HT):
        dfa._grow(status)                           # loads `rehash`
    inner = dfa.walk(dfa.initial, b"(")
    dfa.equivalent(dfa.initial, inner)
    dfa.intern_frames(False, [(dfa.nfa.rule_start[0], [])])     # loads `intern_frames` (an existing state)
    trie = VocabTrie.build([b"[", b"[1", b"12]", b"]"])
    dfa.walk_tokens(trie, np.array([-1], np.int32), np.array([dfa.initial], np.int32), False)
    from constrained import fsm_jit                 # the slice views' level check (`level_native`)

    moves = fsm_jit.flatten_moves([[(0, np.array([40]))]])
    first = np.array([40], np.int64)
    dfa.level_check(dfa.initial, True, 40, moves, first, np.zeros(3 + fsm_jit.META_SIZE + fsm_jit.TAIL, np.int32))
    if _kernels.view_native is not None:            # ... and their chain (`view_rows`)
        _kernels.view_native(int(dfa.initial), 40, moves, np.array([0, len(moves)], np.int64), first,
                             np.array([0, 1], np.int64), np.zeros(1, np.int64), 0, 1, dfa.byte_class, dfa._N,
                             dfa._S, dfa._W, np.zeros(3 + fsm_jit.META_SIZE + fsm_jit.TAIL, np.int32),
                             np.empty((2, 1), np.int32), np.empty(2, np.int64), np.empty(2, np.int64),
                             np.zeros(256, np.bool_))
