"""A JSON document's first mask without stepping through its leading whitespace.

A JSON schema's document is ``gap value gap`` (`grammars.json_schema`), its
leading gap G one of: nothing, 1..`max_spaces` spaces, or 1..`max_newlines`
newlines each followed by up to `max_indent` indent characters
(`grammars.json_values.WhitespacePolicy`); and a JSON value never starts with
whitespace. So, at the document's start, a token that begins with a space or
a newline is readable iff

- it is whitespace only and a prefix of a member of G (the state after it is
  walked on the DFA: a byte or two), or
- it is g + r, g a member of G and r starting with a byte no member of G
  continues with, and r is readable from the start: the gap is over, and
  what may follow g + r is what may follow r, so r's walk gives its state too.

The trie walk from the initial state steps through every whitespace run that
the vocabulary spells instead, one DFA row per step: llama-3 has "\\n" + 24
spaces + "\\n", so 25 of the 29 rows that a one-property object's first mask
computed were such runs, 40% of that mask. `gap_starts` lists, once per
vocabulary and policy, where the walk starts instead: the trie nodes of
every token's first byte that is not a space or a newline, and the nodes of
g + b (g in G, b not continuing a member of G); all of them are walked from
the initial state, their byte included (`JitDFA.walk_tokens`, ``emit_first=2``).

Example:
    >>> from grammars.json_values import WhitespacePolicy
    >>> member = lambda g: in_gap(g, WhitespacePolicy())
    >>> [member(g) for g in (b"", b" ", b"  ", b"\\n", b"\\n\\t  ", b"\\n\\n", b" \\n")]
    [True, True, False, True, True, False, False]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from constrained.vocab_trie import VocabTrie
    from grammars.json_values import WhitespacePolicy

__all__ = ["GapStarts", "in_gap", "gap_starts"]

# Bytes a member of G may hold (indent characters are spaces and tabs, see `WhitespacePolicy`).
_GAP_BYTES = frozenset(b" \t\n")
# (trie start nodes, ((whitespace-only token ids, their bytes), ...))
GapStarts = tuple[np.ndarray, tuple[tuple[np.ndarray, bytes], ...]]


def in_gap(g: bytes, policy: "WhitespacePolicy") -> bool:
    """Whether `g` is a member of the policy's gap (then so is each of its non-empty prefixes)."""
    if not g:
        return True
    if g[0] == 0x20:
        return len(g) <= policy.max_spaces and g.count(b" ") == len(g)
    if g[0] != 0x0A:
        return False
    indent = policy.indent_chars.encode()
    blocks = g[1:].split(b"\n")
    return len(blocks) <= policy.max_newlines and all(
        len(b) <= policy.max_indent and all(c in indent for c in b) for b in blocks)


def gap_starts(trie: "VocabTrie", policy: "WhitespacePolicy") -> GapStarts:
    """Where the first mask's walk starts (see the module docstring): trie nodes, each to be
    walked from the initial state over its own byte, and the whitespace-only tokens to walk
    on the DFA, grouped by their bytes."""
    byte, lo, hi = trie.byte.tolist(), trie.child_lo.tolist(), trie.child_hi.tolist()
    term_lo, term_hi, term_ids = trie.term_lo, trie.term_hi, trie.term_ids
    starts: list[int] = []
    gap_tokens: list[tuple[np.ndarray, bytes]] = []
    todo: list[tuple[int, bytes]] = []
    for node in range(trie.n_roots):
        b = byte[node]
        if b in (0x20, 0x0A):
            if in_gap(bytes([b]), policy):
                todo.append((node, bytes([b])))
        else:
            starts.append(node)
    while todo:                      # nodes whose path g is a member of G
        node, g = todo.pop()
        if term_hi[node] > term_lo[node]:
            gap_tokens.append((term_ids[term_lo[node]:term_hi[node]].copy(), g))
        for child in range(lo[node], hi[node]):
            b = byte[child]
            if b not in _GAP_BYTES:
                starts.append(child)             # the gap ends at g: the value starts with b
            elif in_gap(g + bytes([b]), policy):
                todo.append((child, g + bytes([b])))
            # else: g + b is no gap's prefix, and no value starts with whitespace: nothing below
    return np.array(sorted(starts), dtype=np.int32), tuple(gap_tokens)
