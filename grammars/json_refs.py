"""Loading schemas and resolving local `$ref`s (`$defs`, pointers, `$anchor`, `$id`).

Only references inside the document are followed: JSON pointers (with `~0`,
`~1` and percent escapes), `$anchor`s and embedded resources named by `$id`
(resolved against the enclosing base URI). Anything else is a remote
reference and raises `UnsupportedSchemaError`.

Example:
    >>> r = Resolver({"$defs": {"a~b": {"type": "null"}}})
    >>> r.resolve("#/$defs/a~0b", "", "$")[0]
    {'type': 'null'}
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from grammars.errors import InvalidSchemaError, UnsupportedSchemaError
from grammars.json_values import json_equal
from grammars.native import checkpoint

__all__ = ["load_schema", "Resolver", "check_drafts", "draft_of"]

Schema = Any  # dict | bool


def load_schema(schema: Any) -> dict | bool:
    """A schema as a dict or bool, from a dict, a JSON string, or a pydantic model class.

    Example:
        >>> load_schema('{"type": "string"}')
        {'type': 'string'}
    """
    if isinstance(schema, (dict, bool)):
        return schema
    if isinstance(schema, (str, bytes)):
        try:
            out = json.loads(schema)
        except json.JSONDecodeError as e:
            raise InvalidSchemaError(f"schema is not valid JSON ({e.msg} at char {e.pos})", "$") from None
        if not isinstance(out, (dict, bool)):
            raise InvalidSchemaError("a schema must be an object or a boolean", "$", out)
        return out
    dump = getattr(schema, "model_json_schema", None)
    if callable(dump):
        return dump()
    raise InvalidSchemaError("expected a dict, a bool, a JSON string or a pydantic model", "$",
                             type(schema).__name__)


def draft_of(root: Schema) -> int:
    """The draft a document declares in its `$schema`: 4 (draft-03 and draft-04), 6, 7, or 2020
    (2019-09, 2020-12, and a document that declares none). `json_merge.LACKS` lists the keywords
    each lacks; in 4, 6 and 7 the siblings of a `$ref` are ignored."""
    return _declared(root) or 2020


def _declared(s: Schema) -> int | None:
    """The draft `s`'s own `$schema` names (as `draft_of` numbers them); None: none, or one unknown."""
    uri = s.get("$schema") if isinstance(s, dict) else None
    if not isinstance(uri, str):
        return None
    for marker, draft in _DRAFT_MARKERS:
        if marker in uri:
            return draft
    return None


_DRAFT_MARKERS = (("draft-03", 4), ("draft-04", 4), ("draft-06", 6), ("draft-07", 7), ("draft/2019-09", 2020),
                  ("draft/2020-12", 2020))
_DATA = frozenset(("enum", "const", "default", "examples"))
_NAMED = frozenset(("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"))


def check_drafts(root: Schema, draft: int) -> None:
    """Refuse a document whose subschemas declare (`$schema`) other drafts than its own `draft` where
    those drafts read one of its keywords differently.

    A validator reads a subschema by the draft in effect where it evaluates it: the nearest
    `$schema` on its way there, `$ref`s included (jsonschema switches at each one), so one
    subschema may be read by either draft. This compiler reads a document by one draft. Drafts
    that agree on every keyword the document uses give one reading; otherwise (`$ref` with other
    keywords beside it between draft 4-7 and 2019-09+, a keyword one of them lacks, draft-04's `id`)
    the schema is refused, naming the keyword and where it is, rather than read one way."""
    if all(_declared(s) in (None, draft) for _, s in _subschemas(root, False)[1:]):
        return                                        # (the usual case: no paths written)
    schemas = _subschemas(root, True)
    mixed: dict[int, str] = {}                        # another draft -> where it is first declared
    for path, s in schemas[1:]:
        declared = _declared(s)
        if declared is not None and declared != draft:
            mixed.setdefault(declared, path)
    if not mixed:
        return
    from grammars.json_merge import ANNOTATIONS, LACKS     # (imported here: it is not needed otherwise)

    drafts = {draft, *mixed}
    lacks = [set(LACKS[d]) for d in drafts]
    differ = set.union(*lacks) - set.intersection(*lacks)
    other, where = next(iter(mixed.items()))
    why = (f"the document is {_name(draft)} and its subschema at {where} declares {_name(other)}: a validator reads "
           "a subschema by the draft in effect where it evaluates it, and these drafts read")
    for path, s in schemas:
        for key in s:
            if key in differ:
                raise UnsupportedSchemaError(key, path, f"{why} `{key}` differently")
        if "$ref" in s and min(drafts) <= 7 and 2020 in drafts and any(k != "$ref" and k not in ANNOTATIONS for k in s):
            raise UnsupportedSchemaError("$ref", path, f"{why} the keywords beside a `$ref` differently")
        for key in ("id", "$id") if 4 in drafts else ():
            if isinstance(s.get(key), str):
                raise UnsupportedSchemaError(key, path, f"{why} a schema's URI differently (`id` in draft-04, `$id` later)")


def _name(draft: int) -> str:
    return "2020-12 (or 2019-09)" if draft == 2020 else f"draft-{draft:02d}"


def _subschemas(root: Schema, paths: bool) -> list[tuple[str, dict]]:
    """(path, schema) for every object of the document that may be evaluated as a schema, the root
    first, each once: the values of keywords (the entries of those that name schemas: `properties`,
    `$defs`, ...) and of unknown keys too (a `$ref` may point anywhere), never data (`enum`, `default`, ...).
    Without `paths`, every path is "$"."""
    out: list[tuple[str, dict]] = []
    seen: set[int] = set()
    todo: list[tuple[Any, str]] = [(root, "$")]
    while todo:
        node, path = todo.pop()
        if type(node) is list:
            todo.extend((v, f"{path}[{i}]" if paths else path) for i, v in enumerate(node))
            continue
        if type(node) is not dict or id(node) in seen:
            continue
        seen.add(id(node))
        out.append((path, node))
        if not len(out) & 63:
            checkpoint()                  # compiled: let other threads in (see `grammars.native`)
        for key, value in node.items():
            if key in _DATA:
                continue
            if key in _NAMED and type(value) is dict:
                todo.extend((v, f"{path}.{key}.{k}" if paths else path) for k, v in value.items())
            elif type(value) is dict or type(value) is list:
                todo.append((value, f"{path}.{key}" if paths else path))
    return out


def _claim(table: dict, key: Any, node: Schema, path: str, what: str) -> None:
    """Note that `node` at `path` declares `key` (a resource's URI or an anchor); a second, different
    schema declaring it makes every `$ref` to it ambiguous (validators differ on which one they
    take), so that is an error. The first `$anchor` or `$dynamicAnchor` of a schema keeps its key."""
    old = table.get(key)
    if old is None:
        table[key] = (node, path)
    elif old[0] is not node and not json_equal(old[0], node):
        raise InvalidSchemaError(f"{what} is declared twice (first at {old[1]}): which one a `$ref` to it "
                                 "means is ambiguous", path)


class Resolver:
    """Index of a document's resources and anchors, keyed by absolute URI."""

    def __init__(self, root: Schema, id_key: str = "$id") -> None:
        self.root = root
        self.id_key = id_key                # draft-04 names a schema's URI `id` (`draft_of` gives 4)
        self.base = ""
        self.resources: dict[str, tuple[Schema, str]] = {}
        self.anchors: dict[tuple[str, str], tuple[Schema, str]] = {}
        if isinstance(root, dict) and isinstance(root.get(self.id_key), str):
            self.base = urldefrag(root[self.id_key])[0]
        self.resources[self.base] = (root, "$")
        # The walk that finds nested `$id`s and anchors is made on the first `$ref` that
        # needs it: a JSON pointer into the root document (most refs) needs none.
        self._indexed = False
        # (ref, base) -> what it resolved to: a definition is referred to from many places
        # (Kubernetes-style schemas), and URL parsing was 2-3% of compiling the dev corpus
        self._resolved: dict[tuple[str, str], tuple[Schema, str, str]] = {}

    def _index(self, node: Any, base: str, path: str) -> None:
        checkpoint()                      # compiled: let other threads in (see `grammars.native`)
        if isinstance(node, list):
            for i, item in enumerate(node):
                self._index(item, base, f"{path}[{i}]")
            return
        if not isinstance(node, dict):
            return
        if isinstance(node.get(self.id_key), str) and path != "$":
            base = urldefrag(urljoin(base, node[self.id_key]))[0]
            if not node[self.id_key].startswith("#"):     # (a fragment alone is an anchor, below)
                _claim(self.resources, base, node, path, f"the resource {base!r}")
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                _claim(self.anchors, (base, node[key]), node, path, f"the anchor {node[key]!r}")
        if isinstance(node.get(self.id_key), str) and node[self.id_key].startswith("#"):  # draft-04/07 anchors
            _claim(self.anchors, (base, node[self.id_key][1:]), node, path, f"the anchor {node[self.id_key]!r}")
        for key, value in node.items():
            if key in _DATA:
                continue  # data, not subschemas
            self._index(value, base, f"{path}.{key}")

    def base_of(self, schema: dict, base: str) -> str:
        """The base URI inside `schema` (its own `$id` changes it)."""
        if isinstance(schema.get(self.id_key), str) and not schema[self.id_key].startswith("#"):
            return urldefrag(urljoin(base, schema[self.id_key]))[0]
        return base

    def resolve(self, ref: Any, base: str, path: str) -> tuple[Schema, str, str]:
        """(target schema, its base URI, its JSON path) of `$ref` at `path`."""
        if not isinstance(ref, str):
            raise InvalidSchemaError("`$ref` must be a string", path, ref)
        hit = self._resolved.get((ref, base))
        if hit is None:
            hit = self._resolved[(ref, base)] = self._resolve(ref, base, path)
        return hit

    def _resolve(self, ref: str, base: str, path: str) -> tuple[Schema, str, str]:
        if ref.startswith("#"):                 # within the base document: what urljoin + urldefrag give
            url, fragment = base, ref[1:]
        else:
            url, fragment = urldefrag(urljoin(base, ref))
        if not self._indexed and (url != self.base or not fragment.startswith("/") and fragment):
            self._indexed = True
            self._index(self.root, self.base, "$")
        if url not in self.resources:
            raise UnsupportedSchemaError("$ref", path, f"remote reference {ref!r} (only local references are resolved)")
        doc, doc_path = self.resources[url]
        if not fragment:
            return doc, url, doc_path
        if fragment.startswith("/"):
            return self._pointer(doc, url, doc_path, fragment, ref, path)
        hit = self.anchors.get((url, fragment))
        if hit is None:
            raise InvalidSchemaError(f"`$ref` names an unknown anchor {fragment!r}", path, ref)
        return hit[0], url, hit[1]

    def _pointer(self, doc: Schema, url: str, doc_path: str, fragment: str, ref: str,
                 path: str) -> tuple[Schema, str, str]:
        node, where, base = doc, doc_path, url
        for raw in unquote(fragment).split("/")[1:]:
            token = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
                where = f"{where}.{token}"
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
                where = f"{where}[{token}]"
            else:
                raise InvalidSchemaError("`$ref` points to nothing", path, ref)
            if isinstance(node, dict):
                base = self.base_of(node, base)
        if not isinstance(node, (dict, bool)):
            raise InvalidSchemaError("`$ref` must point to a schema", path, ref)
        return node, base, where
