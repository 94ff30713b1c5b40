"""The benchmark harness itself: corpus checks, worker isolation, the masks suite's counting."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from bench.corpus import DEFAULT_CORPUS, QUICK, CorpusError, load_corpus
from bench.engines import Engine, _Matcher
from bench.isolate import Worker, run_isolated
from bench.masks import encode_exact, run_masks, turn_order
from bench.report import masks_disagreements, masks_neighbours, masks_summary


def _write(tmp_path, name, schema, tests):
    (tmp_path / f"{name}.json").write_text(json.dumps({"schema": schema, "tests": tests}))


def test_default_corpus_loads_and_quick_subset_exists():
    cases = load_corpus(DEFAULT_CORPUS)
    names = {c.name for c in cases}
    assert len(cases) >= 75 and set(QUICK) <= names
    assert all(c.n_valid and c.n_valid < len(c.tests) for c in cases if c.name not in ("any_true", "any_empty", "nothing"))


def test_mislabeled_test_fails_loudly(tmp_path):
    _write(tmp_path, "ok", {"type": "integer"}, [{"data": 1, "valid": True}])
    _write(tmp_path, "bad", {"type": "integer", "maximum": 3}, [{"data": 4, "valid": True}])
    with pytest.raises(CorpusError, match="bad: 1 mislabeled.*4 labeled valid=True"):
        load_corpus(tmp_path)
    assert [c.name for c in load_corpus(tmp_path, ["ok"])] == ["ok"]


def test_oracle_reads_formats_and_float_multiples(tmp_path):
    _write(tmp_path, "fmt", {"type": "string", "format": "date-time"}, [{"data": "2024-01-31 23:59:59Z", "valid": True}])
    with pytest.raises(CorpusError):
        load_corpus(tmp_path)
    # labels follow jsonschema's float check, as the compile default (numbers="double") does: 19.99 / 0.01 != 1999
    _write(tmp_path, "fmt", {"type": "number", "multipleOf": 0.01}, [{"data": 19.99, "valid": True}])
    with pytest.raises(CorpusError):
        load_corpus(tmp_path)
    _write(tmp_path, "fmt", {"type": "number", "multipleOf": 0.01}, [{"data": 19.98, "valid": True}])
    assert load_corpus(tmp_path)[0].tests[0]["valid"]


def _slow(send):
    send({"event": "compile", "status": "ok"})
    time.sleep(30)


def _hog(send):
    send({"event": "started"})
    blocks = []
    while True:
        blocks.append(np.empty(64 << 20, dtype=np.uint8))   # address space only: no page is touched


def _abort(send):
    send({"event": "started"})
    os.abort()


@pytest.mark.parametrize(("target", "status"), [(_slow, "timeout"), (_hog, "oom"), (_abort, "crash")])
def test_worker_failures_are_classified_and_keep_partial_results(target, status):
    out = run_isolated(target, (), time_limit=3, mem_limit=256 << 20)
    assert out.status == status, out.detail
    assert out.messages[0]["event"] in ("compile", "started") and out.wall_s < 10


class _AcceptAll(Engine):
    """Allows every token and EOS everywhere: must accept every invalid instance."""

    name = "accept-all"

    def setup(self, tokenizer, vocab):
        self.n = vocab.size

    def compile(self, schema):
        return None

    def matcher(self, compiled):
        return _Matcher(lambda buf: buf.fill(-1), lambda t: True)

    def version(self):
        return "test"


def _item(send, what):
    """Items: "ok", "slow" (sleeps past the limit), "abort" (kills the worker), "raise", "recycle"."""
    send({"event": "pid", "pid": os.getpid()})
    if what == "slow":
        time.sleep(30)
    elif what == "abort":
        os.abort()
    elif what == "raise":
        raise ValueError("bad item")
    return what == "recycle"


def test_worker_runs_items_and_survives_their_failures():
    w = Worker(lambda: None, _item, time_limit=1.0, mem_limit=1 << 30)
    t0 = time.perf_counter()
    out = [w.run(what) for what in ["ok", "slow", "ok", "abort", "raise", "ok", "recycle", "ok", "ok"]]
    w.close()
    assert [o.status for o in out] == ["ok", "timeout", "ok", "crash", "crash", "ok", "ok", "ok", "ok"]
    assert "SIGABRT" in out[3].detail and "bad item" in out[4].detail
    assert time.perf_counter() - t0 < 20
    pids = [o.messages[0]["pid"] for o in out]
    # one worker until a failure or a recycle; healthy items share it
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4] != pids[5] == pids[6] != pids[7] == pids[8]
    assert w.started == 5


_INHERITED = bytearray(16 << 20)       # allocated before any worker forks: its own anonymous mapping


def _write_inherited(send, step):
    """Write a byte in every page of `_INHERITED`; send how many page faults that took."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for i in range(0, len(_INHERITED), 4096):
        _INHERITED[i] = step
    send({"event": "faults", "n": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before})


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="Linux only (/proc, madvise)")
def test_a_worker_owns_its_inherited_memory_before_its_first_item():
    # A forked worker shares the parent's pages copy-on-write: the first write to each is a
    # fault and a copy, which a timed item would pay. Here 4,096 pages, each written once.
    w = Worker(lambda: None, _write_inherited, time_limit=30, mem_limit=1 << 30)
    owned = w.run(1).messages[0]["n"]
    w.close()
    lone = run_isolated(_write_inherited, (1,), time_limit=30, mem_limit=1 << 30)   # forked, nothing owned
    assert lone.messages[0]["n"] > 1000, lone.messages
    assert owned < 100, owned


def test_masks_suite_counts_on_a_real_tokenizer(tmp_path, hf_tok, vocabulary):
    tok, vocab = hf_tok("gpt-2"), vocabulary("gpt-2")
    _write(tmp_path, "person", {"type": "object", "properties": {"name": {"type": "string"}},
                                "required": ["name"], "additionalProperties": False},
           [{"data": {"name": "Ada"}, "valid": True}, {"data": {"name": 3}, "valid": False},
            {"data": {}, "valid": False}])
    from bench.engines import Ours

    engines = {}
    for e in (Ours(), _AcceptAll()):
        e.setup(tok, vocab)
        engines[e.name] = {"engine": e, "setup_s": 0.0, "version": e.version()}
    rows = []
    recs = run_masks(load_corpus(tmp_path), engines, tok, vocab, ["compact", "default"], time_limit=60,
                     mem_limit=2 << 30, emit=rows.append, log=lambda s: None)
    again = run_masks(load_corpus(tmp_path), engines, tok, vocab, ["compact"], time_limit=60,
                      mem_limit=2 << 30, emit=lambda r: None, isolation="case", log=lambda s: None)
    assert [(r["engine"], r["status"], r["invalid_accepted"]) for r in again] == [("ours", "ok", 0), ("accept-all", "ok", 2)]
    with pytest.raises(ValueError, match="isolation"):
        run_masks([], engines, tok, vocab, ["compact"], time_limit=1, mem_limit=1, emit=print, isolation="threads")
    by = {r["engine"]: r for r in recs}
    assert [r["engine"] for r in rows] == ["ours", "accept-all"]
    assert by["ours"]["status"] == "ok" and by["ours"]["walks_done"] == 6
    assert (by["ours"]["valid_rejected"], by["ours"]["invalid_accepted"]) == (0, 0)
    assert by["ours"]["masks"] > 10 and by["ours"]["ttfm_ms"] > 0
    assert by["ours"]["held_mb"] > 0 and by["accept-all"]["held_mb"] is None   # only ours counts its own bytes
    assert by["ours"]["rss_growth_mb"] is not None
    assert (by["accept-all"]["valid_rejected"], by["accept-all"]["invalid_accepted"]) == (0, 4)
    assert by["accept-all"]["failures"][0]["description"] == "" and not by["accept-all"]["failures"][0]["valid"]
    summary = masks_summary(recs, engines)
    assert "| 0/2 | 0/4 | 1/1 |" in summary and "| 0/2 | 4/4 | 0/1 |" in summary
    assert "accept-all" in masks_disagreements(recs)


def test_valid_instances_rejected_only_for_member_order_are_told_apart(tmp_path, hf_tok, vocabulary):
    tok, vocab = hf_tok("gpt-2"), vocabulary("gpt-2")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
              "required": ["a", "b"], "additionalProperties": False}
    _write(tmp_path, "pair", schema, [{"data": {"b": "x", "a": 1}, "valid": True},
                                      {"data": {"a": 1, "b": "x"}, "valid": True}])
    from bench.engines import Ours

    ours = Ours()
    ours.setup(tok, vocab)
    engines = {"ours": {"engine": ours, "setup_s": 0.0, "version": ours.version()}}
    (rec,) = run_masks(load_corpus(tmp_path), engines, tok, vocab, ["compact", "default"], time_limit=60,
                       mem_limit=2 << 30, emit=lambda r: None, log=lambda s: None)
    assert (rec["valid_rejected"], rec["valid_rejected_order"]) == (2, 2)     # the b-first instance, both styles
    assert "| 2/4 (2 only for member order) |" in masks_summary([rec], engines)
    assert "member order only" in masks_disagreements([rec])
    # the check itself: a document wrong in any order is not excused, and an any-order run has nothing to excuse
    assert ours.accepted_in_any_order(schema, [b'{"b":"x","a":1}', b'{"b":1,"a":1}']) == [True, False]
    loose = Ours(any_order=True)
    loose.setup(tok, vocab)
    assert loose.accepted_in_any_order(schema, [b'{"b":"x","a":1}']) is None


def test_encode_exact_drops_the_sentencepiece_dummy_prefix(hf_tok, vocabulary):
    tok, vocab = hf_tok("llama-spm"), vocabulary("llama-spm")
    ids = encode_exact(tok, vocab.token_bytes, '{"a": 1}')
    assert ids is not None and b"".join(vocab.token_bytes[i] for i in ids) == b'{"a": 1}'


def test_masks_inprocess_walks_cases(capsys) -> None:
    from bench.masks_inprocess import main

    assert main(["--tokenizer", "gpt-2", "--schemas", "enum_strings", "api_order"]) == 0
    out = capsys.readouterr().out
    assert "2 schemas compiled" in out and "masks: mean" in out and "api_order" in out


def test_engines_take_turns_schema_by_schema(tmp_path, hf_tok, vocabulary):
    tok, vocab = hf_tok("gpt-2"), vocabulary("gpt-2")
    for name in ("a", "b", "c"):
        _write(tmp_path, name, {"type": "integer"}, [{"data": 1, "valid": True}])

    class _Other(_AcceptAll):
        name = "other"

    engines = {}
    for e in (_AcceptAll(), _Other()):
        e.setup(tok, vocab)
        engines[e.name] = {"engine": e, "setup_s": 0.0, "version": e.version()}
    recs = run_masks(load_corpus(tmp_path), engines, tok, vocab, ["compact"], time_limit=60, mem_limit=2 << 30,
                     emit=lambda r: None, log=lambda s: None)
    # turns: both engines on each case, in the drawn order of `turn_order`, each record naming the one before
    steps = turn_order(["accept-all", "other"], 3)
    assert [(r["engine"], r["schema"]) for r in recs] == [(name, "abc"[i]) for name, i in steps]
    assert [r["after"] for r in recs] == [None] + [name for name, _ in steps[:-1]]
    assert all(r["status"] == "ok" for r in recs)
    table = masks_neighbours(recs)              # each engine's TTFM by the one before it
    for name in ("accept-all", "other"):
        for before in ("accept-all", "other"):
            times = [r["ttfm_ms"] for r in recs if r["engine"] == name and r["after"] == before]
            cell = f"{round(float(np.median(times)), 2)} ({len(times)})" if times else "-"
            row = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
            assert cell in row.split(" | ")[1 + ["accept-all", "other"].index(before)]
    in_a_row = run_masks(load_corpus(tmp_path), engines, tok, vocab, ["compact"], time_limit=60, mem_limit=2 << 30,
                         emit=lambda r: None, order="engine", log=lambda s: None)
    assert [(r["engine"], r["schema"]) for r in in_a_row] == [
        ("accept-all", "a"), ("accept-all", "b"), ("accept-all", "c"), ("other", "a"), ("other", "b"), ("other", "c")]
    with pytest.raises(ValueError, match="order"):
        run_masks(load_corpus(tmp_path), engines, tok, vocab, ["compact"], time_limit=1, mem_limit=1 << 30,
                  emit=print, order="random")


def test_masks_without_peers_prints_no_head_to_head(tmp_path, capsys):
    """`--engines ours` alone: the summary table, and no empty head-to-head table."""
    from bench.__main__ import main

    _write(tmp_path, "flag", {"type": "boolean"}, [{"data": True, "valid": True}, {"data": 1, "valid": False}])
    assert main(["masks", "--engines", "ours", "--corpus", str(tmp_path), "--tokenizer", "gpt-2",
                 "--jsonl", str(tmp_path / "out.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "| ours 0.1.0 |" in out and "Head to head" not in out


def test_decode_suite_runs_our_loop_on_every_variant() -> None:
    """`bench.bench_decode`'s own-loop variants run to their token count (its regex needs more characters
    than a run's tokens: refused up front by budget-aware completion, which the benchmark turns off)."""
    pytest.importorskip("mlx.core")
    from bench.bench_decode import bench_constrained
    from tests.tiny_lms import async_lm

    results = bench_constrained(async_lm("llama-spm", "mlx"), batch=2, tokens=6, reps=1)   # shared: not closed
    assert sorted(results) == ["none", "regex", "schema"]
    for name, r in results.items():
        assert [len(row) for row in r["rows"]] == [6, 6], name


def test_ttfm_paired_compares_two_checkouts(tmp_path, capsys):
    """This checkout against itself (the null comparison): every schema all the workers
    compile is timed, and the ratio is reported (with llguidance beside, where installed)."""
    from bench import ttfm_paired

    for name, schema in (("a", {"type": "integer"}), ("b", {"type": "object", "properties": {"s": {"type": "string"}}}),
                         ("c", {"type": "array", "items": {"enum": ["x", "y"]}})):
        _write(tmp_path, name, schema, [])
    here = str(Path(ttfm_paired.__file__).resolve().parent.parent)
    try:
        import llguidance  # noqa: F401
        peer = []
    except ImportError:
        peer = ["--no-peer"]
    assert ttfm_paired.main([here, "--corpus", str(tmp_path), "--seed", "3", *peer]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"3 schemas all {2 if peer else 3} workers compile (base: {here})")
    assert ("| llguidance |" in out) is not peer
    ratio = float(out.split("per-schema median ratio here/base: ")[1].split(";")[0])
    assert 0.2 < ratio < 5
