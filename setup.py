"""The build's one step beyond pyproject.toml: the simulator's hot loop compiled with mypyc.

``scenarios/compiled.py`` names the modules (``HOT_MODULES``). They compile where mypy (mypyc) is importable
in the build's environment and a C compiler works; otherwise the install is pure Python, with the same
answers (each extension is ``optional``: a failed compile does not fail the install). ``scripts/setup.sh``
builds in the project's own environment (``--no-build-isolation``), where mypy and the packages the hot
modules use are installed, so mypyc sees their types. ``ASYNCRL_PURE_PYTHON=1`` builds no extension.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("asyncrl_compiled", ROOT / "scenarios" / "compiled.py")
assert _spec is not None and _spec.loader is not None
compiled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compiled)


@functools.cache  # mypyc generates once: a second run in one process leaves the group's library empty
def hot_extensions() -> list:
    """The hot modules as mypyc extensions, or none (pure Python) where mypyc is missing or unwanted."""
    if os.environ.get("ASYNCRL_PURE_PYTHON"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        return []
    # mypy resolves asyncrl.simulator.* through .mypy/asyncrl (pyproject.toml's [tool.mypy]), so the
    # modules keep their installed names.
    paths = [f".mypy/asyncrl/{module}.py" for module in compiled.HOT_MODULES]
    # Its C goes to a new folder each time: over the C of an earlier build, mypyc leaves the group's library
    # without sources (an empty extension that fails at import).
    build = ROOT / "build"
    for old in build.glob("mypyc-*"):
        shutil.rmtree(old, ignore_errors=True)
    build.mkdir(exist_ok=True)
    extensions = mypycify(
        paths, separate=[(paths, compiled.GROUP)], target_dir=tempfile.mkdtemp(prefix="mypyc-", dir=build)
    )
    for extension in extensions:
        extension.optional = True
    return extensions


class BuildHotLoop(build_ext):
    """build_ext of the hot modules, then the fingerprint of the sources compiled beside ``scenarios/compiled.py``.

    mypyc's C is generated here, when a build runs, not whenever setup.py is read (pip reads it for the
    metadata too)."""

    def finalize_options(self) -> None:
        self.distribution.ext_modules = hot_extensions()  # before build_ext takes its list from it
        super().finalize_options()

    def run(self) -> None:
        super().run()
        if not self.extensions:
            return
        built = [Path(self.get_ext_fullpath(extension.name)) for extension in self.extensions]
        if not all(path.is_file() for path in built):  # a compile failed: the rest of the build is removed
            for path in built:
                path.unlink(missing_ok=True)
            return
        target = Path(self.get_ext_fullpath("asyncrl.scenarios.compiled")).with_name(compiled.BUILD_FILE.name)
        target.write_text(compiled.fingerprint(ROOT) + "\n")


# A stand-in, so that setuptools runs build_ext (which builds the real list) and tags the wheel for this platform.
PLACEHOLDER = Extension(compiled.GROUP + "__mypyc", sources=[], optional=True)
setup(ext_modules=[PLACEHOLDER], cmdclass={"build_ext": BuildHotLoop})
