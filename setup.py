"""Builds the optional compiled copies of `grammars`' modules (everything else is in pyproject.toml).

Each module is translated by Cython from its own ``.py`` source and built as
``grammars/_compiled/<name>_<source hash>/<name>``; `grammars.native` loads
it only while the source still has that hash. With GCC the build is
profile-guided: built instrumented, trained by `grammars.pgo_train`, built
again from the profile (``CONSTRAINED_PGO=0``: one plain build). Nothing here is required: with
``CONSTRAINED_NATIVE=0``, without Cython, or where a module fails to compile
(no C compiler), the package installs and runs from its Python source.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# `grammars.native` by path: importing the package would need numpy, absent from the build environment
_spec = importlib.util.spec_from_file_location("_grammars_native", ROOT / "grammars" / "native.py")
native = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(native)

DIRECTIVES = {
    "language_level": 3,
    # annotations are documentation here, not C types: `need: list[int] | np.ndarray` holds either
    "annotation_typing": False,
    "binding": True,             # functions keep their signatures and docstrings
}


class ParallelBuildExt(build_ext):
    """`build_ext` on every core, dropping compiled copies of older sources from an in-place build;
    profile-guided with GCC (`_pgo_build`)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        if not self.extensions:
            # nothing to build (no Cython, or CONSTRAINED_NATIVE=0): leave the compiled copies there,
            # which load only while they match their source
            super().run()
            return
        # copies of older sources, in the source tree (in-place builds) or in a reused build/
        # folder (whose whole content a wheel takes), would never load: drop them
        keep = {ext.name.split(".")[-2] for ext in self.extensions}
        for root in {ROOT, Path(self.build_lib).resolve()}:
            for old in (root / "grammars" / "_compiled").glob("*"):
                if old.is_dir() and old.name not in keep:
                    shutil.rmtree(old, ignore_errors=True)
        if _gcc():
            self._pgo_build()
        else:
            super().run()

    def _pgo_build(self) -> None:
        """Build instrumented, run `grammars.pgo_train` on the result, build again with its profile.

        A compile after other work runs with cold caches through a few hundred KB of
        Cython's machine code; laid out by a profile, the paths that run sit together
        (bench/README, "Profile-guided build"). If the instrumented build or the
        training fails, the second build is a plain one, as without GCC.
        """
        base = {ext.name: (list(ext.extra_compile_args), list(ext.extra_link_args)) for ext in self.extensions}
        compiler = self.compiler           # a name or None until `run` makes the compiler object

        def flags(compile_args: list[str], link_args: list[str]) -> None:
            for ext in self.extensions:
                ext.extra_compile_args = base[ext.name][0] + compile_args
                ext.extra_link_args = base[ext.name][1] + link_args

        with tempfile.TemporaryDirectory(prefix="constrained-pgo-") as profile:
            flags(["-fprofile-generate", f"-fprofile-dir={profile}"], ["-fprofile-generate"])
            self.force = True       # both builds compile every module (an up-to-date copy has no profile)
            super().run()
            trained = self._train() and any(Path(profile).rglob("*.gcda"))   # it ran the instrumented copies
            if trained:
                flags(["-fprofile-use", f"-fprofile-dir={profile}", "-fprofile-partial-training",
                       "-Wno-missing-profile"], [])
            else:
                flags([], [])
            self.compiler = compiler
            super().run()

    def _train(self) -> bool:
        """Run the training workload on the instrumented modules; whether it ran on them."""
        where = Path(self.build_lib)
        if self.inplace or not (where / "grammars" / "__init__.py").exists():
            where = ROOT
        corpus = sorted(str(p) for p in (ROOT / "bench" / "corpus").glob("*.json"))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(where), os.environ.get("PYTHONPATH", "")])}
        try:
            done = subprocess.run([sys.executable, "-m", "grammars.pgo_train", *corpus], cwd=where, env=env,
                                  capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            print(f"constrained: profile training did not run ({e}); plain build", file=sys.stderr)
            return False
        if done.returncode != 0:
            print(f"constrained: profile training failed; plain build\n{done.stderr[-2000:]}", file=sys.stderr)
            return False
        print(done.stdout.strip(), file=sys.stderr)
        return True

    def copy_extensions_to_source(self) -> None:
        # an editable install copies each built module into the source tree: make its hashed folder first
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            package = ext.name.rpartition(".")[0]
            Path(build_py.get_package_dir(package)).mkdir(parents=True, exist_ok=True)
        super().copy_extensions_to_source()


def _gcc() -> bool:
    """Whether the C compiler is GCC 10 or later (a profile-guided build reads its .gcda files;
    clang's profiles need llvm-profdata), unless ``CONSTRAINED_PGO=0``."""
    if sys.platform == "win32" or os.environ.get("CONSTRAINED_PGO", "1") == "0":
        return False
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    try:
        version = subprocess.run([*cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    if "Free Software Foundation" not in version:
        return False
    try:   # -fprofile-partial-training is GCC 10's: an older one would fail every module, leaving Python
        major = subprocess.run([*cc, "-dumpversion"], capture_output=True, text=True, timeout=30).stdout
        return int(major.strip().split(".")[0]) >= 10
    except (OSError, subprocess.SubprocessError, ValueError):
        return False


def compiled_extensions() -> list[Extension]:
    if os.environ.get(native.ENV, "1") == "0":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("constrained: Cython is not installed; grammars runs from its Python source", file=sys.stderr)
        return []
    names = native.sources(ROOT / "grammars")
    # the C code is generated for the module's real name (its init function, classes'
    # __module__), then built under the folder that records the source's hash
    flags = [] if sys.platform == "win32" else ["-g0"]     # no debug info: a third of the build time, 4x the size
    exts = [Extension(f"grammars.{name}", [f"grammars/{name}.py"], optional=True, extra_compile_args=flags)
            for name in names]
    try:
        exts = cythonize(exts, compiler_directives=DIRECTIVES, build_dir="build/cython", quiet=True,
                         nthreads=os.cpu_count() or 1)
    except Exception as e:  # noqa: BLE001 - compiling is an optimization; the source always works
        print(f"constrained: Cython failed ({e}); grammars runs from its Python source", file=sys.stderr)
        return []
    for ext in exts:
        ext.optional = True          # cythonize's copies drop it: a module that fails to build stays Python
        name = ext.name.rpartition(".")[2]
        ext.name = f"grammars._compiled.{native.compiled_dir(name, native.source_bytes(name, ROOT / 'grammars'))}.{name}"
    return exts


setup(ext_modules=compiled_extensions(), cmdclass={"build_ext": ParallelBuildExt})
