"""Strings of one body but none of others (and all of some), exactly: `not` of a `pattern`, and what needs it.

A string body (`pattern`, `format`, length bounds: a node over the JSON
*encoded* characters, every spelling of each) cannot be complemented
syntactically. Its automaton can: `difference` walks the DFAs of the allowed
body and of each excluded one side by side (their product, over the bytes
they tell apart), keeps the product states that still reach a text the first
accepts and no other does, and writes that automaton back as a node by state
elimination within each strongly connected component, the components'
nodes shared (see `_to_node`). Every body reads the same encoded bytes, so a
text is in the result exactly when its decoded string is allowed and matches
no excluded body, whatever escapes spell it. In a schema's grammar the node
is noted (`fragments.automaton`) so that the NFA builds it from the automaton
itself, one state per automaton state.

Each product is bounded (`MAX_STATES` product states, `MAX_SIZE` syntax
leaves); past that the schema is refused with `UnsupportedSchemaError`,
never approximated.

Example:
    >>> from grammars.ast import Grammar
    >>> from grammars.dfa import LazyDFA
    >>> from grammars.json_strings import any_string_body, string_literal
    >>> body = difference(any_string_body(1, 3), [string_literal("ab")], path="$")
    >>> dfa = LazyDFA(Grammar({"start": body}))
    >>> [dfa.matches(s) for s in (b"a", b"ab", b"a\\\\u0062", b"abc", b"", b"abcd")]
    [True, False, False, True, False, False]
"""

from __future__ import annotations

import heapq

from grammars.ast import EMPTY, NOTHING, Alt, ByteSet, Grammar, Node, Seq, alt, seq, star
from grammars.dfa import LazyDFA
from grammars.errors import StateBudgetError, UnsupportedSchemaError
from grammars.fragments import automaton
from grammars.native import checkpoint

__all__ = ["difference", "string_automaton", "use_dfa_class", "MAX_STATES", "MAX_SIZE"]

# Product states walked, and distinct syntax nodes written back, before a schema is refused.
MAX_STATES = 2_000
MAX_SIZE = 100_000
# The class of the products' automata (see `use_dfa_class`).
_DFA_CLASS: list[type[LazyDFA]] = [LazyDFA]


def use_dfa_class(cls: type[LazyDFA] | None) -> None:
    """Build the products' automata with `cls`, a `LazyDFA` subclass whose byte classes never change
    once it is made (no lazy rules), or with `LazyDFA` again when None. `constrained` registers its
    compiled DFA here on its first compile (this package imports neither of the others): its rows
    cost a few microseconds, where the Python DFA's cost 10-20 (maskbench-dev's
    Github_hard---o82144: 30.7 ms to 25.3, median of 10 alternated compiles)."""
    _DFA_CLASS[0] = LazyDFA if cls is None else cls


def difference(body: Node, excluded: list[Node], *, path: str, keyword: str = "not",
               tries: dict | None = None, required: list[Node] = ()) -> Node:
    """The texts of `body` that none of `excluded` derives, and every one of `required` does
    (see the module doc).

    `tries`: the grammar's ``info["tries"]``, where the automaton is noted for the NFA
    to build it state by state (see `fragments.automaton`).

    Raises:
        UnsupportedSchemaError: the product or the node written back passes its bound.
    """
    if not excluded and not required:
        return body
    edges, accepting, live = _walk(body, excluded, required, path, keyword)
    if 0 not in live:
        return NOTHING
    node = _to_node(edges, accepting, live)
    if _dag_size(node) > MAX_SIZE:
        raise _refuse(keyword, path, f"an expression of more than {MAX_SIZE} parts")
    if tries is None:
        return node
    return automaton(tries, Alt((node,)), *_kept(edges, accepting, live))


def string_automaton(body: Node, excluded: list[Node], *, path: str, keyword: str = "not",
                     required: list[Node] = ()) -> tuple[list[dict[int, int]], set[int]] | None:
    """The automaton of `difference`'s texts: per state its edges (target -> byte mask) and the
    accepting states; state 0 is the start and every state reaches an accepting one. None when
    no text is left. For a consumer that adds to it (`grammars.json_counted`: length bounds)."""
    edges, accepting, live = _walk(body, excluded, required, path, keyword)
    return _kept(edges, accepting, live) if 0 in live else None


def _kept(edges: list[dict[int, int]], accepting: set[int],
          live: set[int]) -> tuple[list[dict[int, int]], set[int]]:
    """The automaton of the `live` states only, renumbered (0 stays the start)."""
    number = {old: new for new, old in enumerate(sorted(live))}
    return ([{number[j]: m for j, m in edges[i].items() if j in live} for i in sorted(live)],
            {number[i] for i in accepting if i in live})


def _walk(body: Node, excluded: list[Node], required: list[Node], path: str,
          keyword: str) -> tuple[list[dict[int, int]], set[int], set[int]]:
    """The product automaton (edges, accepting states) and its states that reach an accepting one."""
    try:
        dfa_class = _DFA_CLASS[0]
        dfas = [dfa_class(Grammar({"start": n}), max_states=MAX_STATES) for n in (body, *required, *excluded)]
        edges, accepting = _product(dfas, len(required), path, keyword)
    except StateBudgetError:
        raise _refuse(keyword, path, f"an automaton of more than {MAX_STATES} states") from None
    return edges, accepting, _coreachable(edges, accepting)


def _refuse(keyword: str, path: str, why: str) -> UnsupportedSchemaError:
    return UnsupportedSchemaError(keyword, path, f"its exact strings need {why}")


def _classes(dfas: list[LazyDFA]) -> list[tuple[int, tuple[int, ...]]]:
    """(mask of its bytes, each DFA's class of them) per class of bytes that no DFA tells apart."""
    per_dfa = [d.byte_class.tolist() for d in dfas]
    groups: dict[tuple[int, ...], int] = {}
    for b in range(256):
        key = tuple(bc[b] for bc in per_dfa)
        groups[key] = groups.get(key, 0) | 1 << b
    return [(m, k) for k, m in groups.items()]


def _product(dfas: list[LazyDFA], n_required: int, path: str,
             keyword: str) -> tuple[list[dict[int, int]], set[int]]:
    """Per product state its edges (target -> byte mask), and the accepting states; state 0 is the start.
    `dfas`: the body, then `n_required` that must accept too, then those that must not."""
    head, rest = dfas[0], dfas[1:]
    need, avoid = rest[:n_required], rest[n_required:]
    classes = _classes(dfas)
    start = tuple(d.initial for d in dfas)
    index = {start: 0}
    order = [start]
    edges: list[dict[int, int]] = []
    accepting: set[int] = set()
    k = len(dfas)
    if k == 2:
        return _product2(dfas, n_required, classes, path, keyword)
    for i, q in enumerate(order):
        checkpoint()                                      # (compiled: let other threads have the GIL)
        if (head.is_accepting(q[0]) and all(d.is_accepting(s) for d, s in zip(need, q[1:]))
                and not any(d.is_accepting(s) for d, s in zip(avoid, q[1 + n_required:]))):
            accepting.add(i)
        rows = [d.row(s) if s >= 0 else None for d, s in zip(dfas, q)]   # next state per byte class
        first_row = rows[0]
        out: dict[int, int] = {}
        for mask, cls in classes:
            first = first_row[cls[0]]
            if first < 0:
                continue
            nxt = [first]
            for x in range(1, k):
                row = rows[x]
                nxt.append(row[cls[x]] if row is not None else -1)
            if n_required and min(nxt[1:1 + n_required]) < 0:
                continue                                  # a required body can no longer match
            key = tuple(nxt)
            j = index.get(key)
            if j is None:
                if len(order) >= MAX_STATES:
                    raise _refuse(keyword, path, f"more than {MAX_STATES} automaton states")
                j = index[key] = len(order)
                order.append(key)
            out[j] = out.get(j, 0) | mask
        edges.append(out)
    return edges, accepting


def _product2(dfas: list[LazyDFA], n_required: int, classes: list[tuple[int, tuple[int, ...]]], path: str,
              keyword: str) -> tuple[list[dict[int, int]], set[int]]:
    """`_product` of two DFAs, a pair of states kept as one int (no tuple per edge: a third less time).
    Its loop is `_product`'s on purpose: one loop keeping any number of states as one int, with an
    inner loop over the DFAs, took 7.4-8.4 ms of Snowplow---sp_333's compile against 5.5 here."""
    head, other = dfas
    wide = other.max_states + 2                       # the other's states, DEAD (-1) included
    pairs = [(mask, cls[0], cls[1]) for mask, cls in classes]
    start = head.initial * wide + other.initial + 1
    index = {start: 0}
    order = [start]
    edges: list[dict[int, int]] = []
    accepting: set[int] = set()
    for i, key in enumerate(order):
        checkpoint()                                      # (compiled: let other threads have the GIL)
        q0, q1 = divmod(key, wide)
        q1 -= 1
        if head.is_accepting(q0) and other.is_accepting(q1) == bool(n_required):
            accepting.add(i)
        first_row = head.row(q0)
        second_row = other.row(q1) if q1 >= 0 else None
        out: dict[int, int] = {}
        for mask, c0, c1 in pairs:
            first = first_row[c0]
            if first < 0:
                continue
            second = second_row[c1] if second_row is not None else -1
            if n_required and second < 0:
                continue                                  # the required body can no longer match
            nxt = first * wide + second + 1
            j = index.get(nxt)
            if j is None:
                if len(order) >= MAX_STATES:
                    raise _refuse(keyword, path, f"more than {MAX_STATES} automaton states")
                j = index[nxt] = len(order)
                order.append(nxt)
            out[j] = out.get(j, 0) | mask
        edges.append(out)
    return edges, accepting


def _coreachable(edges: list[dict[int, int]], accepting: set[int]) -> set[int]:
    """States from which an accepting state can be reached."""
    back: list[list[int]] = [[] for _ in edges]
    for i, out in enumerate(edges):
        for j in out:
            back[j].append(i)
    live, todo = set(accepting), list(accepting)
    while todo:
        for i in back[todo.pop()]:
            if i not in live:
                live.add(i)
                todo.append(i)
    return live


def _components(succ: dict[int, dict[int, int]]) -> list[list[int]]:
    """Strongly connected components (Tarjan's, iterative), each after every one it reaches."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    out: list[list[int]] = []
    for root in succ:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(succ[w])))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(comp)
    return out


def _to_node(edges: list[dict[int, int]], accepting: set[int], live: set[int]) -> Node:
    """A node for the automaton's language (live states only, start 0).

    Per strongly connected component, in an order where every component comes
    after those it reaches: a state on no cycle is its edges out, each to the
    node of the state it enters. A component on cycles has one state (the
    hub) written by state elimination, every path through the component and
    back to it. When the component's other states are on no cycle without the
    hub (a string's characters between two of them), each of those is then its
    edges out too; when more than two states enter the component, its other
    states are split the same way again (`_make_nodes`); else each state
    entering it gets the paths from it through the other states, by
    elimination again (nested cycles with one or two ways in, as in
    Github_hard---o82144, where splitting again cost more). All those nodes are
    shared, so the NFA builds each once and calls it from every edge into it:
    the node grows with the automaton, not with its paths. (Eliminating the
    component once per entering state, 41 entries of a 75-state component in
    maskbench-dev's Synthesized---draft2019_09_nonvalid_properties_id8_subschema1_not_2,
    took 18 of that schema's 35 ms; split at hubs, its compile takes 10 ms.)
    """
    succ = {i: {j: m for j, m in edges[i].items() if j in live} for i in live}
    comps = _components(succ)
    comp_of = {s: c for c, members in enumerate(comps) for s in members}
    entries: dict[int, set[int]] = {comp_of[0]: {0}}
    for i, out in succ.items():
        for j in out:
            if comp_of[i] != comp_of[j]:
                entries.setdefault(comp_of[j], set()).add(j)
    made: dict[int, Node] = {}
    for c, members in enumerate(comps):
        checkpoint()
        todo = entries.get(c)
        if not todo:
            continue
        if len(members) == 1 and members[0] not in succ[members[0]]:
            made[members[0]] = _edges_out(members[0], succ, accepting, made)
            continue
        inside = set(members)
        if len(members) > 1:
            hub = _hub(members, inside, succ)
            made[hub] = _paths(hub, inside, succ, accepting, made, last=hub)
            inside.discard(hub)
            rest = _components({i: {j: 0 for j in succ[i] if j in inside} for i in inside})
            if all(len(r) == 1 and r[0] not in succ[r[0]] for r in rest):
                for (x,) in rest:            # no cycle left: each after those it reaches
                    made[x] = _edges_out(x, succ, accepting, made)
                continue
            if len(todo - {hub}) > 2:        # many entries: the rest's own components, the same way
                _make_nodes(rest, succ, accepting, made)
                continue
        for e in sorted(todo):
            if e not in made:
                made[e] = _paths(e, inside, succ, accepting, made, last=None)
    return made[0]


def _make_nodes(comps: list[list[int]], succ: dict[int, dict[int, int]], accepting: set[int],
                made: dict[int, Node]) -> None:
    """Fill `made` for the states of `comps` (components, each after those it reaches, whose targets
    outside them have their nodes): as `_to_node` does, each component on cycles split again at a
    hub. A stack of tasks, not recursion: components nest as deep as the automaton is large."""
    tasks: list[list[int]] = list(reversed(comps))        # the first component on top
    while tasks:
        checkpoint()
        members = tasks.pop()
        if len(members) == 1 and members[0] not in succ[members[0]]:
            made[members[0]] = _edges_out(members[0], succ, accepting, made)
            continue
        inside = set(members)
        hub = _hub(members, inside, succ)
        made[hub] = _paths(hub, inside, succ, accepting, made, last=hub)
        inside.discard(hub)
        if inside:
            tasks.extend(reversed(_components({i: {j: 0 for j in succ[i] if j in inside} for i in inside})))


def _hub(members: list[int], inside: set[int], succ: dict[int, dict[int, int]]) -> int:
    """The state of a component on cycles whose node is made first: the one with the most edges
    within it. Most cycles pass one state (between two characters, for string bodies)."""
    return max(members, key=lambda x: (sum(j in inside for j in succ[x]) + sum(x in succ[i] for i in members), -x))


def _edges_out(e: int, succ: dict[int, dict[int, int]], accepting: set[int], made: dict[int, Node]) -> Node:
    """The node of a state on no cycle: its edges out, as `_paths` would write them."""
    leave = [EMPTY] if e in accepting else []
    leave += [Seq((ByteSet(mask), made[j])) for j, mask in succ[e].items()]
    return alt(*leave)


def _paths(e: int, inside: set[int], succ: dict[int, dict[int, int]], accepting: set[int],
           made: dict[int, Node], last: int | None) -> Node:
    """From `e`: paths through the states of `inside` (eliminated, `last` last), then out to the
    node `made` for the state they leave to, or ending at an accepting state."""
    start, final = -1, -2
    out: dict[int, dict[int, Node]] = {start: {e: EMPTY}}
    into: dict[int, dict[int, Node]] = {final: {}}
    for s in inside:
        out.setdefault(s, {})
        into.setdefault(s, {})
    into[e][start] = EMPTY
    for s in inside:
        leave = [EMPTY] if s in accepting else []
        for j, mask in succ[s].items():
            if j in inside:
                out[s][j] = into[j][s] = ByteSet(mask)
            else:
                leave.append(Seq((ByteSet(mask), made[j])))   # (not `seq`: it would splice the shared node)
        if leave:
            out[s][final] = into[final][s] = alt(*leave)
    def rank(x: int) -> tuple[bool, int, int]:
        # the state with the fewest paths through it goes first (keeps the expression small)
        return x == last, (len(into[x]) - (x in into[x])) * (len(out[x]) - (x in out[x])), x

    todo = set(inside)
    heap = [rank(x) for x in todo]           # a state's rank is pushed again whenever it changes
    heapq.heapify(heap)
    while todo:
        checkpoint()
        key = heapq.heappop(heap)
        k = key[2]
        if k not in todo or key != rank(k):
            continue                         # eliminated, or ranked since
        todo.discard(k)
        touched = [x for x in (*into[k], *out[k]) if x in todo and x != k]
        loop = out[k].pop(k, None)
        into[k].pop(k, None)
        middle = star(loop) if loop is not None else EMPTY
        for i, left in into[k].items():
            del out[i][k]
            for j, right in out[k].items():
                path = seq(left, middle, right)
                old = out[i].get(j)
                out[i][j] = into[j][i] = path if old is None else alt(old, path)
        for j in out[k]:
            del into[j][k]
        del out[k], into[k]
        for x in set(touched):
            heapq.heappush(heap, rank(x))
    return out[start].get(final, NOTHING)


def _dag_size(node: Node) -> int:
    """Distinct syntax nodes under `node` (shared ones counted once, as the NFA builds them once)."""
    seen: set[int] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        items = getattr(n, "items", None)
        if items is not None:
            todo.extend(items)
        elif getattr(n, "item", None) is not None:
            todo.append(n.item)
    return len(seen)
