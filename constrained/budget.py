"""Budget-aware completion: a constrained sample ends complete within its `max_tokens`.

A random or wandering model can stay inside a string or a run of whitespace
until `max_tokens` cuts it off, leaving text that is not a valid result. From
every DFA state the engine knows a shortest way to an accepting state: a
breadth-first search over the byte DFA (one representative byte per byte
class, letters and digits first), memoized per state. Its bytes, cut into
tokens greedily (longest token first), give `tokens_needed(state)`: a number
of tokens that surely completes the text.

While the budget left is more than that plus `MARGIN`, the guide's mask
applies, and a sampled token after which completion no longer fits (one that
opens an object with many required members, say) is drawn again from the
steered set. Once the budget is that close, `steer` allows only tokens that keep completion within it:
tokens that spell a prefix of the shortest completion and after which the
rest still fits (and EOS where the text is already complete). The greedy
first token always qualifies, so from a state whose completion fits, every
step keeps it fitting, and the row ends `complete`. The suffix of a shortest
completion is a shortest completion of the state it reaches; it is kept for
that state when it tokenizes into fewer tokens than the state's own search
found, which is what makes the greedy first token qualify again next step.

The search is bounded (`MAX_SEARCH` DFA states); past it, or when some byte
of the completion has no token of its own, `tokens_needed` is None and the
row runs unsteered. Where every completion is known to be long (a count far
below its exit bound, `CounterTwins.min_bytes`: a long string under a large
`minLength`), the breadth-first search is skipped and the depth-first one
runs only if it can reach that far (`_least_bytes`, `_reachable`).

Example:
    >>> from grammars.regex import regex_grammar
    >>> from grammars.dfa import LazyDFA
    >>> from constrained.token_fsm import TokenFSM
    >>> from constrained.vocab import Vocabulary
    >>> v = Vocabulary.from_token_bytes([b"a", b"b", b"ab", b"c", None], eos_token_ids=[4])
    >>> fsm = TokenFSM(LazyDFA(regex_grammar("c*ab")), v)
    >>> b = completions(fsm)
    >>> b.shortest(fsm.initial), b.tokens_needed(fsm.initial)
    (b'ab', 1)
    >>> b.steer(fsm.initial, 5) is None, b.steer(fsm.initial, 1).tolist()
    (True, [2])
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from grammars.errors import StateBudgetError

if TYPE_CHECKING:
    from constrained.token_fsm import TokenFSM
    from constrained.vocab import Vocabulary

__all__ = ["Completions", "completions", "MARGIN", "MAX_SEARCH", "FIT_WINDOW"]

# Steering starts when at most this many tokens beyond the needed ones are left.
MARGIN = 2
# `restrict` drops tokens that leave too few tokens while at most this many beyond the needed ones are left.
FIT_WINDOW = 64
# DFA states a breadth-first search for the shortest completion may meet; past it, a
# depth-first one (closing bytes first) finds a short one within MAX_SEARCH states.
BREADTH = 10_000
# States a search from the first state of a class of twins (`constrained.twins`) may make.
TWIN_SEARCH = 2_048
MAX_SEARCH = 20_000
# A state whose completions all read more bytes than this is searched depth first only (`_least_bytes`).
FAR_BELOW = 1_024
# Bytes along which `_reachable` counts the states a depth-first search makes a byte.
_PROBE = 8
# Representative bytes of a byte class, most preferred first: what fills strings when steered.
_PREFERRED = b"abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"

_BY_FSM: "weakref.WeakKeyDictionary[TokenFSM, Completions]" = weakref.WeakKeyDictionary()
_BY_VOCAB: "weakref.WeakKeyDictionary[Vocabulary, tuple[dict[bytes, int], int]]" = weakref.WeakKeyDictionary()


def completions(fsm: TokenFSM) -> Completions:
    """The (shared, memoized) `Completions` of `fsm`."""
    out = _BY_FSM.get(fsm)
    if out is None:
        out = _BY_FSM[fsm] = Completions(fsm)
    return out


def _token_table(vocab: Vocabulary) -> tuple[dict[bytes, int], int]:
    """bytes -> the least token id spelling them (EOS and byte-less tokens left out), and the longest length."""
    try:
        found = _BY_VOCAB.get(vocab)
    except TypeError:                           # not weak-referenceable: build it each time
        found = None
    if found is None:
        eos = set(vocab.eos_token_ids)
        table: dict[bytes, int] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b and i not in eos and b not in table:
                table[b] = i
        found = (table, max(map(len, table), default=0))
        try:
            _BY_VOCAB[vocab] = found
        except TypeError:
            pass
    return found


class Completions:
    """Shortest completions of the states of one `TokenFSM`, in bytes and in tokens."""

    def __init__(self, fsm: TokenFSM) -> None:
        self.fsm = fsm
        self._table, self._longest = _token_table(fsm.vocab)
        self._eos = np.asarray(sorted(fsm.vocab.eos_token_ids), dtype=np.int32)
        self._shortest: dict[int, bytes | None] = {}
        self._short: dict[int, tuple[bytes | None, bool]] = {}   # per twin class's first state (`_twin`)
        self._exact: set[int] = set()          # states whose `shortest` is the shortest in bytes
        self._needed: dict[int, int | None] = {}
        self._after_memo: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._classes = -1                     # the DFA's class count `_order` was made for
        self._order: list[tuple[int, int]] = []
        self._bound = 0                        # the search's lower bound on the completion's bytes (`_least_bytes`)
        self._fan = 0                          # the most states a byte of a depth-first search made (`_reachable`)

    def _search_order(self) -> list[tuple[int, int]]:
        """(class, a byte of it) per byte class of the DFA, in search order: those that close strings
        and containers first. Made again when the classes split (a lazy part of the constraint was
        built): call it after `dfa.row`, which may split them."""
        dfa = self.fsm.dfa
        if self._classes != dfa.num_classes:
            bc = dfa.byte_class
            rep = [self._representative(np.flatnonzero(bc == c)) for c in range(dfa.num_classes)]
            self._order = sorted(((c, b) for c, b in enumerate(rep)), key=lambda cb: _rank(cb[1]))
            self._byte_class = bc.tolist()
            self._classes = dfa.num_classes
        return self._order

    def shortest(self, state: int) -> bytes | None:
        """The bytes of a short way from DFA `state` to acceptance (see the module docstring); None if
        none was found within `MAX_SEARCH` states."""
        known = self._shortest
        if state in known:
            return known[state]
        if self._twin(state):
            return known[state]
        # searching creates DFA states: a quarter of the constraint's state budget left, at most
        dfa = self.fsm.dfa
        # the DFA's lazy tables are not thread-safe: a server compiles (and plans) on threads
        # while its event loop steps other rows of the same cached FSM
        with self.fsm._lock:
            room = (getattr(dfa, "max_states", MAX_SEARCH * 8) - dfa.num_states) // 4
            try:
                self._bound = self._least_bytes(state)
                found = self._breadth_first(state, min(BREADTH, room)) if self._bound <= FAR_BELOW else None
                exact = found is not None
                if found is None and self._reachable(state, self._bound, min(MAX_SEARCH, room)):
                    found = self._depth_first(state, min(MAX_SEARCH, room))
            except StateBudgetError:           # the budget is the constraint's own: it ends the row, not this
                found = None
        if found is None:
            known[state] = None
            return None
        path, out = found
        end = path[-1]
        tail = b"" if self.fsm.dfa.is_accepting(end) else known[end]
        for i, q in enumerate(path[:-1]):      # each state on the way: the rest of it
            known.setdefault(q, bytes(out[i:]) + tail)
        known.setdefault(end, tail)
        if exact and self.fsm.dfa.is_accepting(end):
            self._exact.add(state)
        return known[state]

    def _twin(self, state: int) -> bool:
        """Whether `shortest(state)` is known from its class (`constrained.twins`): for a state
        with counts far from their bounds, a completion of at most a token's length found from
        the first state of its class by a search of at most `TWIN_SEARCH` states (the states of a
        class read alike for that long). Otherwise the state is searched from itself."""
        from constrained.state_masks import TwinMasks

        fsm = self.fsm
        if state < 0 or fsm._twins is None:
            return False
        m = fsm.masks(state)
        if type(m) is TwinMasks:
            source = m.source
        elif fsm._twins.usable and fsm._twins.key(state) is not None:
            source = state
        else:
            return False
        if source not in self._short and fsm._twins.min_bytes(source) > fsm.index.longest_token:
            self._short[source] = (None, False)  # (a count far below its bound: no search finds it within a token)
        if source not in self._short:
            w = None
            with fsm._lock:
                try:
                    found = self._breadth_first(source, TWIN_SEARCH)
                except StateBudgetError:
                    found = None
            if found is not None:
                path, out = found
                end = path[-1]
                w = bytes(out) + (b"" if fsm.dfa.is_accepting(end) else self._shortest[end])
                if len(w) > fsm.index.longest_token:
                    w = None
            self._short[source] = (w, found is not None and fsm.dfa.is_accepting(found[0][-1]))
        w, exact = self._short[source]
        if w is None:
            return False                         # longer than a token: searched from the state itself
        self._shortest[state] = w
        if exact:
            self._exact.add(state)
        return True

    def _least_bytes(self, state: int) -> int:
        """A lower bound on the bytes of every completion from `state` (`CounterTwins.min_bytes`: the
        counts left to their exit bounds, as in a long string under a large `minLength`; 0: none known).

        Past `FAR_BELOW` bytes the breadth-first search is skipped (it made up to `BREADTH` states for
        nothing, 9 a byte of a string) and the depth-first one runs only where it can reach that far
        (`_reachable`): under ``minLength: 5000`` a 1,500-token generation made 52,715 DFA states for
        no plan, most of them in such searches."""
        twins = self.fsm.counter_twins()
        return twins.min_bytes(state) if twins is not None else 0

    def _reachable(self, state: int, need: int, limit: int) -> bool:
        """Whether a depth-first search can go `need` bytes within `limit` DFA states: each byte makes
        the live targets of a row, counted along the first `_PROBE` bytes it would take (the state
        itself may allow fewer: after a UTF-8 lead byte only continuations). The most found is kept
        for the next states asked (a probe per state made 21,000 states in the generation above)."""
        if need <= FAR_BELOW:
            return True
        dfa = self.fsm.dfa
        fan = max(self._fan, len({t for t in dfa.row(state) if t >= 0}))
        if not self._fan:
            q = state
            for _ in range(_PROBE):
                row = dfa.row(q)
                fan = max(fan, len({t for t in row if t >= 0}))
                q = next((row[c] for c, _ in self._search_order() if row[c] >= 0), -1)
                if q < 0:
                    break
        self._fan = fan
        return need * fan <= limit

    def _done(self, q: int, start: int) -> bool:
        return self.fsm.dfa.is_accepting(q) or (q != start and self._shortest.get(q) is not None)

    def _breadth_first(self, state: int, limit: int) -> tuple[list[int], bytes] | None:
        """A shortest way to a state that accepts or has a known completion, if one lies within
        `BREADTH` states: (the states along it, its bytes)."""
        dfa = self.fsm.dfa
        parent: dict[int, tuple[int, int]] = {state: (-1, -1)}
        level = [state]
        depth = 0
        made = dfa.num_states + limit           # each row made adds its targets: bound those too
        while level and len(parent) <= limit and dfa.num_states <= made:
            for q in level:
                if self._done(q, state):
                    path, out = [q], bytearray()
                    while q != state:
                        q, b = parent[q]
                        path.append(q)
                        out.append(b)
                    return path[::-1], bytes(out[::-1])
            far = self._far_level(level) if len(parent) > 1 else 0
            if far > FAR_BELOW and far * len(level) > limit - len(parent):
                self._bound = max(self._bound, depth + far)   # no completion within reach: say how far
                return None
            depth += 1
            nxt = []
            for q in level:
                if dfa.num_states > made:
                    return None
                row = dfa.row(q)
                for c, b in self._search_order():
                    t = row[c]
                    if t >= 0 and t not in parent:
                        parent[t] = (q, b)
                        nxt.append(t)
            level = nxt
        return None

    def _far_level(self, level: list[int]) -> int:
        """The least `_least_bytes` over a breadth-first level (0 as soon as one is near): a level all
        of whose states are far from completion (the string under ``minLength`` entered) stops the
        search when its states times that many bytes are past what is left of its limit."""
        least = -1
        for q in level:
            b = self._least_bytes(q)
            if b <= FAR_BELOW:
                return 0
            least = b if least < 0 else min(least, b)
        return least

    def _depth_first(self, state: int, limit: int) -> tuple[list[int], bytes] | None:
        """A way found by always taking the first byte class in search order that leads somewhere new
        (backing up at dead ends), within `MAX_SEARCH` states."""
        dfa = self.fsm.dfa
        seen = {state}
        path, out, todo = [state], bytearray(), [iter(self._search_order())]
        made = dfa.num_states + limit           # each row made adds its targets: bound those too
        while path and len(seen) <= limit and dfa.num_states <= made:
            q = path[-1]
            if self._done(q, state):
                return path, bytes(out)
            row = dfa.row(q)
            self._search_order()                   # the row's classes (it may have split them)
            bc = self._byte_class
            for _, b in todo[-1]:
                t = row[bc[b]]
                if t >= 0 and t not in seen:
                    seen.add(t)
                    path.append(t)
                    out.append(b)
                    todo.append(iter(self._search_order()))
                    break
            else:
                path.pop()
                todo.pop()
                if out:
                    out.pop()
        return None

    def tokens_needed(self, state: int) -> int | None:
        """Tokens that surely complete the text from `state` (greedy cut of `shortest`); None if unknown."""
        if state in self._needed:
            return self._needed[state]
        w = self.shortest(state)
        n = None if w is None else self._count(state, w)
        self._needed[state] = n
        return n

    def is_shortest(self, state: int) -> bool:
        """Whether `shortest(state)` is known to be the shortest completion in bytes (the search was exhaustive)."""
        return self.shortest(state) is not None and state in self._exact

    def fits(self, state: int, token: int, remaining: int) -> bool:
        """Whether the text can still complete within `remaining` tokens after `token` is read in `state`
        (True when unknown: then nothing is steered)."""
        nxt = self.fsm.next_state(state, token)
        need = None if nxt < 0 else self.tokens_needed(nxt)
        return need is None or need <= remaining - 1

    def steer(self, state: int, remaining: int, *, force: bool = False) -> np.ndarray | None:
        """The token ids allowed from `state` with `remaining` tokens left, when the budget binds.

        None when it does not (more than `tokens_needed + MARGIN` left, unless
        `force`) or when completion cannot be planned; then the guide's own
        mask applies.
        """
        need = self.tokens_needed(state)
        if need is None or (remaining > need + MARGIN and not force):
            return None
        w = self._shortest[state]
        fsm = self.fsm
        allowed = [int(e) for e in self._eos] if fsm.is_accepting(state) else []
        for k in range(1, min(self._longest, len(w)) + 1):
            tok = self._table.get(w[:k])
            if tok is None:
                continue
            nxt = fsm.next_state(state, tok)
            if nxt < 0:
                continue
            rest = w[k:]
            after = self.tokens_needed(nxt)
            cut = self._count(nxt, rest)
            if cut is not None and (after is None or cut < after):
                self._shortest[nxt], self._needed[nxt] = rest, cut   # the better-cut shortest completion
                after = cut
            if after is not None and after <= remaining - 1:
                allowed.append(tok)
        return np.asarray(sorted(allowed), dtype=np.int32) if allowed else None

    def fitting(self, state: int, remaining: int) -> np.ndarray | None:
        """The allowed ids of `state` after which the text still completes within `remaining` tokens
        (EOS too when accepting); None when every allowed token fits.

        `fits` for every token at once, for engines that sample by themselves
        (vLLM): a logits processor cannot draw a token again, so it masks the
        ones that do not fit beforehand. The need after each next state is
        computed once per state (`tokens_needed`); unknown needs fit.
        """
        ids, after = self._after(state)
        ok = (after < 0) | (after <= remaining - 1)
        if ok.all():
            return None
        keep = ids[ok]
        if self.fsm.is_accepting(state):
            keep = np.union1d(keep, self._eos).astype(np.int32)
        return keep if len(keep) else None

    def restrict(self, state: int, remaining: int) -> np.ndarray | None:
        """The ids an engine-side processor allows from `state` with `remaining` tokens left, when fewer than
        the guide's: `steer`'s once the budget binds, else, within `FIT_WINDOW` of it, those that `fit`."""
        steer = self.steer(state, remaining)
        if steer is not None:
            return steer
        need = self.tokens_needed(state)
        if need is None or remaining > need + FIT_WINDOW:
            return None
        return self.fitting(state, remaining)

    def _after(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """(allowed non-EOS ids, tokens needed after each; -1 where unknown), memoized per state."""
        hit = self._after_memo.get(state)
        if hit is None:
            ids, nxt = self.fsm.transitions(state)
            states, inverse = np.unique(nxt, return_inverse=True)
            needs = np.array([-1 if n is None else n for n in map(self.tokens_needed, states.tolist())], dtype=np.int64)
            hit = self._after_memo[state] = (ids, needs[inverse] if len(ids) else needs[:0])
        return hit

    def _representative(self, members: np.ndarray) -> int:
        """The byte that stands for a byte class in completions: of its letters and digits, the one
        whose runs take the fewest tokens (strings are filled with it); else printable ASCII."""
        inside = set(members.tolist())
        fill = [b for b in _PREFERRED if b in inside]
        if fill:
            table, longest = self._table, self._longest
            def cost(b: int) -> int:
                run, i, n = bytes([b]) * 16, 0, 0
                while i < 16:
                    i += next((k for k in range(min(longest, 16 - i), 0, -1) if run[i:i + k] in table), 1)
                    n += 1
                return n
            return min(fill, key=cost)
        printable = [b for b in inside if 0x20 <= b < 0x7F]
        return min(printable) if printable else min(inside)

    def _count(self, state: int, w: bytes) -> int | None:
        """Tokens that spell `w` from `state` as the decode loop would: the guide's forced tokens
        where it has them, else the longest token along `w`; None if some byte has no token."""
        fsm, table, n = self.fsm, self._table, 0
        token_bytes = fsm.vocab.token_bytes
        while w:
            forced = fsm.forced_tokens(state)
            if forced:
                for tok in forced:
                    state = fsm.next_state(state, tok)
                    w = w[len(token_bytes[tok]):]
                n += len(forced)
                continue
            for k in range(min(self._longest, len(w)), 0, -1):
                tok = table.get(w[:k])
                if tok is not None and fsm.next_state(state, tok) >= 0:
                    state = fsm.next_state(state, tok)
                    w = w[k:]
                    n += 1
                    break
            else:
                return None                    # a byte no token spells on its own
        return n


def _rank(b: int) -> int:
    """Search order of a class by its representative: the closing quote, letters and digits (what
    fills strings), closing brackets, a comma, other printable ASCII, the rest (a backslash starts
    a 2-6 byte escape, so it comes late)."""
    if b == 0x22:
        return 0
    if b in _PREFERRED:
        return 1
    if b in b"}],":
        return 2 + b"}],".index(b)
    return 5 if 0x20 <= b < 0x7F and b != 0x5C else 6
