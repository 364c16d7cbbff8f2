"""The simulator's hot loop, compiled with mypyc when asyncrl is installed.

    pip install (setup.py, run by scripts/setup.sh) ─► mypycify(HOT_MODULES) ─► simulator/engine.<abi>.so
                                                                                beside simulator/engine.py, ...
    import asyncrl.simulator.engine ─► the .so: Python prefers an extension module to a source of the same name

``HOT_MODULES`` are the modules every simulated rollout passes through (the engines' finish loop, the
dispatch, the group starts). The build compiles them unchanged (mypyc reads their type hints) and writes
the fingerprint of the sources it compiled beside this file (``BUILD_FILE``). Where a hot module's source
has changed since (an edit in a checkout), the build is stale: importing asyncrl removes it, says so once,
and the sources run as the Python they are (the same answers, slower) until the next ``bash
scripts/setup.sh``. No compiler at install, or ``ASYNCRL_PURE_PYTHON=1``: pure Python. Both give the same
records to the byte (``tests/test_compiled.py``).

Kept free of imports beyond the standard library (and mypy's ``mypyc_attr`` where mypy is installed, a
stand-in where not): ``setup.py`` reads it by path, and every ``import asyncrl`` runs it.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

try:
    from mypy_extensions import mypyc_attr  # how mypyc compiles a class (hot modules import it from here)
except ImportError:  # no mypy here (the GPU image): to Python the decorator changes nothing

    def mypyc_attr(*attrs: str, **kwattrs: object) -> object:  # type: ignore[misc]
        return lambda cls: cls


#: Paths below the asyncrl package, without ``.py``.
HOT_MODULES = (
    "simulator/engine",
    "simulator/simulation",
    "simulator/rollouts",
    "simulator/host",
    "scenarios/rules/state",
    "scenarios/rules/engine_index",
    "scenarios/rules/policy",
    "scenarios/rules/workload",
    "scenarios/rules/actions",
)
GROUP = "asyncrl.hot"  # the shared library's module: asyncrl/hot__mypyc.<abi>.so
PACKAGE = Path(__file__).resolve().parent.parent  # what asyncrl.* resolves to: the checkout, or site-packages/asyncrl
BUILD_FILE = Path(__file__).with_name("compiled-build.txt")  # the fingerprint of the sources compiled


def module_name(hot: str) -> str:
    """``simulator/engine`` → ``asyncrl.simulator.engine``."""
    return "asyncrl." + hot.replace("/", ".")


def fingerprint(package: Path | None = None) -> str:
    """Names the sources of ``HOT_MODULES`` (below ``package``, asyncrl's by default) for this Python."""
    package = package or PACKAGE
    digest = hashlib.sha256(f"{sys.implementation.cache_tag}\n".encode())
    for module in HOT_MODULES:
        digest.update(f"{module}\n".encode())
        digest.update((package / f"{module}.py").read_bytes())
    return digest.hexdigest()[:16]


def built_files(asyncrl_dir: Path) -> list[Path]:
    """The files of a build: an extension per hot module, and the group's shared library beside asyncrl/."""
    stems = [PACKAGE / module for module in HOT_MODULES] + [asyncrl_dir / f"{GROUP.rpartition('.')[2]}__mypyc"]
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    return [Path(f"{stem}{suffix}") for stem in stems for suffix in suffixes if Path(f"{stem}{suffix}").is_file()]


class _Sources(importlib.abc.MetaPathFinder):
    """Finds the hot modules' sources ahead of their compiled copies (``ASYNCRL_PURE_PYTHON=1``)."""

    names = frozenset(module_name(module) for module in HOT_MODULES)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names:
            return None
        for entry in path or []:
            source = Path(entry) / f"{fullname.rpartition('.')[2]}.py"
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def settle(asyncrl_dir: Path) -> None:
    """Pure Python where asked for; a stale build (sources edited since) removed, so it never runs."""
    if os.environ.get("ASYNCRL_PURE_PYTHON"):
        sys.meta_path.insert(0, _Sources())
        return
    if not BUILD_FILE.is_file():
        return
    try:
        current = fingerprint()
    except OSError:  # an installed copy without some of the sources: what was installed is what runs
        return
    if BUILD_FILE.read_text().strip() == current:
        return
    for path in built_files(asyncrl_dir):
        path.unlink(missing_ok=True)
    BUILD_FILE.unlink(missing_ok=True)
    print(
        "asyncrl: the compiled simulator was built from older sources and is removed; it runs as Python "
        "(the same answers, slower) until `bash scripts/setup.sh` compiles it again",
        file=sys.stderr,
    )


def active() -> bool:
    """Whether the compiled modules are the ones imported."""
    spec = importlib.util.find_spec(module_name(HOT_MODULES[0]))
    return spec is not None and spec.origin is not None and not spec.origin.endswith(".py")
