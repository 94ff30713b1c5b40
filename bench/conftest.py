"""Let `python -m pytest bench/ --benchmark-only` collect the `bench_*.py` files.

pyproject's `testpaths` is `tests` and pytest only collects `test_*.py` by
default; files named on the command line are collected anyway, so skip those
here to avoid collecting them twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import pytest_sessionfinish, pytest_unconfigure  # noqa: F401 - the exit without abort


def pytest_collect_file(file_path: Path, parent: Any) -> Any:
    if file_path.suffix == ".py" and file_path.name.startswith("bench_") and not parent.session.isinitpath(file_path):
        return pytest.Module.from_parent(parent, path=file_path)
    return None
