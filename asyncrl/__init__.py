"""asyncrl: plan, run and check asynchronous RL schedules for language models.

The project's parts live in top-level folders (``scenarios/``, ``simulator/``,
``executor/``, ``analysis/``) but are installed, and imported, as subpackages
of ``asyncrl`` (``asyncrl.simulator`` and so on), so they never collide with a
user's own packages of those common names. ``pyproject.toml`` maps each folder
to its ``asyncrl.*`` name for installs; in a source checkout (tests, scripts
run from the repository root) the same names resolve through the line below,
which lets ``asyncrl``'s subpackages be found beside this folder too.
"""

from pathlib import Path

__version__ = "0.1.0"

_checkout = Path(__file__).resolve().parent.parent
if (_checkout / "pyproject.toml").is_file() and (_checkout / "simulator" / "__init__.py").is_file():
    __path__.append(str(_checkout))

from asyncrl.compiled import native_dirs  # noqa: E402  (after __path__: the compiled hot loop, if built)

__path__[:0] = native_dirs("")

#: The Python API (``asyncrl/api.py``), imported on first use so ``import asyncrl`` stays instant.
_API = ("load_scenario", "simulate", "execute", "compare", "RunRecord", "Scenario")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> object:
    if name in _API:
        from asyncrl import api

        return getattr(api, name)
    raise AttributeError(f"module 'asyncrl' has no attribute {name!r}")
