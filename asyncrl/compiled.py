"""The simulator's hot loop, compiled with mypyc when a build of the current sources is at hand.

    scripts/compile.py ──► .compiled/<fingerprint>/asyncrl/{hot__mypyc, simulator/engine, scenarios/state, ...}.so
                                      │
    import asyncrl.simulator ─────────┴──► __path__ = [that folder, simulator/]: the .so is found first

``HOT_MODULES`` are the modules every simulated rollout passes through (the engines' finish loop, the
dispatch, the group starts). ``scripts/compile.py`` (run by ``scripts/setup.sh``) compiles them, unchanged,
with mypyc into a folder named by the fingerprint of their sources; a package puts that folder ahead of its own
on its ``__path__`` only while the fingerprint matches, so an edited module runs as the Python it is (the
same answers, slower) until the next build. No build, another Python, or ``ASYNCRL_PURE_PYTHON=1``: pure
Python. Both give the same records to the byte (``tests/test_compiled.py``).

Kept free of imports beyond the standard library (and mypy's ``mypyc_attr`` where mypy is installed, a
stand-in where not): every ``import asyncrl.simulator`` reads it.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

try:
    from mypy_extensions import mypyc_attr  # how mypyc compiles a class (hot modules import it from here)
except ImportError:  # no mypy here (the GPU image): to Python the decorator changes nothing

    def mypyc_attr(*attrs: str, **kwattrs: object) -> object:  # type: ignore[misc]
        return lambda cls: cls


HOT_MODULES = (
    "simulator/engine",
    "simulator/simulation",
    "simulator/rollouts",
    "simulator/host",
    "scenarios/state",
    "scenarios/engine_index",
    "scenarios/policy",
    "scenarios/workload",
    "scenarios/actions",
)
GROUP = "asyncrl.hot"  # the shared library's module: asyncrl/hot__mypyc.<abi>.so
CHECKOUT = Path(__file__).resolve().parent.parent
BUILDS = CHECKOUT / ".compiled"


def fingerprint() -> str:
    """Names the build of the current sources of ``HOT_MODULES`` for this Python (16 hex digits)."""
    digest = hashlib.sha256(f"{sys.implementation.cache_tag}\n".encode())
    for module in HOT_MODULES:
        digest.update(f"{module}\n".encode())
        digest.update((CHECKOUT / f"{module}.py").read_bytes())
    return digest.hexdigest()[:16]


def build_dir() -> Path | None:
    """The compiled build of the current sources, if there is one and it is wanted."""
    if os.environ.get("ASYNCRL_PURE_PYTHON") or not BUILDS.is_dir():
        return None
    try:
        folder = BUILDS / fingerprint()
    except OSError:  # an installed copy without some of the sources
        return None
    return folder if (folder / "complete").is_file() else None


_BUILD = build_dir()


def native_dirs(package: str) -> list[str]:
    """The folders to search ahead of ``package``'s own (``"simulator"``, ``"scenarios"``, ``""`` for asyncrl)."""
    if _BUILD is None:
        return []
    folder = _BUILD / "asyncrl" / package
    return [str(folder)] if folder.is_dir() else []


def active() -> bool:
    """Whether the compiled modules are the ones imported."""
    return _BUILD is not None
