"""Regular expressions -> grammar IR, with full-match semantics over UTF-8.

Patterns are parsed by Python's own parser (`re._parser`, a.k.a. sre_parse);
this module only maps its parse tree into `grammars.ast` nodes. Every
character set (class, literal character, `.`) goes through the `encode` hook,
so the JSON-schema compiler can encode characters as they appear inside a
JSON string literal.

Semantics, exact unless stated:

- lazy quantifiers match the same language as greedy ones (full match);
- possessive quantifiers and atomic groups are compiled when they provably
  match the same language as their greedy form (body prefix-free and no
  character that could continue the body may follow it); otherwise they raise
  `UnsupportedRegexError`;
- anchors `^ $ \\A \\Z` are exact wherever they stand: where the position is
  known to be the start/end or known not to be, and elsewhere too, as in
  `(\\w+($|/))+` or `(^|/)x` (see `grammars.anchor_marks`), except Python's `$`,
  which also matches before a final newline: where it is not known
  (`a$b?`) it raises, as `$` before a trailing newline (`a$\\n`) does;
- IGNORECASE follows Python's matcher exactly, including non-ASCII
  (simple case mapping plus `re._casefix`; see `charsets.ignorecase`).
  ECMA patterns use the same folding, which differs from ECMA's own
  (Canonicalize) only for a few exotic characters;
- ECMA: code points are matched (the `u`-flag view), not UTF-16 units;
  `\\p{...}` supports general categories, not scripts;
- MULTILINE `^` after the start and `$` before more input raise;
- backreferences, lookarounds, conditionals and word boundaries raise
  `UnsupportedRegexError` naming the construct and its position.

Example:
    >>> from grammars.dfa import LazyDFA
    >>> dfa = LazyDFA(regex_grammar(r"[a-c]{2}\\d+"))
    >>> dfa.matches(b"ab12"), dfa.matches(b"ab")
    (True, False)
"""

from __future__ import annotations

import warnings
from typing import Callable

from grammars import charsets as cs
from grammars.anchor_marks import END, START, resolve_marks
from grammars.ast import EMPTY, NOTHING, ByteSet, Grammar, Node, alt, repeat, seq, star
from grammars.deep import deep_call
from grammars.errors import RegexSyntaxError, UnsupportedRegexError
from grammars.native import checkpoint
from grammars.nfa import gc_paused
from grammars.regex_first import ANYTHING, ATOMIC, POSSESSIVE, combine_flags, first, first_of_follow
from grammars.trie import is_word_list, trie_alt, word_list
from grammars.utf8 import codepoints

try:  # Python >= 3.11
    import re._constants as _c
    import re._parser as _parser
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _parser  # type: ignore[no-redef]
import re

__all__ = ["regex_node", "regex_grammar"]

Encoder = Callable[[list[tuple[int, int]]], Node]

_YES, _NO, _MAYBE = 1, 0, 2  # is this point the start (end) of the input?
_I, _S, _A = int(re.IGNORECASE), int(re.DOTALL), int(re.ASCII)
_M = int(re.MULTILINE)
_LINE_ANCHORS = {_c.AT_BEGINNING: _c.AT_BEGINNING_LINE, _c.AT_END: _c.AT_END_LINE}
_MAXREPEAT = _c.MAXREPEAT
_CATEGORIES = {
    _c.CATEGORY_DIGIT: ("digit", False), _c.CATEGORY_NOT_DIGIT: ("digit", True),
    _c.CATEGORY_WORD: ("word", False), _c.CATEGORY_NOT_WORD: ("word", True),
    _c.CATEGORY_SPACE: ("space", False), _c.CATEGORY_NOT_SPACE: ("space", True),
}
_UNSUPPORTED = {
    _c.GROUPREF: "backreference", _c.GROUPREF_EXISTS: "conditional group",
}


def regex_grammar(pattern: str, *, flags: int = 0, ascii: bool = False) -> Grammar:
    """Grammar whose start rule full-matches the Python regex `pattern`.

    `\\d`, `\\w`, `\\s` and `\\b` follow Python's Unicode semantics, as `re`
    does (`\\d` matches "١" and "３" too); `ascii=True` makes them ASCII-only,
    like `re.ASCII` (the same as `flags=re.ASCII`).

    Example:
        >>> regex_grammar("ab?").start
        'start'
    """
    node = regex_node(pattern, flags=flags | (re.ASCII if ascii else 0))
    return Grammar({"start": node}, info={"labels": {id(node): (node, f"regex {pattern!r}")}, "kind": "regex"})


def regex_node(
    pattern: str,
    *,
    flags: int = 0,
    dialect: str = "python",
    encode: Encoder = codepoints,
    search: bool = False,
) -> Node:
    """IR node matching the UTF-8 encodings of the strings `pattern` matches.

    Args:
        pattern: the regex (a str).
        flags: `re` flags (IGNORECASE, DOTALL, MULTILINE, ASCII, VERBOSE).
        dialect: "python" (Python `re` syntax and semantics) or "ecma"
            (ECMA-262, as used by JSON Schema `pattern`: `\\d`/`\\w` are
            ASCII, `\\s` and `.` follow ECMA, `$` is end of input only).
        encode: maps each character set (list of code point ranges) to a
            node; `codepoints` (UTF-8) by default.
        search: match anywhere in the string (`re.search` semantics) instead
            of the whole string.

    Raises:
        RegexSyntaxError: the pattern does not parse.
        UnsupportedRegexError: a construct no finite automaton can express.

    Example:
        >>> regex_node("a|b") == regex_node("[ab]")
        True
    """
    if dialect not in ("python", "ecma"):
        raise ValueError(f"dialect must be 'python' or 'ecma', got {dialect!r}")
    with gc_paused():
        return _regex_node(pattern, flags, dialect, encode, search)


def _regex_node(pattern: str, flags: int, dialect: str, encode: Encoder, search: bool) -> Node:
    if not flags & (re.IGNORECASE | re.VERBOSE) and is_word_list(pattern):
        return word_list(pattern, encode, search)
    source, origin = pattern, None
    if dialect == "ecma":
        from grammars.ecma import translate

        source, origin = translate(pattern)
    tree = _parse(pattern, source, flags, origin)
    conv = _Converter(pattern, source, origin, dialect, encode, tree.state)
    node = _convert(conv, tree, search)
    if conv.marked:
        node = resolve_marks(node, lambda: conv.unsupported("anchor in this construct", "anchor"))
    return node


def _convert(conv: _Converter, tree, search: bool) -> Node:
    root_flags = int(tree.state.flags)
    if not search:
        return conv.items(tree.data, root_flags, _YES, _YES, None)
    anything = star(conv.enc(cs.ALL))
    if not conv.has_anchor(tree.data):
        return seq(anything, conv.items(tree.data, root_flags, _MAYBE, _MAYBE, ANYTHING), anything)
    # Unanchored search, exact with anchors: split on whether the match starts
    # at the very start and ends at the very end of the input.
    some = seq(conv.enc(cs.ALL), anything)
    parts = []
    for s, before in ((_YES, EMPTY), (_NO, some)):
        for e, after in ((_YES, EMPTY), (_NO, some)):
            conv.reset_counts()
            follow = None if e == _YES else ANYTHING  # what the unanchored suffix may read
            parts.append(seq(before, conv.items(tree.data, root_flags, s, e, follow), after))
    return alt(*parts)


def _parse(pattern: str, source: str, flags: int, origin: list[int] | None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "possible nested set" FutureWarnings
        try:
            # (sre's parser recurses per nested group: deeply nested ones parse on a deep stack)
            return deep_call(_parser.parse, source, flags)
        except re.error as exc:
            pos = exc.pos if origin is None or exc.pos is None else origin[min(exc.pos, len(origin) - 1)]
            raise RegexSyntaxError(pattern, exc.msg, pos) from None
        except (OverflowError, ValueError) as exc:  # bad flags, huge counts
            raise RegexSyntaxError(pattern, str(exc) or type(exc).__name__) from None


class _Converter:
    """Maps one parsed pattern to IR; `s`/`e` say whether the current point is
    the start/end of the whole input (_YES, _NO or _MAYBE); `follow` lazily
    describes what may come next (for possessive quantifiers and Python's `$`:
    `grammars.regex_first`)."""

    def __init__(self, pattern: str, source: str, origin: list[int] | None,
                 dialect: str, encode: Encoder, state) -> None:
        self.state = state
        self.pattern, self.source, self.origin = pattern, source, origin
        self.ecma = dialect == "ecma"
        self.encode = encode
        self._enc_memo: dict[tuple, Node] = {}
        self._set_memo: dict[tuple, list[tuple[int, int]]] = {}
        self._anchor_memo: dict[int, bool] = {}
        self._lit_memo: dict[int, Node] = {}
        self._seen: dict[str, int] = {}
        self.marked = 0               # anchors left as `END` / `START` (see `grammars.anchor_marks`)

    # -- errors --------------------------------------------------------------

    def unsupported(self, construct: str, kind: str | None = None) -> UnsupportedRegexError:
        from grammars.ecma import locate

        kind = kind or construct
        nth = self._seen.get(kind, 0)
        pos = locate(self.source, kind, nth)
        if pos is not None and self.origin is not None:
            pos = self.origin[min(pos, len(self.origin) - 1)]
        return UnsupportedRegexError(self.pattern, construct, pos)

    def reset_counts(self) -> None:
        self._seen.clear()

    def _count(self, kind: str) -> None:
        self._seen[kind] = self._seen.get(kind, 0) + 1

    # -- character sets ------------------------------------------------------

    def enc(self, ranges: list[tuple[int, int]]) -> Node:
        key = tuple(ranges)
        node = self._enc_memo.get(key)
        if node is None:
            node = self.encode(list(ranges)) if ranges else NOTHING
            self._enc_memo[key] = node
        return node

    def charset(self, op, av, flags: int) -> list[tuple[int, int]]:
        """Code points one LITERAL / NOT_LITERAL / ANY / IN item matches."""
        key = (op, av if op is not _c.IN else tuple(av), flags & (_I | _S | _A))
        out = self._set_memo.get(key)
        if out is None:
            out = self._charset(op, av, flags)
            self._set_memo[key] = out
        return out

    def _charset(self, op, av, flags: int) -> list[tuple[int, int]]:
        if op is _c.ANY:
            return cs.dot("ecma" if self.ecma else "python", bool(flags & _S))
        negate = op is _c.NOT_LITERAL
        chars: list[tuple[int, int]] = []
        cats: list[tuple[int, int]] = []
        for iop, iav in ([(_c.LITERAL, av)] if op is not _c.IN else av):
            if iop is _c.LITERAL:
                chars.append((iav, iav))
            elif iop is _c.RANGE:
                chars.append(iav)
            elif iop is _c.NEGATE:
                negate = True
            elif iop is _c.CATEGORY and iav in _CATEGORIES:
                cats = cs.union(cats, self.category(iav, flags))
            else:
                raise self.unsupported(f"character class item {iop}")
        if flags & _I:
            out = cs.ignorecase(chars, cats, ascii_only=bool(flags & _A) and not self.ecma)
        else:
            out = cs.union(chars, cats)
        return cs.complement(out) if negate else out

    def category(self, code, flags: int) -> list[tuple[int, int]]:
        name, negated = _CATEGORIES[code]
        if self.ecma:
            ranges = cs.ecma_category(name)
        else:
            ranges = cs.python_category(name, ascii_only=bool(flags & _A))
        return cs.complement(ranges) if negated else ranges

    # -- structure -------------------------------------------------------------

    def items(self, data, flags: int, s: int, e: int, follow) -> Node:
        """A sequence of parse items."""
        checkpoint()                     # compiled: let other threads in (see `grammars.native`)
        n = len(data)
        if n == 1:
            return self.item(data[0][0], data[0][1], flags, s, e, (data, 1, flags, follow))
        starts = ends = None
        if (s != _MAYBE or e != _MAYBE) and self.has_anchor(data):
            starts, ends = self._positions(data, s, e)
        out = []
        literal = _c.LITERAL
        chars = self._lit_memo if not flags & _I else None
        for i, (op, av) in enumerate(data):
            if op is literal and chars is not None:
                # Fast path for literal runs (the bulk of word lists).
                node = chars.get(av)
                if node is None:
                    node = chars[av] = self.enc([(av, av)])
                out.append(node)
                continue
            si = starts[i] if starts else _MAYBE
            ei = ends[i] if ends else _MAYBE
            out.append(self.item(op, av, flags, si, ei, (data, i + 1, flags, follow)))
        return seq(*out)

    def _positions(self, data, s: int, e: int) -> tuple[list[int], list[int]]:
        """Start/end status of each item from the widths of its neighbours."""
        widths = [_parser.SubPattern(self.state, [it]).getwidth() for it in data]

        def scan(order, init):
            out, state = [0] * len(data), init
            for i in order:
                out[i] = state
                lo, hi = widths[i]
                if lo > 0 or state == _NO:
                    state = _NO
                elif hi > 0:
                    state = _MAYBE
            return out

        return scan(range(len(data)), s), scan(range(len(data) - 1, -1, -1), e)

    def item(self, op, av, flags: int, s: int, e: int, follow) -> Node:
        if op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
            return self.enc(self.charset(op, av, flags))
        if op is _c.SUBPATTERN:
            group, add, remove, sub = av
            return self.items(sub.data, combine_flags(flags, add, remove), s, e, follow)
        if op is _c.BRANCH:
            return trie_alt([self.items(b.data, flags, s, e, follow) for b in av[1]])
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            return self.repeat(av, flags, s, e, follow)
        if op is POSSESSIVE and POSSESSIVE is not None:
            self._count("possessive quantifier")
            return self.possessive(av, flags, s, e, follow)
        if op is ATOMIC and ATOMIC is not None:
            self._count("atomic group")
            return self.atomic(av, flags, s, e, follow)
        if op is _c.AT:
            self._count("anchor" if av not in (_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY) else "word boundary")
            if flags & _M:            # the parser leaves MULTILINE to the matcher: `^`/`$` are per line
                av = _LINE_ANCHORS.get(av, av)
            return self.anchor(av, s, e, follow)
        if op in (_c.ASSERT, _c.ASSERT_NOT):
            direction = "lookbehind" if av[0] < 0 else "lookahead"
            neg = "negative " if op is _c.ASSERT_NOT else ""
            raise self.unsupported(f"{neg}{direction}", direction)
        if op in _UNSUPPORTED:
            raise self.unsupported(_UNSUPPORTED[op])
        raise self.unsupported(f"regex construct {op}", str(op))

    def repeat(self, av, flags: int, s: int, e: int, follow) -> Node:
        lo, hi, body = av
        hi = None if hi == _MAXREPEAT else hi
        if hi is not None and hi <= 1 or not self.has_anchor(body.data):
            inner = (_MAYBE, _MAYBE) if hi is None or hi > 1 else (s, e)
            bfollow = ("or", (body.data, 0, flags, follow), follow) if hi != 1 else follow
            return repeat(self.items(body.data, flags, *inner, bfollow), lo, hi)
        # Anchors inside a repeat: the first and last iterations differ from
        # the middle ones, so unroll those (exact when the body is non-empty).
        bfollow = ("or", (body.data, 0, flags, follow), follow)
        if body.getwidth()[0] == 0:
            ms, me = (_NO if s == _NO else _MAYBE), (_NO if e == _NO else _MAYBE)
            return repeat(self.items(body.data, flags, ms, me, bfollow), lo, hi)
        conv = lambda a, b: self.items(body.data, flags, a, b, bfollow)  # noqa: E731
        parts = [EMPTY] if lo == 0 else []
        if lo <= 1:
            parts.append(conv(s, e))
        if hi is None or hi >= 2:
            middle = repeat(conv(_NO, _NO), max(lo, 2) - 2, None if hi is None else hi - 2)
            parts.append(seq(conv(s, _NO), middle, conv(_NO, e)))
        return alt(*parts)

    def anchor(self, code, s: int, e: int, follow) -> Node:
        if code in (_c.AT_BEGINNING, _c.AT_BEGINNING_STRING):
            if s == _MAYBE:           # the start of the input, or nothing: resolved after (`grammars.anchor_marks`)
                self.marked += 1
                return ByteSet(START)
            return self._decide(s, "`^`" if code is _c.AT_BEGINNING else "`\\A`", "start")
        if code is _c.AT_BEGINNING_LINE:
            return self._decide(_MAYBE if s == _NO else s, "`^` (MULTILINE)", "start")
        if code is _c.AT_END_STRING or (code is _c.AT_END and self.ecma):
            if e == _MAYBE:           # the end of the input, or nothing: resolved after (`grammars.anchor_marks`)
                self.marked += 1
                return ByteSet(END)
            return self._decide(e, "`$`" if code is _c.AT_END else "`\\Z`", "end")
        if code in (_c.AT_END, _c.AT_END_LINE):
            # Python's `$` also matches before a (final) newline: if no newline
            # can come next, it only matches at the end.
            if e == _NO and cs.contains(first_of_follow(self.charset, follow)[0], 0x0A):
                e = _MAYBE
            return self._decide(e, "`$`", "end")
        raise self.unsupported("word boundary" if code in (_c.AT_BOUNDARY, _c.AT_NON_BOUNDARY)
                               else f"anchor {code}", "word boundary")

    def _decide(self, where: int, name: str, side: str) -> Node:
        if where == _YES:
            return EMPTY
        if where == _NO:
            return NOTHING
        raise self.unsupported(f"{name} anchor not at the {side} of the pattern", "anchor")

    # -- possessive / atomic ---------------------------------------------------

    def _no_marks(self, before: int, construct: str) -> None:
        if self.marked != before:
            raise self.unsupported(f"anchor inside {construct}", "anchor")

    def possessive(self, av, flags: int, s: int, e: int, follow) -> Node:
        before = self.marked
        node = self.repeat(av, flags, s, e, follow)
        self._no_marks(before, "a possessive quantifier")
        if not self._commits_like_greedy(av[2].data, flags, node_of_body=None, follow=follow):
            raise self.unsupported("possessive quantifier whose body can be followed by "
                                   "its own first character (changes the language)",
                                   "possessive quantifier")
        return node

    def atomic(self, sub, flags: int, s: int, e: int, follow) -> Node:
        data = sub.data
        before = self.marked
        if len(data) == 1 and data[0][0] is _c.MAX_REPEAT:
            node = self.repeat(data[0][1], flags, s, e, follow)
            self._no_marks(before, "an atomic group")
            if self._commits_like_greedy(data[0][1][2].data, flags, None, follow):
                return node
        else:
            node = self.items(data, flags, s, e, follow)
            self._no_marks(before, "an atomic group")
            if _prefix_free(node):
                return node
        raise self.unsupported("atomic group that can match more than one length "
                               "(changes the language)", "atomic group")

    def _commits_like_greedy(self, body, flags: int, node_of_body, follow) -> bool:
        """A possessive `body{m,n}+` equals the greedy one when the body's
        matches are prefix-free, it is never empty, and no first character of
        the body can follow the repeat."""
        starts, nullable = first(self.charset, body, 0, flags)
        if nullable:
            return False
        after, _ = first_of_follow(self.charset, follow)
        if cs.intersect(starts, after):
            return False
        single = len(body) == 1 and body[0][0] in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN)
        if single:
            return True
        before = self.marked
        alone = self.items(body, flags, _MAYBE, _MAYBE, None)
        if self.marked != before:             # anchors the body alone cannot place: not proven
            self.marked = before
            return False
        return _prefix_free(alone)

    def has_anchor(self, data) -> bool:
        key = id(data)
        out = self._anchor_memo.get(key)
        if out is None:
            out = any(_item_has_anchor(op, av, self) for op, av in data)
            self._anchor_memo[key] = out
        return out


def _item_has_anchor(op, av, conv: _Converter) -> bool:
    if op is _c.AT:
        return True
    if op is _c.SUBPATTERN:
        return conv.has_anchor(av[3].data)
    if op is _c.BRANCH:
        return any(conv.has_anchor(b.data) for b in av[1])
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) or op is POSSESSIVE:
        return conv.has_anchor(av[2].data)
    if op is ATOMIC:
        return conv.has_anchor(av.data)
    return False


def _prefix_free(node: Node, budget: int = 2000) -> bool:
    """No match of `node` is a proper prefix of another (checked on its DFA:
    every state is live, so an accepting state must have no move at all)."""
    from grammars.dfa import LazyDFA
    from grammars.errors import StateBudgetError

    try:
        dfa = LazyDFA(Grammar({"start": node}), max_states=budget)
        dfa.explore()
    except StateBudgetError:
        return False
    return not any(dfa.is_accepting(s) and (dfa.table[s] >= 0).any() for s in range(dfa.num_states))
