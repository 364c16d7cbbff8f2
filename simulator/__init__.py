"""The SimPy simulator: predicts a scenario's run (``run``) on any cluster, in seconds of simulated time.

simulator.run(scenario, out=None) ──► scenarios.record.record.RunRecord (see simulator/simulation.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..scenarios.record.record import RunRecord
    from ..scenarios.spec.scenario import Scenario
    from .costs import CostModel


def run(scenario: Scenario, out: Path | None = None, *, costs: CostModel | None = None) -> RunRecord:
    """Simulate ``scenario``; its record, also written to ``out`` when given (``simulator.backend.Simulator``)."""
    from .backend import Simulator  # on call: importing the package stays free

    return Simulator(costs).run(scenario, out)
