"""`import constrained` must work with mlx, mlx_lm, torch, transformers and vllm absent."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    BLOCKED = {"mlx", "mlx_lm", "torch", "transformers", "vllm"}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked for this test: {name}")
            return None

    sys.meta_path.insert(0, Block())
    """
)


def run_blocked(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_core_imports_without_frameworks() -> None:
    proc = run_blocked(
        """
        import constrained, grammars, backends, constrained.constraint_spec
        import sys
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {"mlx", "mlx_lm", "torch", "transformers", "vllm"})
        print("LOADED", loaded)
        print("API", sorted(constrained.__all__))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout
    assert "'ConstraintError'" in proc.stdout


def test_missing_framework_is_a_clear_error() -> None:
    proc = run_blocked(
        """
        from constrained.errors import BackendUnavailableError
        import backends.base
        try:
            backends.base.load_model_by_name("whatever", backend="mlx")
        except BackendUnavailableError as e:
            print("ERR", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'constrained[mlx]'" in proc.stdout


def test_missing_vllm_is_a_clear_error() -> None:
    proc = run_blocked(
        """
        from constrained.errors import BackendUnavailableError
        import backends.base
        for load in (lambda: backends.base.load_model_by_name("whatever", backend="vllm"),
                     lambda: __import__("constrained.vllm_processor")):
            try:
                load()
            except BackendUnavailableError as e:
                print("ERR", e)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("pip install 'constrained[vllm]'") == 2, proc.stdout


@pytest.mark.parametrize("module", ["grammars", "backends.mlx", "backends.hf"])
def test_framework_modules_import_with_extras(module: str) -> None:
    pytest.importorskip("mlx" if module == "backends.mlx" else "torch")
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_core_does_not_import_the_server_stack() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(
            """
            import sys
            import constrained, constrained.cli
            constrained.cli._parser()
            stack = {"fastapi", "uvicorn", "starlette", "pydantic", "httpx"}
            print("LOADED", sorted(m for m in sys.modules if m.split(".")[0] in stack))
            """)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout


def test_serve_without_the_extra_says_what_to_install() -> None:
    proc = run_blocked(
        """
        import sys
        sys.modules["fastapi"] = sys.modules["uvicorn"] = None   # as if not installed
        from constrained.cli import main
        print("EXIT", main(["serve", "--port", "0"]))
        """
    )
    assert "EXIT 2" in proc.stdout, proc.stdout + proc.stderr
    assert "pip install 'constrained[serve]'" in proc.stderr
