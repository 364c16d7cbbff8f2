"""asyncrl: plan, run and check asynchronous RL schedules for language models.

The project's parts live in top-level folders (``scenarios/``, ``simulator/``, ``executor/``,
``analysis/``) and are installed as subpackages of ``asyncrl`` (``asyncrl.simulator`` and so on), so
their common names never collide with a user's own packages: ``pyproject.toml`` maps each folder to its
name, and ``scripts/setup.sh`` installs the checkout editable, so the same names resolve to these folders.
"""

from pathlib import Path

from asyncrl.scenarios import compiled

__version__ = "0.1.0"

compiled.settle(Path(__file__).parent)  # the compiled hot loop, where built from these sources (see there)

#: The Python API (``asyncrl/api.py``), imported on first use so ``import asyncrl`` stays instant.
_API = ("load_scenario", "simulate", "execute", "compare", "RunRecord", "Scenario")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> object:
    if name in _API:
        from asyncrl import api

        return getattr(api, name)
    raise AttributeError(f"module 'asyncrl' has no attribute {name!r}")
