"""Summary tables for the suites: plain-text (Markdown) tables from the per-case records.

Example:
    >>> print(table(["engine", "n"], [["ours", 1]]))
    | engine | n |
    |---|---|
    | ours | 1 |
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["table", "masks_summary", "masks_head_to_head", "masks_neighbours"]

_FAILURES = ("unsupported", "timeout", "oom", "crash")


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table (None prints as "-")."""
    def cell(v: Any) -> str:
        return "-" if v is None else str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None or np.isnan(x) else round(float(x), nd)


def masks_summary(records: list[dict], engines: dict[str, dict]) -> str:
    """Per-engine totals: compile failures by kind, TTFM, TBM, valid rejected, invalid accepted."""
    header = ["engine", "vocab setup s", "schemas ok", "unsupported", "timeout", "oom", "crash",
              "TTFM ms p50 / p90 / p99 / max", "TBM µs mean / p50 / p99 / max", "RSS growth MB p50 / max",
              "peak RSS MB", "valid rejected", "invalid accepted", "all tests pass"]
    rows = []
    for name, info in engines.items():
        if "engine" not in info:
            rows.append([f"{name} (skipped: {info['skipped']})"] + [None] * (len(header) - 1))
            continue
        recs = [r for r in records if r["engine"] == name]
        ok = [r for r in recs if r["status"] == "ok"]
        ttfm = [r["ttfm_ms"] for r in ok]
        pooled = np.array([t for r in recs for t in r["mask_ns"]], dtype=np.float64) / 1e3
        fails = {k: sum(1 for r in recs if r["status"] == k or r["late_failure"] == k) for k in _FAILURES}
        vr = sum(r["valid_rejected"] + r["walk_errors"] for r in ok)
        order = [r.get("valid_rejected_order") for r in ok if r["valid_rejected"]]
        known = sum(x or 0 for x in order)
        order_note = f" ({known} only for member order)" if known else ""
        vt = sum(r["valid_total"] for r in ok)
        ia = sum(r["invalid_accepted"] for r in ok)
        it = sum(r["invalid_total"] for r in ok)
        passing = sum(1 for r in ok if not r["late_failure"] and r["walks_done"] == r["walks"]
                      and not (r["valid_rejected"] or r["invalid_accepted"] or r["walk_errors"]))
        growth = [r["rss_growth_mb"] for r in ok if r.get("rss_growth_mb") is not None]
        peak = [r["peak_rss_mb"] for r in recs if r.get("peak_rss_mb") is not None]
        rows.append([
            f"{name} {info['version']}", info["setup_s"], f"{len(ok)}/{len(recs)}", fails["unsupported"], fails["timeout"],
            fails["oom"], fails["crash"],
            " / ".join(str(_r(np.percentile(ttfm, q), 2 if q == 50 else 1)) for q in (50, 90, 99, 100)) if ttfm else None,
            (f"{_r(pooled.mean())} / " + " / ".join(str(_r(np.percentile(pooled, q))) for q in (50, 99, 100)))
            if pooled.size else None,
            f"{_r(np.median(growth))} / {_r(max(growth))}" if growth else None,
            _r(max(peak), 0) if peak else None,
            f"{vr}/{vt}{order_note}", f"{ia}/{it}", f"{passing}/{len(recs)}",
        ])
    return table(header, rows)


def masks_head_to_head(records: list[dict], ours: str = "ours") -> str:
    """Ratios ours/peer on the schemas both compiled: TTFM (median of per-schema ratios) and TBM (mean)."""
    by = {(r["engine"], r["schema"]): r for r in records}
    peers = sorted({r["engine"] for r in records} - {ours})
    header = ["peer", "schemas both ok", "TTFM ours/peer (median)", "TTFM ours faster on",
              "TBM mean ours/peer", "TBM p99 ours/peer", "compile+all masks ours/peer"]
    rows = []
    for peer in peers:
        shared = [s for (e, s), r in by.items() if e == ours and r["status"] == "ok"
                  and by.get((peer, s), {}).get("status") == "ok"]
        if not shared:
            rows.append([peer, 0] + [None] * 5)
            continue
        ratios = [by[(ours, s)]["ttfm_ms"] / max(by[(peer, s)]["ttfm_ms"], 1e-6) for s in shared]
        mo = np.array([t for s in shared for t in by[(ours, s)]["mask_ns"]], dtype=np.float64)
        mp = np.array([t for s in shared for t in by[(peer, s)]["mask_ns"]], dtype=np.float64)
        total_o = sum(by[(ours, s)]["ttfm_ms"] * 1e6 + by[(ours, s)]["mask_ns_sum"] for s in shared)
        total_p = sum(by[(peer, s)]["ttfm_ms"] * 1e6 + by[(peer, s)]["mask_ns_sum"] for s in shared)
        rows.append([
            peer, len(shared), _r(np.median(ratios), 2), f"{sum(x < 1 for x in ratios)}/{len(shared)}",
            _r(mo.mean() / mp.mean(), 2) if mo.size and mp.size else None,
            _r(np.percentile(mo, 99) / np.percentile(mp, 99), 2) if mo.size and mp.size else None,
            _r(total_o / total_p, 2),
        ])
    return table(header, rows)


def masks_neighbours(records: list[dict]) -> str:
    """Each engine's median TTFM (ms) by the engine that ran just before it (`after`), on the schemas
    every engine compiled: how much a neighbour's work moves an engine's cold start."""
    engines = sorted({r["engine"] for r in records})
    ok = {(r["engine"], r["schema"]): r for r in records if r["status"] == "ok"}
    shared = {s for (_, s) in ok if all((e, s) in ok for e in engines)}
    rows = []
    for name in engines:
        row: list[Any] = [name]
        for before in engines:
            times = [ok[(name, s)]["ttfm_ms"] for s in shared if ok[(name, s)].get("after") == before]
            row.append(f"{_r(np.median(times), 2)} ({len(times)})" if times else None)
        rows.append(row)
    return table(["engine"] + [f"after {e}" for e in engines], rows)


def masks_disagreements(records: list[dict], limit: int = 40) -> str:
    """Schemas where an engine failed to compile or got a test wrong (the details behind the totals)."""
    rows = []
    for r in records:
        wrong = r["valid_rejected"] + r["invalid_accepted"] + r["walk_errors"]
        if r["status"] != "ok" or wrong or r["late_failure"]:
            what = r["status"] if r["status"] != "ok" else (r["late_failure"] or "")
            rows.append([r["schema"], r["engine"], what, r["valid_rejected"], r["invalid_accepted"],
                         _first_problem(r)])
    rows.sort()
    more = f"\n({len(rows) - limit} more in the JSON lines)" if len(rows) > limit else ""
    return table(["schema", "engine", "failure", "valid rejected", "invalid accepted", "first problem"],
                 rows[:limit]) + more


def _first_problem(r: dict) -> str:
    if r["error"]:
        text = r["error"]
    elif r["failures"]:
        f = r["failures"][0]
        verdict = "rejected" if f["valid"] else "accepted"
        where = f"EOS refused after {f['read']!r}" if f["note"].startswith("EOS") else (
            f"{f['next']!r} refused after {f['read']!r}" if f["valid"] else f"{f['read']!r}")
        text = f"{f['description']} ({f['style']}) {verdict}: {where} {f['note'] if f['valid'] else ''}"
        if r.get("valid_rejected_order") == r["valid_rejected"]:
            text = "member order only (accepted with any_order=True); " + text
    else:
        text = r["late_failure"]
    return text[:110].replace("|", "/").replace("\n", "\\n").strip()
