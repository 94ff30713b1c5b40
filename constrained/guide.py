"""`Guide`: a small mutable cursor over an immutable `TokenFSM`.

One guide per sequence.  It holds the stack of DFA states visited (one per
token advanced), which makes `rollback` an O(n) pop and `fork` a list copy;
all the heavy, memoized data stays in the shared `TokenFSM`.

Finished guides: after EOS was advanced, `is_finished()` is True and
`allowed_token_ids()` / `fill_bitmask` allow the EOS ids *only* (advancing EOS
again keeps the guide finished).  We chose EOS-only over an empty mask so that
a finished row of a batch never gets an all-masked (NaN-producing) logit row.

Example:
    >>> from grammars.regex import regex_grammar
    >>> from grammars.dfa import LazyDFA
    >>> from types import SimpleNamespace
    >>> from constrained.token_fsm import TokenFSM
    >>> v = SimpleNamespace(token_bytes=(b"a", b"b", b"ab", None), eos_token_ids=(3,), size=4, fingerprint="guide-doc")
    >>> g = TokenFSM(LazyDFA(regex_grammar("ab?")), v).guide()
    >>> g.allowed_token_ids().tolist(), g.advance(1), g.advance(0)
    ([0, 2], False, True)
    >>> g.allowed_token_ids().tolist(), g.advance(3), g.is_finished()
    ([1, 3], True, True)
    >>> g.rollback(1); g.is_finished()
    False
"""

from __future__ import annotations

import operator

import numpy as np

from constrained.token_fsm import FINISHED, TokenFSM

__all__ = ["Guide"]


_INT32 = np.dtype(np.int32)


class Guide:
    """Cursor over a `TokenFSM`: advance, rollback, fork, masks.

    Example:
        >>> # see the module docstring
    """

    __slots__ = ("fsm", "_states")

    def __init__(self, fsm: TokenFSM, states: list[int] | None = None) -> None:
        self.fsm = fsm
        self._states = [fsm.initial] if states is None else states

    @property
    def state(self) -> int:
        """Current DFA state (`FINISHED` after EOS)."""
        return self._states[-1]

    @property
    def num_tokens(self) -> int:
        """Tokens advanced so far (what `rollback` can undo)."""
        return len(self._states) - 1

    def allowed_token_ids(self) -> np.ndarray:
        """Sorted int32 ids allowed next; EOS included iff the text is a complete match. Do not modify."""
        return self.fsm.allowed_token_ids(self._states[-1])

    def advance(self, token_id: int) -> bool:
        """Read one token. Returns False, leaving the guide unchanged, if it is not allowed."""
        try:
            tok = operator.index(token_id)         # ints, numpy integers, integer 0-d arrays
        except TypeError:
            item = getattr(token_id, "item", None)  # framework scalars (an mx.array of shape ())
            try:
                tok = operator.index(item()) if item is not None else None
            except (TypeError, ValueError):
                tok = None                         # 51.9 is not token 51
            if tok is None:
                return False
        nxt = self.fsm.next_state(self._states[-1], tok)
        if nxt == -1:
            return False
        self._states.append(nxt)
        return True

    def is_finished(self) -> bool:
        """True once EOS was advanced, or when no token other than EOS can follow."""
        state = self._states[-1]
        return state == FINISHED or not self.fsm.masks(state).can_continue

    def is_accepting(self) -> bool:
        """True when the text so far is a complete match (or EOS was read)."""
        return self.fsm.is_accepting(self._states[-1])

    def fork(self) -> "Guide":
        """An independent copy of this cursor (shares the FSM)."""
        return Guide(self.fsm, list(self._states))

    def rollback(self, n: int = 1) -> None:
        """Undo the last `n` advanced tokens.

        Raises:
            ValueError: `n` is negative or more than `num_tokens`.
        """
        if not 0 <= n <= len(self._states) - 1:
            raise ValueError(f"cannot roll back {n!r} tokens: the guide has advanced {len(self._states) - 1}")
        if n:
            del self._states[-n:]

    def reset(self) -> None:
        """Go back to the initial state."""
        del self._states[1:]

    def fill_bitmask(self, buf) -> None:
        """Write the allowed-token mask into `buf`, an int32 row of ceil(vocab.size / 32) words.

        Bit i of word i // 32 is set iff token i is allowed (xgrammar's layout).
        `buf` is a numpy array or a CPU torch tensor.

        Raises:
            ValueError: `buf` is not an int32 row of at least that many words.
        """
        mask = self.fsm.bitmask(self._states[-1])
        if type(buf) is np.ndarray and buf.dtype is _INT32 and buf.ndim == 1 and len(buf) >= len(mask):
            buf[: len(mask)] = mask               # a plain memcpy of ~16 KB for 128k tokens
            return
        dtype, shape = str(getattr(buf, "dtype", type(buf).__name__)), tuple(getattr(buf, "shape", ()))
        if not dtype.endswith("int32") or len(shape) != 1 or shape[0] < len(mask):
            raise ValueError(f"fill_bitmask needs an int32 row of at least {len(mask)} words "
                             f"(ceil(vocab size / 32)), got {dtype} of shape {shape}")
        view = buf.numpy() if hasattr(buf, "numpy") else buf   # a CPU torch tensor: its numpy view
        if not isinstance(view, np.ndarray):
            raise TypeError(f"fill_bitmask writes into a numpy array or a CPU torch tensor, got {type(buf).__name__}")
        view[: len(mask)] = mask

    def forced_tokens(self) -> tuple[int, ...]:
        """Token ids of the bytes forced from here (empty when several continuations are possible)."""
        state = self._states[-1]
        return () if state == FINISHED else self.fsm.forced_tokens(state)
