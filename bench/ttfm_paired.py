"""Time to first mask of two checkouts of ours, paired per schema, beside llguidance.

Three worker processes, ours at BASE (another checkout, built), ours here, and
llguidance, take turns on each schema of ../shared/corpus/maskbench-dev that
all of them compile, in an order drawn per schema: as in `python -m bench masks`,
each compile follows the other workers' work (cold caches), but the two
versions of ours meet the same conditions on the same schemas, so their
per-schema ratio shows a change of 1-2% that the run-to-run spread of the
four-engine benchmark (about 3%) hides. Each worker compiles and masks the
bench's warm-up schema first (`bench.masks._warm_child`); ours compiles with
``any_order=True`` (`--any-order` of the benchmark) unless ``--declared``.

Run::

    git worktree add /tmp/base REV && (cd /tmp/base && python setup.py -q build_ext --inplace)
    python -m bench.ttfm_paired /tmp/base [--seed N] [--declared] [--no-peer]

BASE may be this checkout itself, the null comparison: 0.995-1.010 in three runs
of the dev corpus, which is the noise of one run. Without llguidance
(``--no-peer``) the two workers of one checkout share their machine code and
the second to run finds it warm: 0.97-1.02 in six null runs. Two worktrees of
one commit do not share it.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus" / "maskbench-dev"
HERE = Path(__file__).resolve().parent.parent


def _worker(root: str, engine: str, declared: bool) -> None:
    """Serve schema paths on stdin: compile, fill the first mask, print the microseconds (-1: refused)."""
    sys.path[0] = root                     # this checkout's packages, not the script's
    import numpy as np

    from bench.engines import LLGuidance, Ours
    from bench.masks import _warm_child
    from constrained.gguf_tokenizers import hf_tokenizer
    from constrained.vocab import Vocabulary

    tok = hf_tokenizer("llama-bpe")
    vocab = Vocabulary.from_tokenizer(tok)
    eng = Ours(any_order=not declared) if engine == "ours" else LLGuidance()
    eng.setup(tok, vocab)
    buf = np.zeros((vocab.size + 31) // 32, np.int32)
    _warm_child(eng, buf)
    print("ready", flush=True)
    for line in sys.stdin:
        schema = json.loads(Path(line.strip()).read_text())["schema"]
        t0 = time.perf_counter_ns()
        try:
            eng.matcher(eng.compile(schema)).fill(buf)
            print((time.perf_counter_ns() - t0) / 1e3, flush=True)
        except Exception:  # noqa: BLE001 - refused (or failed): left out of the comparison
            print(-1, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ttfm_paired", description=__doc__.split("\n\n")[0])
    p.add_argument("base", help="another checkout of this repository, built")
    p.add_argument("--seed", type=int, default=0, help="order of the schemas and of the turns")
    p.add_argument("--declared", action="store_true", help="ours in declared member order (no any_order)")
    p.add_argument("--no-peer", action="store_true", help="without the llguidance worker (two workers)")
    p.add_argument("--corpus", type=Path, default=CORPUS)
    args = p.parse_args(argv)
    paths = sorted(str(x) for x in args.corpus.glob("*.json"))
    if not paths:
        p.error(f"no schemas in {args.corpus}")
    rng = random.Random(args.seed)
    rng.shuffle(paths)
    roots = {"base": os.path.abspath(args.base), "here": str(HERE)}
    if not args.no_peer:
        roots["llguidance"] = str(HERE)
    workers, errs = {}, {}
    for name, root in roots.items():
        # stderr (schema notes warned at compile, as in the benchmark's workers) to a file
        errs[name] = tempfile.TemporaryFile()
        cmd = [sys.executable, __file__, "--worker", root, "llg" if name == "llguidance" else "ours"]
        workers[name] = subprocess.Popen(cmd + (["--declared"] if args.declared else []), cwd=root, text=True,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errs[name], bufsize=1)
    for name, w in workers.items():
        if w.stdout.readline().strip() != "ready":
            errs[name].seek(0)
            raise SystemExit(f"the {name} worker ({roots[name]}) did not start:\n"
                             + errs[name].read()[-2000:].decode("utf-8", "replace"))
    times: dict[str, list[float]] = {name: [] for name in workers}
    for path in paths:
        order = list(workers)
        rng.shuffle(order)
        for name in order:
            workers[name].stdin.write(path + "\n")
            workers[name].stdin.flush()
            times[name].append(float(workers[name].stdout.readline()))
    for w in workers.values():
        w.stdin.close()
        w.wait()
    _report(times, roots["base"])
    return 0


def _report(times: dict[str, list[float]], base: str) -> None:
    import numpy as np

    t = {name: np.array(v) for name, v in times.items()}
    ok = np.logical_and.reduce([x > 0 for x in t.values()])
    t = {name: x[ok] for name, x in t.items()}
    print(f"{ok.sum()} schemas all {len(t)} workers compile (base: {base})")
    print("| | p50 | p90 | p99 | max (us) |\n|---|---|---|---|---|")
    for name, x in t.items():
        label = f"ours, {name}" if name in ("base", "here") else name
        p50, p90, p99 = np.percentile(x, [50, 90, 99])
        print(f"| {label} | {p50:.0f} | {p90:.0f} | {p99:.0f} | {x.max():.0f} |")
    b, h = t["base"], t["here"]
    peer = ""
    if "llguidance" in t:
        ll = np.median(t["llguidance"])
        peer = f"; p50 against llguidance's: base {np.median(b) / ll:.3f}x, here {np.median(h) / ll:.3f}x"
    print(f"per-schema median ratio here/base: {np.median(h / b):.4f}{peer}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], sys.argv[3], "--declared" in sys.argv)
    else:
        sys.exit(main())
