"""The compiled (Cython) copies of `grammars`' modules: used when fresh, never when stale, same automata.

`grammars.native` loads ``grammars/_compiled/<name>_<hash>/<name>`` only
while the source hashes to `<hash>`. These tests check that the installed
build is in use, that editing a source makes that module run from its source
again, and that the compiled and the source compilers build identical NFAs
(and refuse the same schemas with the same messages) on the hand-written
corpus, the regex suite's patterns and, where it is present, a sample of
``../shared/corpus/maskbench-dev``.

CI sets ``CONSTRAINED_REQUIRE_NATIVE=1``: there, a build that compiled
nothing fails instead of quietly testing the Python source twice.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import grammars
from grammars import native

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "corpus" / "maskbench-dev"
COMPILED = native.compiled_modules()
needs_build = pytest.mark.skipif(not any(COMPILED.values()),
                                 reason="no compiled module (no C compiler or Cython at install time)")


def test_a_build_is_there_where_required() -> None:
    if os.environ.get("CONSTRAINED_REQUIRE_NATIVE") != "1":
        pytest.skip("CONSTRAINED_REQUIRE_NATIVE is not set")
    missing = [name for name, fresh in COMPILED.items() if not fresh]
    assert not missing, f"no compiled copy matching the source of {missing}: reinstall (pip install -e .)"


@needs_build
def test_fresh_compiled_modules_are_the_ones_imported() -> None:
    import grammars.fragments  # noqa: F401 - imported for the check
    import grammars.json_schema  # noqa: F401
    import grammars.nfa  # noqa: F401

    if not native.enabled():
        assert native.loaded() == []
        return
    for name in ("fragments", "json_schema", "nfa"):
        if COMPILED[name]:
            assert name in native.loaded()
            assert sys.modules[f"grammars.{name}"].__file__.endswith(tuple(_suffixes()))


@needs_build
def test_an_edited_source_runs_from_source(tmp_path: Path) -> None:
    """A copy of the package with ast.py edited: ast comes from its source, fragments stays compiled."""
    package = tmp_path / "grammars"
    shutil.copytree(Path(grammars.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    with open(package / "ast.py", "a") as f:
        f.write("\n# edited after the build\n")
    probe = ("import grammars.ast, grammars.fragments, grammars.native as n;"
             "print(grammars.ast.__file__); print(grammars.fragments.__file__); print(n.loaded())")
    out = _python(probe, tmp_path).splitlines()
    assert out[0] == str(package / "ast.py")
    assert "ast" not in out[2]
    if COMPILED["fragments"]:
        assert out[1].startswith(str(package / "_compiled" / "fragments_")) and "fragments" in out[2]


@needs_build
def test_a_build_with_nothing_to_compile_keeps_the_compiled_modules(tmp_path: Path) -> None:
    """`setup.py build_ext` without Cython or with CONSTRAINED_NATIVE=0 compiles nothing; the compiled
    copies of the current sources stay (they used to be dropped as if stale)."""
    shutil.copytree(Path(grammars.__file__).parent, tmp_path / "grammars", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.py", tmp_path)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    before = sorted(p.name for p in (tmp_path / "grammars" / "_compiled").iterdir())
    env = {**os.environ, "CONSTRAINED_NATIVE": "0"}
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "grammars" / "_compiled").iterdir()) == before
    assert before


@needs_build
def test_compiled_and_source_build_the_same_automata() -> None:
    compiled = json.loads(_python(f"import sys; sys.path.insert(0, {str(ROOT)!r});"
                                  "from tests.test_native import digests; digests()", ROOT))
    source = json.loads(_python(f"import sys; sys.path.insert(0, {str(ROOT)!r});"
                                "from tests.test_native import digests; digests()", ROOT, native=False))
    assert compiled["loaded"] and not source["loaded"]
    assert len(compiled["cases"]) > 150
    differ = [k for k in source["cases"] if compiled["cases"].get(k) != source["cases"][k]]
    assert not differ, f"{len(differ)} cases differ, e.g. {differ[:5]}"
    assert compiled["cases"].keys() == source["cases"].keys()


@needs_build
def test_compiled_syntax_nodes_are_not_tracked_by_the_gc() -> None:
    """Compiled, the node classes are C types the cyclic GC skips (the syntax a lazy FSM keeps costs no collection)."""
    import gc

    from grammars import ast

    if not (native.enabled() and COMPILED["ast"]):
        pytest.skip("grammars.ast runs from its source here")
    nodes = [ast.ByteSet(3), ast.Seq((ast.ByteSet(1), ast.Ref("x"))), ast.Alt((ast.EMPTY,)),
             ast.Repeat(ast.ANY_BYTE, 1, None), ast.Ref("x")]
    assert not any(gc.is_tracked(n) for n in nodes)
    # nor their item tuples (nodes only), untracked when made, not at the next collection
    made = [ast.seq(ast.literal(b"ab"), ast.star(ast.byte_range(48, 57))), ast.alt(ast.literal(b"x"), ast.literal(b"yz"))]
    assert all(len(n.items) > 1 and not gc.is_tracked(n.items) for n in made + nodes[1:2])
    with pytest.raises(AttributeError):
        nodes[1].items = ()                              # immutable, as the source's nodes are by convention


def test_the_source_runs_without_cython(tmp_path: Path) -> None:
    """`grammars.ast` imports `cython` for its decorators; without Cython installed, the source still runs."""
    probe = ("import sys\n"
             "class NoCython:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name == 'cython' or name.startswith('Cython'):\n"
             "            raise ImportError(name)\n"
             "sys.meta_path.insert(0, NoCython())\n"
             "from grammars import ast, native\n"
             "from grammars.json_schema import json_schema_grammar\n"
             "from grammars.nfa import NFA\n"
             "a, b = ast.seq(ast.literal(b'ab'), ast.Ref('x')), ast.seq(ast.literal(b'ab'), ast.Ref('x'))\n"
             "assert a == b and hash(a) == hash(b) and a is not b, (a, b)\n"
             "g = json_schema_grammar({'type': 'object', 'properties': {'a': {'type': 'integer'}}})\n"
             "print(NFA(g).num_states > 0, native.loaded(), ast.__file__.endswith('ast.py'), repr(ast.Ref('x')), isinstance(ast.cython, type))\n")
    out = _python(probe, ROOT, native=False).split()
    assert out == ["True", "[]", "True", "Ref(name='x')", "True"]     # the last: the stand-in, not Cython's module


def test_a_long_compile_lets_other_threads_run() -> None:
    """Compiled code holds the GIL until it calls into Python (`grammars.native.checkpoint`):
    while a 60,000-string enum compiles, a thread that wakes every millisecond is never kept
    waiting for a large share of the compile (without the checkpoints: 354 of 620 ms)."""
    import gc
    import random
    import threading
    import time

    from grammars.json_schema import json_schema_grammar
    from grammars.nfa import NFA

    rnd = random.Random(0)
    schema = {"enum": ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(12)) for _ in range(60_000)]}
    gaps: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    # Neither the modules a first compile imports (a cold disk after a build) nor a full pass of the
    # cyclic GC is what this checks, and each holds the GIL whoever runs it: after two rebuilds, a
    # first run of this test alone saw one gap of 0.30 s
    small = json_schema_grammar({"enum": ["ab", "cd"]})
    NFA(small, max_depth=int(small.info.get("max_depth", 64)))
    gc.collect()
    gc.disable()
    ticker.start()
    start = time.perf_counter()
    try:
        grammar = json_schema_grammar(schema)
        NFA(grammar, max_depth=int(grammar.info.get("max_depth", 64)))
    finally:
        took = time.perf_counter() - start
        done.set()
        ticker.join()
        gc.enable()
    assert len(gaps) > 10
    assert max(gaps) < 0.25 * took, (max(gaps), took)


def digests() -> None:
    """Print, as JSON, a digest of the NFA (or the error) of every case (run in a subprocess)."""
    from bench.regex_corpus import regex_cases
    from grammars.errors import ConstraintError
    from grammars.json_schema import json_schema_grammar
    from grammars.nfa import NFA
    from grammars.regex import regex_grammar

    schemas = {p.name: json.loads(p.read_text())["schema"] for p in sorted((ROOT / "bench" / "corpus").glob("*.json"))}
    shared = sorted(SHARED.glob("*.json"))[::4] if SHARED.is_dir() else []
    schemas.update({p.name: json.loads(p.read_text())["schema"] for p in shared})
    patterns = [str(case.schema) for case in regex_cases(SHARED if SHARED.is_dir() else ROOT / "bench" / "corpus")]
    cases: dict[str, str] = {}
    for name, schema in schemas.items():
        cases[f"schema {name}"] = _digest(lambda: json_schema_grammar(schema), NFA, ConstraintError)
    for i, pattern in enumerate(patterns):
        cases[f"regex {i} {pattern[:40]}"] = _digest(lambda: regex_grammar(pattern), NFA, ConstraintError)
    print(json.dumps({"loaded": native.loaded(), "cases": cases}))


def _digest(make, nfa_class, errors) -> str:  # noqa: ANN001
    import numpy as np

    try:
        grammar = make()
        nfa = nfa_class(grammar, max_depth=int(grammar.info.get("max_depth", 64)))
    except errors as e:
        return f"{type(e).__name__}: {e}"
    h = hashlib.sha256(repr((nfa.num_states, nfa.rule_start, nfa.rule_end, nfa.arrays.masks)).encode())
    for name, value in vars(nfa.arrays).items():
        if isinstance(value, np.ndarray):
            h.update(name.encode() + np.ascontiguousarray(value, dtype=np.int64).tobytes())
    h.update(np.asarray(nfa.need, dtype=np.int64).tobytes())
    return h.hexdigest()


def _python(code: str, cwd: Path, native: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(cwd)
    env["CONSTRAINED_NATIVE"] = "1" if native else "0"
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _suffixes() -> list[str]:
    import importlib.machinery

    return importlib.machinery.EXTENSION_SUFFIXES


# -- the profile-guided build's workload (`setup.py`, `grammars.pgo_train`) ------------------------------------


def test_the_training_schemas_and_regexes_all_compile() -> None:
    """A built-in training schema that the compiler refuses would leave its paths out of every profile;
    each schema is compiled in both member orders."""
    from grammars.pgo_train import REGEXES, SCHEMAS, train

    assert train(SCHEMAS, rounds=1) == 2 * len(SCHEMAS) + len(REGEXES)


def test_training_reads_bench_corpus_files() -> None:
    from grammars.pgo_train import _load

    case = _load(str(ROOT / "bench" / "corpus" / "api_event.json"))
    assert case["type"] == "object" and "tests" not in case


def test_training_without_compiled_modules_says_so() -> None:
    """`setup.py` builds plainly when the training did not run on compiled (instrumented) modules."""
    done = subprocess.run([sys.executable, "-m", "grammars.pgo_train"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, native.ENV: "0"}, timeout=300)
    assert done.returncode == 1
    assert "no compiled module of grammars is loaded" in done.stderr


@needs_build
def test_training_runs_on_the_compiled_modules() -> None:
    case = str(ROOT / "bench" / "corpus" / "api_event.json")
    done = subprocess.run([sys.executable, "-m", "grammars.pgo_train", case], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "compiled modules" in done.stdout
