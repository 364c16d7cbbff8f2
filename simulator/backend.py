"""The simulator as a backend (``scenarios.rules.backend.Backend``): a scenario in, its predicted record out.

Simulator(costs, on_step).run(scenario)       ──simulate──► RunRecord (in memory)
Simulator(costs, on_step).run(scenario, out)  ──simulate_to──► out/, written in pieces (``simulator.recording.streamed``)
                                                             ──► RunRecord read back from out/
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..scenarios.record.outputs import run_directory
from ..scenarios.record.record import RunRecord, read_events
from ..scenarios.record.run_summary import SUMMARY_FILE, RunSummary
from ..scenarios.spec.scenario import Scenario
from .costs import CostModel
from .recording.streamed import simulate_to
from .simulation import StepCallback, simulate


@dataclass(frozen=True)
class Simulator:
    """Predicts a run with the SimPy simulator; ``costs`` replaces the scenario's own cost model when given."""

    costs: CostModel | None = None
    on_step: StepCallback | None = None  # called with (step, simulated time) after each learner step
    force: bool = False  # write into a directory that holds other files

    @property
    def name(self) -> str:
        return "simulator"

    def run(self, scenario: Scenario, out: Path | None = None) -> RunRecord:
        """Simulate ``scenario``; with ``out``, write its run directory (checked and locked before it starts)."""
        if out is None:
            return simulate(scenario, self.on_step, self.costs)
        summary = self.write(scenario, out)
        return RunRecord(scenario, summary, read_events(out))

    def write(self, scenario: Scenario, out: Path) -> RunSummary:
        """Simulate ``scenario`` into the run directory ``out``, its record never whole in memory; its summary."""
        with run_directory(out, force=self.force):
            (out / SUMMARY_FILE).unlink(missing_ok=True)  # an old summary must not outlive a run that fails
            return simulate_to(scenario, out, self.on_step, self.costs)
