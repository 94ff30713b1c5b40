"""The token-level FSM: DFA state -> allowed token ids, next states, bitmask.

A `TokenFSM` is immutable from the outside: it maps each byte-DFA state to the
tokens readable from it.  Nothing is precomputed per state: the first time a
state is reached, one vectorized trie walk (see `vocab_trie`) answers it, and
the answer is memoized as sorted ids + next states + a packed bitmask ready to
copy.  "Inside a string" states use a precomputed slice (see `slices`) and
walk only the small complement trie.

Example:
    >>> from grammars.ast import Grammar, literal, alt
    >>> from grammars.dfa import LazyDFA
    >>> from types import SimpleNamespace
    >>> v = SimpleNamespace(token_bytes=(b"a", b"b", b"ab", None), eos_token_ids=(3,), size=4, fingerprint="doc")
    >>> fsm = TokenFSM(LazyDFA(Grammar({"start": alt(literal(b"ab"), literal(b"b"))})), v)
    >>> fsm.allowed_token_ids(fsm.initial).tolist()
    [0, 1, 2]
    >>> fsm.allowed_token_ids(fsm.next_state(fsm.initial, 1)).tolist()
    [3]
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

from constrained.errors import IncompatibleVocabularyError
from constrained.key_twins import KeyTwins
from constrained.slice_view import find_view
from constrained.slices import ids_bitmask
from constrained.state_masks import EMPTY as _EMPTY
from constrained.state_masks import KeyTwinMasks, StateMasks, TwinMasks
from constrained.twins import CounterTwins
from constrained.vocab_index import VocabIndex
from constrained.work import WORK

if TYPE_CHECKING:
    from constrained.guide import Guide
    from constrained.vocab import Vocabulary
    from grammars.json_values import WhitespacePolicy

__all__ = ["TokenFSM", "StateMasks", "FINISHED"]

# Pseudo-state after EOS was read.
FINISHED = -3
# Forced byte strings longer than this are cut (a safety bound, not a limit users meet).
_MAX_FORCED_BYTES = 4096
# `TokenFSM.next_state` memoizes at most this many transitions (`_MOVE_BYTES` each, counted in `held_bytes`).
_MAX_MOVES = 1 << 12
_MOVE_BYTES = 160
# Masks are shared between twins (`constrained.twins`) once the DFA has this many states: a
# count's states add up fast (~10 a character of a string), a schema's first masks make few.
_TWIN_MIN_STATES = 2048


_Guide = None                                 # `constrained.guide.Guide`, imported on first use


class TokenFSM:
    """Token-level view of a byte DFA over a vocabulary, computed lazily.

    Args:
        dfa: a `grammars.dfa.LazyDFA` (or anything with its interface).
        vocab: the `Vocabulary` whose ids the masks are over.
        use_slices: disable to measure the slice optimization.

        leading_gap: the `WhitespacePolicy` of a JSON document's leading gap, when the
            constraint is one (gap, then a value, which never starts with whitespace):
            the first mask then skips the vocabulary's whitespace runs (`lead_gap`).

    Raises:
        IncompatibleVocabularyError: no token can start a match (and the empty
            string is not one).

    Example:
        >>> # see the module docstring
    """

    # states that differ only in counts far from their bounds share one mask (`constrained.twins`)
    share_counts = True
    # the key states of an `any_order` object that differ only in the members taken share their
    # masks of the tokens without a quote (`constrained.key_twins`)
    share_keys = True

    def __init__(self, dfa, vocab: "Vocabulary", use_slices: bool = True,
                 leading_gap: "WhitespacePolicy | None" = None) -> None:
        self.dfa = dfa
        self.vocab = vocab
        self.index = VocabIndex.for_vocab(vocab)
        self.initial = int(dfa.initial)
        self._use_slices = use_slices
        # a JSON document's leading whitespace, walked the short way in the first mask (`lead_gap`)
        self._lead = self.index.gap_starts(leading_gap) if leading_gap is not None else None
        self._memo: dict[int, StateMasks] = {}
        self._held = 0                            # bytes of the memoized tables when computed (see `held_bytes`)
        self.report: tuple = ()                   # a schema's compile report (`grammars.errors.SchemaNote`s)
        self._steps: dict = {}                    # per-state slice character steps (see slice_view)
        self._moves: dict[int, int] = {}          # state << 32 | token -> `next_state`, the transitions taken
        self._lock = threading.RLock()
        # counter loops whose far counts share masks (`constrained.twins`); None: not built yet
        self._twins: CounterTwins | None = None
        self._twin_of: dict[tuple, tuple[int, StateMasks]] = {}   # a class of states -> its first, and its masks
        # `any_order` keys (`constrained.key_twins`): None, not built yet; False, none to share
        self._keys: KeyTwins | None | bool = None
        self._key_of: dict[tuple, tuple[int, StateMasks]] = {}    # a class of key states -> its first, its masks
        self._finished = StateMasks(_EMPTY, _EMPTY, None, True, self.index.eos_bitmask,
                                    allowed=self.index.eos_ids, forced=())
        self._check_initial()

    # -- public queries -----------------------------------------------------

    def masks(self, state: int) -> StateMasks:
        """The memoized `StateMasks` of `state` (computed on first call)."""
        m = self._memo.get(state)
        if m is None:
            if state == FINISHED:
                return self._finished
            with self._lock:                      # the DFA's lazy tables are not thread-safe
                m = self._memo.get(state)
                if m is None:
                    with WORK:
                        m = self._twin_masks(state)
                    self._memo[state] = m
                    self._held += m.nbytes
        return m

    def allowed_token_ids(self, state: int) -> np.ndarray:
        """Sorted int32 ids allowed from `state`, EOS included iff accepting."""
        m = self.masks(state)
        if m.allowed is None:
            m.allowed = self._materialize(m)
        return m.allowed

    def mask_key(self, state: int) -> int:
        """The state whose mask `state` has: itself, or the first state of its class (see
        `constrained.twins`), so that caches of masks per state keep one entry for a class."""
        if state < 0:
            return state
        m = self.masks(state)
        return m.source if type(m) is TwinMasks else state

    def bitmask(self, state: int) -> np.ndarray:
        """Packed int32 mask (bit i of word i // 32 = token i allowed). Do not modify."""
        return self.masks(state).bitmask

    def next_state(self, state: int, token_id: int) -> int:
        """State after `token_id`; `FINISHED` after EOS; -1 when not allowed.

        Transitions taken are memoized (a dict hit instead of a few numpy calls:
        in a transformers loop, whose forward pass leaves the caches cold, one
        advance took ~45 us), at most `_MAX_MOVES` of them, keyed by one int:
        a dict of ints only is not tracked by the cyclic GC, whose full passes
        over many cached FSMs would otherwise visit every entry.
        """
        if not 0 <= token_id < 1 << 32:
            return self._next_state(state, token_id)
        key = state << 32 | token_id
        nxt = self._moves.get(key)
        if nxt is not None:
            return nxt
        nxt = self._next_state(state, token_id)
        if len(self._moves) >= _MAX_MOVES:
            self._moves = {}                      # rare: a fresh start beats per-entry LRU bookkeeping
        self._moves[key] = int(nxt)
        return nxt

    def _next_state(self, state: int, token_id: int) -> int:
        m = self.masks(state)
        if not 0 <= token_id < self.index.size or not (int(m.bitmask[token_id >> 5]) >> (token_id & 31)) & 1:
            return -1
        if token_id in self.index.eos_set:
            return FINISHED
        if m.view is not None and m.view.allows(token_id):
            return m.view.next_state(token_id)
        kind = type(m)
        if kind is TwinMasks:
            return self._twin_next(m, token_id)
        if kind is KeyTwinMasks:
            return self._key_twin_next(m, token_id)
        return m.lookup(token_id)

    def is_accepting(self, state: int) -> bool:
        return state == FINISHED or self.masks(state).accepting

    def matches(self, data: bytes) -> bool:
        """Whether `data` is a complete match, read byte by byte (a text cut mid-token, say)."""
        with self._lock:                          # the walk may expand DFA rows
            return bool(self.dfa.matches(data))

    def transitions(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """Every allowed non-EOS token of `state` and the state after it, as ``(ids, next_states)``, ids ascending.

        `next_state` for all of them at once: the slice view's tokens are read off its
        rows in one indexing, the others come from the memoized pairs.
        """
        if state == FINISHED:
            return _EMPTY, _EMPTY
        ids, nxt = self._all_pairs(self.masks(state))
        not_eos = ~np.isin(ids, self.index.eos_ids)
        return ids[not_eos], nxt[not_eos]

    def forced_tokens(self, state: int) -> tuple[int, ...]:
        """Token ids spelling the bytes forced from `state` (longest match first)."""
        m = self.masks(state)
        if m.forced is None:
            with self._lock:                      # it may expand DFA rows
                m.forced = self._forced(state)
        return m.forced

    def guide(self) -> "Guide":
        """A fresh cursor at the initial state."""
        global _Guide
        if _Guide is None:                    # (`constrained.guide` imports this module)
            from constrained.guide import Guide as _Guide
        return _Guide(self)

    @property
    def num_states_visited(self) -> int:
        return len(self._memo)

    @property
    def nbytes(self) -> int:
        """Bytes held by the memoized per-state tables (not the shared vocabulary index)."""
        return sum(m.nbytes for m in list(self._memo.values()))

    @property
    def held_bytes(self) -> int:
        """About `nbytes + dfa.nbytes`, in O(1): the per-state tables as first
        computed (id lists materialized later are not counted), the DFA and the memoized transitions."""
        return self._held + int(self.dfa.nbytes) + _MOVE_BYTES * len(self._moves)

    # -- computation --------------------------------------------------------

    def _compute(self, state: int) -> StateMasks:
        dfa = self.dfa
        if state < 0:
            return StateMasks(_EMPTY, _EMPTY, None, False, np.zeros(self.index.n_words, np.int32),
                              allowed=_EMPTY, forced=())
        native = getattr(dfa, "walk_tokens", None)      # a JitDFA walks and expands in one kernel
        # a document's start: its leading whitespace the short way, no slice looked for. 10 of
        # the dev corpus' 564 starts had a slice view (number and any-value roots), and the walk
        # is faster there too (an integer root's first mask and compile: 226 -> 150 us)
        lead = native is not None and self._lead is not None and state == self.initial
        if not lead:                 # (the lead walk's kernel expands the row itself: one call less)
            dfa.expand(np.array([state], dtype=np.int32))
        accepting = bool(dfa.is_accepting(state))
        view = None if lead or not self._use_slices else find_view(self.dfa, self.index, state, self._steps)
        walk_args = (dfa.byte_class, lambda: dfa.table, dfa.expand)
        trie = self.index.trie
        if lead:
            ids, nxt, lead_bits = self._walk_lead(state, native)
        elif view is None:
            ids, nxt = trie.walk(state, *walk_args, native=native)
        else:
            # nodes above the exits are inside the slice, in known states: start at the exits;
            # tokens starting with an excluded byte are walked from their root
            nodes, before = view.exit_frontier()
            if view.excluded is not None:
                roots = trie.root_of_byte[np.flatnonzero(view.excluded)]
                roots = roots[roots >= 0]
                nodes = np.concatenate((nodes, roots))
                before = np.concatenate((before, np.full(len(roots), state, dtype=before.dtype)))
            if native is not None:                  # steps over each node's byte, then walks on
                ids, nxt = native(trie, nodes, before, 2)
            else:
                dfa.expand(np.unique(before))
                starts = trie.step(before, nodes, *walk_args)
                ids, nxt = trie.walk_from(nodes, starts, *walk_args)
        if lead:
            bitmask = lead_bits.view(np.int32)
        else:
            base = view.bitmask() if view is not None else None
            bitmask = ids_bitmask(ids, self.index.n_words, base)
        if accepting:
            bitmask |= self.index.eos_bitmask
        return StateMasks(ids, nxt, view, accepting, bitmask, sorted=False)

    def _twin_masks(self, state: int) -> StateMasks:
        """`_compute(state)`, or the masks of an earlier state of its class (`constrained.twins`,
        `constrained.key_twins`)."""
        dfa = self.dfa
        if self._keys is not False and state >= 0 and state != self.initial:   # (not in a first mask)
            keys = self._key_twins(dfa)
            key = keys.key(state) if keys is not None else None
            if key is not None:
                hit = self._key_of.get(key)
                if hit is None:
                    m = self._compute(state)
                    self._key_of[key] = (state, m)
                    return m
                return self._key_twin(hit, state)
        twins = self._twins
        if not self.share_counts or state < 0 or dfa.num_states < _TWIN_MIN_STATES or not self._counts_far(dfa):
            return self._compute(state)         # (a schema's first masks pay nothing for this)
        if twins is None or twins.num_states != dfa.nfa.num_states:   # (a lazy rule was built since)
            twins = self._twins = CounterTwins(dfa, self.index.longest_token)
        key = twins.key(state) if twins.usable else None
        if key is None:
            return self._compute(state)
        hit = self._twin_of.get(key)
        if hit is None:
            twin = self._compute(state)
            self._twin_of[key] = (state, twin)
            return twin
        source, twin = hit
        if twin.allowed is None:
            twin.allowed = self._materialize(twin)
        return TwinMasks(twin, source, state)

    def _key_twins(self, dfa) -> KeyTwins | None:
        """The `KeyTwins` of the DFA as its NFA is now (built again, keeping what it found, when a
        lazy rule grew it); None while it has no key to share; `_keys` False for good where
        nothing can be shared (not asked, a DFA whose configurations are not read)."""
        keys = self._keys
        if keys is None or keys.num_states != dfa.nfa.num_states:
            if not self.share_keys or getattr(dfa, "_stk_ret", None) is None:
                self._keys = False
                return None
            if not getattr(dfa.nfa, "key_entries", None):
                return None                       # (a lazy rule may bring one later)
            keys = self._keys = KeyTwins(dfa, keys or None)
        return keys if keys.usable else None

    def _key_twin(self, hit: tuple[int, StateMasks], state: int) -> KeyTwinMasks:
        """The masks of key state `state`, whose class's first state and masks are `hit`: that
        mask for the tokens without a quote, and the quote tokens walked from `state`."""
        source, twin = hit
        dfa = self.dfa
        qtrie, qmask = self.index.quote_tokens()
        ids, nxt = qtrie.walk(state, dfa.byte_class, lambda: dfa.table, dfa.expand,
                              native=getattr(dfa, "walk_tokens", None))
        base = twin.bitmask & ~qmask              # (a key state is never accepting: no EOS bit)
        return KeyTwinMasks(ids, nxt, ids_bitmask(ids, self.index.n_words, base), state, source)

    def _key_twin_next(self, m: KeyTwinMasks, token: int) -> int:
        """The state after `token` (allowed) from a key twin, walked from the state itself."""
        data = self.index.token_bytes[token]
        with self._lock:                          # the DFA's tables grow
            return self.dfa.walk(m.state, data) if data else -1

    def counter_twins(self) -> CounterTwins | None:
        """The `CounterTwins` of the DFA, built now if it is not yet (None for a DFA whose
        configurations it cannot read, the Python `LazyDFA`). For the budget planner's lower
        bounds (`CounterTwins.min_bytes`), which hold for the NFA it was built for even after
        lazy rules grew it (their states are not attributed: no bound); masks share only past
        the gates of `_twin_masks`, which builds it again for the grown NFA."""
        if getattr(self.dfa, "_stk_ret", None) is None:
            return None
        with self._lock:
            if self._twins is None:
                self._twins = CounterTwins(self.dfa, self.index.longest_token)
            return self._twins

    def _twin_next(self, m: "TwinMasks", token: int) -> int:
        """The state after `token` (allowed) from a twin: its twin's next state with the counts
        moved (`CounterTwins.moved`: one new DFA state, no row computed), or, where they cannot
        be, the token's bytes walked from the state itself."""
        with self._lock:                          # the DFA's tables grow
            twins = self._twins
            if m.shift is False or m.shift[0] is not twins:   # (rebuilt: a lazy rule grew the NFA)
                m.shift = (twins, twins.shift(m.source, m.state) if twins is not None else None)
            delta = m.shift[1]
            if delta is not None:
                after = self.next_state(m.source, token)
                if after >= 0 and self._twins is twins:
                    moved = twins.moved(after, delta)
                    if moved is not None:
                        return moved
            data = self.index.token_bytes[token]
            return self.dfa.walk(m.state, data) if data else -1

    def _counts_far(self, dfa) -> bool:
        """Whether a counter (a loop's or a `Counted` string's, not an `AnyOrder`'s set) has
        counted past a token's length, which twins need (`constrained.twins`): the DFA kernels
        keep the largest count made. Schemas whose counts stay small (a number's digits, most
        strings) build nothing, nor do `any_order` objects, whose sets of members taken look
        like large counts on the stacks (their twins were built, and built again at every
        lazy rule, for nothing: 113 ms masks on Github_hard---o40454)."""
        counts = getattr(dfa, "_counts", None)
        return counts is not None and int(counts[6]) > self.index.longest_token + 1

    def _all_pairs(self, m: StateMasks) -> tuple[np.ndarray, np.ndarray]:
        """Every allowed id of `m` (EOS aside) and its next state, ids ascending: its own
        pairs and its slice view's tokens (a twin's: computed from its state)."""
        if type(m) is TwinMasks:
            if not m._sorted:
                m._pairs = self._all_pairs(self._compute(m.state))
                m._sorted = True
            return m._pairs
        if type(m) is KeyTwinMasks:
            if m._full is None:
                with self._lock:
                    m._full = self._all_pairs(self._compute(m.state))
            return m._full
        ids, nxt = m.ids, m.next
        if m.view is not None:
            view, sl = m.view, m.view.slice
            bits = np.unpackbits(view.bitmask().view(np.uint8), bitorder="little")[: self.index.size]
            vids = np.flatnonzero(bits).astype(np.int32)
            vnext = view.rows[view.row_index(sl.complete[vids].astype(np.int64)), sl.end[vids]].astype(np.int32)
            keep = ~np.isin(ids, vids)                # `next_state` asks the view first
            ids, nxt = np.concatenate([ids[keep], vids]), np.concatenate([nxt[keep], vnext])
            order = np.argsort(ids, kind="stable")
            ids, nxt = ids[order], nxt[order]
        return ids, nxt

    def _walk_lead(self, state: int, native) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`trie.walk` of the document's start, its leading whitespace taken the short way (`lead_gap`),
        with the packed mask of its tokens (uint32; the walk's kernel sets their bits as it goes)."""
        nodes, gap_tokens = self._lead
        words = np.zeros(self.index.n_words, np.uint32)
        starts = np.empty(len(nodes), np.int32)
        starts.fill(state)
        ids, nxt = native(self.index.trie, nodes, starts, 2, words)
        if gap_tokens:                            # tokens of whitespace only: " ", "\n" (llama-3)
            all_ids, all_next = [ids], [nxt]
            for tok_ids, gap in gap_tokens:
                after = self.dfa.walk(state, gap)
                if after >= 0:
                    all_ids.append(tok_ids)
                    after_ids = np.empty(len(tok_ids), np.int32)
                    after_ids.fill(after)
                    all_next.append(after_ids)
                    for i in tok_ids.tolist():    # a few ids: two for llama-3
                        words[i >> 5] |= 1 << (i & 31)
            ids, nxt = np.concatenate(all_ids), np.concatenate(all_next)
        return ids, nxt, words

    def _materialize(self, m: StateMasks) -> np.ndarray:
        if m.view is None and type(m) is not KeyTwinMasks:
            eos = self.index.eos_ids if m.accepting else _EMPTY
            return np.union1d(m.ids, eos).astype(np.int32) if len(eos) else m.ids
        bits = np.unpackbits(m.bitmask.view(np.uint8), bitorder="little")[: self.index.size]
        return np.flatnonzero(bits).astype(np.int32)

    def _forced_bytes(self, state: int) -> bytes:
        """Bytes forced from `state`: one possible next byte and no EOS, repeatedly."""
        dfa, out = self.dfa, bytearray()
        while state >= 0 and len(out) < _MAX_FORCED_BYTES and not dfa.is_accepting(state):
            dfa.expand(np.array([state], dtype=np.int32))
            row = dfa.table[state][dfa.byte_class]
            live = np.flatnonzero(row >= 0)
            if len(live) != 1:
                break
            out.append(int(live[0]))
            state = int(row[live[0]])
        return bytes(out)

    def _forced(self, state: int) -> tuple[int, ...]:
        m = self._memo.get(state)
        if type(m) is TwinMasks:
            # its twin's forced bytes, when they are no longer than a token: the two states
            # read alike for that long (`constrained.twins`), and this one's row stays unmade
            data = self._forced_bytes(m.source)
            if len(data) > self.index.longest_token:
                data = self._forced_bytes(state)
        else:
            data = self._forced_bytes(state)
        tokens: list[int] = []
        while data:
            # every prefix of forced bytes is readable, so the longest token that spells one is allowed
            tok, n = self.index.trie.longest_prefix_token(data)
            if tok < 0:
                break
            tokens.append(tok)
            data = data[n:]
        return tuple(tokens)

    def _check_initial(self) -> None:
        m = self.masks(self.initial)
        if m.can_continue or m.accepting:
            return
        row = self.dfa.transitions(self.initial)
        wanted = {b for b in range(256) if row[b] >= 0}
        missing = sorted(wanted - self.index.first_bytes) or sorted(wanted)
        raise IncompatibleVocabularyError(missing, "the start of the constraint")
