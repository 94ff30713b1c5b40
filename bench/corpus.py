"""Benchmark corpora in the MaskBench layout: one JSON file per schema.

Each file holds ``{"schema": ..., "tests": [{"data": ..., "valid": bool,
"description": str}, ...]}``. Loading checks every `valid` flag with the
oracle (`bench.oracle`) and fails loudly on a mislabeled test, so a wrong
corpus can never make an engine look better or worse than it is.

`build_corpus` writes `bench/corpus/` from `tests/schema_corpus.py` (the
compiler's own keyword table) plus `bench.api_shapes` (realistic API shapes).
Object members in `data` are stored in schema order (`oracle.canonical`):
every engine benchmarked emits properties in that order by default.

Example:
    >>> cases = load_corpus(DEFAULT_CORPUS)
    >>> len(cases) > 70 and all(c.tests for c in cases)
    True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from bench.oracle import canonical, is_valid, key_order, strict_schema

__all__ = ["Case", "CorpusError", "DEFAULT_CORPUS", "load_corpus", "build_corpus", "QUICK"]

DEFAULT_CORPUS = Path(__file__).parent / "corpus"

# `--quick`: a few schemas of each kind, for a run of a minute or two.
QUICK = ("boolean", "int_range", "string_length", "pattern_anchored", "format_date", "enum_strings",
         "object_required", "nested_objects", "array_of_objects", "anyOf_types", "recursive_tree",
         "tool_call", "api_tool_call_weather", "api_order", "api_file_tree", "api_event")


class CorpusError(ValueError):
    """A corpus file is malformed or a test's `valid` flag disagrees with the oracle."""


@dataclass(frozen=True)
class Case:
    """One schema and its tests (`tests[i]` = {"data", "valid", "description"})."""

    name: str
    schema: Any
    tests: tuple[dict, ...]

    @property
    def n_valid(self) -> int:
        return sum(1 for t in self.tests if t["valid"])


def load_corpus(directory: str | Path, names: Iterable[str] | None = None) -> list[Case]:
    """Read and check every ``*.json`` case in `directory` (sorted by name).

    Args:
        directory: a folder in the MaskBench layout.
        names: keep only these case names (file stems); all when None.

    Raises:
        CorpusError: a file is malformed, a wanted name is missing, or a `valid` flag is wrong.
    """
    directory = Path(directory)
    files = sorted(directory.glob("*.json"))
    if not files:
        raise CorpusError(f"no *.json schema files in {str(directory)!r}")
    wanted = None if names is None else set(names)
    cases = [_read(f) for f in files if wanted is None or f.stem in wanted]
    if wanted is not None and len(cases) != len(wanted):
        missing = sorted(wanted - {c.name for c in cases})
        raise CorpusError(f"cases {missing} not found in {str(directory)!r}")
    for case in cases:
        check_labels(case)
    return cases


def check_labels(case: Case) -> None:
    """Raise `CorpusError` if the oracle disagrees with any test's `valid` flag."""
    wrong = [t for t in case.tests if is_valid(case.schema, t["data"]) != t["valid"]]
    if wrong:
        shown = ", ".join(f"{t['data']!r} labeled valid={t['valid']}" for t in wrong[:3])
        raise CorpusError(f"{case.name}: {len(wrong)} mislabeled test(s) per jsonschema: {shown}")


def _read(path: Path) -> Case:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise CorpusError(f"cannot read corpus file {str(path)!r}: {e}") from None
    if not isinstance(doc, dict) or "schema" not in doc or not isinstance(doc.get("tests"), list):
        raise CorpusError(f"{str(path)!r} must hold {{'schema': ..., 'tests': [...]}}")
    for i, t in enumerate(doc["tests"]):
        if not isinstance(t, dict) or "data" not in t or not isinstance(t.get("valid"), bool):
            raise CorpusError(f"{str(path)!r}: tests[{i}] needs 'data' and a boolean 'valid', got {t!r:.80}")
    tests = tuple({"description": t.get("description", ""), **t} for t in doc["tests"])
    return Case(path.stem, doc["schema"], tests)


def _entries() -> list[dict]:
    from bench.api_shapes import SHAPES
    from tests.schema_corpus import CORPUS

    out = []
    for entry in CORPUS:
        schema = entry["schema"]
        if entry.get("options", {}).get("strict"):
            schema = strict_schema(schema)          # a compiler option, made explicit for the other engines
        elif entry.get("options"):
            continue                          # options no other engine can express
        out.append({"name": entry["name"], "schema": schema, "valid": entry["valid"], "invalid": entry["invalid"]})
    return out + list(SHAPES)


def build_corpus(directory: str | Path = DEFAULT_CORPUS) -> list[Path]:
    """Write one checked case file per schema into `directory`; returns the paths written.

    Raises:
        CorpusError: a source instance is mislabeled (nothing is written then).
    """
    directory = Path(directory)
    docs = {}
    for e in _entries():
        order = key_order(e["schema"])
        tests = [{"data": canonical(v, order), "valid": ok, "description": f"{'valid' if ok else 'invalid'} #{i}"}
                 for ok, values in ((True, e["valid"]), (False, e["invalid"])) for i, v in enumerate(values)]
        check_labels(Case(e["name"], e["schema"], tuple(tests)))
        docs[e["name"]] = {"schema": e["schema"], "tests": tests}
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, doc in docs.items():
        path = directory / f"{name}.json"
        path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        paths.append(path)
    return paths
