"""The examples in the docstrings of `grammars` and `constrained` run and say what they show.

They run in a child process with ``CONSTRAINED_NATIVE=0``: the compiled copies of
`grammars`' modules (`grammars.native`) keep their docstrings, but doctest finds
examples only in Python functions, so the source is what gets checked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# modules whose import needs an optional integration (each has its own tests)
OPTIONAL = ("constrained/vllm_processor.py",)


def test_docstring_examples() -> None:
    env = {**os.environ, "CONSTRAINED_NATIVE": "0"}
    env.pop("CONSTRAINED_REQUIRE_NATIVE", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--doctest-modules", "grammars",
           "constrained", *(f"--ignore={p}" for p in OPTIONAL)]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout
