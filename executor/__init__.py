"""Real runs of a scenario's schedule with torch and transformers.

    runtime (learner + coordinator) ──commands──► actors (continuous-batching engines)
            ◄──finished groups── actors           weights ──torch.distributed──► actors

    executor.run(scenario, out=None) ──► scenarios.record.record.RunRecord (executor.backend.Executor)

See ``executor/processes/runtime.py`` for the process layout and ``docs/executor.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..scenarios.record.record import RunRecord
    from ..scenarios.spec.scenario import Scenario


def run(scenario: Scenario, out: Path | None = None, *, device: str = "cpu", runtime: str = "local") -> RunRecord:
    """Execute ``scenario`` on ``device``; its record, written to ``out`` when given (else kept in memory only)."""
    from .backend import Executor  # on call: importing the package imports no torch

    return Executor(device, runtime).run(scenario, out)
