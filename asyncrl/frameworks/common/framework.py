"""What a framework plug-in is: one folder per framework, one ``Framework`` value registered in one place.

    asyncrl/frameworks/<name>/__init__.py: FRAMEWORK = Framework(...) ──► asyncrl.frameworks.registry
        from-<name> CONFIG ...       its command: its flags (add_arguments) and its run's scenario (scenario)
        plan CONFIG                  which framework CONFIG is (config_keys of a YAML config, modules of a script)
        calibrate --from-log LOG     the scenario of a log that prints its run's config (prints_config,
                                     scenario_from_log)
        lengths DIR | --from-log     completion lengths from its rollout dumps or its metrics log
        simulate, size, ...          its fixed costs per step (scenarios.costs.efficiency.FRAMEWORKS[costs])

Every part but the names is optional: a framework asyncrl reads nothing of yet (AReaL) still has its costs
and is recognised, so that a command given its config says what to do instead.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncrl.scenarios.costs.efficiency import FRAMEWORKS as FIXED_COSTS

from asyncrl.frameworks.common.command import Imported

#: ``python -m MODULE`` or ``python3 -m MODULE`` in a launch script or command line.
_MODULE = re.compile(r"(?:^|\s)-m\s+([A-Za-z_][\w.]*)")


@dataclass(frozen=True)
class Framework:
    name: str  # the folder's name: verl, openrlhf, nemo_rl, areal
    label: str  # as its users write it: verl, OpenRLHF, NeMo-RL, AReaL
    costs: str  # its key in scenarios.costs.efficiency.FRAMEWORKS
    modules: tuple[str, ...] = ()  # the python -m modules its launch commands run
    config_keys: tuple[str, ...] = ()  # top-level keys that all appear in its YAML config, and no other's
    setting: str = "flag"  # what the provenance table calls one of its settings
    command: str | None = None  # its import command, from-<name>
    help: str = ""
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    scenario: Callable[[argparse.Namespace, Path | None], tuple[Imported, Path]] | None = None
    prints_config: Callable[[Path], bool] | None = None  # a log of its holds its run's config
    scenario_from_log: Callable[[Path, Any, str | None], Imported] | None = None
    rollout_dumps: Callable[[Path, str | None, str | None, str], Any] | None = None
    metrics_lengths: Callable[..., Any] | None = None

    def fixed_costs(self) -> dict[str, float]:
        """What it pays per step beyond the work (dispatch, engine sleep and wake, resharding), in seconds."""
        return dict(FIXED_COSTS[self.costs])

    def launches(self, text: str) -> bool:
        """Whether a launch script or command line runs this framework (its first ``-m`` module is one of its)."""
        found = _MODULE.findall(text)
        return bool(found) and found[0].split(".")[0] in self.modules

    def reads(self, config: Mapping[str, Any]) -> bool:
        """Whether a YAML config is this framework's (all of its ``config_keys`` at the top level)."""
        return bool(self.config_keys) and all(key in config for key in self.config_keys)
