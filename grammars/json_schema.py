"""JSON Schema (drafts 2020-12 and 7) -> byte-level grammar, exactly.

`json_schema_grammar(schema)` returns a `Grammar` whose language is the set
of JSON texts valid under the schema (up to the documented syntax choices
below). Anything that cannot be enforced exactly raises
`UnsupportedSchemaError(keyword, path)` unless `allow_approximate=True`, in
which case it is dropped with a warning (an over-approximation). Nothing is
dropped silently. Malformed schemas raise `InvalidSchemaError`.

Recursion (`$ref` cycles, the any-JSON-value rule) goes through `Ref` rules;
everything else is inlined, except the shared rests of objects with more
than 24 optional properties before the first required one (non-recursive
`Ref`s, one call level; see `json_objects`). Pass
`max_depth=grammar.info["max_depth"]` to `LazyDFA`: it bounds all nested rule
calls together, max_recursion_depth + max_any_depth + 1, so recursive `$ref`s
always get at least `max_recursion_depth` levels.

| keyword / option | support |
|---|---|
| `type` (string or list) | exact; `integer` accepts `-?(0|[1-9]\\d*)` only (not `1.0`, `1e2`, `-0`) |
| `enum`, `const` | exact, any JSON value; numbers by value (`1` = `1.0` = `1e0`), but spelled as integers beside `type: integer`; strings in every escape spelling; object keys in any order up to 4 keys, else schema order; values are filtered by the sibling keywords |
| `minimum` `maximum` `exclusiveMinimum` `exclusiveMaximum` | exact decimal comparison (draft-4/7 boolean form too); bounded `number`s use plain decimals + normalized scientific `[1-9](\\.\\d+)?e[+-]?\\d+` (other exponent forms rejected) |
| numbers (`numbers=`) | "double" (default): valid after `json.loads`, see `grammars.json_doubles` (floats <= 17 significant digits in [5e-324, 1.8e308], bounds on the parsed double, float `multipleOf` as validators divide: bounded ranges listed, unbounded refused); "exact": decimal semantics, the rows below |
| `multipleOf` | integers: any integer divisor (enumerated ranges, or suffix rules for 2^a5^b); numbers: `10^-k` (fraction digits, no exponent form), integer divisors, or bounded ranges of <= 4096 multiples; decimal semantics (`0.29` is a multiple of `0.01`, unlike float-based validators); else unsupported |
| `minLength` `maxLength` | exact, in code points (an escape or surrogate pair counts once) |
| `pattern` | ECMA-262, search semantics, over every JSON spelling of each character; lookaheads at the start (`^(?!X)Y`) by a product of automata; with min/maxLength an exact product on the syntax tree, past its size budget a product of automata (unsupported past 2,000 states); with a known `format`, a product of their automata (`json_string_sets`) |
| `format` | date, time, date-time, duration, email (dot-atom subset), hostname (<=253 chars subset), ipv4, ipv6, uri, uuid: exact per RFC, plain (unescaped) spelling; any other is an annotation, as 2020-12 has it (not checked, listed in the compile report, no warning) |
| `properties` `required` | exact; order = `properties` order, then required-only names; optional ones skippable; names written as JSON encoders write them (printable ASCII raw, never `\\u`-escaped) (n optional properties before the first required one cost ~n^2/2 member copies, ~2n^1.5 past 24) |
| `additionalProperties` | exact, default `true` (extra keys after the declared ones, never repeating a declared name; while an extra key still spells the start of a declared name, its printable ASCII is written raw, not `\\u`-escaped); `strict=True` makes the default `false` |
| `patternProperties` | exact: each group of names (the patterns it matches, or none: `additionalProperties`) by the automata; up to 4 patterns of different schemas |
| `propertyNames` | exact for declared names; extra keys: the strings valid under it (compiled as a string value, every keyword included), minus the declared names it admits (every spelling, a product of automata: `json_string_sets.difference`) |
| `minProperties` `maxProperties` | exact (counted over declared + additional members); unsupported when the counted layout exceeds the size budget (400k NFA states) |
| `items` `prefixItems` `minItems` `maxItems` | exact; draft-7 `items: [...]` + `additionalItems` too |
| `contains` `minContains` `maxContains` | exact on arrays (`json_arrays`), other types unaffected: at least `minContains` (default 1; 0: no lower bound) items valid under `contains`, any schema that compiles; `maxContains` exact when `contains` has a negation (`json_negation.negation`: types, enum/const, required, properties, not/allOf/anyOf of those), else unsupported; with `prefixItems`, `minItems` or `maxItems` a (position, count) product, unsupported past the size budget; `allOf` of two different `contains` unsupported; in draft-04/06/07 schemas, which lack some of these, see `json_merge.LACKS` |
| `allOf` | real merge (types intersect, bounds tighten, properties merge recursively, patternProperties union unless a side has additionalProperties, required union, anyOf/oneOf distribute); unmergeable pairs unsupported |
| `anyOf` | exact (each branch merged with the sibling keywords) |
| `oneOf` | exact: branches provably disjoint (types, enum values, a required discriminator property with distinct const/enum, or a member one requires and the other forbids) as they are; types of which two branches take every value (no type and only object keywords) left out of both; a branch that may overlap others holds with their negations (`json_negation.negation`: types, enum/const, bounds, required, properties, items, contains, pattern, a known format, `propertyNames: false`, dependencies, a nested oneOf, not/allOf/anyOf of those, through local `$ref`s; unknown keywords and formats, ignored when compiling, ignored there too; at most `json_branches.ONE_OF_NEGATIONS` in all); else unsupported (`allow_approximate`: compiled as anyOf) |
| `not` | exact for types, enum/const of scalars (numbers: excluded points; strings: complement of a finite set, or with other string keywords their strings minus the set, by `json_string_sets`), a `pattern` or a known `format` (strings it does not match, with any other string keywords: `json_string_sets`, a product of automata bounded by `MAX_STATES`; an unknown format, an annotation, excludes every string), and anyOf of those; and, rewritten as `allOf`/`anyOf` (`json_negation.negation`), for `not`, `allOf`, `anyOf`, `required`, `properties`, `contains` (without min/maxContains), `propertyNames: false` (an object with a member) and bounds (`minimum` ... `maxProperties`: a value of their type past them) of such forms (`not: {required: [a]}` is "an object without a") |
| `if` / `then` / `else` | exact when `if` has such a negation: (if and then) or (not if and else), e.g. a discriminator `{"properties": {"mode": {"const": ...}}, "required": ["mode"]}`; else unsupported |
| `$ref` `$defs` `definitions` `$anchor` `$id` | local refs, JSON pointers with `~0 ~1`; recursion via `Ref` rules, depth `max_recursion_depth`; remote refs unsupported; 2020-12 siblings of `$ref` are merged, draft-7 siblings ignored |
| `true` / `{}` / `false` | any JSON value (nesting <= `max_any_depth`) / nothing |
| `dependentRequired`, draft-7 `dependencies` | exact when the dependencies require names (arrays) or only require or forbid names (`{"required": [...]}`, `"properties": {"x": false}` or `{"not": {}}`), also as `dependentSchemas`, among at most 12 properties per object (`json_objects.DEPENDENCY_LIMIT`; no limit with `any_order`); names they mention that are not declared are members after the declared ones, with the `additionalProperties` schema; any other dependent schema is a condition (`json_merge.normalize`: not an object, no such member, or the schema holds) |
| `uniqueItems: true` | exact over at most `json_arrays.UNIQUE_VALUES` (10) distinct item values (enum/const, booleans and null, small integer ranges); else unsupported |
| `unevaluatedProperties` `unevaluatedItems` | exact where static (`Compiler._unevaluated`): `allOf`/`$ref` merged, no branches left; then `additionalProperties` / `items` (no effect beside those); beside branches or `contains` unsupported |
| other `if`s, `$dynamicRef`, other `uniqueItems` | unsupported (dropped with a warning under `allow_approximate`) |
| annotations (`title`, `description`, `default`, `examples`, `$comment`, `readOnly`, `deprecated`, `content*`, `discriminator`) | ignored; unknown keywords are ignored with a warning |
| `whitespace` | "default": after `{ [ ,` and before `} ]` <= 1 space, or 1 newline + <= 32 spaces/tabs; <= 1 space around `:` and before `,`; one such gap before/after the document. "compact": none. Or a `WhitespacePolicy` |
| `any_order` | members (declared, additional, pattern) in any order, each declared one at most once, exactly: the set taken is a 64-bit frame on the DFA's stack (`ast.AnyOrder`), O(n) NFA states; <= 62 properties per object (55 with `minProperties`/`maxProperties`, whose counts of optional members are <= 127), no `minProperties`/`maxProperties` together with dependencies: past those, that object keeps declared order, with a "declared order" note in the report |
| strings | all JSON escapes, `\\uXXXX` in either case, surrogate pairs; raw control characters and lone surrogates rejected |

Example:
    >>> from grammars.dfa import LazyDFA
    >>> g = json_schema_grammar({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}},
    ...                          "required": ["n"], "additionalProperties": False})
    >>> dfa = LazyDFA(g, max_depth=g.info["max_depth"])
    >>> [dfa.matches(s) for s in (b'{"n":3}', b'{"n": 0}', b'{}')]
    [True, False, False]
"""

from __future__ import annotations

import json
from typing import Any, Callable

from grammars.ast import (
    MAX_CODEPOINT, NOTHING, Alt, AnyOrder, Grammar, Node, Ref, Repeat, Seq, alt, byteset, optional, seq, star,
)
from grammars.errors import InvalidSchemaError, SchemaNote, StateBudgetError, UnsupportedSchemaError
from grammars.json_branches import branches_node
from grammars.json_checks import KNOWN_KEYWORDS, check_schema
from grammars.json_doubles import exact_value
from grammars.json_formats import DRAFT_FORMATS, FORMATS
from grammars.json_length import DEFAULT_SIZE_BUDGET
from grammars.json_merge import ANNOTATIONS, LACKS, UNEVALUATED, Merger, normalize
from grammars.json_negation import negation, plain_not
from grammars.json_number_keywords import as_decimal
from grammars.json_refs import Resolver, check_drafts, draft_of, load_schema
from grammars.json_typed import typed_node
from grammars.json_values import ANY_RULE, Whitespace, WhitespacePolicy, any_value_rule
from grammars.native import checkpoint
from grammars.utf8 import codepoints

try:
    import cython
except ImportError:  # the source runs as plain Python, without Cython: the decorator does nothing
    class cython:  # noqa: N801 - stands in for the module
        @staticmethod
        def cclass(cls: type) -> type:
            return cls

__all__ = ["json_schema_grammar", "load_schema", "WhitespacePolicy", "Compiler"]

NUMBER_POLICIES = ("double", "exact")
# Subschemas nested deeper than this are refused (deeper recursion runs on a big stack, `grammars.deep`).
MAX_NESTING = 2000


def json_schema_grammar(
    schema: Any, *, strict: bool = False, whitespace: str | WhitespacePolicy = "default",
    any_order: bool = False, max_recursion_depth: int = 16, max_any_depth: int = 8,
    allow_approximate: bool = False, numbers: str = "double", or_text: bool = False,
) -> Grammar:
    """Compile a JSON schema (dict, JSON string or pydantic model class) to a `Grammar`.

    Args:
        schema: the schema; see `load_schema`.
        strict: `additionalProperties` defaults to false instead of true.
        whitespace: "default", "compact" or a `WhitespacePolicy`.
        any_order: allow object members in any order (<= 62 properties per object; see the table).
        max_recursion_depth: nesting bound for recursive `$ref`s.
        max_any_depth: nesting bound inside unconstrained (any) values.
        allow_approximate: drop unsupported keywords with a warning instead of raising.
        numbers: "double" (default): every number stays valid after `json.loads`, bounds and
            `multipleOf` decided on the double it parses to (see `grammars.json_doubles`);
            "exact": arbitrary-precision decimal semantics, for readers that parse with `Decimal`.
        or_text: the document, or any text whose first character after JSON
            whitespace is not ``{`` (a reply that may or may not be a tool call,
            OpenAI's ``tool_choice: "auto"``): the two never overlap, so the
            output's first non-space character says which it is.

    Raises:
        UnsupportedSchemaError: a keyword cannot be enforced exactly.
        InvalidSchemaError: the schema is malformed.

    Example:
        >>> g = json_schema_grammar({"type": "boolean"}, whitespace="compact")
        >>> sorted(g.rules), g.info["max_depth"]
        (['start'], 25)
    """
    for name, value in (("max_recursion_depth", max_recursion_depth), ("max_any_depth", max_any_depth)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    if numbers not in NUMBER_POLICIES:
        raise ValueError(f"numbers must be one of {', '.join(map(repr, NUMBER_POLICIES))}, got {numbers!r}")
    policy = WhitespacePolicy.named(whitespace)
    root = load_schema(schema)
    c = Compiler(root, strict=strict, ws=Whitespace.of(policy), any_order=any_order,
                 allow_approximate=allow_approximate, numbers=numbers)
    body = c.root_node()
    start = seq(c.ws.around, body, c.ws.around)
    rules = {"start": alt(start, _NOT_A_DOCUMENT) if or_text else start, **c.rules}
    info = {"max_depth": max_recursion_depth + max_any_depth + 1, "whitespace": policy, "labels": c.labels,
            "tries": c.tries, "max_recursion_depth": max_recursion_depth, "max_any_depth": max_any_depth,
            "kind": "JSON schema", "empty_at": c.empty, "report": _dedup(c.notes), "numbers": numbers,
            "prelude": ANY_RULE if ANY_RULE in c.rules else None,
            # the document is this policy's gap, then a value (never starting with whitespace): the
            # first mask walks it the short way (`constrained.lead_gap`)
            "leading_gap": policy if policy.around_document and not or_text else None,
            # the path of each rule's own subschema, whose parts an NFA does not defer (`grammars.nfa`)
            "homes": {"start": "$", **{name: name[4:] for name in c.rules if name.startswith("ref:")}}}
    return Grammar(rules, "start", info, check_refs=False)     # the compiler defines every rule it refers to


# `or_text`'s other branch: JSON whitespace, then nothing or a character other than "{", then any text.
_NOT_A_DOCUMENT: Node = seq(
    star(byteset(b" \t\n\r")),
    optional(seq(codepoints([(0, 0x08), (0x0B, 0x0C), (0x0E, 0x1F), (0x21, 0x7A), (0x7C, MAX_CODEPOINT)]),
                 star(codepoints([(0, MAX_CODEPOINT)])))))


def _dedup(notes: list[SchemaNote]) -> tuple[SchemaNote, ...]:
    """One note per (keyword, path, kind): a subschema can be visited more than once."""
    return tuple({(n.keyword, n.path, n.kind): n for n in notes}.values())


def _dicts(doc: Any) -> list[dict]:
    """Every object in a JSON document, once each (iteratively: documents may be deep)."""
    out: list[dict] = []
    seen: set[int] = set()
    todo = [doc]
    while todo:
        x = todo.pop()
        if type(x) is dict:
            if id(x) not in seen:
                seen.add(id(x))
                out.append(x)
                todo.extend(x.values())
        elif type(x) is list:
            todo.extend(x)
    return out


@cython.cclass
class Compiler:
    """Walks one schema document; `rules` collects the recursive rules.

    Compiled, it is a C extension type whose tables are C slots (`json_schema.pxd`).

    Example:
        >>> from grammars.ast import literal
        >>> c = Compiler({"type": "null"}, ws=Whitespace(WhitespacePolicy()))
        >>> c.root_node() == literal(b"null")
        True
    """

    def __init__(self, root: Any, *, ws: Whitespace, strict: bool = False, any_order: bool = False,
                 allow_approximate: bool = False, numbers: str = "double") -> None:
        self.root, self.ws, self.strict = root, ws, strict
        self.numbers = numbers
        self.value = exact_value if numbers == "double" else as_decimal   # a schema number, as compared
        self.any_order, self.approximate = any_order, allow_approximate
        self.draft = draft_of(root)
        check_drafts(root, self.draft)
        self.resolver = Resolver(root, "id" if self.draft == 4 else "$id")
        self.merger = Merger(self.resolver.resolve, self.draft, self.resolver.base)
        self.rules: dict[str, Node] = {}
        self._stack: set[int] = set()
        self._rule_of: dict[int, str] = {}
        self._inline: dict[int, Node] = {}
        # pattern -> its string bodies, and its automaton for tests at compile time (`json_patterns`)
        self.pattern_bodies: dict[str, Node] = {}
        self.matchers: dict[str, Any] = {}
        self.string_bodies: dict[tuple, Node] = {}   # string keywords -> their body (`json_string_keywords`)
        self.budget = DEFAULT_SIZE_BUDGET
        self._acceptors: dict[int, tuple[Any, Any]] = {}
        # id(node) -> (node, JSON path): where each part of the grammar comes from (see `grammars.nfa`)
        self.labels: dict[int, tuple[Node, str]] = {}
        self.tries: dict[int, tuple] = {}        # key complements the NFA builds from their tries
        self._depth = 0                          # nesting of `node` calls (see MAX_NESTING)
        self.empty: list[str] = []               # paths of subschemas that match nothing, innermost first
        self.notes: list[SchemaNote] = []        # the compile report: keywords ignored or not enforced
        # (the schemas' text, base) of the merged `patternProperties` values being compiled (see
        # `json_objects._pattern_member`)
        self.merged_patterns: set[tuple] = set()
        # (the schema's text, base) of the compile-time value checks in progress (see `accepts`)
        self.checking: set[tuple] = set()
        self._documents: set[int] | None = None   # ids of the user's schema objects (`_later_draft`)
        self._lacking: bool | None = None          # (`lacks_keywords`)

    # -- entry points -----------------------------------------------------------

    def root_node(self) -> Node:
        return self._target(self.root, self.resolver.base, "$")

    def node(self, s: Any, path: str, base: str) -> Node:
        """The node of JSON texts valid under the subschema `s` (at `path`), labeled with its path."""
        checkpoint()                     # compiled: let other threads in (see `grammars.native`)
        if self._depth >= MAX_NESTING:
            where = path if len(path) <= 160 else f"{path[:80]}...{path[-60:]}"
            raise StateBudgetError(MAX_NESTING, f"the subschema at {where}", unit="levels of nesting (a recursive "
                                   "`$ref` merged with other keywords, allOf or siblings, unrolls without end)",
                                   option=None)
        self._depth += 1
        try:
            out = self._node(s, path, base)
        finally:
            self._depth -= 1
        if out == NOTHING and len(self.empty) < 8:
            self.empty.append(path)
        # parents flatten sequences (`seq`), so a sequence's own items are labeled too (an object's
        # body among them: an `AnyOrder`, with `any_order`, is deferred by a lazy NFA as an `Alt` is)
        for part in (out, *(out.items if type(out) is Seq else ())):
            if type(part) in (Seq, Alt, Repeat, AnyOrder) and id(part) not in self.labels:
                self.labels[id(part)] = (part, path)   # the node is kept alive, so its id stays unique
        return out

    def _node(self, s: Any, path: str, base: str) -> Node:
        if s is True:
            return self.any()
        if s is False:
            return NOTHING
        if not isinstance(s, dict):
            raise InvalidSchemaError("a schema must be an object or a boolean", path, s)
        s = check_schema(s, path, self.approximate, notes=self.notes, draft=self.draft)
        base = self.resolver.base_of(s, base)
        if self.draft != 2020 and not s.keys().isdisjoint(LACKS[self.draft]):
            self._later_draft(s, path)
        s = normalize(s, self.draft)
        merged = False                         # `normalize` keeps checked keywords well-formed; merging may not
        if "unevaluatedProperties" in s or "unevaluatedItems" in s:
            s, merged = self._unevaluated(s, path, base), True
            if not isinstance(s, dict):
                return self.node(s, path, base)
        if "$ref" in s:
            if all(k in ANNOTATIONS for k in s if k != "$ref"):
                return self.ref(s["$ref"], path, base)
            s, merged = self.flatten(s, path, base), True
        if isinstance(s, dict) and "allOf" in s:
            branches = s["allOf"]
            if isinstance(branches, list) and len(branches) == 1 and all(k in ANNOTATIONS for k in s if k != "allOf"):
                # `allOf: [x]` is x: compiled as such, a `$ref` in it stays a (possibly recursive) rule
                return self.node(branches[0], f"{path}.allOf[0]", base)
            s, merged = self.flatten(s, path, base), True
        if not isinstance(s, dict):
            return self.node(s, path, base)
        if merged:
            s = check_schema(s, path, self.approximate, warn_unknown=False, notes=self.notes, draft=self.draft)
        if "not" in s and not plain_not(s["not"]):    # (its own, or one an allOf branch brought in)
            return self.node(self._not_as_negation(s, path, base), path, base)
        if "anyOf" in s or "oneOf" in s:
            return branches_node(self, s, path, base)
        return typed_node(self, s, path, base)

    def _not_as_negation(self, s: dict, path: str, base: str) -> dict:
        """`s` with a `not` that `json_typed` cannot exclude directly replaced by its negation, found with
        the subschema's `$ref`s and `allOf`s resolved (`normalize` had none without them)."""
        why: list[str] = []
        neg = negation(s["not"], self.resolving(f"{path}.not", base), why, f"{path}.not", self.draft)
        if neg is None:
            raise UnsupportedSchemaError("not", path, "the values it rules out have no exact form here"
                                         + (f": {why[0]}" if why else ""))
        rest = {k: v for k, v in s.items() if k != "not"}
        return {**rest, "allOf": [*rest.get("allOf", []), neg]}

    def _unevaluated(self, s: dict, path: str, base: str) -> Any:
        """`s` with `unevaluatedProperties` / `unevaluatedItems` where what they see does not depend on
        the instance: its `$ref`s and `allOf`s merged in (`flatten`; one of those holding its own
        `unevaluated*` is refused by the merger), no `anyOf`/`oneOf` left (`if`, `not` and dependent
        schemas are those by now). Then `unevaluatedProperties` is `additionalProperties` (the names
        that neither `properties` nor `patternProperties` evaluate), and changes nothing beside an
        `additionalProperties`, which evaluates every other name; `unevaluatedItems` is `items`
        after `prefixItems`, and changes nothing beside an `items`. Beside `contains` (which
        evaluates the items it matches) or branches, refused (dropped with a note under
        `allow_approximate`)."""
        keys = [k for k in UNEVALUATED if k in s]
        flat = self.flatten({k: v for k, v in s.items() if k not in UNEVALUATED}, path, base)
        if flat is False:
            return False
        flat = {} if flat is True else dict(flat)
        if any(k in flat for k in UNEVALUATED):         # a referenced schema's own: applied in its scope first
            flat = self._unevaluated(flat, path, base)
            if not isinstance(flat, dict):
                return flat
        for key in keys:
            value = s[key]
            if value is True:
                continue
            why = None
            if "anyOf" in flat or "oneOf" in flat:
                why = "beside anyOf/oneOf/if/dependentSchemas: what is evaluated depends on which branches hold"
            elif key == "unevaluatedItems" and "contains" in flat:
                why = "beside contains, which evaluates the items it matches"
            if why is not None:
                if key in LACKS[self.draft]:       # as the draft's validators do: exact for it
                    self.notes.append(SchemaNote(key, path, "later draft", f"draft-{self.draft:02d}'s validators "
                                                 f"ignore it, and it is ignored here: enforcing it is not exact ({why})"))
                    continue
                if not self.approximate:
                    raise UnsupportedSchemaError(key, path, why)
                self.notes.append(SchemaNote(key, path, "approximated", why))
                continue
            evaluates_rest = "additionalProperties" if key == "unevaluatedProperties" else "items"
            if evaluates_rest not in flat:
                flat[evaluates_rest] = value
        return flat

    def lacks_keywords(self) -> bool:
        """Whether the document uses a keyword its draft lacks (`json_merge.LACKS`) anywhere, even as
        a property's name: only then can a subschema read inside a negation differ from it as written."""
        if self._lacking is None:
            lacks = LACKS[self.draft]
            self._lacking = any(not d.keys().isdisjoint(lacks) for d in _dicts(self.resolver.root))
        return self._lacking

    def _later_draft(self, s: dict, path: str) -> None:
        """Report the keywords of a later draft in a schema of the user's (not one the compiler
        wrote, a negation say): enforced, and ignored inside negations (`json_merge.LACKS`)."""
        if self._documents is None:
            self._documents = {id(d) for d in _dicts(self.resolver.root)}
        if id(s) not in self._documents:
            return
        name = f"draft-{self.draft:02d}"
        for key in LACKS[self.draft]:
            if key in s:
                self.notes.append(SchemaNote(key, path, "later draft", f"{name}'s validators ignore it: enforced "
                                             "here and ignored inside negations, so what passes is valid "
                                             f"under both {name} and 2020-12"))

    def any(self) -> Node:
        if ANY_RULE not in self.rules:
            self.rules[ANY_RULE] = any_value_rule(self.ws, self.numbers)
        return Ref(ANY_RULE)

    def flatten(self, s: Any, path: str, base: str, negated: bool = False) -> Any:
        """`s` with its `$ref` and `allOf` merged in; `negated`: read inside a negation, without the
        keywords the schema's draft lacks (`json_merge.LACKS`)."""
        merger = self.merger
        merger.base = base
        if not negated:
            return merger.flatten(s, path)
        outer, merger.negated = merger.negated, True
        try:
            return merger.flatten(s, path)
        finally:
            merger.negated = outer

    # -- references -------------------------------------------------------------

    def ref(self, ref: Any, path: str, base: str) -> Node:
        target, tbase, tpath = self.resolver.resolve(ref, base, path)
        return self._target(target, tbase, tpath)

    def _target(self, target: Any, base: str, path: str) -> Node:
        """Inline a ref target, or turn it into a rule when it is reached again while compiling it."""
        if isinstance(target, bool):
            return self.node(target, path, base)
        key = id(target)
        if key in self._rule_of:
            return Ref(self._rule_of[key])
        if key in self._inline:
            return self._inline[key]
        if key in self._stack:
            self._rule_of[key] = f"ref:{path}"
            return Ref(self._rule_of[key])
        self._stack.add(key)
        try:
            body = self.node(target, path, base)
        finally:
            self._stack.discard(key)
        if key in self._rule_of:
            self.rules[self._rule_of[key]] = body
            return Ref(self._rule_of[key])
        self._inline[key] = body
        return body

    def resolving(self, path: str, base: str) -> Callable[[Any], Any]:
        """`json_negation.negation`'s `resolve`: a subschema with its `$ref` and `allOf` merged in
        (`flatten`), without what compiling it ignores (unknown keywords, a `format` not known) or what a
        negation must (a keyword or a `format` the schema's draft does not define: `json_merge.LACKS`,
        `json_formats.DRAFT_FORMATS`)."""

        formats = DRAFT_FORMATS.get(self.draft, FORMATS)   # (a format the schema's draft lacks: ignored)

        def resolve(s: Any) -> Any:
            flat = self.flatten(s, path, base, negated=True)
            if isinstance(flat, dict) and any(k not in KNOWN_KEYWORDS or k == "format" for k in flat):
                flat = {k: v for k, v in flat.items()
                        if k in KNOWN_KEYWORDS and not (k == "format" and isinstance(v, str) and v not in formats)}
            return flat

        return resolve

    def string_node(self, schema: Any, path: str, base: str) -> Node:
        """The JSON strings valid under `schema`, quoted (for `propertyNames`: names are strings
        with a value's spellings). Compiled as a value with every keyword, `not`, `anyOf`, `oneOf`
        and `if` too."""
        return self.node({"allOf": [{"type": "string"}, schema]}, path, base)

    # -- membership tests at compile time -----------------------------------------

    def accepts(self, schema: Any, value: Any, path: str, base: str) -> bool:
        """Whether `value` is valid under `schema` (by running its automaton)."""
        from grammars.dfa import LazyDFA

        hit = self._acceptors.get(id(schema))
        if hit is None or hit[0] is not schema:
            # A separate compiler: compact whitespace, and its own recursion rules. The checks in
            # progress are shared down the chain of such compilers: a check that needs itself (an
            # `enum` checked against keywords beside it that `$ref` back to it) would otherwise make
            # a new compiler per level, without end (compiled, until the C stack overflowed)
            key = (json.dumps(schema, sort_keys=True, default=repr), base)   # by content: checks make new dicts
            if key in self.checking:
                raise UnsupportedSchemaError("$ref", path, "checking a value against this schema at compile time "
                                             "needs the same check again, through a recursive `$ref`")
            sub = Compiler(self.root, ws=Whitespace.of(WhitespacePolicy.named("compact")), strict=self.strict,
                           allow_approximate=self.approximate, numbers=self.numbers)
            sub.checking = self.checking
            self.checking.add(key)
            try:
                node = sub.node(schema, path, base)
            finally:
                self.checking.discard(key)
            # (its tries and automata noted: the NFA builds those from the notes, not their nodes)
            grammar = Grammar({"start": node, **sub.rules}, "start", {"tries": sub.tries}, check_refs=False)
            hit = (schema, LazyDFA(grammar, max_depth=64))
            self._acceptors[id(schema)] = hit
        return hit[1].matches(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())

