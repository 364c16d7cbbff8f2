"""The frameworks asyncrl reads, in one place: ``from-*``, ``plan``, ``calibrate --from-log`` and ``lengths``
ask this module, never a framework's folder by name.

    FRAMEWORKS ── verl ── openrlhf ── nemo_rl ── areal     (each folder's FRAMEWORK: asyncrl.frameworks.common.framework)

Adding a framework is adding its folder and its line below; ``tests/test_frameworks.py`` checks that every
registered one answers the same protocol.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from asyncrl.scenarios.files.errors import ScenarioError

from asyncrl.frameworks import areal, nemo_rl, openrlhf, verl
from asyncrl.frameworks.common.framework import Framework

FRAMEWORKS: tuple[Framework, ...] = (verl.FRAMEWORK, openrlhf.FRAMEWORK, nemo_rl.FRAMEWORK, areal.FRAMEWORK)
#: What a launch script or YAML config is taken for when nothing marks it as another framework's.
DEFAULT = verl.FRAMEWORK


def framework(name: str) -> Framework:
    """The registered framework of that name (``verl``, ``openrlhf``, ``nemo_rl``, ``areal``)."""
    for known in FRAMEWORKS:
        if known.name == name:
            return known
    raise KeyError(name)


def launched_by(text: str) -> Framework:
    """The framework a launch script or command line runs (verl where none says)."""
    return next((known for known in FRAMEWORKS if known.launches(text)), DEFAULT)


def config_of(config: Mapping[str, Any]) -> Framework:
    """The framework a YAML config is for (verl where none says)."""
    return next((known for known in FRAMEWORKS if known.reads(config)), DEFAULT)


def importable(known: Framework, what: str) -> Framework:
    """``known``, if asyncrl reads its settings; else a one-line error saying what to give instead."""
    if known.scenario is None:
        raise ScenarioError(
            f"{what}: an {known.label} run; asyncrl reads no {known.label} settings yet: write its scenario "
            "(docs/scenario.md) and give that instead"
        )
    return known


def with_capability(capability: str) -> Framework | None:
    """The first framework that offers ``capability`` (a field of ``Framework``: rollout_dumps, ...)."""
    return next((known for known in FRAMEWORKS if getattr(known, capability) is not None), None)
