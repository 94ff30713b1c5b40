"""Suite `masks`: compile time, mask time and correctness per engine, MaskBench-style.

Each engine runs in a forked worker (see `bench.isolate`; by default one
long-lived worker per engine, restarted after a timeout or a crash) that, for
every schema, compiles it and walks each test instance token by token,
filling the FULL mask before each token:

- TTFM, time to first mask = compile + the first mask;
- TBM, time between masks = every later mask fill (mean, p50, p99 in µs);
- correctness: a token missing from the mask rejects the instance, and so
  does a walk that ends where EOS is not allowed. Valid instances rejected
  and invalid instances accepted are counted (per serialization style).

Instances are tokenized for real (`tokenizer.encode`) and serialized in each
style of `STYLES`, object members in schema order (every engine's default).

Example:
    >>> sorted(STYLES)
    ['compact', 'default']
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from bench.corpus import Case
from bench.engines import ENGINES, Engine, Unsupported, available
from bench.isolate import Worker, run_isolated

__all__ = ["STYLES", "Walk", "prepare_walks", "run_masks"]

# json.dumps keyword arguments of each serialization style (non-ASCII kept as UTF-8 in both).
STYLES: dict[str, dict[str, Any]] = {
    "compact": {"separators": (",", ":"), "ensure_ascii": False},
    "default": {"ensure_ascii": False},       # ", " and ": ", what json.dumps writes by default
}
_MAX_FAILURES_LISTED = 5


@dataclass(frozen=True)
class Walk:
    """One serialized test instance: its token ids and what the oracle says."""

    test: int
    style: str
    valid: bool
    ids: tuple[int, ...]


def encode_exact(tokenizer: Any, token_bytes: Any, text: str) -> list[int] | None:
    """Token ids spelling exactly `text` (drops a SentencePiece dummy-prefix space); None if impossible."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    want = text.encode("utf-8")
    got = b"".join(token_bytes[i] or b"" for i in ids)
    if got == want:
        return ids
    if got == b" " + want and ids and token_bytes[ids[0]] == b" ":
        return ids[1:]
    if got == b" " + want and ids:                # "▁{" -> "{" + the rest, re-encoded after a newline
        probe = list(tokenizer.encode("\n" + text, add_special_tokens=False))
        nl = [i for i, t in enumerate(probe) if b"".join(token_bytes[j] or b"" for j in probe[: i + 1]).endswith(b"\n")]
        if nl:
            rest = probe[nl[0] + 1:]
            if b"".join(token_bytes[i] or b"" for i in rest) == want:
                return rest
    return None


def prepare_walks(case: Case, tokenizer: Any, token_bytes: Any, styles: list[str]) -> tuple[list[Walk], list[str]]:
    """Tokenize every test of `case` in every style; returns (walks, problems)."""
    from bench.regex_corpus import Regex

    walks, problems = [], []
    for i, t in enumerate(case.tests):
        for style in (["raw"] if isinstance(case.schema, Regex) else styles):   # a regex's text is the data itself
            text = t["data"] if style == "raw" else json.dumps(t["data"], **STYLES[style])
            ids = encode_exact(tokenizer, token_bytes, text)
            if ids is None:
                problems.append(f"test {i} ({style}) does not tokenize back to its text")
                continue
            walks.append(Walk(i, style, bool(t["valid"]), tuple(ids)))
    return walks, problems


def _bit(buf: np.ndarray, token: int) -> bool:
    return bool((int(buf[token >> 5]) >> (token & 31)) & 1)


def _walk_one(m: Any, buf: np.ndarray, walk: Walk, eos: int, first_filled: bool) -> dict:
    """Walk one instance; returns its message (mask/advance times in ns, where it was rejected)."""
    clock = time.perf_counter_ns
    mask_ns, adv_ns = [], []
    at, note = None, ""
    for k, tok in enumerate(walk.ids):
        if k or not first_filled:
            t0 = clock()
            m.fill(buf)
            mask_ns.append(clock() - t0)
        if not _bit(buf, tok):
            at = k
            break
        t0 = clock()
        ok = m.accept(tok)
        adv_ns.append(clock() - t0)
        if not ok:
            at, note = k, "token in the mask but refused by accept"
            break
    if at is None:
        t0 = clock()
        m.fill(buf)
        mask_ns.append(clock() - t0)
        if not _bit(buf, eos):
            at, note = len(walk.ids), "EOS not allowed at the end"
    return {"event": "walk", "test": walk.test, "style": walk.style, "valid": walk.valid, "accepted": at is None,
            "at": at, "note": note, "mask_ns": mask_ns, "adv_ns": adv_ns}


# Compiled and masked, untimed, by every worker before its case (see `_warm_child`).
# It uses the common keywords (not from the corpus), so that the code paths a
# case runs have already been touched once in the worker.
WARMUP_SCHEMA = {
    "type": "object",
    "properties": {
        "s": {"type": "string", "maxLength": 8}, "d": {"type": "string", "format": "date-time"},
        "p": {"type": "string", "pattern": "^[a-z]+$"}, "n": {"type": "number", "minimum": 0},
        "i": {"type": "integer"}, "b": {"type": "boolean"}, "e": {"enum": ["a", "b"]},
        "a": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "o": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/x"}]},
    },
    "required": ["s", "i"],
    "additionalProperties": False,
    "$defs": {"x": {"type": "object", "additionalProperties": {"type": "integer"}}},
}


def _warm_child(engine: Engine, buf: np.ndarray) -> None:
    """Compile and mask a small schema, untimed, in the fresh worker, for every engine alike.

    A forked worker shares the parent's pages copy-on-write: the first code to
    run writes reference counts and GC headers all over the inherited heap and
    pays a page fault per page touched (measured for ours: 800-2,100 faults and
    2-3x the compile time of the same schema a moment later). A long-running
    process does not pay that per schema, so it is paid here, outside the timer.
    With `{"type": "string"}` as the warm-up ours still took 200-1,500 faults
    (1.5-2x) on a case's compile; this schema's common keywords leave 40-200.
    """
    try:
        engine.matcher(engine.compile(WARMUP_SCHEMA)).fill(buf)
    except Exception:  # noqa: BLE001 - an engine that cannot do this is measured cold, as before
        pass


def _case_worker(send: Callable[[dict], None], engine: Engine, schema: Any, walks: list[Walk],
                 eos: int, n_words: int) -> None:
    """Body of one forked (engine, schema) worker (``--isolation case``)."""
    engine.prepare_child()
    buf = np.zeros(n_words, dtype=np.int32)
    _warm_child(engine, buf)
    _run_case(send, engine, schema, walks, eos, buf)


class _EngineServer:
    """What an engine's long-lived worker does (``--isolation engine``): warm up once, then run cases.

    Like a server, it keeps what the engine caches per vocabulary between
    schemas. When its memory has grown by `recycle_bytes` it asks for a fresh
    worker (so that one engine's growth cannot look like a later case's OOM).
    """

    def __init__(self, engine: Engine, eos: int, n_words: int, recycle_bytes: int) -> None:
        self.engine, self.eos, self.n_words, self.recycle_bytes = engine, eos, n_words, recycle_bytes

    def setup(self) -> None:
        self.engine.prepare_child()
        self.buf = np.zeros(self.n_words, dtype=np.int32)
        _warm_child(self.engine, self.buf)
        self.rss_start = _rss_bytes()

    def handle(self, send: Callable[[dict], None], item: tuple[Any, list[Walk]]) -> bool:
        schema, walks = item
        _run_case(send, self.engine, schema, walks, self.eos, self.buf)
        return _rss_bytes() - self.rss_start > self.recycle_bytes


def _run_case(send: Callable[[dict], None], engine: Engine, schema: Any, walks: list[Walk], eos: int,
              buf: np.ndarray) -> None:
    """Compile `schema`, fill the first mask, walk every test; stream the results."""
    rss0 = _rss_bytes()
    t0 = time.perf_counter_ns()
    try:
        compiled = engine.compile(schema)
    except Unsupported as e:
        send({"event": "compile", "status": "unsupported", "error": str(e)[:300]})
        return
    t1 = time.perf_counter_ns()
    m = engine.matcher(compiled)
    m.fill(buf)
    t2 = time.perf_counter_ns()
    send({"event": "compile", "status": "ok", "compile_ns": t1 - t0, "ttfm_ns": t2 - t0})
    try:
        _walk_all(send, engine, compiled, m, buf, walks, eos)
    finally:
        # what the schema cost in memory once every test was walked (its visited states included)
        send({"event": "memory", "rss_growth": _rss_bytes() - rss0, "held": engine.held_bytes(compiled),
              "peak": _peak_rss_bytes()})


def _peak_rss_bytes() -> int:
    """This worker's peak resident set size so far (Linux VmHWM; 0 elsewhere)."""
    try:
        with open("/proc/self/status") as f:
            line = next(x for x in f if x.startswith("VmHWM:"))
        return int(line.split()[1]) * 1024
    except (OSError, ValueError, StopIteration):
        return 0


def _rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _walk_all(send: Callable[[dict], None], engine: Engine, compiled: Any, m: Any, buf: np.ndarray,
              walks: list[Walk], eos: int) -> None:
    for i, walk in enumerate(walks):
        try:
            if i:
                m = engine.matcher(compiled)
            send(_walk_one(m, buf, walk, eos, first_filled=(i == 0)))
        except MemoryError:
            raise
        except Exception as e:  # noqa: BLE001 - an engine failing mid-walk is a result
            send({"event": "walk", "test": walk.test, "style": walk.style, "valid": walk.valid, "accepted": None,
                  "at": None, "note": f"{type(e).__name__}: {e}"[:200], "mask_ns": [], "adv_ns": []})


def _failure(msg: dict, walk: Walk, case: Case, token_text: Callable[[list[int]], str]) -> dict:
    """Where a walk went wrong, with the text read so far (its last 40 characters)."""
    at = len(walk.ids) if msg["at"] is None else msg["at"]
    return {"test": msg["test"], "description": case.tests[msg["test"]]["description"], "style": msg["style"],
            "valid": msg["valid"], "at_token": msg["at"], "read": token_text(list(walk.ids[:at]))[-40:],
            "next": token_text(list(walk.ids[at:at + 1])), "note": msg["note"]}


def case_record(engine: str, case: Case, walks: list[Walk], outcome: Any,
                token_text: Callable[[list[int]], str] = lambda ids: "") -> dict:
    """One JSON line for an (engine, schema) run from the worker's messages."""
    comp = next((m for m in outcome.messages if m["event"] == "compile"), None)
    done = [m for m in outcome.messages if m["event"] == "walk"]
    mem = next((m for m in outcome.messages if m["event"] == "memory"), {})
    mask_ns = [t for m in done for t in m["mask_ns"]]
    adv_ns = [t for m in done for t in m["adv_ns"]]
    status = comp["status"] if comp else outcome.status
    rec = {
        "suite": "masks", "engine": engine, "schema": case.name, "status": status,
        "error": (comp or {}).get("error") or ("" if comp else outcome.detail),
        "compile_ms": _ms(comp, "compile_ns"), "ttfm_ms": _ms(comp, "ttfm_ns"),
        "masks": len(mask_ns), "mask_ns_sum": int(sum(mask_ns)),
        "tbm_mean_us": _us(np.mean(mask_ns)) if mask_ns else None,
        "tbm_p50_us": _us(np.percentile(mask_ns, 50)) if mask_ns else None,
        "tbm_p99_us": _us(np.percentile(mask_ns, 99)) if mask_ns else None,
        "advance_mean_us": _us(np.mean(adv_ns)) if adv_ns else None,
        "walks": len(walks), "walks_done": len(done),
        "valid_total": sum(w.valid for w in walks), "invalid_total": sum(not w.valid for w in walks),
        "valid_rejected": sum(1 for m in done if m["valid"] and m["accepted"] is False),
        "invalid_accepted": sum(1 for m in done if not m["valid"] and m["accepted"]),
        "walk_errors": sum(1 for m in done if m["accepted"] is None),
        "inconsistent": sum(1 for m in done if m["note"].startswith("token in the mask")),
        "late_failure": outcome.status if comp and outcome.status != "ok" else "",
        "rss_growth_mb": round(mem["rss_growth"] / 2**20, 2) if "rss_growth" in mem else None,
        "held_mb": round(mem["held"] / 2**20, 3) if mem.get("held") is not None else None,
        "peak_rss_mb": round(mem["peak"] / 2**20, 1) if mem.get("peak") else None,
        "tbm_max_us": _us(max(mask_ns)) if mask_ns else None,
        "wall_s": round(outcome.wall_s, 3),
    }
    by_key = {(w.test, w.style): w for w in walks}
    rec["failures"] = [_failure(m, by_key[(m["test"], m["style"])], case, token_text)
                       for m in done if m["accepted"] is None or m["accepted"] != m["valid"]][:_MAX_FAILURES_LISTED]
    rec["mask_ns"] = mask_ns                       # pooled by the summary, dropped before printing
    return rec


def _order_only(engine: Engine, case: Case, walks: list[Walk], outcome: Any, vocab: Any) -> int | None:
    """How many of the valid instances `engine` rejected it accepts with object members in any order
    (`Engine.accepted_in_any_order`, in this process, after the timed work); None: not known."""
    by_key = {(w.test, w.style): w for w in walks}
    texts = [b"".join(vocab.token_bytes[i] or b"" for i in by_key[(m["test"], m["style"])].ids)
             for m in outcome.messages if m["event"] == "walk" and m["valid"] and m["accepted"] is False]
    accepted = engine.accepted_in_any_order(case.schema, texts)
    return None if accepted is None else sum(accepted)


def _ms(msg: dict | None, key: str) -> float | None:
    return None if not msg or key not in msg else round(msg[key] / 1e6, 3)


def _us(ns: float) -> float:
    return round(float(ns) / 1e3, 2)


def setup_engines(names: list[str], tokenizer: Any, vocab: Any, log: Callable[[str], None],
                  options: dict[str, dict] | None = None) -> dict[str, dict]:
    """Instantiate and set up each available engine (with its `options`, by name: ours' ``any_order``);
    returns name -> {engine, setup_s, version, settings} or skip note."""
    out: dict[str, dict] = {}
    for name in names:
        if not available(name):
            log(f"[masks] {name}: not installed, skipped (pip install '.[bench]')")
            out[name] = {"skipped": "not installed"}
            continue
        engine = ENGINES[name](**(options or {}).get(name, {}))
        t0 = time.perf_counter()
        try:
            engine.setup(tokenizer, vocab)
        except Exception as e:  # noqa: BLE001 - a peer that cannot load this tokenizer is skipped, not fatal
            log(f"[masks] {name}: setup failed, skipped: {type(e).__name__}: {e}")
            out[name] = {"skipped": f"setup failed: {e}"[:200]}
            continue
        out[name] = {"engine": engine, "setup_s": round(time.perf_counter() - t0, 3), "version": engine.version(),
                     "settings": engine.settings}
        log(f"[masks] {name} {out[name]['version']}: per-vocabulary setup {out[name]['setup_s']}s")
    return out


def run_masks(cases: list[Case], engines: dict[str, dict], tokenizer: Any, vocab: Any, styles: list[str], *,
              time_limit: float, mem_limit: int, emit: Callable[[dict], None], isolation: str = "engine",
              order: str = "turns", log: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> list[dict]:
    """Run every (engine, case); `emit` gets each JSON record as it completes. Returns the records.

    `isolation`: "engine" runs each engine's cases in a long-lived forked
    worker (restarted after a timeout or crash), as a server would; `order`
    "turns" has the engines take turns case by case (a machine that speeds up
    or slows down during the run weighs on all alike), "engine" runs each
    engine's cases in a row (no other engine's work between two of its
    cases). "case" forks a fresh worker per
    (engine, case), which adds the fork's copy-on-write page faults to every
    first touch of inherited memory.
    """
    if isolation not in ("engine", "case"):
        raise ValueError(f"isolation must be 'engine' or 'case', got {isolation!r}")
    eos = int(tokenizer.eos_token_id)
    text = lambda ids: b"".join(vocab.token_bytes[i] or b"" for i in ids).decode("utf-8", "replace")  # noqa: E731
    n_words = (vocab.size + 31) // 32
    prepared = []
    for case in cases:
        walks, problems = prepare_walks(case, tokenizer, vocab.token_bytes, styles)
        for p in problems:
            log(f"[masks] {case.name}: {p}; skipped")
        prepared.append((case, walks))
    records = []

    def record(name: str, case: Case, walks: list[Walk], outcome: Any) -> None:
        rec = case_record(name, case, walks, outcome, text)
        if rec["valid_rejected"]:
            rec["valid_rejected_order"] = _order_only(engines[name]["engine"], case, walks, outcome, vocab)
        rec["after"] = records[-1]["engine"] if records else None   # the engine that ran just before
        records.append(rec)
        emit({k: v for k, v in rec.items() if k != "mask_ns"})
        log(f"[masks] {case.name:28s} {name:13s} {rec['status']:11s} ttfm={rec['ttfm_ms']}ms "
            f"tbm={rec['tbm_mean_us']}us vr={rec['valid_rejected']} ia={rec['invalid_accepted']} "
            f"{rec['late_failure']}")

    live = [(name, info["engine"]) for name, info in engines.items() if "engine" in info]
    if isolation == "case":
        for case, walks in prepared:
            for name, engine in live:
                outcome = run_isolated(_case_worker, (engine, case.schema, walks, eos, n_words),
                                       time_limit=time_limit, mem_limit=mem_limit)
                record(name, case, walks, outcome)
        return records
    # One long-lived worker per engine.
    workers = {name: Worker(*_server_calls(_EngineServer(engine, eos, n_words, mem_limit // 2)),
                            time_limit=time_limit, mem_limit=mem_limit) for name, engine in live}
    if order not in ("turns", "engine"):
        raise ValueError(f"order must be 'turns' or 'engine', got {order!r}")
    names = [name for name, _ in live]
    steps = turn_order(names, len(prepared)) if order == "turns" else [(name, i) for name in names
                                                                     for i in range(len(prepared))]
    try:
        for name, i in steps:
            case, walks = prepared[i]
            record(name, case, walks, workers[name].run((case.schema, walks)))
    finally:
        for worker in workers.values():
            worker.close()
    return records


def turn_order(names: list[str], cases: int, seed: int = 0) -> list[tuple[str, int]]:
    """(engine, case index) steps where the engines take turns case by case, in an order drawn
    for each case (seeded: every run the same), so that each engine runs just after each of the
    others about as often. In a fixed order (or a rotation of it, which keeps the neighbours) the
    first engine always ran just after the last one, whose work (an eager index of seconds and
    gigabytes, for outlines-core) left the CPU caches and TLB cold for that engine alone.

    >>> steps = turn_order(["a", "b", "c"], 300)
    >>> sorted({name for name, i in steps if i == 7}), len(steps)
    (['a', 'b', 'c'], 900)
    >>> after = [(steps[k - 1][0], steps[k][0]) for k in range(1, len(steps)) if steps[k - 1][0] != steps[k][0]]
    >>> sorted(set(after)) == [(x, y) for x in "abc" for y in "abc" if x != y]
    True
    """
    rng = random.Random(seed)
    steps = []
    for i in range(cases):
        order = list(names)
        rng.shuffle(order)
        steps += [(name, i) for name in order]
    return steps


def _server_calls(server: _EngineServer) -> tuple[Callable[[], None], Callable[..., bool]]:
    return server.setup, server.handle
