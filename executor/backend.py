"""The executor as a backend (``scenarios.rules.backend.Backend``): a scenario in, its measured record out.

Executor(device, runtime, on_step).run(scenario, out) ──runtime.execute──► out/ ──► RunRecord
                                                out None: a temporary directory, removed after
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..scenarios.record.record import RunRecord
from ..scenarios.spec.scenario import Scenario
from .processes.restarts import DEFAULT_MAX_RESTARTS
from .processes.runtime import StepCallback, execute


@dataclass(frozen=True)
class Executor:
    """Runs a scenario for real with torch: ``device`` cpu or cuda, actors as ``local`` processes or ``ray`` actors."""

    device: str = "cpu"
    runtime: str = "local"
    on_step: StepCallback | None = None  # called with (step, metrics row) after each learner step
    force: bool = False  # write into a directory that holds other files
    max_restarts: int = DEFAULT_MAX_RESTARTS  # actor restarts before a death fails the run

    @property
    def name(self) -> str:
        return "executor"

    def run(self, scenario: Scenario, out: Path | None = None) -> RunRecord:
        """Execute ``scenario`` into ``out`` (checked and locked first); without ``out``, into a temporary
        directory removed afterwards, so the record lives in memory only."""
        if out is not None:
            return self._execute(scenario, out)
        with tempfile.TemporaryDirectory(prefix="asyncrl-") as folder:
            return self._execute(scenario, Path(folder) / "run")

    def _execute(self, scenario: Scenario, out: Path) -> RunRecord:
        return execute(
            scenario,
            out,
            device=self.device,
            on_step=self.on_step,
            runtime=self.runtime,
            force=self.force,
            max_restarts=self.max_restarts,
        )
