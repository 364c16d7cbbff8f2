"""What a backend is: something that runs a scenario and hands back its record.

    Scenario ──Backend.run(scenario, out)──► RunRecord  (written to ``out`` when given)
               ├── simulator.backend.Simulator   SimPy, predicted seconds
               └── executor.backend.Executor     torch + transformers, measured seconds

The workflows that compare the two (``asyncrl demo``, ``validate``, ``study``,
the sweeps) take backends and scenarios, so neither knows how the other runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..record.record import RunRecord
    from ..spec.scenario import Scenario


class Backend(Protocol):
    """Runs one scenario to its last learner step."""

    @property
    def name(self) -> str:
        """``simulator`` or ``executor``: what the summaries say under ``backend``."""
        ...

    def run(self, scenario: Scenario, out: Path | None = None) -> RunRecord:
        """Run ``scenario``; write its run directory to ``out`` (checked and locked first) when given."""
        ...
