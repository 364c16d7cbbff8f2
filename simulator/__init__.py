"""The SimPy simulator: predicts a scenario's run (``run``) on any cluster, in seconds of simulated time.

simulator.run(scenario, out=None) ──► scenarios.record.RunRecord (see simulator/simulation.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from asyncrl.compiled import native_dirs

__path__[:0] = native_dirs("simulator")  # the hot modules compiled, when built (``asyncrl.compiled``)

if TYPE_CHECKING:
    from asyncrl.scenarios.record import RunRecord
    from asyncrl.scenarios.scenario import Scenario
    from asyncrl.simulator.costs import CostModel


def run(scenario: Scenario, out: Path | None = None, *, costs: CostModel | None = None) -> RunRecord:
    """Simulate ``scenario``; its record, also written to ``out`` when given (``simulator.backend.Simulator``)."""
    from asyncrl.simulator.backend import Simulator  # on call: importing the package stays free

    return Simulator(costs).run(scenario, out)
